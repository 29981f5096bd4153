package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/sink/kafka"
	"github.com/outboxd/outboxd/source"
	"github.com/outboxd/outboxd/transform/outbox"
)

// fakeCluster models what the exactly-once runner relies on from Kafka: transactions that
// become visible only on commit, and a transactional id whose newest initialisation fences the
// older ones and aborts what they left open.
type fakeCluster struct {
	mu     sync.Mutex
	log    []sink.Record // committed records, in commit order
	txns   [][]sink.Record
	epoch  int
	open   []sink.Record // records of the open transaction (current epoch)
	inits  int
	aborts int

	// Failure injection (guarded by mu).
	tooLarge      func(*sink.Record) bool // refused by the "broker" with every record sent with it
	dlqDenied     bool                    // every dead letter is refused permanently
	transientLeft int                     // the next N flushes fail transiently
	commitFails   []string                // per Commit: "" ok, "before" (error, not committed), "after" (error, committed), "taken" (error, not committed; another instance committed position 77)
	failInit      int                     // the next N initialisations fail
	reqSize       int                     // >0: every reqSize queued records go out as one request without a Flush
}

var (
	errTooLarge   = errors.New("message too large")
	errDenied     = errors.New("topic authorization failed")
	errTransient  = errors.New("not enough replicas")
	errFakeFenced = errors.New("producer fenced")
)

func classifyFake(err error) (bool, string) {
	switch {
	case errors.Is(err, errTooLarge):
		return true, "record_too_large"
	case errors.Is(err, errDenied):
		return true, "topic_authorization_failed"
	}
	return false, "unknown"
}

func fencedFake(err error) bool { return errors.Is(err, errFakeFenced) }

func fatalFake(err error) (bool, string) {
	if errors.Is(err, errFakeFenced) {
		return true, "producer fenced: another producer"
	}
	return false, ""
}

func (c *fakeCluster) newProducer() (TxnProducer, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failInit > 0 {
		c.failInit--
		return nil, errors.New("coordinator not available")
	}
	c.epoch++
	c.inits++
	c.open = nil // initialising aborts what an older producer left open
	return &fakeTxn{c: c, epoch: c.epoch, ready: true, reqSize: c.reqSize}, nil
}

func (c *fakeCluster) committed() []sink.Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]sink.Record(nil), c.log...)
}

// fakeTxn is one producer. Produce queues; Flush resolves everything queued as one request.
type fakeTxn struct {
	c       *fakeCluster
	epoch   int
	ready   bool
	inTxn   bool
	failErr error // the transaction failed: every later record fails with this
	queued  []fakeQueued
	reqSize int
}

type fakeQueued struct {
	rec  sink.Record
	done func(error)
}

func (p *fakeTxn) fencedLocked() bool { return p.epoch != p.c.epoch }

func (p *fakeTxn) Begin() error {
	if !p.ready {
		return errors.New("transition not allowed")
	}
	p.ready, p.inTxn, p.failErr = false, true, nil
	return nil
}

func (p *fakeTxn) Produce(_ context.Context, rec *sink.Record, done func(error)) error {
	if !p.inTxn {
		return errors.New("no transaction")
	}
	p.queued = append(p.queued, fakeQueued{rec: *rec, done: done})
	if p.reqSize > 0 && len(p.queued) >= p.reqSize {
		p.Flush(context.Background())
	}
	return nil
}

func (p *fakeTxn) Flush(context.Context) error {
	c := p.c
	c.mu.Lock()
	q := p.queued
	p.queued = nil
	var err error
	switch {
	case len(q) == 0:
	case p.fencedLocked():
		err = errFakeFenced
	case p.failErr != nil:
		err = p.failErr
	case c.transientLeft > 0:
		c.transientLeft--
		err = errTransient
	default:
		for _, x := range q {
			if c.tooLarge != nil && c.tooLarge(&x.rec) {
				err = fmt.Errorf("broker refused the request: %w", errTooLarge)
			}
			if c.dlqDenied && x.rec.Topic == "dlq" {
				err = fmt.Errorf("dlq: %w", errDenied)
			}
		}
	}
	if err != nil {
		p.failErr = err
	} else {
		for _, x := range q {
			c.open = append(c.open, x.rec)
		}
	}
	c.mu.Unlock()
	for _, x := range q {
		x.done(err)
	}
	return nil
}

