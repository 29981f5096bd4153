package mysql

// The assembler's chunks (Config.ChunkRows / ChunkBytes): cuts at rows-event granularity, the
// last chunk at XID (also without rows), ROLLBACK / XA / stops after chunks went out, and the
// rows skipped when a transaction is read again after a reconnect.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outboxd/outboxd/source"
)

// rowsEv is the fixture's WriteRows event into app.types with one row per id (column 1, a
// CHAR(36), holds the id): a multi-row event when several ids are given.
func (k *streamKit) rowsEv(ids ...string) *replication.BinlogEvent {
	orig := k.wr.Event.(*replication.RowsEvent)
	e := *orig
	e.Rows = nil
	for _, id := range ids {
		r := append([]interface{}(nil), orig.Rows[0]...)
		r[1] = id
		e.Rows = append(e.Rows, r)
	}
	h := *k.wr.Header
	return &replication.BinlogEvent{Header: &h, Event: &e}
}

// rowEvs is a TableMap and a one-row rows event per id.
func (k *streamKit) rowEvs(ids ...string) []*replication.BinlogEvent {
	var evs []*replication.BinlogEvent
	for _, id := range ids {
		evs = append(evs, k.tm, k.rowsEv(id))
	}
	return evs
}

func idList(prefix string, from, to int) []string {
	var ids []string
	for i := from; i < to; i++ {
		ids = append(ids, fmt.Sprintf("%s%d", prefix, i))
	}
	return ids
}

// chunkIDs renders chunks as "r0 r1 | r2" (the id column of each row, chunks separated by "|")
// and checks the fields the contract fixes: More on all but the last, which alone has the
// position; More chunks have rows; Bytes is source.ChunkBytes of the rows; a commit time on all.
func chunkIDs(t *testing.T, chunks []source.Tx) string {
	t.Helper()
	var parts []string
	for i, c := range chunks {
		last := i == len(chunks)-1
		if c.More == last || last != (c.Position != "") || c.More && len(c.Rows) == 0 || c.CommitTime.IsZero() {
			t.Errorf("chunk %d of %d: More %v, position %q, %d rows, commit time %v", i, len(chunks), c.More, c.Position, len(c.Rows), c.CommitTime)
		}
		if want := source.ChunkBytes(&source.Tx{Rows: c.Rows}); c.Bytes != want {
			t.Errorf("chunk %d: Bytes %d, want %d", i, c.Bytes, want)
		}
		var s []string
		for _, r := range c.Rows {
			s = append(s, string(r.Values[1].Bytes))
		}
		parts = append(parts, strings.Join(s, " "))
	}
	return strings.Join(parts, " | ")
}

func xid() *replication.BinlogEvent { return ev(900, &replication.XIDEvent{}) }

