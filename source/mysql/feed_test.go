package mysql

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"

	th "github.com/outboxd/outboxd/internal/testenv/harness"
)

func feedEvent(e replication.Event, size uint32) *replication.BinlogEvent {
	return &replication.BinlogEvent{Header: &replication.EventHeader{EventSize: size}, Event: e}
}

// takeNow takes what is queued without waiting (nil when nothing is).
func takeNow(t *testing.T, f *eventFeed) []*replication.BinlogEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	evs, err := f.take(ctx, nil)
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	return evs
}

// TestFeedHandsOverTransactions: events reach take at a transaction's end, in order; a large
// transaction is handed over in parts.
func TestFeedHandsOverTransactions(t *testing.T) {
	f := newFeed(&liveness{})
	tx := []*replication.BinlogEvent{
		feedEvent(&replication.MariadbGTIDEvent{}, 40),
		feedEvent(&replication.MariadbAnnotateRowsEvent{}, 100),
		feedEvent(&replication.TableMapEvent{}, 60),
		feedEvent(&replication.RowsEvent{}, 500),
	}
	for _, ev := range tx {
		if err := f.HandleEvent(ev); err != nil {
			t.Fatal(err)
		}
	}
	if evs := takeNow(t, f); len(evs) != 0 {
		t.Fatalf("events handed over inside a transaction: %d", len(evs))
	}
	xid := feedEvent(&replication.XIDEvent{}, 30)
	if err := f.HandleEvent(xid); err != nil {
		t.Fatal(err)
	}
	evs := takeNow(t, f)
	if len(evs) != 5 || evs[0] != tx[0] || evs[3] != tx[3] || evs[4] != xid {
		t.Fatalf("took %d events, want the 5 of the transaction in order", len(evs))
	}
	if f.live.events.Load() != 5 {
		t.Errorf("liveness counted %d events", f.live.events.Load())
	}

	// BEGIN does not end a batch; a large transaction is handed over every feedBatch events.
	if err := f.HandleEvent(feedEvent(&replication.QueryEvent{Query: []byte("BEGIN")}, 50)); err != nil {
		t.Fatal(err)
	}
	for range feedBatch - 1 {
		if err := f.HandleEvent(feedEvent(&replication.RowsEvent{}, 100)); err != nil {
			t.Fatal(err)
		}
	}
	if evs := takeNow(t, f); len(evs) != feedBatch {
		t.Fatalf("took %d events of a large transaction, want %d", len(evs), feedBatch)
	}
	// A big event is handed over at once.
	if err := f.HandleEvent(feedEvent(&replication.RowsEvent{}, feedBatchBytes)); err != nil {
		t.Fatal(err)
	}
	if evs := takeNow(t, f); len(evs) != 1 {
		t.Fatalf("took %d events after a big one, want 1", len(evs))
	}
}

// TestFeedBackpressure: the reading goroutine waits while the queue is full, until take empties
// it or the feed is abandoned.
func TestFeedBackpressure(t *testing.T) {
	for _, tc := range []struct {
		name string
		size uint32
		n    int // events that fill the queue
	}{{"events", 100, feedQueue}, {"bytes", feedQueueBytes / 4, 4}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFeed(&liveness{})
			done := make(chan error, 1)
			reader := make(chan uint64, 1) // the reading goroutine's id
			fill := func() {
				reader <- th.GoroutineID()
				for range tc.n + 1 {
					if err := f.HandleEvent(feedEvent(&replication.XIDEvent{}, tc.size)); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}
			// waitReader waits until the reader is parked in flush waiting for space: it can go
			// no further until take or abandon, so a reader that does not wait is caught at once.
			waitReader := func(base uint64) {
				t.Helper()
				id := <-reader
				err := th.Until(10*time.Second, th.BlockedInterval, func() error {
					select {
					case err := <-done:
						return th.Final(fmt.Errorf("the reader did not wait with a full queue (%v)", err))
					default:
					}
					if !th.Blocked(id, "mysql.(*eventFeed).flush") {
						return errors.New("the reader neither waits for space nor finished")
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if n := f.live.events.Load() - base; n != uint64(tc.n) {
					t.Fatalf("the reader waits after %d events, want after the %d that fill the queue", n, tc.n)
				}
			}
			go fill()
			waitReader(0)
			evs, err := f.take(context.Background(), nil)
			if err != nil || len(evs) != tc.n {
				t.Fatalf("take: %d events, %v; want %d", len(evs), err, tc.n)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if evs, _ := f.take(context.Background(), evs); len(evs) != 1 {
				t.Fatalf("second take: %d events", len(evs))
			}

			// Full again: abandon releases the waiting reader with an error.
			base := f.live.events.Load()
			go fill()
			waitReader(base)
			f.abandon()
			if err := <-done; !errors.Is(err, errAbandoned) {
				t.Fatalf("abandoned reader: %v", err)
			}
		})
	}
}

// TestFeedEnd: the end of the stream is reported after the events handed over before it, and
// wakes a waiting take.
func TestFeedEnd(t *testing.T) {
	f := newFeed(&liveness{})
	if err := f.HandleEvent(feedEvent(&replication.XIDEvent{}, 30)); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("connection reset")
	st := replication.NewBinlogStreamer()
	st.AddErrorToStreamer(boom)
	f.watch(st)
	if evs, err := f.take(context.Background(), nil); err != nil || len(evs) != 1 {
		t.Fatalf("take before the end: %d events, %v", len(evs), err)
	}
	if _, err := f.take(context.Background(), nil); err != boom {
		t.Fatalf("take at the end: %v", err)
	}

	// The end wakes a take that waits for events (parked before the stream ends).
	f = newFeed(&liveness{})
	st = replication.NewBinlogStreamer()
	go f.watch(st)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	taker, errc := make(chan uint64, 1), make(chan error, 1)
	go func() {
		taker <- th.GoroutineID()
		_, err := f.take(ctx, nil)
		errc <- err
	}()
	th.WaitBlocked(t, 10*time.Second, <-taker, "mysql.(*eventFeed).take")
	st.AddErrorToStreamer(boom)
	if err := <-errc; err != boom {
		t.Fatalf("waiting take: %v", err)
	}
}
