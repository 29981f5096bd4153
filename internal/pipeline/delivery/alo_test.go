package delivery

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/outboxd/outboxd/source"
)

// Targeted at_least_once scenarios; the property test (alo_prop_test.go) covers the random ones.

// aloHarness drives a core like the loop does and records what the Readys asked for.
type aloHarness struct {
	t        *testing.T
	c        *Core
	now      time.Time
	sends    []Send
	saves    []source.Position
	confirms []source.Position
	events   []Event
	done     bool
}

func newHarness(t *testing.T, cfg Config, stored source.Position) *aloHarness {
	cfg.Mode = AtLeastOnce
	if cfg.Route == nil {
		cfg.Route = testRoute
	}
	cfg.Classify, cfg.DeadLetter, cfg.DLQTopic = testClassify, testDeadLetter, "dlq"
	h := &aloHarness{t: t, c: New(cfg, stored), now: time.Unix(1e9, 0)}
	h.c.Open()
	h.drain()
	return h
}

func (h *aloHarness) drain() Ready {
	h.t.Helper()
	rd := h.c.Ready()
	if rd.Err != nil {
		h.t.Fatalf("fatal: %v", rd.Err)
	}
	h.sends = append(h.sends, rd.Sends...)
	if rd.Save != "" {
		h.saves = append(h.saves, rd.Save)
	}
	if rd.Confirm != "" {
		h.confirms = append(h.confirms, rd.Confirm)
	}
	h.events = append(h.events, rd.Events...)
	h.done = h.done || rd.Done
	h.c.Advance()
	if err := h.c.Check(); err != nil {
		h.t.Fatalf("Check: %v", err)
	}
	return rd
}

func rows(tx, n, size int) []source.Row {
	var out []source.Row
	for i := 0; i < n; i++ {
		out = append(out, source.Row{Table: "db.outbox", Columns: []string{"id", "payload"},
			Values: []source.Value{{Bytes: []byte(fmt.Sprintf("%d.%d", tx, i))}, {Bytes: make([]byte, size)}}})
	}
	return out
}

func (h *aloHarness) accept(ch source.Tx) {
	h.t.Helper()
	if !h.c.CanAccept(len(ch.Rows), source.ChunkBytes(&ch)) {
		h.t.Fatalf("CanAccept refused a chunk of %d rows", len(ch.Rows))
	}
	if err := h.c.Accept(h.now, &ch); err != nil {
		h.t.Fatal(err)
	}
	h.drain()
}

// ackAll acks every send so far (in order) and returns how many.
func (h *aloHarness) ackAll() int {
	n := len(h.sends)
	for _, s := range h.sends {
		h.c.Outcome(h.now, s.ID, nil)
		h.drain()
	}
	h.sends = h.sends[n:]
	return n
}

func (h *aloHarness) tick() Ready {
	h.now = h.now.Add(100 * time.Millisecond)
	h.c.Tick(h.now)
	return h.drain()
}

// A chunked transaction is stored only after its last chunk came and every record of every
// chunk is acked; the stored position is its end, never anything inside it.
func TestALOChunkedTransactionStoredWhole(t *testing.T) {
	h := newHarness(t, Config{}, "p000")
	h.accept(source.Tx{Rows: rows(1, 3, 10), More: true})
	h.accept(source.Tx{Rows: rows(1, 2, 10), More: true})
	if h.ackAll() != 5 {
		t.Fatal("want 5 sends")
	}
	if rd := h.tick(); rd.Save != "" {
		t.Fatalf("saved %s before the transaction's last chunk", rd.Save)
	}
	h.accept(source.Tx{Rows: rows(1, 1, 10), Position: "p001"})
	if rd := h.tick(); rd.Save != "" {
		t.Fatalf("saved %s with a record of the last chunk unacked", rd.Save)
	}
	h.ackAll()
	if rd := h.tick(); rd.Save != "p001" {
		t.Fatalf("save %q, want p001", rd.Save)
	}
	h.c.SaveResult("p001", nil, false)
	if rd := h.drain(); rd.Confirm != "p001" {
		t.Fatalf("confirm %q after the save, want p001", rd.Confirm)
	}
}