func (p *fakeTxn) Commit() error {
	p.Flush(context.Background())
	c := p.c
	c.mu.Lock()
	defer c.mu.Unlock()
	p.inTxn = false
	if p.fencedLocked() {
		return errFakeFenced
	}
	if p.failErr != nil {
		return p.failErr
	}
	mode := ""
	if len(c.commitFails) > 0 {
		mode, c.commitFails = c.commitFails[0], c.commitFails[1:]
	}
	if mode == "taken" {
		// Another instance took over meanwhile and committed its own position.
		c.log = append(c.log, fakePosStore{c}.Record("77"))
	}
	if mode != "before" && mode != "taken" {
		c.log = append(c.log, c.open...)
		c.txns = append(c.txns, c.open)
	}
	c.open = nil
	if mode != "" {
		return errors.New("coordinator connection lost")
	}
	p.ready = true
	return nil
}

func (p *fakeTxn) Abort() error {
	p.queued = nil
	c := p.c
	c.mu.Lock()
	defer c.mu.Unlock()
	p.inTxn = false
	if p.fencedLocked() {
		return errFakeFenced
	}
	c.open = nil
	c.aborts++
	p.ready = true
	return nil
}

func (p *fakeTxn) Usable() bool { return p.ready }
func (p *fakeTxn) Close() error { return nil }

// fakePosStore reads the last committed position record of the fake cluster.
type fakePosStore struct{ c *fakeCluster }

func (s fakePosStore) Record(p source.Position) sink.Record {
	return sink.Record{Topic: "offsets", Key: []byte("pipe"), Value: []byte(p)}
}

func (s fakePosStore) Load(context.Context) (source.Position, error) {
	var pos source.Position
	for _, r := range s.c.committed() {
		if r.Topic == "offsets" {
			pos = source.Position(r.Value)
		}
	}
	return pos, nil
}

func eosOptions(c *fakeCluster, src *fakeSource) EOSOptions {
	rt, _ := outbox.New(outbox.DefaultConfig())
	return EOSOptions{
		NewSource:   func() source.Source { return src },
		NewProducer: c.newProducer, Route: rt.Route, Classify: classifyFake, Fatal: fatalFake, Fenced: fencedFake,
		Store: fakePosStore{c}, TransactionalID: "outboxd-test", DLQTopic: "dlq",
		MaxRecords: 4, Linger: 5 * time.Millisecond, IdleInterval: 20 * time.Millisecond,
		ShutdownTimeout: 5 * time.Second, RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond,
	}
}

// runEOS runs the pipeline until the committed position reaches want, then stops it.
func runEOS(t *testing.T, o EOSOptions, want source.Position) error {
	t.Helper()
	return runEOSFor(t, o, want, 10*time.Second)
}