// TestAssemblerChunks: the row cap cuts between rows events (7 one-row events, cap 3: 3+3+1; 6:
// 3+3, no empty last chunk); a multi-row event is never split (cap 3, events of 2, 4 and 1
// rows: 2 | 4 | 1); the byte cap likewise; without caps, one chunk.
func TestAssemblerChunks(t *testing.T) {
	k := newStreamKit(t)
	run := func(rows, bytes int, evs ...*replication.BinlogEvent) []source.Tx {
		a := k.assembler(t, "0-1-1", true)
		a.capRows, a.capBytes = rows, bytes
		return feed(t, a, append(append([]*replication.BinlogEvent{mariaGTID(2, false)}, evs...), xid())...)
	}
	if got := chunkIDs(t, run(3, 0, k.rowEvs(idList("r", 0, 7)...)...)); got != "r0 r1 r2 | r3 r4 r5 | r6" {
		t.Errorf("7 rows, cap 3: %q", got)
	}
	if got := chunkIDs(t, run(3, 0, k.rowEvs(idList("r", 0, 6)...)...)); got != "r0 r1 r2 | r3 r4 r5" {
		t.Errorf("6 rows, cap 3: %q", got)
	}
	got := chunkIDs(t, run(3, 0, k.tm, k.rowsEv("a", "b"), k.tm, k.rowsEv("c", "d", "e", "f"), k.tm, k.rowsEv("g")))
	if got != "a b | c d e f | g" {
		t.Errorf("multi-row events, cap 3: %q", got)
	}
	whole := run(0, 0, k.rowEvs(idList("r", 0, 7)...)...)
	if len(whole) != 1 || len(whole[0].Rows) != 7 || whole[0].Position != "0-1-2" {
		t.Fatalf("no caps: %d chunks", len(whole))
	}
	chunkIDs(t, whole)

	rb := source.RowBytes(&whole[0].Rows[0]) // every row has the same size
	if got := chunkIDs(t, run(0, 2*rb, k.rowEvs(idList("r", 0, 5)...)...)); got != "r0 r1 | r2 r3 | r4" {
		t.Errorf("byte cap of two rows: %q", got)
	}
	if got := chunkIDs(t, run(0, 2*rb, k.tm, k.rowsEv("a"), k.tm, k.rowsEv("b", "c", "d"), k.tm, k.rowsEv("e"))); got != "a | b c d | e" {
		t.Errorf("byte cap, a 3-row event: %q", got)
	}
}

// logSink collects log records for assertions.
type logSink struct {
	mu   sync.Mutex
	recs []string
}

func (l *logSink) Enabled(context.Context, slog.Level) bool { return true }
func (l *logSink) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String() + " " + r.Message)
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
	l.mu.Lock()
	l.recs = append(l.recs, b.String())
	l.mu.Unlock()
	return nil
}
func (l *logSink) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logSink) WithGroup(string) slog.Handler      { return l }

func (l *logSink) find(part string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.recs {
		if strings.Contains(r, part) {
			return r
		}
	}
	return ""
}

// TestAssemblerChunkedEnds: ROLLBACK after chunks went out (a transaction that touched a
// non-transactional table) closes the transaction with a last chunk without rows and warns how
// many rows were published and dropped; XA PREPARE, XA ROLLBACK and a guard's stop after chunks
// stop loudly, saying that earlier chunks may already be in Kafka; a guard's stop hands out no
// further chunk.
func TestAssemblerChunkedEnds(t *testing.T) {
	k := newStreamKit(t)
	chunked := func() (*assembler, *logSink) {
		a := k.assembler(t, "0-1-1", true)
		sink := &logSink{}
		a.log = slog.New(sink)
		a.capRows = 2
		return a, sink
	}

	a, logs := chunked()
	got := feed(t, a, append(append([]*replication.BinlogEvent{mariaGTID(2, false)}, k.rowEvs(idList("r", 0, 5)...)...), q(0, "ROLLBACK"))...)
	if ids := chunkIDs(t, got); ids != "r0 r1 | r2 r3 | " || got[2].Position != "0-1-2" || len(got[2].Rows) != 0 {
		t.Fatalf("ROLLBACK after chunks: %q (last at %q), want two chunks and a last one without rows at 0-1-2", ids, got[len(got)-1].Position)
	}
	if w := logs.find("ROLLBACK"); !strings.Contains(w, "WARN") || !strings.Contains(w, "published_rows=4") || !strings.Contains(w, "dropped_rows=1") {
		t.Errorf("ROLLBACK warning: %q", w)
	}
	// The next transaction is an ordinary one.
	if ids := chunkIDs(t, feed(t, a, append(append([]*replication.BinlogEvent{mariaGTID(3, false)}, k.rowEvs("n0")...), xid())...)); ids != "n0" {
		t.Errorf("after the ROLLBACK: %q", ids)
	}

	const prepared = 64 | 12
	a, _ = chunked()
	evs := append([]*replication.BinlogEvent{mariaXAGTID(2, prepared)}, k.rowEvs(idList("x", 0, 5)...)...)
	got, err := feedErr(a, append(evs, q(0, "XA END X'7831',X'',1"), xaPrepareEvent(500))...)
	if len(got) != 2 || !got[0].More || !got[1].More {
		t.Fatalf("XA PREPARE: %d chunks handed out before the stop, want the two full ones", len(got))
	}
	wantStop(t, err, "XA transaction was prepared with 5 outbox row(s)", "4 of its outbox rows were already handed out in earlier chunks",
		"at_least_once they may already be in Kafka", "0-1-2")

	a, _ = chunked()
	evs = append([]*replication.BinlogEvent{mariaGTID(2, false), q(0, "XA START X'7833',X'',1")}, k.rowEvs(idList("x", 0, 3)...)...)
	got, err = feedErr(a, append(evs, q(0, "XA END X'7833',X'',1"), q(0, "XA ROLLBACK X'7833',X'',1"))...)
	if len(got) != 1 {
		t.Fatalf("XA ROLLBACK: %d chunks before the stop, want 1", len(got))
	}
	wantStop(t, err, "XA transaction was rolled back", "2 of its outbox rows were already handed out", "offsets set")

	// A statement-format write to the outbox after a chunk: the transaction stops at its end,
	// and no chunk of it is handed out after the guard fired.
	a, _ = chunked()
	evs = append([]*replication.BinlogEvent{mariaGTID(2, false)}, k.rowEvs("s0", "s1", "s2")...)
	evs = append(evs, q(0, "INSERT INTO types VALUES (1)"))
	evs = append(evs, k.rowEvs(idList("t", 0, 6)...)...)
	got, err = feedErr(a, append(evs, xid())...)
	if ids := chunkIDsLoose(got); ids != "s0 s1" {
		t.Fatalf("chunks around the guard: %q, want only the one before it", ids)
	}
	wantStop(t, err, "logged as a statement", "2 of its outbox rows were already handed out in earlier chunks")
}