// In-flight caps count bytes as well as records; a chunk bigger than the byte cap goes alone
// when nothing is in flight, and nothing joins it until it is resolved.
func TestALOByteCapAndOversizedChunk(t *testing.T) {
	h := newHarness(t, Config{MaxInflight: 100, MaxInflightBytes: 1000}, "")
	h.accept(source.Tx{Rows: rows(1, 2, 300), Position: "p001"}) // 2×(300+64+3) bytes
	if h.c.CanAccept(1, 400) {
		t.Fatal("a chunk passing the byte cap was accepted with records in flight")
	}
	if !h.c.CanAccept(1, 200) {
		t.Fatal("a chunk within the byte cap was refused")
	}
	h.ackAll()
	if !h.c.CanAccept(10, 50_000) {
		t.Fatal("an oversized chunk was refused with nothing in flight")
	}
	h.accept(source.Tx{Rows: rows(2, 10, 5000), Position: "p002"})
	if h.c.CanAccept(1, 1) {
		t.Fatal("a chunk joined an oversized one in flight")
	}
	h.ackAll()
	if !h.c.CanAccept(1, 1) {
		t.Fatal("room not freed after the oversized chunk resolved")
	}
}

// A source error between two chunks of a transaction: the drain resolves what is in flight,
// stores the prefix BEFORE the cut transaction, and abandons it; after Open it is read again
// whole and stored once complete.
func TestALOSourceEndedMidTransaction(t *testing.T) {
	h := newHarness(t, Config{}, "")
	h.accept(source.Tx{Rows: rows(1, 1, 10), Position: "p001"})
	h.accept(source.Tx{Rows: rows(2, 2, 10), More: true})
	h.c.SourceEnded(h.now, h.now.Add(time.Minute))
	h.drain()
	if h.c.CanAccept(0, 0) {
		t.Fatal("accepting after SourceEnded")
	}
	h.ackAll()
	if len(h.saves) != 1 || h.saves[0] != "p001" {
		t.Fatalf("saves %v, want [p001] (never inside the cut transaction)", h.saves)
	}
	h.c.SaveResult("p001", nil, false)
	h.drain()
	if !h.done || h.c.Stored() != "p001" {
		t.Fatalf("done %v stored %q", h.done, h.c.Stored())
	}
	h.done = false
	h.c.Open()
	h.drain()
	h.accept(source.Tx{Rows: rows(2, 2, 10), More: true}) // re-read whole
	h.accept(source.Tx{Rows: rows(2, 1, 10), Position: "p002"})
	h.ackAll()
	if rd := h.tick(); rd.Save != "p002" {
		t.Fatalf("save %q, want p002", rd.Save)
	}
}