func runEOSFor(t *testing.T, o EOSOptions, want source.Position, limit time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reached := make(chan struct{})
	var once sync.Once
	prev := o.OnCommit
	o.OnCommit = func(p source.Position) {
		if prev != nil {
			prev(p)
		}
		if p >= want {
			once.Do(func() { close(reached) })
		}
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	errc := make(chan error, 1)
	go func() { errc <- RunExactlyOnce(ctx, o) }()
	select {
	case <-reached:
		cancel()
		return <-errc
	case err := <-errc:
		return err
	case <-time.After(limit):
		t.Fatalf("position %s not reached", want)
		return nil
	}
}

func ids(recs []sink.Record, topic string) []string {
	var out []string
	for _, r := range recs {
		if topic == "" && r.Topic != "offsets" || r.Topic == topic {
			for _, h := range r.Headers {
				if h.Key == "id" {
					out = append(out, string(h.Value))
				}
			}
		}
	}
	return out
}

// txs builds source transactions, one per spec: row ids separated by spaces ("id@aggregate" for
// another topic), "|" cutting the transaction into chunks (More on all but the last; the
// position, the spec's number, on the last).
func txs(spec ...string) []source.Tx {
	var out []source.Tx
	for i, s := range spec {
		chunks := strings.Split(s, "|")
		for j, c := range chunks {
			tx := source.Tx{More: j < len(chunks)-1}
			if !tx.More {
				tx.Position = source.Position(fmt.Sprintf("%02d", i+1))
			}
			for _, r := range strings.Fields(c) {
				id, agg, _ := strings.Cut(r, "@")
				if agg == "" {
					agg = "order"
				}
				tx.Rows = append(tx.Rows, row(id, agg))
			}
			out = append(out, tx)
		}
	}
	return out
}

// Batches hold whole source transactions, each Kafka transaction ends with its position, and
// the source is confirmed only with committed positions.
func TestEOSBatchesWholeTransactions(t *testing.T) {
	c := &fakeCluster{}
	src := &fakeSource{txs: txs("a b", "c", "", "d e f g h i", "j", "k l")}
	if err := runEOS(t, eosOptions(c, src), "06"); err != nil {
		t.Fatal(err)
	}
	got := ids(c.committed(), "")
	if strings.Join(got, " ") != "a b c d e f g h i j k l" {
		t.Fatalf("committed %v", got)
	}
	var ends []string
	for _, txn := range c.txns {
		last := txn[len(txn)-1]
		if last.Topic != "offsets" {
			t.Fatalf("a Kafka transaction does not end with its position: %+v", txn)
		}
		n := len(txn) - 1
		if n > 4 && n != 6 { // the 6-row source transaction goes whole
			t.Errorf("Kafka transaction with %d records (MaxRecords 4)", n)
		}
		ends = append(ends, string(last.Value))
	}
	src.mu.Lock()
	confirmed := fmt.Sprint(src.confirmed)
	src.mu.Unlock()
	if confirmed != "["+strings.Join(ends, " ")+"]" {
		t.Fatalf("confirmed %s, committed positions %v", confirmed, ends)
	}
	if ends[len(ends)-1] != "06" {
		t.Fatalf("last position %v", ends)
	}
}

// A record the broker refuses poisons its whole request: the runner re-sends the records that
// failed together one by one, dead-letters the culprit, and delivers the rest once, in order.
func TestEOSPoisonRecordIsolated(t *testing.T) {
	c := &fakeCluster{tooLarge: func(r *sink.Record) bool { return r.Topic == "outbox.event.big" }}
	src := &fakeSource{txs: txs("a b", "c big@big d", "e", "f")}
	o := eosOptions(c, src)
	o.MaxRecords = 100
	o.Linger = 50 * time.Millisecond
	if err := runEOS(t, o, "04"); err != nil {
		t.Fatal(err)
	}
	if got := ids(c.committed(), ""); strings.Join(got, " ") != "a b c big d e f" {
		t.Fatalf("committed %v", got)
	}
	dlq := ids(c.committed(), "dlq")
	if strings.Join(dlq, " ") != "big" {
		t.Fatalf("dead letters %v", dlq)
	}
	for _, r := range c.committed() {
		if r.Topic == "dlq" && (h(r, sink.HeaderReason) != "record_too_large" || h(r, sink.HeaderStage) != "produce" || h(r, sink.HeaderOriginalTopic) != "outbox.event.big") {
			t.Fatalf("dead letter headers %+v", r.Headers)
		}
	}
	if ids := ids(c.committed(), "outbox.event.order"); strings.Join(ids, " ") != "a b c d e f" {
		t.Fatalf("order %v", ids)
	}
}

// Poison rows of the transform stage go to the DLQ in the same Kafka transaction.
func TestEOSTransformPoison(t *testing.T) {
	c := &fakeCluster{}
	bad := row("x", "order")
	bad.Values[1].Null, bad.Values[1].Bytes = true, nil
	src := &fakeSource{txs: []source.Tx{{Position: "01", Rows: []source.Row{row("a", "order"), bad, row("b", "order")}}}}
	if err := runEOS(t, eosOptions(c, src), "01"); err != nil {
		t.Fatal(err)
	}
	got := c.committed()
	if len(got) != 4 || got[1].Topic != "dlq" || h(got[1], sink.HeaderStage) != "transform" || got[3].Topic != "offsets" {
		t.Fatalf("committed %+v", got)
	}
}

func TestEOSDLQUnwritableStops(t *testing.T) {
	c := &fakeCluster{dlqDenied: true, tooLarge: func(r *sink.Record) bool { return r.Topic == "outbox.event.big" }}
	src := &fakeSource{txs: txs("a", "big@big b")}
	o := eosOptions(c, src)
	o.MaxRecords = 1
	err := runEOS(t, o, "99")
	if err == nil || !strings.Contains(err.Error(), "dead-letter topic dlq cannot be written") {
		t.Fatalf("err = %v", err)
	}
	if pos, _ := (fakePosStore{c}).Load(context.Background()); pos != "01" {
		t.Fatalf("committed past the poison row: %s", pos)
	}
}

// Transient failures abort and redo the batch; nothing is committed twice.
func TestEOSTransientRetries(t *testing.T) {
	c := &fakeCluster{transientLeft: 3, failInit: 0}
	src := &fakeSource{txs: txs("a b", "c", "d")}
	if err := runEOS(t, eosOptions(c, src), "03"); err != nil {
		t.Fatal(err)
	}
	if got := ids(c.committed(), ""); strings.Join(got, " ") != "a b c d" {
		t.Fatalf("committed %v", got)
	}
	if c.aborts < 3 {
		t.Fatalf("%d aborts", c.aborts)
	}
}

// A commit whose outcome is unknown is settled by re-initialising and reading the position.
func TestEOSAmbiguousCommit(t *testing.T) {
	for _, mode := range []string{"before", "after"} {
		t.Run(mode, func(t *testing.T) {
			c := &fakeCluster{commitFails: []string{"", mode}, failInit: 0}
			src := &fakeSource{txs: txs("a", "b", "c")}
			o := eosOptions(c, src)
			o.MaxRecords = 1
			if err := runEOS(t, o, "03"); err != nil {
				t.Fatal(err)
			}
			if got := ids(c.committed(), ""); strings.Join(got, " ") != "a b c" {
				t.Fatalf("committed %v", got)
			}
			if c.inits != 2 {
				t.Fatalf("%d initialisations, want 2", c.inits)
			}
		})
	}
}

// A zombie: its commit fails with an unknown outcome (not PRODUCER_FENCED) after another
// instance took over and committed. It stops with ErrFenced without initialising the
// transactional id again, which would fence the instance that took over.
func TestEOSAmbiguousCommitAfterTakeover(t *testing.T) {
	c := &fakeCluster{commitFails: []string{"", "taken"}}
	src := &fakeSource{txs: txs("a", "b", "c")}
	o := eosOptions(c, src)
	o.MaxRecords = 1
	err := runEOS(t, o, "99")
	if !errors.Is(err, ErrFenced) || !strings.Contains(err.Error(), "77") || !strings.Contains(err.Error(), "kafka.transactional_id") {
		t.Fatalf("err = %v, want ErrFenced naming the position 77 and kafka.transactional_id", err)
	}
	if c.inits != 1 {
		t.Fatalf("%d initialisations, want 1: a zombie must not initialise the transactional id again", c.inits)
	}
	if got := ids(c.committed(), ""); strings.Join(got, " ") != "a" {
		t.Fatalf("committed %v", got)
	}
}

// Another producer with the same transactional id fences the running one: it stops with
// ErrFenced, committing nothing more.
func TestEOSFenced(t *testing.T) {
	c := &fakeCluster{}
	src := &fakeSource{txs: txs("a", "b")}
	o := eosOptions(c, src)
	o.MaxRecords = 1
	first := true
	o.OnCommit = func(source.Position) {
		if first {
			first = false
			c.newProducer() // the other instance starts
		}
	}
	err := runEOS(t, o, "99")
	if !errors.Is(err, ErrFenced) || !strings.Contains(err.Error(), "outboxd-test") {
		t.Fatalf("err = %v", err)
	}
	if got := ids(c.committed(), ""); strings.Join(got, " ") != "a" {
		t.Fatalf("committed %v", got)
	}
}

// A restart resumes from the committed position: nothing twice.
func TestEOSResumes(t *testing.T) {
	c := &fakeCluster{}
	all := txs("a", "b", "c", "d")
	if err := runEOS(t, eosOptions(c, &fakeSource{txs: all[:2]}), "02"); err != nil {
		t.Fatal(err)
	}
	src := &fakeSource{txs: all}
	if err := runEOS(t, eosOptions(c, src), "04"); err != nil {
		t.Fatal(err)
	}
	if src.from != "02" {
		t.Fatalf("opened from %q", src.from)
	}
	if got := ids(c.committed(), ""); strings.Join(got, " ") != "a b c d" {
		t.Fatalf("committed %v", got)
	}
}

// A stop commits the batch being collected, even before its linger.
func TestEOSStopCommitsCurrentBatch(t *testing.T) {
	c := &fakeCluster{}
	src := &fakeSource{txs: txs("a", "b")}
	o := eosOptions(c, src)
	o.Linger = time.Hour
	o.MaxRecords = 100
	m := &countMetrics{}
	o.Metrics = m
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- RunExactlyOnce(ctx, o) }()
	waitFor(t, "transactions read", func() bool { return m.read.Load() == 2 })
	time.Sleep(20 * time.Millisecond)
	if len(c.committed()) != 0 {
		t.Fatal("committed before the linger")
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if got := ids(c.committed(), ""); strings.Join(got, " ") != "a b" {
		t.Fatalf("committed %v", got)
	}
}

// A source error: what was read is committed, the source is reopened from there.
func TestEOSSourceErrorReopens(t *testing.T) {
	c := &fakeCluster{}
	src := &fakeSource{txs: txs("a", "b", "c"), failAfter: 2}
	opens := 0
	o := eosOptions(c, src)
	o.NewSource = func() source.Source {
		src.n = 0 // a fresh connection replays from the committed position
		return src
	}
	o.OnOpen = func() { opens++ }
	if err := runEOS(t, o, "03"); err != nil {
		t.Fatal(err)
	}
	if got := ids(c.committed(), ""); strings.Join(got, " ") != "a b c" || opens != 2 {
		t.Fatalf("committed %v, %d opens", got, opens)
	}
}

// Idle progress (transactions without rows) is committed, at most every IdleInterval.
func TestEOSIdleProgress(t *testing.T) {
	c := &fakeCluster{}
	src := &fakeSource{txs: txs("", "", "")}
	if err := runEOS(t, eosOptions(c, src), "03"); err != nil {
		t.Fatal(err)
	}
	if got := c.committed(); len(got) == 0 || len(got) > 3 || string(got[len(got)-1].Value) != "03" {
		t.Fatalf("committed %+v", got)
	}
}

func TestEOSBreakerStops(t *testing.T) {
	c := &fakeCluster{}
	bad := func(id string) source.Row {
		r := row(id, "order")
		r.Values[1].Null, r.Values[1].Bytes = true, nil
		return r
	}
	src := &fakeSource{txs: []source.Tx{{Position: "01", Rows: []source.Row{row("a", "order")}},
		{Position: "02", Rows: []source.Row{bad("x"), bad("y"), row("b", "order")}}}}
	o := eosOptions(c, src)
	o.MaxRecords = 1
	o.DLQBreaker = Breaker{Max: 1, Window: 10}
	err := runEOS(t, o, "99")
	if err == nil || !strings.Contains(err.Error(), "kafka.dlq_max_rate exceeded") {
		t.Fatalf("err = %v", err)
	}
	if pos, _ := (fakePosStore{c}).Load(context.Background()); pos != "01" {
		t.Fatalf("committed %s past the tripping record", pos)
	}
}

func TestCrashHook(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	if f, err := CrashHook("", log, nil); f != nil || err != nil {
		t.Fatal("empty spec armed the hook")
	}
	if f, err := CrashHook("mid_batch:3", log, nil); f == nil || err != nil {
		t.Fatalf("mid_batch refused: %v", err)
	}
	for _, bad := range []string{"nope", "after_commit:0", "before_commit:x", "mid_batch:-1"} {
		if _, err := CrashHook(bad, log, nil); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	exits := 0
	f, err := CrashHook("after_commit:2", log, func() { exits++ })
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"before_commit", "after_commit", "before_commit", "after_commit", "after_commit"} {
		f(p)
	}
	if exits != 1 {
		t.Fatalf("%d exits", exits)
	}
}

// The mid_batch crash point passes inside an open Kafka transaction: some of the batch's records
// are acked there, none is committed, and the position is not stored.
func TestEOSCrashMidBatch(t *testing.T) {
	c := &fakeCluster{reqSize: 2}
	src := &fakeSource{txs: txs("a b c", "d e f")}
	o := eosOptions(c, src)
	o.MaxRecords = 100
	passes := 0
	o.Crash = func(p string) {
		if p != "mid_batch" {
			return
		}
		passes++
		c.mu.Lock()
		open, committed := len(c.open), len(c.log)
		c.mu.Unlock()
		if open == 0 || committed != 0 {
			t.Errorf("mid_batch: %d records acked in the open transaction, %d committed; want some and none", open, committed)
		}
	}
	if err := runEOS(t, o, "02"); err != nil {
		t.Fatal(err)
	}
	if passes == 0 {
		t.Fatal("mid_batch never passed")
	}
	if got := ids(c.committed(), ""); strings.Join(got, " ") != "a b c d e f" {
		t.Fatalf("committed %v", got)
	}
}

func h(r sink.Record, key string) string {
	for _, x := range r.Headers {
		if x.Key == key {
			return string(x.Value)
		}
	}
	return ""
}

type countMetrics struct {
	noMetrics
	read atomic.Int64
}

func (m *countMetrics) EventsRead(n int) { m.read.Add(int64(n)) }

// TestEOSAgainstKafka runs the runner with the real transactional producer and Kafka offsets
// store against the kfake broker: a record the broker refuses for its size is found among the
// records it failed together with and dead-lettered, the rest arrive once (read_committed), the
// position is in offsets.topic, and a restart resumes from it.
func TestEOSAgainstKafka(t *testing.T) {
	b := testenv.NewBroker(t)
	kc := kafka.Config{Brokers: []string{b.Addr()}, RetryBackoffMin: 10 * time.Millisecond, RetryBackoffMax: 100 * time.Millisecond}
	admin := newAdmin(t, b.Addr())
	max := "4096"
	if err := admin.CreateTopic("outbox.event.big", &sarama.TopicDetail{NumPartitions: 3, ReplicationFactor: 1,
		ConfigEntries: map[string]*string{"max.message.bytes": &max}}, false); err != nil {
		t.Fatal(err)
	}
	store := &kafka.OffsetStore{Kafka: kc, Topic: "outboxd.offsets", Key: "pipe", Source: "test"}
	defer store.Close()
	bigRow := row("big", "big")
	bigRow.Values[3].Bytes = []byte(strings.Repeat("x", 10000))
	var all []source.Tx
	n := 0
	for i := 1; i <= 30; i++ {
		tx := source.Tx{Position: source.Position(fmt.Sprintf("%03d", i))}
		for j := 0; j < 1+i%3; j++ {
			n++
			agg := "order"
			if j == 1 {
				agg = "big" // small records to the big topic share its requests
			}
			tx.Rows = append(tx.Rows, row(fmt.Sprintf("id%d", n), agg))
		}
		if i == 12 {
			tx.Rows = append(tx.Rows, bigRow)
		}
		all = append(all, tx)
	}
	opts := func(src *fakeSource) EOSOptions {
		rt, _ := outbox.New(outbox.DefaultConfig())
		return EOSOptions{
			NewSource: func() source.Source { return src },
			NewProducer: func() (TxnProducer, error) {
				p, err := kafka.NewTxn(kc, kafka.TxnOptions{ID: "outboxd-pipe"}, nil)
				if err != nil {
					return nil, err
				}
				return p, nil
			},
			Route: rt.Route, Classify: kafka.Classify, Fatal: kafka.TxnFatal, Fenced: kafka.IsFenced, Store: store,
			TransactionalID: "outboxd-pipe", DLQTopic: "outboxd.dlq", MaxRecords: 50, Linger: 20 * time.Millisecond,
			RetryMin: 10 * time.Millisecond, RetryMax: 100 * time.Millisecond,
		}
	}
	if err := runEOS(t, opts(&fakeSource{txs: all[:20]}), "020"); err != nil {
		t.Fatal(err)
	}
	src := &fakeSource{txs: all}
	if err := runEOS(t, opts(src), "030"); err != nil {
		t.Fatal(err)
	}
	if src.from != "020" {
		t.Fatalf("second run opened the source from %q", src.from)
	}
	got := testenv.Consume(t, b.Addr(), `outbox\.event\..*`, n, 10*time.Second)
	seen := map[string]int{}
	for _, r := range got {
		seen[r.Header("id")]++
	}
	for i := 1; i <= n; i++ {
		if c := seen[fmt.Sprintf("id%d", i)]; c != 1 {
			t.Errorf("id%d delivered %d times", i, c)
		}
	}
	if len(got) != n {
		t.Errorf("%d records, want %d", len(got), n)
	}
	dlq := testenv.Consume(t, b.Addr(), `outboxd\.dlq`, 1, 5*time.Second)
	if len(dlq) != 1 || dlq[0].Header("id") != "big" || dlq[0].Header(sink.HeaderReason) != "record_too_large" {
		t.Fatalf("dead letters: %+v", dlq)
	}
	if pos, err := store.Load(context.Background()); err != nil || pos != "030" {
		t.Fatalf("committed position %q %v", pos, err)
	}
}

func newAdmin(t *testing.T, addr string) sarama.ClusterAdmin {
	t.Helper()
	sc := sarama.NewConfig()
	sc.Version = sarama.V2_8_0_0
	a, err := sarama.NewClusterAdmin([]string{addr}, sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

// pacedSource serves n single-row transactions, one every interval, from a fresh position each
// Open (a reconnect replays from the committed position).
type pacedSource struct {
	n        int
	interval time.Duration
	mu       sync.Mutex
	next     int
}

func (s *pacedSource) Open(_ context.Context, from source.Position) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next = 1
	if from != "" {
		fmt.Sscanf(string(from), "%d", &s.next)
		s.next++
	}
	return nil
}

func (s *pacedSource) Next(ctx context.Context) (source.Tx, error) {
	if s.interval > 0 {
		select {
		case <-ctx.Done():
			return source.Tx{}, ctx.Err()
		case <-time.After(s.interval):
		}
	} else if err := ctx.Err(); err != nil {
		return source.Tx{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.next > s.n {
		<-ctx.Done()
		return source.Tx{}, ctx.Err()
	}
	i := s.next
	s.next++
	return source.Tx{Position: source.Position(fmt.Sprintf("%06d", i)), Rows: []source.Row{row(fmt.Sprintf("id%d", i), "order")}}, nil
}

func (s *pacedSource) Confirm(context.Context, source.Position) error { return nil }
func (s *pacedSource) Close() error                                   { return nil }

// TestEOSBrokerOutage stops the broker (state kept on disk) for a few seconds under load: the
// runner aborts, backs off, re-initialises and carries on; every record arrives once.
func TestEOSBrokerOutage(t *testing.T) {
	port, _ := testenv.FreePort()
	br := &testenv.Broker{Port: port, Dir: t.TempDir()}
	if err := br.Start(); err != nil {
		t.Fatal(err)
	}
	defer br.Stop()
	kc := kafka.Config{Brokers: []string{br.Addr()}, RetryBackoffMin: 10 * time.Millisecond, RetryBackoffMax: 200 * time.Millisecond}
	store := &kafka.OffsetStore{Kafka: kc, Topic: "outboxd.offsets", Key: "pipe"}
	defer store.Close()
	const n = 1500
	src := &pacedSource{n: n, interval: 2 * time.Millisecond}
	rt, _ := outbox.New(outbox.DefaultConfig())
	var commits atomic.Int64
	o := EOSOptions{
		NewSource: func() source.Source { return src },
		NewProducer: func() (TxnProducer, error) {
			p, err := kafka.NewTxn(kc, kafka.TxnOptions{ID: "outboxd-pipe"}, nil)
			if err != nil {
				return nil, err
			}
			return p, nil
		},
		Route: rt.Route, Classify: kafka.Classify, Fatal: kafka.TxnFatal, Fenced: kafka.IsFenced, Store: store, TransactionalID: "outboxd-pipe",
		DLQTopic: "outboxd.dlq", RetryMin: 50 * time.Millisecond, RetryMax: 500 * time.Millisecond,
		OnCommit: func(source.Position) { commits.Add(1) },
	}
	const outage = 6 * time.Second // longer than sarama's bounded retries: the producer is replaced
	go func() {
		for commits.Load() < 10 {
			time.Sleep(10 * time.Millisecond)
		}
		br.Stop()
		time.Sleep(outage)
		if err := br.Start(); err != nil {
			t.Error(err)
		}
	}()
	start := time.Now()
	if err := runEOSFor(t, o, source.Position(fmt.Sprintf("%06d", n)), 90*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d records through a %v broker outage in %v, %d commits", n, outage, time.Since(start), commits.Load())
	got := testenv.Consume(t, br.Addr(), `outbox\.event\.order`, n, 20*time.Second)
	seen := map[string]int{}
	for _, r := range got {
		seen[r.Header("id")]++
	}
	lost, dups := 0, 0
	for i := 1; i <= n; i++ {
		switch c := seen[fmt.Sprintf("id%d", i)]; {
		case c == 0:
			lost++
		case c > 1:
			dups += c - 1
		}
	}
	if lost != 0 || dups != 0 || len(got) != n {
		t.Fatalf("%d records: %d lost, %d duplicates", len(got), lost, dups)
	}
}

// A record too large even for its dead letter: the dead letter drops the value (as in
// at_least_once) instead of stopping the pipeline.
func TestEOSHugeRecordDeadLetterDropsValue(t *testing.T) {
	b := testenv.NewBroker(t)
	kc := kafka.Config{Brokers: []string{b.Addr()}, RetryBackoffMin: 10 * time.Millisecond, RetryBackoffMax: 100 * time.Millisecond}
	store := &kafka.OffsetStore{Kafka: kc, Topic: "outboxd.offsets", Key: "pipe"}
	defer store.Close()
	big := row("big", "order")
	big.Values[3] = source.Value{Bytes: make([]byte, 2<<20)}
	src := &fakeSource{txs: []source.Tx{{Position: "01", Rows: []source.Row{row("a", "order"), big, row("b", "order")}}}}
	rt, _ := outbox.New(outbox.DefaultConfig())
	o := EOSOptions{
		NewSource: func() source.Source { return src },
		NewProducer: func() (TxnProducer, error) {
			p, err := kafka.NewTxn(kc, kafka.TxnOptions{ID: "outboxd-pipe"}, nil)
			if err != nil {
				return nil, err
			}
			return p, nil
		},
		Route: rt.Route, Classify: kafka.Classify, Fatal: kafka.TxnFatal, Fenced: kafka.IsFenced, Store: store,
		TransactionalID: "outboxd-pipe", DLQTopic: "outboxd.dlq",
	}
	if err := runEOS(t, o, "01"); err != nil {
		t.Fatal(err)
	}
	dlq := testenv.Consume(t, b.Addr(), `outboxd\.dlq`, 1, 5*time.Second)
	if len(dlq) != 1 || dlq[0].Value != nil || dlq[0].Header(sink.HeaderValueDropped) == "" || dlq[0].Header(sink.HeaderReason) != "record_too_large" {
		t.Fatalf("dead letters %+v", dlq)
	}
	if got := testenv.Consume(t, b.Addr(), `outbox\.event\.order`, 2, 5*time.Second); len(got) != 2 {
		t.Fatalf("%d records", len(got))
	}
}

// countingSource counts the rows its Next has handed out.
type countingSource struct {
	*fakeSource
	rows atomic.Int64
}

func (s *countingSource) Next(ctx context.Context) (source.Tx, error) {
	tx, err := s.fakeSource.Next(ctx)
	s.rows.Add(int64(len(tx.Rows)))
	return tx, err
}

// While Kafka refuses every batch, the runner reads ahead no more than ReadAheadRows rows (plus
// the open batch and the transaction the reader holds): a backlog is not pulled into memory.
func TestEOSReadAheadBoundedByRows(t *testing.T) {
	c := &fakeCluster{transientLeft: 1 << 30}
	var spec []string
	for i := range 300 {
		spec = append(spec, fmt.Sprintf("r%d", i))
	}
	src := &countingSource{fakeSource: &fakeSource{txs: txs(spec...)}}
	o := eosOptions(c, src.fakeSource)
	o.NewSource = func() source.Source { return src }
	o.ReadAheadRows = 10
	o.ShutdownTimeout = 100 * time.Millisecond // the open batch cannot commit: do not wait for it
	o.Log = slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- RunExactlyOnce(ctx, o) }()
	time.Sleep(300 * time.Millisecond) // many failed flush attempts
	read := src.rows.Load()
	cancel()
	<-errc
	// batch (MaxRecords 4) + the transaction that starts the next batch (the core holds it until
	// the batch commits) + budget (10) + the one transaction the reader waits to hand over.
	if read > 4+1+10+1 {
		t.Fatalf("read %d rows ahead of a stalled Kafka with ReadAheadRows 10", read)
	}
	if read < 4 {
		t.Fatalf("read only %d rows: the test did not fill a batch", read)
	}
}
