// Package sinktest is the conformance suite for producers: the Kafka producer (sink/kafka) and
// every fake a test puts in its place run it, so a fake cannot promise the pipeline more (or
// less) than the real producer does. Each clause of the contract is a subtest of its own, with a
// producer of its own.
package sinktest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv/harness"
	"github.com/outboxd/outboxd/sink"
)

// Producer is the contract the pipeline relies on (internal/pipeline.Producer).
type Producer interface {
	// Produce queues rec. It may block while the producer's in-flight cap is reached; it then
	// returns ctx.Err() if ctx ends first, and an error once the producer is closed. A nil
	// error means queued: done is then called exactly once, later, from the producer's own
	// goroutine (one goroutine, so dones of one producer never overlap), never from inside
	// Produce, with nil once delivered or the final error. A non-nil error means not queued:
	// done is never called. Dones arrive whether or not the caller calls Produce again.
	Produce(ctx context.Context, rec *sink.Record, done func(error)) error
	// Close stops taking records and returns once every done of a queued record was called.
	// Produce after Close returns an error.
	Close() error
}

// Harness binds the suite to one producer implementation.
type Harness struct {
	// New returns a new, ready producer; the suite closes it.
	New func(t *testing.T) Producer
	// Record returns record i of subtest t (a topic the producer delivers to).
	Record func(t *testing.T, i int) *sink.Record
	// AtCap, if set, returns a producer whose in-flight cap is reached: its next Produce blocks
	// until release is called, after which every queued record completes.
	AtCap func(t *testing.T) (p Producer, release func())
	// Wait bounds how long the suite waits for dones (default 30s).
	Wait time.Duration
	// ReadBack, if set, reads what the producer delivered (the RecordFieldsArrive clause is
	// skipped without it).
	ReadBack *ReadBack
}

var clauses = []struct {
	name string
	run  func(t *testing.T, h Harness)
}{
	{"DoneExactlyOnce", testDoneExactlyOnce},
	{"DoneFromOneGoroutine", testDoneFromOneGoroutine},
	{"DoneNeverInsideProduce", testDoneNeverInsideProduce},
	{"CloseWaitsForDones", testCloseWaits},
	{"ProduceAfterClose", testProduceAfterClose},
	{"CancelledContext", testCancelledContext},
	{"BlockedProduceHonoursContext", testBlockedProduce},
	{"RecordFieldsArrive", testRecordFields},
}

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	if h.New == nil || h.Record == nil {
		t.Fatal("incomplete Harness: New and Record are required")
	}
	if h.Wait == 0 {
		h.Wait = 30 * time.Second
	}
	for _, c := range clauses {
		t.Run(c.name, func(t *testing.T) { c.run(t, h) })
	}
}

const records = 200

// tally records the dones of one subtest: how often each record's done ran, on which
// goroutine, and whether two ever overlapped.
type tally struct {
	mu       sync.Mutex
	calls    []int
	errs     []error
	gids     map[uint64]bool
	active   atomic.Int32
	overlaps atomic.Int32
	all      chan struct{}
	left     atomic.Int32
}

func newTally(n int) *tally {
	tl := &tally{calls: make([]int, n), errs: make([]error, n), gids: map[uint64]bool{}, all: make(chan struct{})}
	tl.left.Store(int32(n))
	return tl
}

func (tl *tally) done(i int) func(error) {
	return func(err error) {
		if tl.active.Add(1) > 1 {
			tl.overlaps.Add(1)
		}
		runtime.Gosched() // widen the window another done would overlap in
		tl.mu.Lock()
		tl.calls[i]++
		tl.errs[i] = err
		tl.gids[goid()] = true
		first := tl.calls[i] == 1
		tl.mu.Unlock()
		tl.active.Add(-1)
		if first && tl.left.Add(-1) == 0 {
			close(tl.all)
		}
	}
}

// wait waits until every record's done ran once.
func (tl *tally) wait(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-tl.all:
	case <-time.After(d):
		t.Fatalf("%d of %d dones not called within %v", tl.left.Load(), len(tl.calls), d)
	}
}

// check fails t unless every record's done ran exactly once (and, if delivered is set, with nil).
func (tl *tally) check(t *testing.T, delivered bool) {
	t.Helper()
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for i, n := range tl.calls {
		if n != 1 {
			t.Errorf("record %d: done called %d times, want exactly once", i, n)
		}
		if delivered && tl.errs[i] != nil {
			t.Errorf("record %d: done(%v), want nil", i, tl.errs[i])
		}
	}
}

// goid is the calling goroutine's id.
func goid() uint64 { return harness.GoroutineID() }

func newProducer(t *testing.T, h Harness) Producer {
	p := h.New(t)
	t.Cleanup(func() { p.Close() })
	return p
}

func produceAll(t *testing.T, h Harness, p Producer, tl *tally) {
	t.Helper()
	for i := range tl.calls {
		if err := p.Produce(context.Background(), h.Record(t, i), tl.done(i)); err != nil {
			t.Fatalf("Produce %d: %v", i, err)
		}
	}
}

