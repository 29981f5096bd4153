package sourcetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv/harness"
	"github.com/outboxd/outboxd/source"
)

// testOrder: transactions come in commit order, each whole, its rows in the order written, and
// the positions of successive transactions move forward.
func testOrder(t *testing.T, h Harness, _ string) {
	r := open(t, h, h.NewScope(t), "")
	a1, a2, a3, single, b := NewEvent("a"), NewEvent("a"), NewEvent("b"), NewEvent("c"), NewEvent("d")
	h.Insert(t, a1, a2, a3)
	h.Insert(t, single)
	h.Insert(t, b)
	t1, t2, t3 := r.expect(a1, a2, a3), r.expect(single), r.expect(b)
	if h.Compare(t1.Position, t2.Position) >= 0 || h.Compare(t2.Position, t3.Position) >= 0 {
		t.Fatalf("positions of successive transactions do not move forward: %s %s %s", t1.Position, t2.Position, t3.Position)
	}
}

// testOnlyCommittedInserts: a rolled-back transaction, updates, deletes and writes to other
// tables hand out no row; an insert deleted again in its transaction is handed out once. The
// committed transaction written after them all proves the source had the chance to hand them out.
func testOnlyCommittedInserts(t *testing.T, h Harness, _ string) {
	r := open(t, h, h.NewScope(t), "")
	single, rolled, itd, after := NewEvent("c"), NewEvent("r"), NewEvent("d"), NewEvent("e")
	h.Insert(t, single)
	h.InsertRollback(t, rolled)
	h.UpdateDelete(t, single.ID)
	h.InsertThenDelete(t, itd)
	h.Insert(t, after)
	r.expect(single) // not the rolled-back row
	r.expect(itd)    // not the update, the delete or the other table's row
	r.expect(after)
}

// testRestart: a source opened from a stored position hands out nothing at or before it, and
// everything after it.
func testRestart(t *testing.T, h Harness, _ string) {
	sc := h.NewScope(t)
	r1 := open(t, h, sc, "")
	a, b, c, d := NewEvent("f"), NewEvent("g"), NewEvent("h"), NewEvent("i")
	h.Insert(t, a)
	h.Insert(t, b)
	h.Insert(t, c)
	pa := r1.expect(a).Position
	r1.expect(b)
	r1.expect(c)
	confirm(t, r1.s, pa)
	closeSource(t, r1.s)

	r2 := open(t, h, sc, pa)
	pb := r2.expect(b).Position
	r2.expect(c)
	confirm(t, r2.s, pb)
	closeSource(t, r2.s)

	r3 := open(t, h, sc, pb)
	r3.expect(c)
	h.Insert(t, d)
	r3.expect(d) // and nothing else before it
}

// testChunks: a transaction larger than one chunk comes as several chunks, in order, complete,
// the position on the last only. A restart after its first chunk (nothing of it stored) reads it
// again from its first row; a restart from its end skips it.
func testChunks(t *testing.T, h Harness, _ string) {
	sc := h.NewScope(t)
	r1 := open(t, h, sc, "")
	pre := NewEvent("pre")
	h.Insert(t, pre)
	from := r1.expect(pre).Position
	evs := make([]Event, 2*h.ChunkRows+3)
	for i := range evs {
		evs[i] = NewEvent(fmt.Sprintf("big-%d", i))
	}
	h.Insert(t, evs...)
	checkChunked(t, h, r1.chunks(1), evs, false)
	closeSource(t, r1.s)

	r2 := open(t, h, sc, from)
	chunks := r2.chunks(0)
	checkChunked(t, h, chunks, evs, true)
	end := chunks[len(chunks)-1].Position
	closeSource(t, r2.s)

	r3 := open(t, h, sc, end)
	after := NewEvent("after-big")
	h.Insert(t, after)
	r3.expect(after) // no chunk of the big transaction before it
}

