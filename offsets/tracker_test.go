package offsets

import (
	"errors"
	"fmt"
	"math/rand"
	"testing"

	"github.com/outboxd/outboxd/source"
)

func TestTrackerInOrder(t *testing.T) {
	tr := NewTracker(10, 10)
	s1, _ := tr.Track("1", 2)
	s2, _ := tr.Track("2", 1)
	if _, ok := tr.Commit(); ok {
		t.Fatal("commit with nothing resolved")
	}
	must(t, tr.Done(s1))
	if _, ok := tr.Commit(); ok {
		t.Fatal("commit with tx 1 half resolved")
	}
	must(t, tr.Done(s2))
	if _, ok := tr.Commit(); ok {
		t.Fatal("tx 2 resolved before tx 1 must not commit")
	}
	must(t, tr.Done(s1))
	if p, ok := tr.Commit(); !ok || p != "2" {
		t.Fatalf("commit = %q %v, want 2 true", p, ok)
	}
	if tr.Transactions() != 0 || tr.Records() != 0 {
		t.Fatalf("left %d txs %d records", tr.Transactions(), tr.Records())
	}
}

func TestTrackerEmptyTransactionsCommitAtOnce(t *testing.T) {
	tr := NewTracker(10, 10)
	tr.Track("a", 0)
	tr.Track("b", 0)
	if p, ok := tr.Commit(); !ok || p != "b" {
		t.Fatalf("got %q %v", p, ok)
	}
	s, _ := tr.Track("c", 1)
	tr.Track("d", 0)
	if _, ok := tr.Commit(); ok {
		t.Fatal("empty tx after an unresolved one committed")
	}
	must(t, tr.Done(s))
	if p, _ := tr.Commit(); p != "d" {
		t.Fatalf("got %q", p)
	}
}

func TestTrackerErrors(t *testing.T) {
	tr := NewTracker(3, 2)
	if _, err := tr.Track("x", -1); err == nil {
		t.Fatal("negative count accepted")
	}
	s, _ := tr.Track("1", 1)
	must(t, tr.Done(s))
	if err := tr.Done(s); err == nil {
		t.Fatal("double resolution accepted")
	}
	if err := tr.Done(s + 1); err == nil {
		t.Fatal("unknown seq accepted")
	}
	tr.Commit()
	if err := tr.Done(s); err == nil {
		t.Fatal("committed seq accepted")
	}
}

func TestTrackerCaps(t *testing.T) {
	tr := NewTracker(3, 2)
	if !tr.CanTrack(5) {
		t.Fatal("an oversized transaction must be accepted when nothing is pending")
	}
	s1, err := tr.Track("big", 5)
	must(t, err)
	if tr.CanTrack(0) == false {
		t.Fatal("tx count cap is 2, only 1 tracked")
	}
	if _, err := tr.Track("x", 1); !errors.Is(err, ErrFull) {
		t.Fatalf("record cap passed: %v", err)
	}
	for i := 0; i < 5; i++ {
		must(t, tr.Done(s1))
	}
	if _, err := tr.Track("a", 3); err != nil {
		t.Fatalf("records resolved but not committed must not count: %v", err)
	}
	if _, err := tr.Track("b", 0); !errors.Is(err, ErrFull) {
		t.Fatalf("tx cap passed: %v", err)
	}
	if p, ok := tr.Commit(); !ok || p != "big" {
		t.Fatalf("commit %q %v", p, ok)
	}
	if _, err := tr.Track("b", 0); err != nil {
		t.Fatalf("after commit: %v", err)
	}
}

// TestTrackerRandomOrders is the property test: for random transaction sizes and random outcome
// orders, a committed position is never past a transaction with an unresolved record, every
// commit moves forward, and once everything is resolved the last position is committed.
func TestTrackerRandomOrders(t *testing.T) {
	for iter := 0; iter < 2000; iter++ {
		rng := rand.New(rand.NewSource(int64(iter)))
		maxTx := 1 + rng.Intn(8)
		tr := NewTracker(1+rng.Intn(20), maxTx)
		type rec struct{ tx int }
		var outstanding []rec
		resolved := map[int]int{}
		sizes := map[int]int{}
		seqs := map[int]Seq{}
		next, committed := 0, -1
		total := 5 + rng.Intn(40)
		for next < total || len(outstanding) > 0 {
			if next < total && rng.Intn(2) == 0 {
				n := rng.Intn(5)
				if tr.CanTrack(n) {
					s, err := tr.Track(source.Position(fmt.Sprint(next)), n)
					must(t, err)
					seqs[next], sizes[next] = s, n
					for i := 0; i < n; i++ {
						outstanding = append(outstanding, rec{next})
					}
					next++
				} else if _, err := tr.Track("x", n); !errors.Is(err, ErrFull) {
					t.Fatalf("CanTrack false but Track accepted: %v", err)
				}
			} else if len(outstanding) > 0 {
				i := rng.Intn(len(outstanding))
				r := outstanding[i]
				outstanding = append(outstanding[:i], outstanding[i+1:]...)
				must(t, tr.Done(seqs[r.tx]))
				resolved[r.tx]++
			}
			if rng.Intn(3) == 0 {
				if p, ok := tr.Commit(); ok {
					var c int
					fmt.Sscan(string(p), &c)
					if c <= committed {
						t.Fatalf("iter %d: commit went from %d to %d", iter, committed, c)
					}
					for tx := 0; tx <= c; tx++ {
						if resolved[tx] != sizes[tx] {
							t.Fatalf("iter %d: committed %d but tx %d has %d/%d resolved", iter, c, tx, resolved[tx], sizes[tx])
						}
					}
					committed = c
				}
			}
			if tr.Transactions() > maxTx {
				t.Fatalf("tx cap exceeded")
			}
		}
		if p, ok := tr.Commit(); ok {
			fmt.Sscan(string(p), &committed)
		}
		if committed != total-1 {
			t.Fatalf("iter %d: everything resolved but committed %d of %d", iter, committed, total-1)
		}
	}
}

func BenchmarkTracker(b *testing.B) {
	tr := NewTracker(10000, 10000)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		s, err := tr.Track("0/16B3748", 1)
		if err != nil {
			b.Fatal(err)
		}
		tr.Done(s)
		tr.Commit()
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
