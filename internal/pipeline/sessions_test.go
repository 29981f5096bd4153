package pipeline

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestReadBudgetBytes: the read-ahead budget caps bytes as well as rows, per chunk: a chunk that
// would pass the byte cap waits until earlier chunks are freed, and a chunk larger than the whole
// byte cap is let through alone when nothing is buffered.
func TestReadBudgetBytes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newReadBudget(1000, 100)
		ctx := context.Background()
		if err := b.acquire(ctx, 1, 60); err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() { got <- b.acquire(ctx, 1, 60) }() // 1+1 rows fit, 120 bytes do not
		select {
		case err := <-got:
			t.Fatalf("acquired past the byte budget: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		b.free(1, 60)
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		if err := b.acquire(ctx, 1, 40); err != nil { // 100 bytes: exactly the cap
			t.Fatal(err)
		}
		b.free(1, 60)
		b.free(1, 40)
		if err := b.acquire(ctx, 1, 1<<20); err != nil { // oversized, nothing buffered: alone
			t.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := b.acquire(cctx, 1, 1); err == nil {
			t.Fatal("a chunk next to an oversized one was admitted")
		}
		b.free(1, 1<<20)
		if b.rows != 0 || b.bytes != 0 {
			t.Fatalf("budget left %d rows %d bytes", b.rows, b.bytes)
		}
		if d := newReadBudget(10, 0); d.maxBytes != DefaultReadAheadBytes {
			t.Fatalf("default byte budget %d", d.maxBytes)
		}
	})
}

// The row cap of the read-ahead budget (bytes far below their cap).
func TestRowBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newReadBudget(2000, 1<<30)
		ctx := context.Background()
		if err := b.acquire(ctx, 1500, 0); err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() { got <- b.acquire(ctx, 1000, 0) }()
		select {
		case err := <-got:
			t.Fatalf("acquired past the budget: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		b.free(1500, 0)
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		// Larger than the whole budget: admitted when nothing else is buffered.
		b.free(1000, 0)
		if err := b.acquire(ctx, 5000, 0); err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := b.acquire(cctx, 1, 0); err == nil {
			t.Fatal("acquire past the budget with a cancelled context succeeded")
		}
	})
}
