package pipeline

import (
	"context"
	"fmt"
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

// The exactly-once runner against kfake over real sockets (not under synctest).

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
	got := testenv.ConsumeAll(t, b.Addr(), `^outbox\.event\.`)
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
	dlq := testenv.ConsumeAll(t, b.Addr(), `^outboxd\.dlq$`)
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

// TestEOSBrokerOutage stops the broker (state kept on disk) under load until the runner has
// given up on its producer and asked for a new one (sarama's retries are bounded): the runner
// aborts, backs off, re-initialises and carries on; every record arrives once.
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
	tenCommits := make(chan struct{}) // closed by the 10th commit
	var down atomic.Bool              // the broker is stopped
	replaced := make(chan struct{})   // closed by the first NewProducer call during the outage
	var replacedOnce sync.Once
	o := EOSOptions{
		NewSource: func() source.Source { return src },
		NewProducer: func() (TxnProducer, error) {
			if down.Load() {
				replacedOnce.Do(func() { close(replaced) })
			}
			p, err := kafka.NewTxn(kc, kafka.TxnOptions{ID: "outboxd-pipe"}, nil)
			if err != nil {
				return nil, err
			}
			return p, nil
		},
		Route: rt.Route, Classify: kafka.Classify, Fatal: kafka.TxnFatal, Fenced: kafka.IsFenced, Store: store, TransactionalID: "outboxd-pipe",
		DLQTopic: "outboxd.dlq", RetryMin: 50 * time.Millisecond, RetryMax: 500 * time.Millisecond,
		OnCommit: func(source.Position) {
			if commits.Add(1) == 10 {
				close(tenCommits)
			}
		},
	}
	outage := make(chan time.Duration, 1)
	go func() {
		defer close(outage)
		select {
		case <-tenCommits:
		case <-time.After(60 * time.Second):
			t.Error("10 commits not made within 60s")
			return
		}
		br.Stop()
		down.Store(true)
		stopped := time.Now()
		select {
		case <-replaced:
		case <-time.After(60 * time.Second):
			t.Error("the runner did not replace its producer within 60s of the broker stopping")
		}
		down.Store(false)
		outage <- time.Since(stopped)
		if err := br.Start(); err != nil {
			t.Error(err)
		}
	}()
	start := time.Now()
	if err := runEOSFor(t, o, source.Position(fmt.Sprintf("%06d", n)), 90*time.Second); err != nil {
		t.Fatal(err)
	}
	d, ok := <-outage
	if !ok {
		t.Fatal("the outage did not happen")
	}
	t.Logf("%d records through a %v broker outage in %v, %d commits", n, d.Round(time.Millisecond), time.Since(start), commits.Load())
	// The whole topic up to its last stable offset (every record is committed): a duplicate
	// anywhere in it is counted.
	got := testenv.ConsumeAll(t, br.Addr(), `^outbox\.event\.order$`)
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
	dlq := testenv.ConsumeAll(t, b.Addr(), `^outboxd\.dlq$`)
	if len(dlq) != 1 || dlq[0].Value != nil || dlq[0].Header(sink.HeaderValueDropped) == "" || dlq[0].Header(sink.HeaderReason) != "record_too_large" {
		t.Fatalf("dead letters %+v", dlq)
	}
	if got := testenv.ConsumeAll(t, b.Addr(), `^outbox\.event\.order$`); len(got) != 2 {
		t.Fatalf("%d records", len(got))
	}
}