// testNextHonoursContext: Next blocked on an idle source returns ctx.Err() once ctx ends.
func testNextHonoursContext(t *testing.T, h Harness, _ string) {
	r := open(t, h, h.NewScope(t), "")
	const wait = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	start := time.Now()
	for {
		tx, err := r.s.Next(ctx)
		if err == nil {
			if len(tx.Rows) > 0 {
				t.Fatalf("rows from an idle outbox: %+v", tx.Rows)
			}
			continue // idle progress
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Next when its context ended: %v, want an error matching %v", err, context.DeadlineExceeded)
		}
		break
	}
	if d := time.Since(start); d > wait+5*time.Second {
		t.Fatalf("Next returned %v after its context ended", d-wait)
	}
}

// testConfirmConcurrentWithNext: Confirm, called from one other goroutine while Next runs, with
// non-decreasing positions, returns promptly; a source opened from the last confirmed position
// resumes after it.
func testConfirmConcurrentWithNext(t *testing.T, h Harness, _ string) {
	sc := h.NewScope(t)
	r := open(t, h, sc, "")
	evs := make([]Event, 5)
	for i := range evs {
		evs[i] = NewEvent(fmt.Sprintf("cc-%d", i))
		h.Insert(t, evs[i])
	}
	positions := make(chan source.Position, len(evs))
	errc := make(chan error, 1)
	go func() {
		var err error
		for p := range positions {
			start := time.Now()
			if e := r.s.Confirm(context.Background(), p); e != nil && err == nil {
				err = fmt.Errorf("Confirm(%s): %w", p, e)
			}
			if d := time.Since(start); d > 5*time.Second && err == nil {
				err = fmt.Errorf("Confirm(%s) blocked for %v", p, d)
			}
		}
		errc <- err
	}()
	var last source.Position
	for _, ev := range evs {
		last = r.expect(ev).Position
		positions <- last
	}
	close(positions)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	closeSource(t, r.s)

	r2 := open(t, h, sc, last)
	after := NewEvent("cc-after")
	h.Insert(t, after)
	r2.expect(after)
}

// testCloseUnblocksNext: Close, called while another goroutine is blocked in Next, ends that Next
// with ErrClosed; Close is idempotent and Confirm after Close neither fails nor blocks.
func testCloseUnblocksNext(t *testing.T, h Harness, _ string) {
	r := open(t, h, h.NewScope(t), "")
	ev := NewEvent("closing")
	h.Insert(t, ev)
	p := r.expect(ev).Position // the stream runs
	errc, id := make(chan error, 1), make(chan uint64, 1)
	go closeReader(r.s, id, errc)
	harness.WaitBlocked(t, 30*time.Second, <-id, "sourcetest.closeReader") // parked in Next: nothing is pending
	start := time.Now()
	if err := r.s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, h.ErrClosed) {
			t.Fatalf("Next after Close: %v, want %v", err, h.ErrClosed)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Next still blocked 15s after Close")
	}
	t.Logf("Close ended the blocked Next in %v", time.Since(start))
	if err := r.s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.s.Confirm(ctx, p); err != nil {
		t.Errorf("Confirm after Close: %v", err)
	}
}

// closeReader sends its goroutine id, then calls Next until it fails and reports the error
// (rows are a failure: nothing is pending). It calls nothing but Next that could block, so
// parked with closeReader on its stack means parked in Next.
func closeReader(s source.Source, id chan<- uint64, errc chan<- error) {
	id <- harness.GoroutineID()
	for {
		tx, err := s.Next(context.Background())
		if err != nil {
			errc <- err
			return
		}
		if len(tx.Rows) > 0 {
			errc <- fmt.Errorf("Next handed out %d rows, but nothing was pending", len(tx.Rows))
			return
		}
	}
}

// testPositionLost: once the stored position can no longer be served (slot dropped, binlogs
// purged), Open from it fails with an error wrapping source.ErrPositionLost: loudly, never a
// silent skip to wherever the log now begins.
func testPositionLost(t *testing.T, h Harness, _ string) {
	sc := h.NewScope(t)
	if sc.LosePosition == nil {
		t.Fatal("Scope.LosePosition is required: drop the slot, purge the binlogs")
	}
	r := open(t, h, sc, "")
	ev := NewEvent("lost")
	h.Insert(t, ev)
	p := r.expect(ev).Position
	confirm(t, r.s, p)
	closeSource(t, r.s)
	sc.LosePosition(t, p)

	s := sc.NewSource()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := s.Open(ctx, p)
	s.Close()
	if err == nil {
		t.Fatalf("Open(%s) succeeded after the position was made unservable", p)
	}
	if !errors.Is(err, source.ErrPositionLost) {
		t.Fatalf("Open(%s): the error does not wrap source.ErrPositionLost, so the pipeline would retry it: %v", p, err)
	}
	t.Logf("Open(%s): %v", p, err)
	if sc.CheckLost != nil {
		sc.CheckLost(t, err, p)
	}
}

