package sinktest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxd/outboxd/sink"
)

// TxnProducer is the transactional producer the exactly_once runner relies on
// (internal/pipeline.TxnProducer, sink/kafka.TxnProducer).
type TxnProducer interface {
	// Begin starts a transaction; it fails unless Usable.
	Begin() error
	// Produce queues rec in the open transaction. A nil error means queued: done is then called
	// exactly once, later, from the producer's own goroutine (one goroutine, so dones never
	// overlap), never on the goroutine that called Produce, Flush or Commit. A non-nil error
	// (a record that cannot be sent at all, a closed producer) means not queued: done is never
	// called.
	Produce(ctx context.Context, rec *sink.Record, done func(error)) error
	// Flush returns once every queued record's done has been called (or ctx ended).
	Flush(ctx context.Context) error
	// Commit waits for every queued record's done, then commits.
	Commit() error
	// Abort aborts the open transaction; the producer can then begin another.
	Abort() error
	// Usable reports whether a transaction can begin.
	Usable() bool
	// Close shuts the producer down: records still queued are reported through done (with an
	// error) before it returns. It may be called more than once; Produce after it fails.
	Close() error
}

// TxnHarness binds the transactional suite to one implementation.
type TxnHarness struct {
	// New returns a new, ready producer (its transactional id initialised); the suite closes it.
	New func(t *testing.T) TxnProducer
	// Record returns record i of subtest t.
	Record func(t *testing.T, i int) *sink.Record
	// Wait bounds how long the suite waits (default 30s).
	Wait time.Duration
	// ReadBack, if set, reads what the producer delivered (the RecordFieldsArrive clause is
	// skipped without it).
	ReadBack *ReadBack
}

var txnClauses = []struct {
	name string
	run  func(t *testing.T, h TxnHarness)
}{
	{"FlushWaitsForDones", testTxnFlush},
	{"CommitWaitsForDones", testTxnCommit},
	{"DoneFromOneGoroutineNeverTheCallers", testTxnGoroutines},
	{"AbortThenBegin", testTxnAbort},
	{"CloseReportsQueued", testTxnClose},
	{"RecordFieldsArrive", testTxnRecordFields},
}

// RunTxn runs the transactional producer suite.
func RunTxn(t *testing.T, h TxnHarness) {
	if h.New == nil || h.Record == nil {
		t.Fatal("incomplete TxnHarness: New and Record are required")
	}
	if h.Wait == 0 {
		h.Wait = 30 * time.Second
	}
	for _, c := range txnClauses {
		t.Run(c.name, func(t *testing.T) { c.run(t, h) })
	}
}

const txnRecords = 50

func newTxn(t *testing.T, h TxnHarness) TxnProducer {
	p := h.New(t)
	t.Cleanup(func() { p.Close() })
	if !p.Usable() {
		t.Fatal("a new producer is not Usable")
	}
	return p
}

// produceTxn begins a transaction and queues n records into tl.
func produceTxn(t *testing.T, h TxnHarness, p TxnProducer, tl *tally, from int) {
	t.Helper()
	if err := p.Begin(); err != nil {
		t.Fatalf("Begin: %v", err)
	}
	for i := from; i < len(tl.calls); i++ {
		if err := p.Produce(context.Background(), h.Record(t, i), tl.done(i)); err != nil {
			t.Fatalf("Produce %d: %v", i, err)
		}
	}
}

func flush(t *testing.T, h TxnHarness, p TxnProducer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), h.Wait)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
}

// testTxnFlush: once Flush returns, every queued record's done has been called, once.
func testTxnFlush(t *testing.T, h TxnHarness) {
	p := newTxn(t, h)
	tl := newTally(txnRecords)
	produceTxn(t, h, p, tl, 0)
	flush(t, h, p)
	if n := tl.left.Load(); n != 0 {
		t.Fatalf("Flush returned with %d of %d dones not called", n, txnRecords)
	}
	if err := p.Commit(); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	tl.check(t, true)
	if !p.Usable() {
		t.Fatal("not Usable after a commit")
	}
}

