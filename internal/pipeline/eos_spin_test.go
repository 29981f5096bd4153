package pipeline

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"
)

// loopCount counts the exactly_once loop's iterations: the loop reports Inflight once each.
type loopCount struct {
	noMetrics
	n atomic.Int64
}

func (m *loopCount) Inflight(int) { m.n.Add(1) }

// TestEOSLoopBlocksWhileItWaits: while the runner waits (a retry backoff; a stop whose batch
// cannot commit), its loop blocks instead of spinning. Real time, not a synctest bubble: a
// busy loop shows here as iterations per failed attempt (in a bubble it stops the fake clock).
func TestEOSLoopBlocksWhileItWaits(t *testing.T) {
	start := func(t *testing.T) (*fakeCluster, *loopCount, context.CancelFunc, chan error) {
		c := &fakeCluster{transientLeft: 1 << 30} // every flush fails transiently
		o := eosOptions(c, &fakeSource{txs: txs("a")})
		o.RetryMin, o.RetryMax = 20*time.Millisecond, 20*time.Millisecond
		o.ShutdownTimeout = 100 * time.Millisecond
		o.Log = slog.New(slog.DiscardHandler)
		m := &loopCount{}
		o.Metrics = m
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- RunExactlyOnce(ctx, o) }()
		return c, m, cancel, errc
	}
	attempts := func(c *fakeCluster) int {
		c.mu.Lock()
		defer c.mu.Unlock()
		return 1<<30 - c.transientLeft
	}
	const limit = 200 // iterations per failed attempt: a handful each when the loop blocks

	t.Run("retry backoff", func(t *testing.T) {
		c, m, cancel, errc := start(t)
		defer func() { cancel(); <-errc }()
		waitFor(t, "a failed attempt", func() bool { return attempts(c) >= 1 })
		n0, a0 := m.n.Load(), attempts(c)
		waitFor(t, "three more failed attempts (20ms backoff each)", func() bool { return attempts(c) >= a0+3 })
		if n := m.n.Load() - n0; n > limit*3 {
			t.Fatalf("the loop ran %d times over 3 retry backoffs: it spins while it waits", n)
		}
	})
	t.Run("stop with a batch that cannot commit", func(t *testing.T) {
		c, m, cancel, errc := start(t)
		waitFor(t, "a failed attempt", func() bool { return attempts(c) >= 1 })
		n0, a0 := m.n.Load(), attempts(c)
		cancel()
		<-errc // after the 100ms shutdown timeout
		if n, a := m.n.Load()-n0, attempts(c)-a0; n > int64(limit*(a+1)) {
			t.Fatalf("the loop ran %d times during a stop with %d failed attempts: it spins while it waits", n, a)
		}
	})
}
