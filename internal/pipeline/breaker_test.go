package pipeline

import (
	"context"
	"testing"
	"time"
)

func TestBreaker(t *testing.T) {
	b, err := ParseRate("2/5")
	if err != nil {
		t.Fatal(err)
	}
	seq := []struct {
		dl   bool
		trip bool
	}{{true, false}, {false, false}, {true, false}, {false, false}, {false, false},
		{false, false}, // window now: F T F F F... (first T dropped)
		{true, false}, {true, false}, {true, true}}
	for i, s := range seq {
		if got := b.Record(s.dl); got != s.trip {
			t.Fatalf("step %d: tripped=%v want %v (count %d)", i, got, s.trip, b.Count())
		}
	}
	var zero Breaker
	for i := 0; i < 10; i++ {
		if zero.Record(true) {
			t.Fatal("zero breaker tripped")
		}
	}
	for _, bad := range []string{"x", "5", "5/5", "-1/3", "1/0", "a/b"} {
		if _, err := ParseRate(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestRowBudget(t *testing.T) {
	b := newRowBudget(2000)
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
	b.release(1500)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	// Larger than the whole budget: admitted when nothing else is buffered.
	b.release(1000)
	if err := b.acquire(ctx, 5000, 0); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := b.acquire(cctx, 1, 0); err == nil {
		t.Fatal("acquire past the budget with a cancelled context succeeded")
	}
}
