// Package sourcetest is the conformance suite every source adapter must pass. An adapter's test
// provides a Harness bound to a real database (a private server started by internal/testenv)
// and calls Run.
package sourcetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/outboxd/outboxd/source"
)

// Event is one outbox row a harness writes. ID is a canonical lower-case uuid.
type Event struct {
	ID            string
	AggregateType string
	AggregateID   string
	Type          string
	Payload       string // a JSON document
}

// Harness binds the suite to one adapter and one real database. The outbox table has the columns
// id, aggregatetype, aggregateid, type, payload (Debezium's names); its qualified name is Table.
//
// Every write method commits (or rolls back) one database transaction and returns once the
// database has acknowledged it.
type Harness struct {
	// Table is the outbox table's qualified name as the source reports it in Row.Table.
	Table string
	// NewSource returns a new, unopened source on the same database and configuration (same
	// slot / server id), as a restarted outboxd would build it.
	NewSource func(t *testing.T) source.Source
	// Insert commits one transaction inserting evs into the outbox, in order.
	Insert func(t *testing.T, evs ...Event)
	// InsertRollback inserts evs in a transaction that is rolled back.
	InsertRollback func(t *testing.T, evs ...Event)
	// InsertThenDelete inserts ev and deletes it again in the same transaction (Debezium habit).
	InsertThenDelete func(t *testing.T, ev Event)
	// UpdateDelete commits one transaction that updates and then deletes the outbox row with id
	// (which must already exist), and one transaction that inserts into a non-outbox table.
	UpdateDelete func(t *testing.T, id string)
	// Equal compares two positions of this source: it reports whether a is before b (-1), equal
	// (0) or after (1). Used to check monotonicity.
	Compare func(a, b source.Position) int
	// ChunkRows is the row cap of one chunk the sources NewSource returns are configured with
	// (keep it small, e.g. 7, so the suite stays fast). Required: the suite checks that a larger
	// transaction arrives in chunks. Insert must write one row per statement.
	ChunkRows int
}

var seq int

// NewEvent makes a unique event for aggregate agg.
func NewEvent(agg string) Event {
	seq++
	return Event{
		ID:            fmt.Sprintf("00000000-0000-4000-8000-%012x", seq+int(time.Now().UnixNano()%1e9)*1000),
		AggregateType: "order",
		AggregateID:   agg,
		Type:          "created",
		Payload:       fmt.Sprintf(`{"n": %d, "agg": "%s"}`, seq, agg),
	}
}

