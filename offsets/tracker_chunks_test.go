package offsets

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/outboxd/outboxd/source"
)

// Chunked transactions (issue 13): Add with more=true keeps the transaction open; Commit stops
// at an open transaction; Abandon drops it. T1–T8 of DESIGN §2.

// T1: an open transaction whose records so far are all resolved is not committed: Commit
// returns the transaction before it, never its (unknown) end.
func TestTrackerOpenTransactionNotCommitted(t *testing.T) {
	tr := NewTracker(10, 10)
	s0, _ := tr.Add(1, false, "p0")
	s1, err := tr.Add(2, true, "")
	must(t, err)
	must(t, tr.Done(s0))
	must(t, tr.Done(s1))
	must(t, tr.Done(s1))
	if p, ok := tr.Commit(); !ok || p != "p0" {
		t.Fatalf("commit = %q %v, want p0", p, ok)
	}
	if _, ok := tr.Commit(); ok {
		t.Fatal("an open transaction was committed")
	}
	if !tr.Open() || tr.Transactions() != 1 {
		t.Fatalf("open=%v transactions=%d", tr.Open(), tr.Transactions())
	}
}

// T2: a closed transaction with one record of its FIRST chunk unresolved is not committed.
func TestTrackerFirstChunkRecordHoldsTransaction(t *testing.T) {
	tr := NewTracker(10, 10)
	s, _ := tr.Add(2, true, "")
	s2, _ := tr.Add(3, false, "p1")
	if s != s2 {
		t.Fatalf("chunks of one transaction got seqs %d and %d", s, s2)
	}
	for i := 0; i < 4; i++ { // all of chunk 2 and one of chunk 1
		must(t, tr.Done(s))
	}
	if p, ok := tr.Commit(); ok {
		t.Fatalf("committed %q with a record of the first chunk unresolved", p)
	}
	must(t, tr.Done(s))
	if p, ok := tr.Commit(); !ok || p != "p1" {
		t.Fatalf("commit = %q %v", p, ok)
	}
}

// T3: a 0-row closing chunk of a fully resolved transaction commits it.
func TestTrackerEmptyClosingChunk(t *testing.T) {
	tr := NewTracker(10, 10)
	s, _ := tr.Add(1, true, "")
	must(t, tr.Done(s))
	if _, ok := tr.Commit(); ok {
		t.Fatal("committed before the closing chunk")
	}
	if _, err := tr.Add(0, false, "end"); err != nil {
		t.Fatal(err)
	}
	if p, ok := tr.Commit(); !ok || p != "end" {
		t.Fatalf("commit = %q %v, want end", p, ok)
	}
}

// T4: a chunked transaction holds one transaction slot, and its chunks count toward the record
// cap: CanAdd stays false until Done frees room.
func TestTrackerChunksShareOneSlot(t *testing.T) {
	tr := NewTracker(4, 2)
	tr.Add(0, false, "a") // resolved at once, but it holds a slot until Commit
	s, _ := tr.Add(2, true, "")
	if tr.CanAdd(0) != true {
		t.Fatal("a continuing chunk needs no new slot")
	}
	for i := 0; i < 3; i++ { // chunks 2..4 of one transaction: one slot
		if _, err := tr.Add(0, true, ""); err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
	}
	if tr.Transactions() != 2 {
		t.Fatalf("transactions = %d, want 2", tr.Transactions())
	}
	if _, err := tr.Add(2, true, ""); err != nil {
		t.Fatal(err)
	}
	if tr.CanAdd(1) {
		t.Fatal("record cap 4 passed by chunks")
	}
	if _, err := tr.Add(1, true, ""); !errors.Is(err, ErrFull) {
		t.Fatalf("Add past the record cap: %v", err)
	}
	must(t, tr.Done(s))
	if !tr.CanAdd(1) {
		t.Fatal("Done did not free room")
	}
	tr.Add(1, false, "b")
	if _, err := tr.Track("c", 0); !errors.Is(err, ErrFull) {
		t.Fatalf("transaction cap 2 passed: %v", err)
	}
}

// T5: a chunk larger than the record cap is accepted only when nothing is unresolved.
func TestTrackerOversizedChunk(t *testing.T) {
	tr := NewTracker(3, 10)
	s, _ := tr.Add(1, true, "")
	if tr.CanAdd(5) {
		t.Fatal("oversized chunk accepted with a record unresolved")
	}
	must(t, tr.Done(s))
	if !tr.CanAdd(5) {
		t.Fatal("oversized chunk refused with nothing unresolved")
	}
	if _, err := tr.Add(5, false, "big"); err != nil {
		t.Fatal(err)
	}
	if tr.Records() != 5 {
		t.Fatalf("records = %d", tr.Records())
	}
}

// T6: Abandon with records unresolved errors; after Abandon, Commit does not pass the prefix
// before it, and the next Add opens a fresh transaction.
func TestTrackerAbandon(t *testing.T) {
	tr := NewTracker(10, 10)
	s0, _ := tr.Add(1, false, "p0")
	s1, _ := tr.Add(2, true, "")
	must(t, tr.Done(s1))
	if err := tr.Abandon(); err == nil {
		t.Fatal("abandoned an open transaction with a record unresolved")
	}
	must(t, tr.Done(s1))
	must(t, tr.Abandon())
	if tr.Open() {
		t.Fatal("still open after Abandon")
	}
	if p, ok := tr.Commit(); ok {
		t.Fatalf("committed %q with p0 unresolved", p)
	}
	must(t, tr.Done(s0))
	if p, ok := tr.Commit(); !ok || p != "p0" {
		t.Fatalf("commit = %q %v, want p0 (the abandoned transaction yields nothing)", p, ok)
	}
	s2, _ := tr.Add(1, false, "p1") // the same transaction, re-read whole
	if s2 == s1 {
		t.Fatal("a new transaction reused the abandoned Seq")
	}
	if tr.Records() != 1 || tr.Transactions() != 1 {
		t.Fatalf("records %d transactions %d", tr.Records(), tr.Transactions())
	}
	must(t, tr.Abandon()) // nothing open: no-op
	must(t, tr.Done(s2))
	if p, _ := tr.Commit(); p != "p1" {
		t.Fatalf("commit = %q", p)
	}
}

