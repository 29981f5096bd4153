package postgres

// The batched hand-off between the stream loop and Next (stream_queue.go), against the fake
// walsender: queued chunks reach a waiting Next in order and together, a queue is never held
// back for a WAL message that has not arrived, and the queue bound stops the reading.

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv/harness"
)

// TestStreamQueueBatchToWaitingNext: transactions that arrive together while Next waits reach
// it in order, in fewer hand-offs than transactions (one batch per read of the connection),
// with no further WAL message needed to release them.
func TestStreamQueueBatchToWaitingNext(t *testing.T) {
	s, f := startFake(t, Config{StandbyTimeout: 10 * time.Second}, 0x10)
	type got struct {
		ids   string
		batch *txBatch
		err   error
	}
	const n = 8 // small enough for one read of pgproto3's 8 KiB buffer
	res := make(chan got, n)
	gid := make(chan uint64, 1)
	go func() {
		gid <- harness.GoroutineID()
		for i := 0; i < n; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			tx, err := s.Next(ctx)
			cancel()
			r := got{batch: s.nb.cur, err: err}
			if err == nil {
				r.ids = fmt.Sprintf("%s@%s", tx.Rows[0].Values[0].Bytes, tx.Position)
			}
			res <- r
			if err != nil {
				return
			}
		}
	}()
	harness.WaitBlocked(t, 5*time.Second, <-gid, "postgres.(*Source).Next")
	b := appendXLogData(nil, 0x18, 0x18, relMsg(1, "public", "outbox", outboxCols...))
	for i := 0; i < n; i++ {
		b = appendChunkTx(b, fmt.Sprint("t", i), 1, uint64(0x100*(i+1)))
	}
	f.write(t, b)
	batches := map[*txBatch]bool{}
	for i := 0; i < n; i++ {
		r := <-res
		if r.err != nil {
			t.Fatalf("Next %d: %v", i, r.err)
		}
		if want := fmt.Sprintf("t%d-0@0/%X", i, 0x100*(i+1)); r.ids != want {
			t.Fatalf("Next %d: %s, want %s", i, r.ids, want)
		}
		batches[r.batch] = true
	}
	if len(batches) >= n {
		t.Errorf("%d transactions that arrived together came in %d hand-offs, want fewer (batches)", n, len(batches))
	}
}

// TestStreamQueueIdleHandsOver: an idle stream holding queued transactions hands them over at
// once: it waits in the hand-off, not in a read that only the next WAL message would end, and
// Next gets them all without another message.
func TestStreamQueueIdleHandsOver(t *testing.T) {
	s, f := startFake(t, Config{StandbyTimeout: 10 * time.Second}, 0x10)
	b := appendXLogData(nil, 0x18, 0x18, relMsg(1, "public", "outbox", outboxCols...))
	b = appendChunkTx(b, "a", 1, 0x100)
	b = appendChunkTx(b, "b", 2, 0x200)
	f.write(t, b)
	harness.WaitBlocked(t, 5*time.Second, 0, "postgres.(*stream).handOff")
	for _, want := range []string{"0/100", "0/200"} {
		if tx := nextTx(t, s, 2*time.Second); string(tx.Position) != want {
			t.Fatalf("Next: %q, want %s", tx.Position, want)
		}
	}
	// Next waits now; one more transaction reaches it without another after it.
	f.write(t, appendChunkTx(nil, "c", 1, 0x300))
	if tx := nextTx(t, s, 2*time.Second); tx.Position != "0/300" {
		t.Fatalf("Next: %q, want 0/300", tx.Position)
	}
}

// TestStreamQueueBound: more single-row transactions than the queue holds arrive while nobody
// takes: the loop waits in the hand-off, and Next then gets every one in order, in batches
// within the bound (queueChunks, queueRows).
func TestStreamQueueBound(t *testing.T) {
	s, f := startFake(t, Config{StandbyTimeout: 10 * time.Second}, 0x10)
	total := queueRows + 100
	b := appendXLogData(nil, 0x18, 0x18, relMsg(1, "public", "outbox", outboxCols...))
	for i := 0; i < total; i++ {
		b = appendChunkTx(b, fmt.Sprint("t", i), 1, uint64(0x100*(i+1)))
	}
	go func() { _, _ = f.conn.Write(b) }() // more than the socket buffers may hold: the loop must read
	// The loop stops at the bound: waiting in the hand-off with a full queue.
	if err := harness.Until(10*time.Second, harness.BlockedInterval, func() error {
		if !harness.Blocked(0, "postgres.(*stream).handOff") {
			return fmt.Errorf("loop not waiting in the hand-off")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	largest := 0
	for i := 0; i < total; i++ {
		tx := nextTx(t, s, 5*time.Second)
		largest = max(largest, len(s.nb.cur.txs))
		if want := fmt.Sprintf("0/%X", 0x100*(i+1)); string(tx.Position) != want {
			t.Fatalf("Next %d: %q, want %s", i, tx.Position, want)
		}
		if b := s.nb.cur; b != nil && (len(b.txs) > queueChunks || b.rows > queueRows) {
			t.Fatalf("a batch of %d chunks, %d rows: over the bound", len(b.txs), b.rows)
		}
	}
	t.Logf("largest batch: %d transactions", largest)
}

// BenchmarkStreamCPU is BenchmarkStream reporting the process's CPU time per row (user+system,
// the fake server's writes included): on a loaded machine it varies less than wall time.
func BenchmarkStreamCPU(b *testing.B) {
	for _, rows := range []int{1, 100} {
		b.Run(fmt.Sprintf("%drows", rows), func(b *testing.B) {
			c0 := cpuNanos(b)
			benchStream(b, rows)
			b.ReportMetric(float64(cpuNanos(b)-c0)/float64(b.N*rows), "cpu-ns/row")
		})
	}
}

func cpuNanos(tb testing.TB) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