// A dead letter of a row in a chunk with More has no position of its own yet: it says where
// the row lies (After: the end of the transaction before). Rows of a whole transaction keep
// their position.
func TestALODeadLetterOfAnOpenChunk(t *testing.T) {
	h := newHarness(t, Config{}, "p000")
	bad := rows(1, 1, 0)
	bad[0].Values[1].Bytes = []byte("bad")
	h.accept(source.Tx{Rows: bad, More: true})
	h.accept(source.Tx{Rows: nil, Position: "p001"})
	bad2 := rows(2, 1, 0)
	bad2[0].Values[1].Bytes = []byte("bad")
	h.accept(source.Tx{Rows: bad2, Position: "p002"})
	var got []Where
	for _, e := range h.events {
		if e.Kind == EventDeadLetter {
			got = append(got, Where{Position: e.Position, After: e.After})
		}
	}
	want := []Where{{After: "p000"}, {Position: "p002"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("dead letters at %v, want %v", got, want)
	}
	for _, s := range h.sends {
		if s.Rec.Topic != "dlq" {
			t.Fatalf("send to %s, want only dead letters", s.Rec.Topic)
		}
	}
}

// While a save stalls, newer prefixes are queued and only the newest is saved next, at once;
// the source is confirmed only with saved positions.
func TestALOSaveQueueNewestOnly(t *testing.T) {
	h := newHarness(t, Config{}, "")
	for i := 1; i <= 3; i++ {
		h.accept(source.Tx{Rows: rows(i, 1, 1), Position: source.Position(fmt.Sprintf("p%03d", i))})
		h.ackAll()
		h.tick()
	}
	if fmt.Sprint(h.saves) != "[p001]" || len(h.confirms) != 0 {
		t.Fatalf("saves %v confirms %v, want one save in flight and nothing confirmed", h.saves, h.confirms)
	}
	h.c.SaveResult("p001", nil, false)
	h.drain()
	if fmt.Sprint(h.saves) != "[p001 p003]" || fmt.Sprint(h.confirms) != "[p001]" {
		t.Fatalf("saves %v confirms %v, want the newest prefix saved right after", h.saves, h.confirms)
	}
}

// A stop that cancels the running save stores the prefix again (the final save), then is Done.
func TestALOStopCancelsSaveThenFinalSave(t *testing.T) {
	h := newHarness(t, Config{}, "")
	h.accept(source.Tx{Rows: rows(1, 1, 1), Position: "p001"})
	h.ackAll()
	h.tick()
	h.c.Stop(h.now, h.now.Add(time.Second))
	h.drain()
	h.c.SaveResult("p001", errors.New("context canceled"), true)
	h.drain()
	if fmt.Sprint(h.saves) != "[p001 p001]" || h.done {
		t.Fatalf("saves %v done %v, want the final save of p001 before Done", h.saves, h.done)
	}
	h.c.SaveResult("p001", nil, false)
	h.drain()
	if !h.done || fmt.Sprint(h.confirms) != "[p001]" {
		t.Fatalf("done %v confirms %v", h.done, h.confirms)
	}
}

// Past the stop's deadline with records unresolved: the resolved prefix is stored, then the
// error wraps ErrShutdownTimeout and says what was left.
func TestALOStopDeadline(t *testing.T) {
	h := newHarness(t, Config{}, "")
	h.accept(source.Tx{Rows: rows(1, 1, 1), Position: "p001"})
	h.ackAll()
	h.accept(source.Tx{Rows: rows(2, 1, 1), Position: "p002"})
	h.c.Stop(h.now, h.now.Add(time.Second))
	if rd := h.drain(); !rd.WakeAt.Equal(h.now.Add(time.Second)) {
		t.Fatalf("WakeAt %v, want the deadline", rd.WakeAt)
	}
	h.now = h.now.Add(2 * time.Second)
	h.c.Tick(h.now)
	h.drain()
	if fmt.Sprint(h.saves) != "[p001]" {
		t.Fatalf("saves %v, want the resolved prefix p001", h.saves)
	}
	h.c.SaveResult("p001", nil, false)
	rd := h.c.Ready()
	if !errors.Is(rd.Err, ErrShutdownTimeout) || h.c.Stored() != "p001" {
		t.Fatalf("err %v stored %q", rd.Err, h.c.Stored())
	}
}

// Outcomes reported twice are a bug the core refuses loudly.
func TestALODoubleOutcomeIsFatal(t *testing.T) {
	h := newHarness(t, Config{}, "")
	h.accept(source.Tx{Rows: rows(1, 1, 1), Position: "p001"})
	id := h.sends[0].ID
	h.c.Outcome(h.now, id, nil)
	h.drain()
	h.c.Outcome(h.now, id, nil)
	if rd := h.c.Ready(); rd.Err == nil {
		t.Fatal("a second outcome for one send was accepted")
	}
}

// A chunk larger than MaxInflight is accepted alone, but its sends are handed out only as
// outcomes make room: never more than MaxInflight without an outcome (the producer's own cap is
// the same number, so Produce never blocks the loop on it), in order.
func TestALOOversizedChunkSendsPaced(t *testing.T) {
	h := newHarness(t, Config{MaxInflight: 3}, "")
	h.accept(source.Tx{Rows: rows(1, 10, 1), Position: "p001"})
	var order []string
	for len(h.sends) > 0 {
		if len(h.sends) > 3 {
			t.Fatalf("%d sends without an outcome, MaxInflight 3", len(h.sends))
		}
		s := h.sends[0]
		h.sends = h.sends[1:]
		order = append(order, string(s.Rec.Key))
		h.c.Outcome(h.now, s.ID, nil)
		h.drain()
	}
	if fmt.Sprint(order) != "[1.0 1.1 1.2 1.3 1.4 1.5 1.6 1.7 1.8 1.9]" {
		t.Fatalf("sends in order %v", order)
	}
	if rd := h.tick(); rd.Save != "p001" {
		t.Fatalf("save %q", rd.Save)
	}
}