// T7: Track while a transaction is open errors; Done on an abandoned Seq errors.
func TestTrackerChunkErrors(t *testing.T) {
	tr := NewTracker(10, 10)
	s, _ := tr.Add(1, true, "")
	if _, err := tr.Track("x", 1); err == nil {
		t.Fatal("Track accepted while a transaction is open")
	}
	if tr.CanTrack(0) {
		t.Fatal("CanTrack true while a transaction is open")
	}
	must(t, tr.Done(s))
	must(t, tr.Abandon())
	if err := tr.Done(s); err == nil {
		t.Fatal("Done on an abandoned transaction accepted")
	}
	tr.Add(1, false, "n")
	if err := tr.Done(s); err == nil {
		t.Fatal("Done on an abandoned transaction accepted after a new Add")
	}
}

// T8 (property): random chunk cuts, Done orders and abandons. After every step the committed
// position is the end of the longest closed, fully resolved prefix (computed by a model that
// knows nothing of the ring), and it never decreases.
func TestTrackerChunksRandom(t *testing.T) {
	for seed := uint64(0); seed < 3000; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		tr := NewTracker(1+rng.IntN(12), 1+rng.IntN(6))
		type mtx struct {
			seq      Seq
			pos      source.Position
			total    int
			resolved int
			closed   bool
			dropped  bool
		}
		var txs []*mtx // model, uncommitted, oldest first
		var out []int  // outstanding: index into all
		var all []*mtx
		lastCommit := -1 // index into all of the last committed transaction
		steps := 20 + rng.IntN(80)
		for step := 0; step < steps; step++ {
			switch op := rng.IntN(10); {
			case op < 4: // add a chunk
				n, more := rng.IntN(4), rng.IntN(3) == 0
				if more && n == 0 {
					n = 1
				}
				open := len(txs) > 0 && !txs[len(txs)-1].closed
				if !tr.CanAdd(n) {
					if _, err := tr.Add(n, more, "x"); !errors.Is(err, ErrFull) {
						t.Fatalf("seed %d: CanAdd false, Add: %v", seed, err)
					}
					continue
				}
				pos := source.Position("")
				if !more {
					pos = source.Position(fmt.Sprint(len(all)))
				}
				s, err := tr.Add(n, more, pos)
				must(t, err)
				var m *mtx
				if open {
					m = txs[len(txs)-1]
					if m.seq != s {
						t.Fatalf("seed %d: continuing chunk got seq %d, want %d", seed, s, m.seq)
					}
				} else {
					m = &mtx{seq: s}
					txs = append(txs, m)
					all = append(all, m)
				}
				m.total += n
				m.closed, m.pos = !more, pos
				for i := 0; i < n; i++ {
					out = append(out, len(all)-1)
				}
			case op < 8: // resolve a random outstanding record
				if len(out) == 0 {
					continue
				}
				i := rng.IntN(len(out))
				m := all[out[i]]
				out = append(out[:i], out[i+1:]...)
				must(t, tr.Done(m.seq))
				m.resolved++
			case op == 8: // abandon
				open := len(txs) > 0 && !txs[len(txs)-1].closed
				err := tr.Abandon()
				switch {
				case !open && err != nil:
					t.Fatalf("seed %d: Abandon without an open transaction: %v", seed, err)
				case open && txs[len(txs)-1].resolved < txs[len(txs)-1].total:
					if err == nil {
						t.Fatalf("seed %d: Abandon with records unresolved succeeded", seed)
					}
				case open:
					must(t, err)
					m := txs[len(txs)-1]
					m.closed, m.dropped = true, true
				}
			default:
				p, ok := tr.Commit()
				// Model: pop the closed, fully resolved prefix.
				want := -1
				for len(txs) > 0 && txs[0].closed && txs[0].resolved == txs[0].total {
					if !txs[0].dropped {
						for k, m := range all {
							if m == txs[0] {
								want = k
							}
						}
					}
					txs = txs[1:]
				}
				if (want >= 0) != ok || ok && p != all[want].pos {
					t.Fatalf("seed %d step %d: Commit = %q %v, model wants index %d", seed, step, p, ok, want)
				}
				if ok {
					if want <= lastCommit {
						t.Fatalf("seed %d: commit went back from %d to %d", seed, lastCommit, want)
					}
					lastCommit = want
				}
			}
			if tr.Records() != len(out) {
				t.Fatalf("seed %d: records %d, model %d", seed, tr.Records(), len(out))
			}
			if tr.Transactions() != len(txs) {
				t.Fatalf("seed %d: transactions %d, model %d", seed, tr.Transactions(), len(txs))
			}
			if tr.Open() != (len(txs) > 0 && !txs[len(txs)-1].closed) {
				t.Fatalf("seed %d: Open() disagrees with the model", seed)
			}
		}
	}
}