// testDoneExactlyOnce: every queued record's done is called once, without further calls from
// the caller; none is called again, not even by Close.
func testDoneExactlyOnce(t *testing.T, h Harness) {
	p := newProducer(t, h)
	tl := newTally(records)
	produceAll(t, h, p, tl)
	tl.wait(t, h.Wait) // the caller makes no call meanwhile: dones arrive on their own
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	tl.check(t, true)
}

// testDoneFromOneGoroutine: every done of one producer runs on the same goroutine, and no two
// ever overlap.
func testDoneFromOneGoroutine(t *testing.T, h Harness) {
	p := newProducer(t, h)
	tl := newTally(records)
	produceAll(t, h, p, tl)
	tl.wait(t, h.Wait)
	p.Close()
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if len(tl.gids) != 1 {
		t.Errorf("dones ran on %d goroutines, want one", len(tl.gids))
	}
	if n := tl.overlaps.Load(); n > 0 {
		t.Errorf("%d dones overlapped another done of the same producer", n)
	}
}

// testDoneNeverInsideProduce: done never runs on the goroutine calling Produce, so a caller that
// holds its own lock around Produce, which done also takes, never deadlocks.
func testDoneNeverInsideProduce(t *testing.T, h Harness) {
	p := newProducer(t, h)
	var mu sync.Mutex
	callers := map[uint64]bool{}
	tl := newTally(records)
	finished := make(chan error, 1)
	go func() {
		for i := range tl.calls {
			d := tl.done(i)
			mu.Lock()
			callers[goid()] = true
			err := p.Produce(context.Background(), h.Record(t, i), func(err error) {
				mu.Lock() // the caller's lock: held while it is inside Produce
				mu.Unlock()
				d(err)
			})
			mu.Unlock()
			if err != nil {
				finished <- fmt.Errorf("Produce %d: %w", i, err)
				return
			}
		}
		finished <- nil
	}()
	select {
	case err := <-finished:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(h.Wait):
		t.Fatalf("Produce did not return within %v: done was called from inside Produce, on the caller's goroutine (deadlock)", h.Wait)
	}
	tl.wait(t, h.Wait)
	p.Close()
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for g := range tl.gids {
		if callers[g] {
			t.Errorf("done ran on the goroutine that called Produce (goroutine %d)", g)
		}
	}
}

// testCloseWaits: Close, called while records are outstanding, returns only once every done of
// a queued record was called (delivered, or failed by the Close).
func testCloseWaits(t *testing.T, h Harness) {
	p := newProducer(t, h)
	tl := newTally(records)
	produceAll(t, h, p, tl)
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if n := tl.left.Load(); n != 0 {
		t.Fatalf("Close returned with %d of %d dones outstanding", n, records)
	}
	tl.check(t, false)
}

// testProduceAfterClose: Produce after Close returns an error and never calls done; a second
// Close is harmless.
func testProduceAfterClose(t *testing.T, h Harness) {
	p := newProducer(t, h)
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	var called atomic.Int32
	err := p.Produce(context.Background(), h.Record(t, 0), func(error) { called.Add(1) })
	if err == nil {
		t.Fatal("Produce after Close returned nil")
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if n := called.Load(); n != 0 {
		t.Errorf("done called %d times for a record Produce refused (%v)", n, err)
	}
}

// testCancelledContext: Produce with a context that already ended either refuses the record with
// ctx.Err() (done never called) or queues it (done called exactly once): never both, never
// neither.
func testCancelledContext(t *testing.T, h Harness) {
	p := newProducer(t, h)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tl := newTally(1)
	err := p.Produce(ctx, h.Record(t, 0), tl.done(0))
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Produce with an ended context: %v, want nil or context.Canceled", err)
		}
		p.Close()
		if n := tl.left.Load(); n != 1 {
			t.Fatalf("done called for a record Produce refused with %v", err)
		}
		return
	}
	tl.wait(t, h.Wait)
	p.Close()
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if tl.calls[0] != 1 {
		t.Fatalf("done called %d times, want once", tl.calls[0])
	}
}

// testBlockedProduce: Produce blocked at the in-flight cap returns ctx.Err() once ctx ends, and
// never calls that record's done.
func testBlockedProduce(t *testing.T, h Harness) {
	if h.AtCap == nil {
		t.Skip("this producer has no in-flight cap: Produce never blocks")
	}
	p, release := h.AtCap(t)
	t.Cleanup(func() { release(); p.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var called atomic.Int32
	start := time.Now()
	err := p.Produce(ctx, h.Record(t, 0), func(error) { called.Add(1) })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Produce at the in-flight cap: %v after %v, want context.DeadlineExceeded", err, time.Since(start))
	}
	if d := time.Since(start); d < 250*time.Millisecond || d > 10*time.Second {
		t.Errorf("Produce at the in-flight cap returned after %v, want about 300ms", d)
	}
	release()
	if err := p.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if n := called.Load(); n != 0 {
		t.Errorf("done called %d times for a record Produce refused with %v", n, err)
	}
}