// chunkIDsLoose renders chunks like chunkIDs without checking them (a stopped transaction has
// no last chunk).
func chunkIDsLoose(chunks []source.Tx) string {
	var parts []string
	for _, c := range chunks {
		var s []string
		for _, r := range c.Rows {
			s = append(s, string(r.Values[1].Bytes))
		}
		parts = append(parts, strings.Join(s, " "))
	}
	return strings.Join(parts, " | ")
}

// TestAssemblerChunkedReconnect: a connection lost inside a chunked transaction (dropPartial,
// as recover does) reads it again from its start; the rows already handed out are skipped, so
// each row is handed out once, in order, the last chunk with the position. A re-read with fewer
// rows than were handed out is a loud stop.
func TestAssemblerChunkedReconnect(t *testing.T) {
	k := newStreamKit(t)
	a := k.assembler(t, "0-1-1", true)
	a.capRows = 3
	// A transaction without outbox rows first: its position waits for idleEvery (not passed).
	if got := feed(t, a, mariaGTID(2, false), xid()); len(got) != 0 {
		t.Fatalf("empty transaction handed out before idleEvery: %+v", got)
	}
	begin := []*replication.BinlogEvent{mariaGTID(3, false)}
	all := append(begin, k.rowEvs(idList("r", 0, 8)...)...)
	first := feed(t, a, all[:1+2*5]...) // GTID and 5 rows: one chunk out, 2 pending
	if ids := chunkIDsLoose(first); ids != "r0 r1 r2" {
		t.Fatalf("before the reconnect: %q", ids)
	}
	a.dropPartial()
	// A heartbeat on the new connection before the transaction comes again: no idle progress
	// (it would end the chunked transaction for the pipeline).
	if got := feed(t, a, ev(0, &replication.HeartbeatEvent{})); len(got) != 0 {
		t.Fatalf("heartbeat between the chunks of a transaction handed out %+v", got)
	}
	// Read again from the start; the multi-row event straddles the skipped rows.
	again := append(append([]*replication.BinlogEvent{mariaGTID(3, false)}, k.rowEvs("r0")...), k.tm, k.rowsEv("r1", "r2", "r3"))
	again = append(again, k.rowEvs(idList("r", 4, 8)...)...)
	rest := feed(t, a, append(again, xid())...)
	if ids := chunkIDs(t, append(first, rest...)); ids != "r0 r1 r2 | r3 r4 r5 | r6 r7" {
		t.Fatalf("across the reconnect: %q, want every row once", ids)
	}
	if a.txRows != 0 || a.skipRows != 0 {
		t.Fatalf("after the transaction: txRows %d skipRows %d", a.txRows, a.skipRows)
	}
	// Two reconnects inside one transaction.
	a.capRows = 2
	got := feed(t, a, append([]*replication.BinlogEvent{mariaGTID(4, false)}, k.rowEvs("a", "b", "c")...)...)
	a.dropPartial()
	got = append(got, feed(t, a, append([]*replication.BinlogEvent{mariaGTID(4, false)}, k.rowEvs("a", "b", "c", "d", "e")...)...)...)
	a.dropPartial()
	got = append(got, feed(t, a, append(append([]*replication.BinlogEvent{mariaGTID(4, false)}, k.rowEvs("a", "b", "c", "d", "e", "f")...), xid())...)...)
	if ids := chunkIDs(t, got); ids != "a b | c d | e f" {
		t.Fatalf("two reconnects: %q", ids)
	}

	// After the reconnect, a statement of its own (DDL) instead of the transaction: stop.
	feed(t, a, append([]*replication.BinlogEvent{mariaGTID(5, false)}, k.rowEvs("a", "b", "c")...)...)
	a.dropPartial()
	_, err := feedErr(a, q(0, "CREATE TABLE x (a INT)"))
	wantStop(t, err, "instead of reading that transaction again", "2 of its outbox rows were already handed out")
	a = k.assembler(t, "0-1-1", true)
	a.capRows = 2

	// The transaction read again is shorter than what was handed out: stop.
	feed(t, a, append([]*replication.BinlogEvent{mariaGTID(5, false)}, k.rowEvs("a", "b", "c")...)...)
	a.dropPartial()
	_, err = feedErr(a, append(append([]*replication.BinlogEvent{mariaGTID(5, false)}, k.rowEvs("a")...), xid())...)
	wantStop(t, err, "read again after a reconnect has 1 outbox row(s) fewer")
	if !errors.Is(err, source.ErrPositionLost) {
		t.Fatalf("not final: %v", err)
	}
}

// BenchmarkAssemblerRows: one op is one captured rows event (one 29-column row) through the
// assembler, in transactions of 5000 rows, whole (no caps) and chunked (the default caps): the
// chunk cuts add no allocation per row.
func BenchmarkAssemblerRows(b *testing.B) {
	for _, tc := range []struct {
		name       string
		rows, size int
	}{{"whole", 0, 0}, {"chunked", DefaultChunkRows, DefaultChunkBytes}} {
		b.Run(tc.name, func(b *testing.B) {
			k := newStreamKit(b)
			a := k.assembler(b, "0-1-1", true)
			a.capRows, a.capBytes = tc.rows, tc.size
			x := xid()
			seq := uint64(2)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if i%5000 == 0 {
					if i > 0 {
						if err := a.handle(x); err != nil {
							b.Fatal(err)
						}
					}
					if err := a.handle(mariaGTID(seq, false)); err != nil {
						b.Fatal(err)
					}
					seq++
				}
				if err := a.handle(k.tm); err != nil {
					b.Fatal(err)
				}
				if err := a.handle(k.wr); err != nil {
					b.Fatal(err)
				}
				for _, ok := a.pop(); ok; _, ok = a.pop() {
				}
				i++
			}
		})
	}
}
