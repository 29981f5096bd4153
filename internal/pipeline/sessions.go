package pipeline

// The source side both runners share: reading transactions with a row budget, and the session
// loop that reopens a failed source with backoff.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/outboxd/outboxd/offsets"
	"github.com/outboxd/outboxd/source"
)

// readTransactions runs src.Next on its own goroutine, sending each transaction on txCh (capacity
// buffer) until Next fails or ctx ends; that error (or ctx.Err()) is then sent on errCh. With a
// budget, each transaction's rows are acquired before it is sent (the receiver releases them).
// wait returns once the goroutine has exited.
func readTransactions(ctx context.Context, src source.Source, buffer int, budget *rowBudget) (<-chan source.Tx, <-chan error, func()) {
	txCh := make(chan source.Tx, buffer)
	errCh := make(chan error, 1)
	var readers sync.WaitGroup
	readers.Add(1)
	go func() {
		defer readers.Done()
		for {
			tx, err := src.Next(ctx)
			if err == nil && budget != nil {
				err = budget.acquire(ctx, len(tx.Rows))
			}
			if err != nil {
				errCh <- err
				return
			}
			select {
			case txCh <- tx:
			case <-ctx.Done():
				errCh <- ctx.Err()
				return
			}
		}
	}()
	return txCh, errCh, readers.Wait
}

// rowBudget bounds the rows buffered between the reader and the loop (the transaction channel
// alone would bound transactions, not their size). One goroutine acquires, another releases.
type rowBudget struct {
	mu        sync.Mutex
	used, max int
	freed     chan struct{}
}

func newRowBudget(max int) *rowBudget { return &rowBudget{max: max, freed: make(chan struct{}, 1)} }

// acquire blocks until n rows fit (a transaction larger than max fits when nothing is buffered).
func (b *rowBudget) acquire(ctx context.Context, n int) error {
	for {
		b.mu.Lock()
		if b.used == 0 || b.used+n <= b.max {
			b.used += n
			b.mu.Unlock()
			return nil
		}
		b.mu.Unlock()
		select {
		case <-b.freed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (b *rowBudget) release(n int) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
	select {
	case b.freed <- struct{}{}:
	default:
	}
}

// runSessions is the source session loop both runners share: open a new source at pos(), run
// stream on it, and after a source error (stream drained and stored what it had) reopen with
// capped backoff. The first Open failing, or any error wrapping source.ErrPositionLost, is
// returned; a graceful stop (ctx done) returns nil. drained says, for the log, what stream did
// before returning a source error.
func runSessions(ctx context.Context, newSource func() source.Source, onOpen func(), log *slog.Logger, setSrc func(source.Source),
	pos func() offsets.Position, stream func(context.Context) (srcErr, fatal error), drained string) error {
	backoff := newBackoff(500*time.Millisecond, 30*time.Second)
	first := true
	for {
		src := newSource()
		setSrc(src)
		if err := src.Open(ctx, pos()); err != nil {
			src.Close()
			if ctx.Err() != nil {
				return nil
			}
			if first || errors.Is(err, source.ErrPositionLost) {
				return fmt.Errorf("open source at position %q: %w", pos(), err)
			}
			d := backoff.next()
			log.Warn("source unavailable, retrying", "err", err, "in", d)
			if !sleep(ctx, d) {
				return nil
			}
			continue
		}
		first = false
		if onOpen != nil {
			onOpen()
		}
		srcErr, err := stream(ctx)
		src.Close()
		if err != nil {
			return err
		}
		if srcErr == nil { // graceful stop
			log.Info("stopped cleanly", "position", string(pos()))
			return nil
		}
		if errors.Is(srcErr, source.ErrPositionLost) {
			return srcErr
		}
		d := backoff.next()
		log.Warn("source failed; "+drained+", reconnecting", "err", srcErr, "in", d, "position", string(pos()))
		if !sleep(ctx, d) {
			return nil
		}
	}
}

type backoff struct {
	min, max, cur time.Duration
}

func newBackoff(min, max time.Duration) *backoff { return &backoff{min: min, max: max} }

// next returns a capped exponential delay with full jitter in [cur/2, cur].
func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else if b.cur *= 2; b.cur > b.max {
		b.cur = b.max
	}
	return b.cur/2 + time.Duration(rand.Int64N(int64(b.cur/2)+1))
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
