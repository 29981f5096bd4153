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

	"github.com/outboxd/outboxd/sink"
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
	closed  bool
	dl      deliverer // calls the dones (Flush waits for it)
}

var errFakeTxnClosed = errors.New("fake transactional producer closed with the record queued")

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
	if p.closed {
		return errors.New("fake transactional producer closed")
	}
	if !p.inTxn {
		return errors.New("no transaction")
	}
	p.queued = append(p.queued, fakeQueued{rec: *rec, done: done})
	if p.reqSize > 0 && len(p.queued) >= p.reqSize {
		p.send() // one request: its outcomes arrive later, as from a broker
	}
	return nil
}

// Flush sends what is queued as one request and waits for every done.
func (p *fakeTxn) Flush(context.Context) error {
	p.send()
	p.dl.idle()
	return nil
}

// send resolves everything queued as one request and hands the dones to the deliverer.
func (p *fakeTxn) send() {
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
		p.dl.push(fakeDelivery{done: x.done, err: err})
	}
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

// Close fails what is still queued, waits for every done and stops the deliverer.
func (p *fakeTxn) Close() error {
	if !p.closed {
		p.closed = true
		for _, x := range p.queued {
			p.dl.push(fakeDelivery{done: x.done, err: errFakeTxnClosed})
		}
		p.queued = nil
	}
	p.dl.close()
	return nil
}

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