// Run runs the conformance suite.
func Run(t *testing.T, h Harness) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	src := h.NewSource(t)
	if err := src.Open(ctx, ""); err != nil {
		t.Fatalf("Open from the beginning: %v", err)
	}
	defer func() { src.Close() }()

	var last source.Position
	// next returns the next transaction that has rows, checking position monotonicity on all.
	next := func(t *testing.T, s source.Source) source.Tx {
		t.Helper()
		for {
			rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
			tx, err := s.Next(rctx)
			rcancel()
			if err != nil {
				t.Fatalf("Next: %v", err)
			}
			if last != "" && tx.Position != "" && h.Compare(tx.Position, last) < 0 {
				t.Fatalf("position went backwards: %s after %s", tx.Position, last)
			}
			if tx.Position != "" {
				last = tx.Position
			}
			if len(tx.Rows) > 0 {
				return tx
			}
		}
	}
	expect := func(t *testing.T, tx source.Tx, evs ...Event) {
		t.Helper()
		if len(tx.Rows) != len(evs) {
			t.Fatalf("transaction has %d rows, want %d (%+v)", len(tx.Rows), len(evs), tx.Rows)
		}
		for i, ev := range evs {
			checkRow(t, h.Table, tx.Rows[i], ev)
		}
		if tx.Position == "" {
			t.Fatalf("transaction without a position")
		}
		if tx.CommitTime.IsZero() || time.Since(tx.CommitTime) > time.Hour || time.Until(tx.CommitTime) > time.Minute {
			t.Fatalf("implausible commit time %v", tx.CommitTime)
		}
	}

	// Ordering, atomicity, rollback, insert-then-delete, other tables, updates and deletes.
	a1, a2, a3 := NewEvent("a"), NewEvent("a"), NewEvent("b")
	single := NewEvent("c")
	rolled := NewEvent("r")
	itd := NewEvent("d")
	after := NewEvent("e")
	h.Insert(t, a1, a2, a3)
	h.InsertRollback(t, rolled)
	h.Insert(t, single)
	h.UpdateDelete(t, single.ID)
	h.InsertThenDelete(t, itd)
	h.Insert(t, after)

	t.Run("multi-row transaction whole and in order", func(t *testing.T) { expect(t, next(t, src), a1, a2, a3) })
	t.Run("rolled back absent, single row next", func(t *testing.T) { expect(t, next(t, src), single) })
	t.Run("updates, deletes, other tables ignored; insert-then-delete published once", func(t *testing.T) {
		expect(t, next(t, src), itd)
	})
	var stored source.Position
	t.Run("transaction after", func(t *testing.T) {
		tx := next(t, src)
		expect(t, tx, after)
		stored = tx.Position
		if err := src.Confirm(ctx, stored); err != nil {
			t.Fatalf("Confirm: %v", err)
		}
	})

	// Restart from a stored position: nothing at or before it again, everything after it.
	b1, b2 := NewEvent("f"), NewEvent("g")
	h.Insert(t, b1)
	h.Insert(t, b2)
	var b1pos, b2pos source.Position
	t.Run("read past the stored position before restart", func(t *testing.T) {
		tx := next(t, src)
		expect(t, tx, b1)
		b1pos = tx.Position
		expect(t, next(t, src), b2)
	})
	if err := src.Close(); err != nil {
		t.Logf("Close: %v", err)
	}
	t.Run("restart from a stored position", func(t *testing.T) {
		if stored == "" || b1pos == "" {
			t.Skip("earlier subtest failed")
		}
		s2 := h.NewSource(t)
		if err := s2.Open(ctx, stored); err != nil {
			t.Fatalf("Open(%s): %v", stored, err)
		}
		defer s2.Close()
		last = stored
		expect(t, next(t, s2), b1)
		expect(t, next(t, s2), b2)
		if err := s2.Confirm(ctx, b1pos); err != nil {
			t.Fatalf("Confirm: %v", err)
		}
		s2.Close()

		s3 := h.NewSource(t)
		if err := s3.Open(ctx, b1pos); err != nil {
			t.Fatalf("Open(%s): %v", b1pos, err)
		}
		defer s3.Close()
		last = b1pos
		tx := next(t, s3)
		expect(t, tx, b2)
		b2pos = tx.Position
		// Nothing else is pending: Next must block until the deadline (idle progress allowed).
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		defer rcancel()
		for {
			tx, err := s3.Next(rctx)
			if err != nil {
				if !errors.Is(err, context.DeadlineExceeded) && rctx.Err() == nil {
					t.Fatalf("Next while idle: %v", err)
				}
				break
			}
			if len(tx.Rows) > 0 {
				t.Fatalf("unexpected transaction after restart: %+v", tx.Rows)
			}
		}
	})

	// A transaction larger than one chunk: several chunks, in order, complete, the position on
	// the last only. A restart after its first chunk (nothing of it stored) reads it again from
	// its first row; a restart from its end skips it.
	t.Run("big transaction in chunks, again after a restart inside it", func(t *testing.T) {
		if h.ChunkRows <= 0 {
			t.Fatalf("Harness.ChunkRows is %d: configure the adapter's chunk row cap (e.g. 7) and set it", h.ChunkRows)
		}
		if b2pos == "" {
			t.Skip("earlier subtest failed")
		}
		evs := make([]Event, 2*h.ChunkRows+3)
		for i := range evs {
			evs[i] = NewEvent(fmt.Sprintf("big-%d", i))
		}
		s4 := h.NewSource(t)
		if err := s4.Open(ctx, b2pos); err != nil {
			t.Fatalf("Open(%s): %v", b2pos, err)
		}
		h.Insert(t, evs...)
		last = b2pos
		first := nextChunks(t, ctx, s4, h, &last, 1)
		checkChunked(t, h, first, evs, false)
		s4.Close()

		s5 := h.NewSource(t)
		if err := s5.Open(ctx, b2pos); err != nil {
			t.Fatalf("Open(%s): %v", b2pos, err)
		}
		last = b2pos
		chunks := nextChunks(t, ctx, s5, h, &last, 0)
		checkChunked(t, h, chunks, evs, true)
		end := chunks[len(chunks)-1].Position
		s5.Close()

		s6 := h.NewSource(t)
		if err := s6.Open(ctx, end); err != nil {
			t.Fatalf("Open(%s): %v", end, err)
		}
		defer s6.Close()
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		defer rcancel()
		for {
			tx, err := s6.Next(rctx)
			if err != nil {
				break
			}
			if len(tx.Rows) > 0 || tx.More {
				t.Fatalf("after a restart from the big transaction's end %s: %d rows (More %v)", end, len(tx.Rows), tx.More)
			}
		}
	})
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
		checkRow(t, h.Table, rows[i], evs[i])
	}
}