// testTxnCommit: Commit without a Flush first waits for every queued record's done.
func testTxnCommit(t *testing.T, h TxnHarness) {
	p := newTxn(t, h)
	tl := newTally(txnRecords)
	produceTxn(t, h, p, tl, 0)
	if err := p.Commit(); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if n := tl.left.Load(); n != 0 {
		t.Fatalf("Commit returned with %d of %d dones not called", n, txnRecords)
	}
	tl.check(t, true)
}

// testTxnGoroutines: over two transactions every done runs on one goroutine, never two at once,
// and never on the goroutine calling Produce, Flush or Commit.
func testTxnGoroutines(t *testing.T, h TxnHarness) {
	p := newTxn(t, h)
	tl := newTally(2 * txnRecords)
	caller, finished := make(chan uint64, 1), make(chan struct{})
	go func() {
		defer close(finished)
		caller <- goid()
		if err := p.Begin(); err != nil { // first half: flushed, then committed
			t.Errorf("Begin: %v", err)
		}
		for i := 0; i < txnRecords; i++ {
			if err := p.Produce(context.Background(), h.Record(t, i), tl.done(i)); err != nil {
				t.Errorf("Produce %d: %v", i, err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), h.Wait)
		defer cancel()
		if err := p.Flush(ctx); err != nil {
			t.Errorf("Flush: %v", err)
		}
		if err := p.Commit(); err != nil {
			t.Errorf("Commit: %v", err)
		}
		if err := p.Begin(); err != nil { // second half, committed without a Flush
			t.Errorf("Begin: %v", err)
		}
		for i := txnRecords; i < 2*txnRecords; i++ {
			if err := p.Produce(context.Background(), h.Record(t, i), tl.done(i)); err != nil {
				t.Errorf("Produce %d: %v", i, err)
			}
		}
		if err := p.Commit(); err != nil {
			t.Errorf("Commit: %v", err)
		}
	}()
	g := <-caller
	select {
	case <-finished:
	case <-time.After(h.Wait):
		t.Fatalf("two transactions did not commit within %v", h.Wait)
	}
	tl.wait(t, h.Wait)
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if len(tl.gids) != 1 {
		t.Errorf("dones ran on %d goroutines, want one", len(tl.gids))
	}
	if tl.gids[g] {
		t.Errorf("done ran on the goroutine that called Produce/Flush/Commit")
	}
	if n := tl.overlaps.Load(); n > 0 {
		t.Errorf("%d dones overlapped another done of the same producer", n)
	}
}

// testTxnAbort: after a flushed transaction is aborted the producer is Usable and the next
// transaction commits.
func testTxnAbort(t *testing.T, h TxnHarness) {
	p := newTxn(t, h)
	tl := newTally(txnRecords)
	produceTxn(t, h, p, tl, txnRecords/2)
	flush(t, h, p)
	if err := p.Abort(); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	if !p.Usable() {
		t.Fatal("not Usable after Abort")
	}
	tl2 := newTally(txnRecords / 2)
	produceTxn(t, h, p, tl2, 0)
	if err := p.Commit(); err != nil {
		t.Fatalf("Commit after Abort: %v", err)
	}
	tl2.check(t, true)
}

// testTxnClose: Close reports every queued record through done before it returns; a second
// Close is harmless; Produce after Close fails without calling done.
func testTxnClose(t *testing.T, h TxnHarness) {
	p := newTxn(t, h)
	tl := newTally(txnRecords)
	produceTxn(t, h, p, tl, 0)
	if err := p.Close(); err != nil {
		t.Logf("Close: %v", err)
	}
	if n := tl.left.Load(); n != 0 {
		t.Fatalf("Close returned with %d of %d dones not called", n, txnRecords)
	}
	tl.check(t, false)
	if err := p.Close(); err != nil {
		t.Logf("second Close: %v", err)
	}
	var called atomic.Int32
	err := p.Produce(context.Background(), h.Record(t, 0), func(error) { called.Add(1) })
	if err == nil {
		t.Fatal("Produce after Close returned nil")
	}
	if n := called.Load(); n != 0 {
		t.Errorf("done called %d times for a record Produce refused (%v)", n, err)
	}
}
