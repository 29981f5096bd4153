package cleanup

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/source"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func row(table, id string) source.Row {
	return source.Row{Table: table, Columns: []string{"id", "payload"}, Values: []source.Value{{Bytes: []byte(id)}, {Bytes: []byte("{}")}}}
}

func tx(pos string, at time.Time, rows ...source.Row) *source.Tx {
	return &source.Tx{Position: source.Position(pos), CommitTime: at, Rows: rows}
}

// takeAll drains every due id, table by table, as "table:id" strings.
func takeAll(tr *Tracker, batch int, now time.Time) []string {
	var out []string
	for {
		b, ok := tr.Take(batch, now)
		if !ok {
			return out
		}
		if len(b.IDs) == 0 || len(b.IDs) > batch {
			panic(fmt.Sprintf("batch of %d ids (max %d)", len(b.IDs), batch))
		}
		for _, id := range b.IDs {
			out = append(out, b.Table+":"+string(id))
		}
	}
}

func TestCommittedReleasesUpToTheMatchingTransaction(t *testing.T) {
	tr := New(Config{IDColumn: "id"})
	tr.Accept(tx("p1", t0, row("s.t", "a"), row("s.t", "b")), t0)
	tr.Accept(tx("p2", t0, row("s.t", "c")), t0)
	tr.Accept(tx("p3", t0, row("s.u", "d")), t0)
	if got := takeAll(tr, 10, t0); got != nil {
		t.Fatalf("released before any commit: %v", got)
	}
	if !tr.Committed("p2") {
		t.Fatal("p2 not matched")
	}
	if got := strings.Join(takeAll(tr, 10, t0), " "); got != "s.t:a s.t:b s.t:c" {
		t.Fatalf("after p2: %q", got)
	}
	if !tr.Committed("p3") {
		t.Fatal("p3 not matched")
	}
	if got := strings.Join(takeAll(tr, 10, t0), " "); got != "s.u:d" {
		t.Fatalf("after p3: %q", got)
	}
	if s := tr.Stats(); s.Held != 0 || s.Releasable != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestUnmatchedCommitReleasesNothingAndKeepsTheQueue(t *testing.T) {
	tr := New(Config{IDColumn: "id"})
	tr.Accept(tx("p1", t0, row("t", "a")), t0)
	tr.Accept(tx("p2", t0, row("t", "b")), t0)
	for _, p := range []string{"p0", "p9", "", "P1", "p1 "} {
		if tr.Committed(source.Position(p)) {
			t.Fatalf("%q matched", p)
		}
		if got := takeAll(tr, 10, t0); got != nil {
			t.Fatalf("%q released %v", p, got)
		}
	}
	if s := tr.Stats(); s.Unmatched != 5 || s.LastUnmatched != "p1 " || s.Held != 2 {
		t.Fatalf("stats %+v", s)
	}
	tr.Committed("p2")
	if got := strings.Join(takeAll(tr, 10, t0), " "); got != "t:a t:b" {
		t.Fatalf("after p2: %q", got)
	}
}

func TestChunkedTransactionReleasedWhole(t *testing.T) {
	tr := New(Config{IDColumn: "id"})
	tr.Accept(&source.Tx{CommitTime: t0, More: true, Rows: []source.Row{row("t", "a"), row("t", "b")}}, t0)
	tr.Accept(&source.Tx{CommitTime: t0, More: true, Rows: []source.Row{row("t", "c")}}, t0)
	if tr.Committed("p1") {
		t.Fatal("an open transaction matched")
	}
	tr.Accept(&source.Tx{CommitTime: t0, Position: "p1"}, t0) // closing chunk without rows
	tr.Committed("p1")
	if got := strings.Join(takeAll(tr, 2, t0), " "); got != "t:a t:b t:c" {
		t.Fatalf("got %q", got)
	}
}

// A reopened session re-reads from the stored position: without Reset the open transaction's
// chunks would be merged into the re-read transaction before it and released with it.
func TestResetForgetsTheUncommittedTail(t *testing.T) {
	tr := New(Config{IDColumn: "id"})
	tr.Accept(tx("p1", t0, row("t", "a")), t0)
	tr.Accept(tx("p2", t0, row("t", "b")), t0)
	tr.Accept(&source.Tx{CommitTime: t0, More: true, Rows: []source.Row{row("t", "c1")}}, t0) // p3, cut
	tr.Committed("p1")
	tr.Reset()                                 // reopened at p1
	tr.Accept(tx("p2", t0, row("t", "b")), t0) // re-read
	tr.Committed("p2")
	got := takeAll(tr, 10, t0)
	if slices.Contains(got, "t:c1") {
		t.Fatalf("an id of the cut, uncommitted transaction was released: %v", got)
	}
	if strings.Join(got, " ") != "t:a t:b" {
		t.Fatalf("got %v", got)
	}
}

func TestNoIDAndMessageRows(t *testing.T) {
	tr := New(Config{IDColumn: "id"})
	null := source.Row{Table: "t", Columns: []string{"id"}, Values: []source.Value{{Null: true}}}
	missing := source.Row{Table: "t", Columns: []string{"other"}, Values: []source.Value{{Bytes: []byte("x")}}}
	msg := source.Row{Table: source.MessageTablePrefix + "outboxd.event", Message: true, Columns: []string{source.MessageColumn},
		Values: []source.Value{{Bytes: []byte(`{"id":"m"}`)}}}
	tr.Accept(tx("p1", t0, null, missing, msg, row("t", "a")), t0)
	tr.Committed("p1")
	if got := strings.Join(takeAll(tr, 10, t0), " "); got != "t:a" {
		t.Fatalf("got %q", got)
	}
	if s := tr.Stats(); s.NoID != 2 {
		t.Fatalf("NoID %d, want 2", s.NoID)
	}
}

func TestRetainHoldsIDsUntilOldEnough(t *testing.T) {
	tr := New(Config{IDColumn: "id", Retain: time.Minute})
	tr.Accept(tx("p1", t0, row("t", "a")), t0)
	tr.Accept(tx("p2", t0.Add(30*time.Second), row("t", "b")), t0)
	tr.Accept(tx("p3", time.Time{}, row("t", "c")), t0.Add(40*time.Second)) // no commit time: aged from acceptance
	tr.Committed("p3")
	if got := takeAll(tr, 10, t0.Add(59*time.Second)); got != nil {
		t.Fatalf("released too young: %v", got)
	}
	if got := strings.Join(takeAll(tr, 10, t0.Add(time.Minute)), " "); got != "t:a" {
		t.Fatalf("at +1m: %q", got)
	}
	if got := strings.Join(takeAll(tr, 10, t0.Add(100*time.Second)), " "); got != "t:b t:c" {
		t.Fatalf("at +100s: %q", got)
	}
}

func TestTakeBatchesPerTableAndPutback(t *testing.T) {
	tr := New(Config{IDColumn: "id"})
	tr.Accept(tx("p1", t0, row("t", "a"), row("u", "x"), row("t", "b"), row("t", "c")), t0)
	tr.Accept(tx("p2", t0.Add(time.Second), row("u", "y")), t0)
	tr.Committed("p2")
	b, ok := tr.Take(2, t0)
	if !ok || b.Table != "t" || len(b.IDs) != 2 {
		t.Fatalf("first take %v %v", b.Table, b.IDs)
	}
	tr.Putback(b) // the DELETE failed
	if got := strings.Join(takeAll(tr, 2, t0), " "); got != "t:a t:b t:c u:x u:y" {
		t.Fatalf("got %q", got)
	}
}

func TestCapsDropOldestWithCount(t *testing.T) {
	tr := New(Config{IDColumn: "id", MaxIDs: 3, MaxTxs: 2})
	tr.Accept(tx("p1", t0, row("t", "a"), row("t", "b")), t0)
	tr.Committed("p1")
	tr.Accept(tx("p2", t0, row("t", "c"), row("t", "d")), t0) // 4 > 3: the oldest released id goes
	if s := tr.Stats(); s.Dropped != 1 || s.Held != 3 {
		t.Fatalf("stats %+v", s)
	}
	tr.Accept(tx("p3", t0), t0)
	tr.Accept(tx("p4", t0), t0) // 3 queued > MaxTxs 2: p2 (and its ids) dropped
	if s := tr.Stats(); s.Dropped != 3 || s.Held != 1 {
		t.Fatalf("stats %+v", s)
	}
	if tr.Committed("p2") {
		t.Fatal("dropped p2 matched")
	}
	tr.Committed("p4")
	if got := strings.Join(takeAll(tr, 10, t0), " "); got != "t:b" {
		t.Fatalf("got %q", got)
	}
	// Uncommitted ids alone over the cap: their ids are dropped, their position still matches.
	tr2 := New(Config{IDColumn: "id", MaxIDs: 2})
	tr2.Accept(tx("q1", t0, row("t", "a"), row("t", "b")), t0)
	tr2.Accept(tx("q2", t0, row("t", "c")), t0)
	if !tr2.Committed("q2") {
		t.Fatal("q2 not matched")
	}
	if got := strings.Join(takeAll(tr2, 10, t0), " "); got != "t:c" {
		t.Fatalf("got %q", got)
	}
	if s := tr2.Stats(); s.Dropped != 2 {
		t.Fatalf("stats %+v", s)
	}
}

// TestNoIDBeforeItsCommit simulates the pipeline around the Tracker: a log of transactions
// (some chunked), sessions that accept ahead of what is stored, stored positions that move
// forward to a resolved prefix, source reopens (Reset, re-read from the stored position, also
// in the middle of a chunked transaction), stray commits of positions not queued, caps, retain
// and Takes at random. Property: every id Take hands out belongs to a transaction at or before
// the stored position at that moment, and (without caps) every committed id is handed out.
func TestNoIDBeforeItsCommit(t *testing.T) {
	for seed := uint64(1); seed <= 300; seed++ {
		rng := rand.New(rand.NewPCG(seed, 99))
		runModel(t, rng, seed)
	}
}

type modelTx struct {
	pos    string
	chunks [][]source.Row
	at     time.Time
}

func runModel(t *testing.T, rng *rand.Rand, seed uint64) {
	nTx := 20 + rng.IntN(60)
	log := make([]modelTx, nTx)
	txOf := map[string]int{} // "table:id" → transaction index
	now := t0
	for i := range log {
		now = now.Add(time.Duration(rng.IntN(3)) * time.Second)
		m := modelTx{pos: fmt.Sprintf("0/%X", 100+i), at: now}
		for range rng.IntN(4) { // 0 chunks: an idle-progress transaction
			var rows []source.Row
			for range 1 + rng.IntN(3) {
				table := []string{"s.a", "s.b"}[rng.IntN(2)]
				id := fmt.Sprintf("%d-%d", i, len(txOf))
				txOf[table+":"+id] = i
				rows = append(rows, row(table, id))
			}
			m.chunks = append(m.chunks, rows)
		}
		log[i] = m
	}
	capped := rng.IntN(4) == 0
	cfg := Config{IDColumn: "id"}
	if capped {
		cfg.MaxIDs, cfg.MaxTxs = 1+rng.IntN(8), 1+rng.IntN(4)
	}
	if rng.IntN(3) == 0 {
		cfg.Retain = time.Duration(rng.IntN(5)) * time.Second
	}
	tr := New(cfg)
	stored := -1        // index of the stored transaction
	next, chunk := 0, 0 // the next chunk to accept
	accepted := -1      // last complete transaction accepted this session
	clock := t0
	taken := map[string]bool{}
	check := func(ids []string) {
		for _, id := range ids {
			i, ok := txOf[id]
			if !ok {
				t.Fatalf("seed %d: unknown id %s", seed, id)
			}
			if i > stored {
				t.Fatalf("seed %d: id %s of transaction %d released with the stored position at transaction %d", seed, id, i, stored)
			}
			taken[id] = true
		}
	}
	for step := 0; step < 400; step++ {
		clock = clock.Add(time.Duration(rng.IntN(800)) * time.Millisecond)
		switch k := rng.IntN(10); {
		case k < 4 && next < len(log): // accept a chunk
			m := log[next]
			c := &source.Tx{CommitTime: m.at}
			if len(m.chunks) > 0 {
				c.Rows = m.chunks[chunk]
			}
			if chunk+1 < len(m.chunks) {
				c.More = true
				chunk++
			} else {
				c.Position = source.Position(m.pos)
				accepted, next, chunk = next, next+1, 0
			}
			tr.Accept(c, clock)
		case k < 6 && accepted > stored: // the resolved prefix advances and is stored
			stored += 1 + rng.IntN(accepted-stored)
			tr.Committed(source.Position(log[stored].pos))
		case k == 6: // a stray commit: the stored position again, an old one, or garbage
			var p string
			switch rng.IntN(3) {
			case 0:
				if stored >= 0 {
					p = log[rng.IntN(stored+1)].pos
				}
			case 1:
				p = fmt.Sprintf("junk-%d", rng.IntN(5))
			default:
				if next < len(log) {
					p = log[next].pos // read later, not accepted yet
				}
			}
			tr.Committed(source.Position(p))
		case k == 7: // the source session ends: reopen at the stored position
			tr.Reset()
			next, chunk, accepted = stored+1, 0, stored
		default:
			b, ok := tr.Take(1+rng.IntN(4), clock)
			if ok {
				var ids []string
				for _, id := range b.IDs {
					ids = append(ids, b.Table+":"+string(id))
				}
				check(ids)
				if rng.IntN(5) == 0 {
					tr.Putback(b) // DELETE failed
				}
			}
		}
	}
	check(takeAll(tr, 1000, clock.Add(time.Hour)))
	if !capped {
		for id, i := range txOf {
			if i <= stored && !taken[id] {
				t.Fatalf("seed %d: id %s of stored transaction %d never released", seed, id, i)
			}
		}
	}
}

// FuzzMismatchedPositions: a committed position the queue does not hold changes nothing. The
// same accepted transactions and matching commits are fed to two Trackers, one of them also
// gets the fuzzed positions (unless one happens to equal a queued position); both must hand out
// the same ids.
func FuzzMismatchedPositions(f *testing.F) {
	f.Add("p1", "x", uint8(3))
	f.Add("", "0/0", uint8(0))
	f.Add("p2 ", "P3", uint8(7))
	f.Fuzz(func(t *testing.T, a, b string, at uint8) {
		queued := map[string]bool{}
		for i := range 8 {
			queued[fmt.Sprintf("p%d", i)] = true
		}
		if queued[a] || queued[b] {
			return // a queued position is not a mismatch
		}
		clean, fuzzed := New(Config{IDColumn: "id"}), New(Config{IDColumn: "id"})
		var gotClean, gotFuzzed []string
		for i := range 8 {
			x := tx(fmt.Sprintf("p%d", i), t0, row("t", fmt.Sprint(i)))
			clean.Accept(x, t0)
			fuzzed.Accept(x, t0)
			if uint8(i) == at%8 {
				if fuzzed.Committed(source.Position(a)) || fuzzed.Committed(source.Position(b)) {
					t.Fatalf("%q or %q matched", a, b)
				}
				gotFuzzed = append(gotFuzzed, takeAll(fuzzed, 3, t0)...)
			}
			if i%3 == 2 {
				clean.Committed(source.Position(fmt.Sprintf("p%d", i)))
				fuzzed.Committed(source.Position(fmt.Sprintf("p%d", i)))
			}
			gotClean = append(gotClean, takeAll(clean, 3, t0)...)
			gotFuzzed = append(gotFuzzed, takeAll(fuzzed, 3, t0)...)
		}
		if !slices.Equal(gotClean, gotFuzzed) {
			t.Fatalf("with stray commits %v, without %v", gotFuzzed, gotClean)
		}
		if s := fuzzed.Stats(); s.Unmatched != 2 || s.Held != clean.Stats().Held {
			t.Fatalf("stats %+v vs %+v", s, clean.Stats())
		}
	})
}
