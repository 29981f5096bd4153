package pipeline

// The source side both runners share: reading transactions with a row budget, and the session
// loop that reopens a failed source with backoff.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/outboxd/outboxd/internal/backoff"
	"github.com/outboxd/outboxd/source"
)

// readTransactions runs src.Next on its own goroutine, pushing each chunk on the returned queue
// until Next fails or ctx ends; that error (or ctx.Err()) is then sent on errCh, after every
// chunk read before it is in the queue. Each chunk's rows and bytes (and the chunk itself, of
// budget.maxChunks) are acquired from budget before it is queued, and tx.Bytes is set to what was
// acquired (source.ChunkBytes), so the receiver frees exactly (1, len(tx.Rows), tx.Bytes) per
// chunk once it has accepted it. The loop takes every waiting chunk per wake (txQueue.take)
// instead of one per channel receive. wait returns once the goroutine has exited.
func readTransactions(ctx context.Context, src source.Source, budget *readBudget) (*txQueue, <-chan error, func()) {
	q := newTxQueue()
	errCh := make(chan error, 1)
	var readers sync.WaitGroup
	readers.Add(1)
	go func() {
		defer readers.Done()
		for {
			tx, err := src.Next(ctx)
			if err == nil {
				tx.Bytes = source.ChunkBytes(&tx)
				err = budget.acquire(ctx, len(tx.Rows), tx.Bytes)
			}
			if err != nil {
				errCh <- err
				return
			}
			q.push(tx)
		}
	}()
	return q, errCh, readers.Wait
}

// DefaultReadAheadBytes is the read-ahead byte budget when ReadAheadBytes is not set.
const DefaultReadAheadBytes = 2 << 20

// readBudget bounds the chunks, rows and bytes read but not yet accepted by the loop (queued,
// or taken and waiting for room in the core), so that when the loop stops accepting chunks the
// reader stops reading and the backpressure reaches the database. One goroutine acquires,
// another frees.
type readBudget struct {
	mu                sync.Mutex
	chunks, maxChunks int // maxChunks 0: chunks are not capped (rows and bytes are)
	rows, maxRows     int
	bytes, maxBytes   int
	freed             chan struct{}
}

// newReadBudget caps rows and bytes (bytes <= 0: DefaultReadAheadBytes); chunks (TxBuffer) may
// be capped by setting maxChunks.
func newReadBudget(rows, bytes int) *readBudget {
	if bytes <= 0 {
		bytes = DefaultReadAheadBytes
	}
	return &readBudget{maxRows: rows, maxBytes: bytes, freed: make(chan struct{}, 1)}
}

// acquire blocks until a chunk of n rows and size bytes fits. A chunk larger than either cap
// fits when nothing is buffered (per chunk: a huge transaction comes as many bounded chunks).
func (b *readBudget) acquire(ctx context.Context, n, size int) error {
	for {
		b.mu.Lock()
		if b.chunks == 0 || (b.maxChunks <= 0 || b.chunks < b.maxChunks) && b.rows+n <= b.maxRows && b.bytes+size <= b.maxBytes {
			b.chunks++
			b.rows += n
			b.bytes += size
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

// free returns one chunk's rows and bytes (as the reader set them in tx.Bytes).
func (b *readBudget) free(n, size int) { b.freeChunks(1, n, size) }

// freeChunks returns chunks chunks of n rows and size bytes in all (the loop frees what it
// accepted in one wake at once: one lock, one wake-up of the reader).
func (b *readBudget) freeChunks(chunks, n, size int) {
	if chunks == 0 {
		return
	}
	b.mu.Lock()
	b.chunks -= chunks
	b.rows -= n
	b.bytes -= size
	b.mu.Unlock()
	select {
	case b.freed <- struct{}{}:
	default:
	}
}

// runSessions is the source session loop both runners share: open a new source at pos(), run
// stream on it, and after a source error (stream drained and stored what it had) reopen with
// capped backoff. The first Open failing, or any error wrapping source.ErrPositionLost, is
// returned; a graceful stop (ctx done) returns nil, and so does the end of a finite source
// (a source error wrapping source.ErrEnd, once stream drained and stored). drained says, for the log, what stream did
// before returning a source error.
func runSessions(ctx context.Context, newSource func() source.Source, onOpen func(), log *slog.Logger, setSrc func(source.Source),
	pos func() source.Position, stream func(context.Context) (srcErr, fatal error), drained string) error {
	retry := backoff.Backoff{Policy: backoff.Policy{Min: 500 * time.Millisecond, Max: 30 * time.Second}}
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
			d := backoff.Jitter(retry.Next())
			log.Warn("source unavailable, retrying", "err", err, "in", d)
			if backoff.Wait(ctx, d) != nil {
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
		if errors.Is(srcErr, source.ErrEnd) { // a finite source is exhausted: done, not reopened
			log.Info("source ended; everything read was delivered and stored", "position", string(pos()))
			return nil
		}
		d := backoff.Jitter(retry.Next())
		log.Warn("source failed; "+drained+", reconnecting", "err", srcErr, "in", d, "position", string(pos()))
		if backoff.Wait(ctx, d) != nil {
			return nil
		}
	}
}
