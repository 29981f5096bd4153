package backoff

import (
	"context"
	"math"
	"testing"
	"testing/synctest"
	"time"
)

func TestNextDoublesFromMinUpToMax(t *testing.T) {
	p := Policy{Min: 100 * time.Millisecond, Max: time.Second}
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	var cur time.Duration
	for i, w := range want {
		cur = p.Next(cur)
		if cur != w*time.Millisecond {
			t.Fatalf("step %d: got %s, want %s", i, cur, w*time.Millisecond)
		}
	}
	if got := p.Next(0); got != p.Min {
		t.Fatalf("after a reset: got %s, want Min %s", got, p.Min)
	}
}

func TestMaxCapsEverything(t *testing.T) {
	// Min above Max (sink/kafka's transactional producer caps the configured max at 1s):
	// Max wins from the first delay on.
	p := Policy{Min: 2 * time.Second, Max: time.Second}
	if got := p.Next(0); got != time.Second {
		t.Fatalf("Next(0) = %s, want Max", got)
	}
	if got := p.Attempt(0); got != time.Second {
		t.Fatalf("Attempt(0) = %s, want Max", got)
	}
	// A non-positive Min starts at Max.
	if got := (Policy{Max: time.Second}).Next(0); got != time.Second {
		t.Fatalf("zero Min: Next(0) = %s, want Max", got)
	}
	// No overflow near the top of the range.
	huge := Policy{Min: time.Duration(math.MaxInt64 / 3), Max: time.Duration(math.MaxInt64)}
	if got := huge.Next(huge.Next(huge.Next(0))); got != huge.Max {
		t.Fatalf("near MaxInt64: got %d, want Max", got)
	}
	if got := huge.Attempt(1000); got != huge.Max {
		t.Fatalf("Attempt(1000) near MaxInt64: got %d, want Max", got)
	}
}

func TestAttemptIsNextRepeated(t *testing.T) {
	p := Policy{Min: 3 * time.Millisecond, Max: 10 * time.Second}
	var cur time.Duration
	for n := range 30 {
		cur = p.Next(cur)
		if got := p.Attempt(n); got != cur {
			t.Fatalf("Attempt(%d) = %s, Next applied %d times = %s", n, got, n+1, cur)
		}
	}
	if cur != p.Max {
		t.Fatalf("30 doublings of 3ms: got %s, want Max", cur)
	}
}

func TestBackoffState(t *testing.T) {
	b := Backoff{Policy: Policy{Min: time.Millisecond, Max: 4 * time.Millisecond}}
	for i, w := range []time.Duration{1, 2, 4, 4} {
		if got := b.Next(); got != w*time.Millisecond {
			t.Fatalf("step %d: got %s, want %s", i, got, w*time.Millisecond)
		}
	}
	b.Reset()
	if got := b.Next(); got != time.Millisecond {
		t.Fatalf("after Reset: got %s, want Min", got)
	}
}

func TestJitterStaysInUpperHalf(t *testing.T) {
	for _, d := range []time.Duration{1, 2, 3, 7, time.Millisecond, 10 * time.Second} {
		lo, hi := d, time.Duration(0)
		for range 2000 {
			j := Jitter(d)
			if j < d/2 || j > d {
				t.Fatalf("Jitter(%d) = %d, outside [%d, %d]", d, j, d/2, d)
			}
			lo, hi = min(lo, j), max(hi, j)
		}
		// It does jitter: over 2000 draws both halves of the range show up.
		if d >= time.Millisecond && (lo > d/2+d/8 || hi < d-d/8) {
			t.Fatalf("Jitter(%s) spread only [%s, %s]", d, lo, hi)
		}
	}
	if Jitter(0) != 0 || Jitter(-time.Second) != -time.Second {
		t.Fatal("Jitter of a non-positive delay must return it unchanged")
	}
}

func TestWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if err := Wait(context.Background(), 3*time.Second); err != nil || time.Since(start) != 3*time.Second {
			t.Fatalf("Wait(3s) = %v after %v", err, time.Since(start))
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start = time.Now()
		if err := Wait(ctx, time.Hour); err != context.DeadlineExceeded || time.Since(start) != time.Second {
			t.Fatalf("Wait(1h) with a 1s context = %v after %v", err, time.Since(start))
		}
	})
}
