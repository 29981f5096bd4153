// Package backoff is the capped exponential backoff every retry loop of outboxd uses: the
// first delay is Min, each further one doubles it, and none exceeds Max. Policy and Backoff
// are pure (no clock, no sleeping): callers own time and decide when to wait, so loops that are
// driven by an injected clock (the delivery core) stay deterministic. Wait is the one
// cancellable wait the loops that do own real time use.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Wait waits d, or until ctx ends: ctx.Err() then, nil after d.
func Wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Policy is a capped exponential backoff. Max caps every delay, Min included. A Min that
// is not positive starts at Max.
type Policy struct {
	Min, Max time.Duration
}

// Next returns the delay after cur: Min when cur is 0 (no failure yet), otherwise 2*cur;
// never more than Max. Keep the returned value as the loop's state and set it back to 0 on
// success to start again at Min.
func (p Policy) Next(cur time.Duration) time.Duration {
	switch {
	case cur <= 0:
		cur = p.Min
		if cur <= 0 {
			cur = p.Max
		}
	case cur > p.Max/2:
		cur = p.Max
	default:
		cur *= 2
	}
	return min(cur, p.Max)
}

// Attempt returns the delay of attempt n (n = 0 is the first): Min·2ⁿ, never more than
// Max. It is Next applied n+1 times from 0, for loops that count attempts instead of
// keeping the last delay.
func (p Policy) Attempt(n int) time.Duration {
	d := p.Next(0)
	for i := 0; i < n && d < p.Max; i++ {
		d = p.Next(d)
	}
	return d
}

// Backoff is a Policy with its state, for loops that keep one: the zero Cur means no failure
// yet. It is not safe for concurrent use.
type Backoff struct {
	Policy
	Cur time.Duration
}

// Next advances to and returns the next delay (see Policy.Next).
func (b *Backoff) Next() time.Duration {
	b.Cur = b.Policy.Next(b.Cur)
	return b.Cur
}

// Reset starts again at Min (after a success).
func (b *Backoff) Reset() { b.Cur = 0 }

// Jitter returns d with "equal jitter": uniformly distributed in [d/2, d], so retrying
// clients spread out while each still waits at least half the delay. A non-positive d is
// returned as is.
func Jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	half := d / 2
	return half + rand.N(d-half+1)
}