// testGoroutinesEnd: a source runs goroutines while open (so the leak check every subtest makes
// can see them) and all of them have ended once Close returned.
func testGoroutinesEnd(t *testing.T, h Harness, l string) {
	r := open(t, h, h.NewScope(t), "")
	ev := NewEvent("leak")
	h.Insert(t, ev)
	p := r.expect(ev).Position
	confirm(t, r.s, p)
	if n, _ := labelled(l); n <= 0 {
		t.Fatalf("an open source runs no goroutine under the subtest's label (%d): the leak check proves nothing", n)
	}
	closeSource(t, r.s)
	if err := waitNoGoroutines(l, leakWait); err != nil {
		t.Fatal(err)
	}
}

func confirm(t *testing.T, s source.Source, p source.Position) {
	t.Helper()
	if err := s.Confirm(context.Background(), p); err != nil {
		t.Fatalf("Confirm(%s): %v", p, err)
	}
}

func closeSource(t *testing.T, s source.Source) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Logf("Close: %v", err)
	}
}

// checkChunked checks chunks against the transaction evs: several chunks when whole, More on
// all but the last (which alone has a position), at most ChunkRows rows each, rows in order;
// when whole, every row of evs.
func checkChunked(t *testing.T, h Harness, chunks []source.Tx, evs []Event, whole bool) {
	t.Helper()
	if whole && len(chunks) < 2 {
		t.Fatalf("a transaction of %d rows came as %d chunk(s), want at least 2 (ChunkRows %d)", len(evs), len(chunks), h.ChunkRows)
	}
	var rows []source.Row
	for i, c := range chunks {
		isLast := whole && i == len(chunks)-1
		switch {
		case c.More == isLast:
			t.Errorf("chunk %d of %d: More %v", i, len(chunks), c.More)
		case !isLast && c.Position != "":
			t.Errorf("chunk %d of %d (More) has a position %s", i, len(chunks), c.Position)
		case isLast && c.Position == "":
			t.Errorf("the last chunk has no position")
		case !isLast && len(c.Rows) == 0:
			t.Errorf("chunk %d of %d (More) has no rows", i, len(chunks))
		case len(c.Rows) > h.ChunkRows:
			t.Errorf("chunk %d has %d rows, more than ChunkRows %d (one row per statement)", i, len(c.Rows), h.ChunkRows)
		case c.CommitTime.IsZero() || time.Since(c.CommitTime) > time.Hour:
			t.Errorf("chunk %d: implausible commit time %v", i, c.CommitTime)
		}
		if c.Bytes != 0 && c.Bytes != source.ChunkBytes(&source.Tx{Rows: c.Rows}) {
			t.Errorf("chunk %d: Bytes %d, its rows say %d", i, c.Bytes, source.ChunkBytes(&source.Tx{Rows: c.Rows}))
		}
		rows = append(rows, c.Rows...)
	}
	if whole && len(rows) != len(evs) || len(rows) > len(evs) {
		t.Fatalf("chunks hold %d rows, the transaction %d", len(rows), len(evs))
	}
	for i := range rows {
		checkRow(t, h, rows[i], evs[i])
	}
}

// chunks returns the chunks of the next transaction that has rows (idle progress before it is
// skipped); at most max chunks (0: all).
func (r *reader) chunks(max int) []source.Tx {
	r.t.Helper()
	var chunks []source.Tx
	for {
		tx, err := r.next(30 * time.Second)
		if err != nil {
			r.t.Fatalf("Next (after %d chunks): %v", len(chunks), err)
		}
		if len(chunks) == 0 && !tx.More && len(tx.Rows) == 0 {
			continue // idle progress
		}
		chunks = append(chunks, tx)
		if !tx.More || len(chunks) == max {
			return chunks
		}
	}
}
