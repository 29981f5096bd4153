package pipeline

// The fakes of the runner tests (both modes), and the helpers that drive them.

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outboxd/outboxd/internal/testenv/harness"
	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
	"github.com/outboxd/outboxd/transform/outbox"
)

// fakeSource serves a fixed list of transactions, then blocks.
type fakeSource struct {
	txs       []source.Tx
	from      source.Position
	mu        sync.Mutex
	confirmed []source.Position
	failAfter int // return an error after this many txs (0 = never)
	n         int
}

func (s *fakeSource) Open(ctx context.Context, from source.Position) error {
	s.from = from
	return nil
}
func (s *fakeSource) Next(ctx context.Context) (source.Tx, error) {
	for s.n < len(s.txs) {
		tx := s.txs[s.n]
		s.n++
		if s.failAfter > 0 && s.n > s.failAfter {
			s.failAfter = 0
			return source.Tx{}, errors.New("connection reset")
		}
		if s.from != "" && tx.Position <= s.from {
			continue
		}
		return tx, nil
	}
	<-ctx.Done()
	return source.Tx{}, ctx.Err()
}
func (s *fakeSource) Confirm(ctx context.Context, p source.Position) error {
	s.mu.Lock()
	s.confirmed = append(s.confirmed, p)
	s.mu.Unlock()
	return nil
}
func (s *fakeSource) Close() error { return nil }

// fakeProducer holds every record until the test acks or fails it (auto: acks at once). It
// keeps the Producer contract (TestFakeProducersConform runs sinktest on it): dones run on its
// deliverer goroutine; Close fails what the test never acked and waits for every done; Produce
// after Close fails.
type fakeProducer struct {
	mu      sync.Mutex
	queued  []*sink.Record
	dones   []func(error)    // nil once handed to the deliverer
	failFor map[string]error // topic → error returned on ack
	auto    bool             // ack immediately
	closed  bool
	dl      deliverer
}

var errFakeProducerClosed = errors.New("fake producer closed before the test acked the record")

func (p *fakeProducer) Produce(ctx context.Context, rec *sink.Record, done func(error)) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("fake producer closed")
	}
	r := *rec
	p.queued = append(p.queued, &r)
	if p.auto {
		p.dl.push(fakeDelivery{done: done, err: p.failFor[rec.Topic]})
		p.dones = append(p.dones, nil)
		return nil
	}
	p.dones = append(p.dones, done)
	return nil
}

// Close fails the records the test never acked, waits for every done, and stops the deliverer.
// It is idempotent.
func (p *fakeProducer) Close() error {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		for i, d := range p.dones {
			if d != nil {
				p.dones[i] = nil
				p.dl.push(fakeDelivery{done: d, err: errFakeProducerClosed})
			}
		}
	}
	p.mu.Unlock()
	p.dl.close()
	return nil
}

func (p *fakeProducer) count() int { p.mu.Lock(); defer p.mu.Unlock(); return len(p.queued) }

// ack resolves record i with err and returns once its done has run (on the deliverer). A
// record Close already failed is not resolved again.
func (p *fakeProducer) ack(i int, err error) {
	p.mu.Lock()
	d := p.dones[i]
	if d == nil {
		p.mu.Unlock()
		return
	}
	p.dones[i] = nil
	ran := make(chan struct{})
	p.dl.push(fakeDelivery{done: d, err: err, ran: ran})
	p.mu.Unlock()
	<-ran
}

type memStore struct {
	mu  sync.Mutex
	pos source.Position
	err error
}

func (m *memStore) Load(context.Context) (source.Position, error) { return m.pos, nil }
func (m *memStore) Save(_ context.Context, p source.Position) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return m.err
	}
	m.pos = p
	return nil
}
func (m *memStore) get() source.Position { m.mu.Lock(); defer m.mu.Unlock(); return m.pos }

func row(id, agg string) source.Row {
	return source.Row{Table: "public.outbox", Columns: []string{"id", "aggregatetype", "aggregateid", "payload"},
		Values: []source.Value{{Bytes: []byte(id)}, {Bytes: []byte(agg)}, {Bytes: []byte("k")}, {Bytes: []byte("{}")}}}
}

// testCommitInterval is the at_least_once runner's commit tick in these tests.
const testCommitInterval = 5 * time.Millisecond

func options(src *fakeSource, p *fakeProducer, st *memStore) Options {
	rt, _ := outbox.New(outbox.DefaultConfig())
	return Options{NewSource: func() source.Source { return src }, Producer: p, Route: rt.Route,
		Classify: func(err error) (bool, string) { return strings.Contains(err.Error(), "too large"), "record_too_large" },
		Store:    st, DLQTopic: "dlq", CommitInterval: testCommitInterval, ShutdownTimeout: 2 * time.Second}
}

// settle lets d pass on the fake clock of the test's synctest bubble and returns once every
// goroutine of the bubble is blocked again: whatever the pipeline would do within d is done, so
// a negative assertion after it proves the pipeline had the chance to act.
func settle(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// waitFor polls cond (on the bubble's fake clock, so the pipeline's timers run meanwhile).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	harness.WaitFor(t, 5*time.Second, what, cond)
}

// deliverer is the one goroutine a fake producer calls its dones from, as the Kafka producers
// call them from their result goroutine: in order, one at a time, never on the goroutine that
// called Produce, Flush or Commit. It starts with the first push and ends with close.
type deliverer struct {
	mu      sync.Mutex
	work    *sync.Cond // nil until started
	pending []fakeDelivery
	head    int  // pending[head:] is still to call
	running bool // a done is being called
	closed  bool
	stopped chan struct{}
}

// fakeDelivery is one done call; ran (if set) is closed once it returned.
type fakeDelivery struct {
	done func(error)
	err  error
	ran  chan struct{}
}

// push queues done calls. Not after close.
func (d *deliverer) push(xs ...fakeDelivery) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.work == nil {
		d.work = sync.NewCond(&d.mu)
		d.stopped = make(chan struct{})
		go d.loop()
	}
	d.pending = append(d.pending, xs...)
	d.work.Broadcast()
}

func (d *deliverer) loop() {
	d.mu.Lock()
	for {
		for d.head == len(d.pending) && !d.closed {
			d.work.Wait()
		}
		if d.head == len(d.pending) {
			d.mu.Unlock()
			close(d.stopped)
			return
		}
		x := d.pending[d.head]
		d.pending[d.head] = fakeDelivery{}
		if d.head++; d.head == len(d.pending) {
			d.pending, d.head = d.pending[:0], 0 // reuse the array
		}
		d.running = true
		d.mu.Unlock()
		x.done(x.err)
		if x.ran != nil {
			close(x.ran)
		}
		d.mu.Lock()
		d.running = false
		d.work.Broadcast()
	}
}

// idle returns once every pushed done has returned.
func (d *deliverer) idle() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for d.work != nil && (d.head < len(d.pending) || d.running) {
		d.work.Wait()
	}
}

// close calls what is pending, then ends the goroutine. Idempotent.
func (d *deliverer) close() {
	d.mu.Lock()
	d.closed = true
	if d.work == nil {
		d.mu.Unlock()
		return
	}
	d.work.Broadcast()
	stopped := d.stopped
	d.mu.Unlock()
	<-stopped
}