// nextChunks returns the chunks of the next transaction that has rows (idle progress before it
// is skipped), checking position monotonicity against *last; at most max chunks (0: all).
func nextChunks(t *testing.T, ctx context.Context, s source.Source, h Harness, last *source.Position, max int) []source.Tx {
	t.Helper()
	var chunks []source.Tx
	for {
		rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
		tx, err := s.Next(rctx)
		rcancel()
		if err != nil {
			t.Fatalf("Next (after %d chunks): %v", len(chunks), err)
		}
		if tx.Position != "" {
			if *last != "" && h.Compare(tx.Position, *last) < 0 {
				t.Fatalf("position went backwards: %s after %s", tx.Position, *last)
			}
			*last = tx.Position
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

func checkRow(t *testing.T, table string, r source.Row, ev Event) {
	t.Helper()
	if r.Table != table {
		t.Errorf("row table %q, want %q", r.Table, table)
	}
	want := map[string]string{"id": ev.ID, "aggregatetype": ev.AggregateType, "aggregateid": ev.AggregateID, "type": ev.Type}
	for col, w := range want {
		v, ok := r.Get(col)
		if !ok {
			t.Errorf("row lacks column %q (columns %v)", col, r.Columns)
			continue
		}
		if v.Null || string(v.Bytes) != w {
			t.Errorf("column %s = %q (null=%v), want %q", col, v.Bytes, v.Null, w)
		}
	}
	p, ok := r.Get("payload")
	if !ok || p.Null {
		t.Fatalf("payload missing or NULL")
	}
	if !jsonEqualish(p.Bytes, []byte(ev.Payload)) {
		t.Errorf("payload %q, want the JSON %q", p.Bytes, ev.Payload)
	}
}

// jsonEqualish compares JSON texts ignoring insignificant whitespace (PostgreSQL's jsonb and
// MySQL's binary JSON reformat documents; the key order of these fixtures is already canonical).
func jsonEqualish(a, b []byte) bool {
	strip := func(s []byte) []byte {
		var out []byte
		inStr := false
		for i := 0; i < len(s); i++ {
			c := s[i]
			if c == '"' && (i == 0 || s[i-1] != '\\') {
				inStr = !inStr
			}
			if !inStr && (c == ' ' || c == '\n' || c == '\t') {
				continue
			}
			out = append(out, c)
		}
		return out
	}
	return bytes.Equal(strip(a), strip(b))
}
