package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outboxd/outboxd/source"
)

// seqSource serves n single-row transactions at positions 0001.., then source.ErrEnd (end)
// or blocks; Open skips what is at or before the position it is opened at.
type seqSource struct {
	n, next int
	end     bool
	mu      sync.Mutex
	served  int
}

func pos4(i int) source.Position { return source.Position(fmt.Sprintf("%04d", i)) }

func (s *seqSource) Open(_ context.Context, from source.Position) error {
	s.next = 1
	for s.next <= s.n && pos4(s.next) <= from {
		s.next++
	}
	return nil
}

func (s *seqSource) Next(ctx context.Context) (source.Tx, error) {
	if s.next <= s.n {
		i := s.next
		s.next++
		s.mu.Lock()
		s.served++
		s.mu.Unlock()
		return source.Tx{Position: pos4(i), Rows: []source.Row{row(fmt.Sprint(i), "x")}}, nil
	}
	if s.end {
		return source.Tx{}, fmt.Errorf("finite: %w", source.ErrEnd)
	}
	<-ctx.Done()
	return source.Tx{}, ctx.Err()
}
func (s *seqSource) Confirm(context.Context, source.Position) error { return nil }
func (s *seqSource) Close() error                                   { return nil }
func (s *seqSource) read() int                                      { s.mu.Lock(); defer s.mu.Unlock(); return s.served }

// The reader queues chunks in read order, never more than the budget's chunks and rows, and
// reports the source's end only after every chunk before it is queued.
func TestTxQueueOrderAndBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &seqSource{n: 20, end: true}
		src.Open(context.Background(), "")
		b := newReadBudget(5, 1<<20)
		b.maxChunks = 3
		q, errCh, wait := readTransactions(context.Background(), src, b)
		defer wait()
		var got []source.Position
		var batch txBatch
		var end error
		for len(got) < 20 {
			synctest.Wait()                        // the reader is blocked: on the budget, or on the source's end
			if n := src.read(); n-len(got) > 3+1 { // the budget's 3, and one read waiting for room
				t.Fatalf("%d chunks read with %d taken: past the budget of 3", n, len(got))
			}
			batch.refill(q)
			if len(batch.txs) > 3 {
				t.Fatalf("a batch of %d chunks: the budget is 3", len(batch.txs))
			}
			if len(batch.txs) == 0 && len(got) < 20 {
				t.Fatalf("nothing queued after %d of 20 with the budget empty", len(got))
			}
			// Accept half the batch, then the rest: the reader refills only what was freed.
			for tx := batch.head(); tx != nil; tx = batch.head() {
				got = append(got, tx.Position)
				batch.next++
				b.free(len(tx.Rows), tx.Bytes)
			}
			select {
			case end = <-errCh:
				if len(got) < 20 || !q.empty() {
					t.Fatalf("the source's end (%v) before every chunk was queued (%d taken)", end, len(got))
				}
			default:
			}
		}
		for i, p := range got {
			if p != pos4(i+1) {
				t.Fatalf("chunk %d is %s: order lost (%v)", i, p, got)
			}
		}
		if synctest.Wait(); end == nil {
			end = <-errCh
		}
		if !errors.Is(end, source.ErrEnd) {
			t.Fatalf("the reader ended with %v, want the source's end", end)
		}
		if b.chunks != 0 || b.rows != 0 || b.bytes != 0 {
			t.Fatalf("budget left %d chunks %d rows %d bytes", b.chunks, b.rows, b.bytes)
		}
	})
}

// A stop while a batch is half accepted (the core has room for 4 of the chunks waiting): the
// accepted chunks are delivered and stored, the rest is dropped, and the next run reads from
// the stored position on: every transaction is accepted exactly once across both runs, in
// order, and nothing is lost.
func TestStopMidBatchLosesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 30
		src := &seqSource{n: n}
		st := &memStore{}
		var accepted []source.Position
		run := func(p *fakeProducer, stopAfter int) (int, error) {
			o := options(nil, p, st)
			o.NewSource = func() source.Source { return src }
			o.MaxInflight, o.TxBuffer, o.ReadAheadRows = 4, 64, 64
			o.OnAccept = func(tx *source.Tx) { accepted = append(accepted, tx.Position) }
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- Run(ctx, o) }()
			if stopAfter > 0 {
				waitFor(t, "a full core", func() bool { return p.count() == 4 })
				settle(testCommitInterval)
				if p.count() != 4 || src.read() <= 4 {
					t.Fatalf("%d produced, %d read: want 4 in flight of a bigger batch", p.count(), src.read())
				}
				cancel()
				for i := 0; i < 4; i++ {
					p.ack(i, nil)
				}
			} else {
				waitFor(t, "the rest stored", func() bool {
					for i := 0; i < p.count(); i++ {
						p.ack(i, nil)
					}
					return st.get() == pos4(n)
				})
				cancel()
			}
			return p.count(), <-errc
		}
		if produced, err := run(&fakeProducer{}, 4); err != nil || produced != 4 {
			t.Fatalf("first run: %d produced, err %v", produced, err)
		}
		if got := st.get(); got != pos4(4) {
			t.Fatalf("stored %s after the stop, want %s (the 4 accepted chunks)", got, pos4(4))
		}
		if _, err := run(&fakeProducer{}, 0); err != nil {
			t.Fatal(err)
		}
		if len(accepted) != n {
			t.Fatalf("accepted %d transactions over both runs, want %d: %v", len(accepted), n, accepted)
		}
		for i, p := range accepted {
			if p != pos4(i+1) {
				t.Fatalf("accept %d is %s: lost or re-read (%v)", i, p, accepted)
			}
		}
	})
}

// endlessSource hands out single-row transactions as fast as they are asked for.
type endlessSource struct{ n int }

func (s *endlessSource) Open(context.Context, source.Position) error { return nil }
func (s *endlessSource) Next(ctx context.Context) (source.Tx, error) {
	if err := ctx.Err(); err != nil {
		return source.Tx{}, err
	}
	s.n++
	return source.Tx{Position: source.Position(fmt.Sprintf("%012d", s.n)), Rows: []source.Row{row(fmt.Sprint(s.n), "x")}}, nil
}
func (s *endlessSource) Confirm(context.Context, source.Position) error { return nil }
func (s *endlessSource) Close() error                                   { return nil }

// While acks and chunks are always waiting (an endless backlog, instant acks), the loop's fast
// path (waiting) still lets the commit ticks and a stop through: positions keep being stored,
// and the stop ends Run. Real time: the loop is never idle, so a fake clock would never move.
func TestBusyLoopStillCommitsAndStops(t *testing.T) {
	src, p, st := &endlessSource{}, &fakeProducer{auto: true}, &memStore{}
	o := options(nil, p, st)
	o.NewSource = func() source.Source { return src }
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- Run(ctx, o) }()
	var seen []source.Position
	waitFor(t, "three commits during the backlog", func() bool {
		if pos := st.get(); pos != "" && (len(seen) == 0 || pos != seen[len(seen)-1]) {
			seen = append(seen, pos)
		}
		return len(seen) >= 3
	})
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop while busy")
	}
}
