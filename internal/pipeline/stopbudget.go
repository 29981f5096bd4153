package pipeline

import (
	"context"
	"sync"
	"time"
)

// stopBudget is shutdown_timeout as ONE budget for a whole stop: the deadline is fixed when the
// run context ends (the stop signal), and every wait of the stop — draining in-flight records,
// the producer's shutdown, closing the transactional producer — ends at that same deadline, so a
// stop with Kafka down takes shutdown_timeout, not a multiple of it. Without a stop (a fatal
// error), each bounded wait gets the full timeout from when it starts.
type stopBudget struct {
	timeout  time.Duration
	mu       sync.Mutex
	deadline time.Time // zero until the stop begins
	release  func() bool
}

func newStopBudget(ctx context.Context, timeout time.Duration) *stopBudget {
	b := &stopBudget{timeout: timeout}
	b.release = context.AfterFunc(ctx, func() { b.start() })
	return b
}

// start fixes the deadline (the first call wins) and returns it.
func (b *stopBudget) start() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.deadline.IsZero() {
		b.deadline = time.Now().Add(b.timeout)
	}
	return b.deadline
}

// stopping reports whether a stop began, and its deadline.
func (b *stopBudget) stopping() (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.deadline, !b.deadline.IsZero()
}

// stopTimer fires at the stop's deadline (starting the stop's clock if it has not started).
func (b *stopBudget) stopTimer() <-chan time.Time {
	return time.After(time.Until(b.start()))
}

// wait is a channel that fires when a bounded wait must give up: at the stop's deadline when a
// stop began, else after the full timeout from now.
func (b *stopBudget) wait() <-chan time.Time {
	if d, ok := b.stopping(); ok {
		return time.After(time.Until(d))
	}
	return time.After(b.timeout)
}

// context is bounded by the stop's deadline when a stop began, else by the full timeout.
func (b *stopBudget) context() (context.Context, context.CancelFunc) {
	if d, ok := b.stopping(); ok {
		return context.WithDeadline(context.Background(), d)
	}
	return context.WithTimeout(context.Background(), b.timeout)
}
