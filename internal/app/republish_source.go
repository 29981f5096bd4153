package app

// The table scan of `outboxd republish` as a source.Source, so that the rows already in the
// outbox tables go through the pipeline's own delivery (internal/pipeline.Run: the transform,
// the producer, the DLQ, the classification of Kafka errors, backpressure and acks).

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/outboxd/outboxd/source"
)

// scanChunkBytes caps the bytes of one chunk handed to the pipeline (source.ChunkBytes): a scan
// batch of large rows is cut into several chunks, each its own transaction.
const scanChunkBytes = 1 << 20

// scanReadAhead is how many scan batches may wait for the pipeline, so that the database's next
// fetch overlaps the delivery of the previous batches.
const scanReadAhead = 2

// scanPositionPrefix starts every position of a scan source: "republish:<n>" means "the first n
// rows of the scan are delivered". It is never stored beyond the command's memory (the
// dead letters of the scan carry it as outboxd.source.position).
const scanPositionPrefix = "republish:"

// scanSource runs the scanner's ScanOutbox for each query in turn, on one goroutine started by
// Open, and hands each batch of rows to Next as one or more chunks; each chunk is a whole
// transaction whose position is scanPositionPrefix + the rows handed out so far. Once every
// query is scanned, Next returns source.ErrEnd (the pipeline then drains, stores and returns).
// A failed scan also ends the source with source.ErrEnd, wrapping the failure, so that what was
// read before it is still delivered; Err returns the failure (the command's exit status 1). A
// scan source is opened once: it cannot resume at a position (a new scan is a new snapshot, the
// first n rows of which need not be the same rows), so a second Open fails.
type scanSource struct {
	sc      scanner
	queries []source.ScanQuery

	batches  chan []source.Row // unbuffered: the scan waits while the pipeline is full
	done     chan struct{}     // closed when the scan goroutine has ended
	cancel   context.CancelFunc
	opened   bool
	closing  sync.Once
	closedCh chan struct{} // closed by Close

	err     error // the scan's failure; written before done is closed
	rest    []source.Row
	handed  int64        // rows handed out by Next (Next's goroutine)
	scanned atomic.Int64 // rows the scan has returned so far
}

func newScanSource(sc scanner, queries []source.ScanQuery) *scanSource {
	return &scanSource{sc: sc, queries: queries, batches: make(chan []source.Row, scanReadAhead), done: make(chan struct{}),
		closedCh: make(chan struct{})}
}

// Open starts the scan. from must be empty: a scan is never resumed.
func (s *scanSource) Open(_ context.Context, from source.Position) error {
	if s.opened || from != "" {
		return fmt.Errorf("%w: a republish scan cannot resume at %q; run outboxd republish again (narrowed with --since or --where to what is left)",
			source.ErrPositionLost, from)
	}
	s.opened = true
	ctx, cancel := context.WithCancel(context.Background()) // Open's ctx bounds Open only; Close ends the scan
	s.cancel = cancel
	go func() {
		defer close(s.done)
		for _, q := range s.queries {
			err := s.sc.ScanOutbox(ctx, q, func(rows []source.Row) error {
				if len(rows) == 0 {
					return nil
				}
				s.scanned.Add(int64(len(rows)))
				select {
				case s.batches <- rows:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
			if err != nil {
				if ctx.Err() == nil { // not the Close that stopped it
					s.err = fmt.Errorf("scan of %s failed after %d rows of the scan were read: %w", q.Table, s.scanned.Load(), err)
				}
				return
			}
		}
	}()
	return nil
}

// Next returns the next chunk: the next rows of the current batch, at most scanChunkBytes of
// them (one row at least), or of the next batch the scan returns.
func (s *scanSource) Next(ctx context.Context) (source.Tx, error) {
	if len(s.rest) == 0 {
		select {
		case rows := <-s.batches:
			s.rest = rows
		case <-s.done:
			select {
			case <-s.closedCh: // the scan was stopped, not finished
				return source.Tx{}, errScanClosed
			default:
			}
			select {
			case rows := <-s.batches: // read before the scan ended: handed out first
				s.rest = rows
			default:
				if s.err != nil {
					return source.Tx{}, fmt.Errorf("%w: %w", source.ErrEnd, s.err)
				}
				return source.Tx{}, source.ErrEnd
			}
		case <-s.closedCh:
			return source.Tx{}, errScanClosed
		case <-ctx.Done():
			return source.Tx{}, ctx.Err()
		}
	}
	n, size := 0, 0
	for n < len(s.rest) {
		b := source.RowBytes(&s.rest[n])
		if n > 0 && size+b > scanChunkBytes {
			break
		}
		n, size = n+1, size+b
	}
	rows := s.rest[:n:n]
	s.rest = s.rest[n:]
	s.handed += int64(n)
	return source.Tx{Position: source.Position(scanPositionPrefix + strconv.FormatInt(s.handed, 10)), Rows: rows, Bytes: size}, nil
}

// errScanClosed is Next's error after Close.
var errScanClosed = errors.New("republish scan closed")

// Confirm does nothing: a scan has no server-side position to confirm.
func (s *scanSource) Confirm(context.Context, source.Position) error { return nil }

// Close stops the scan and waits for its goroutine (it ends promptly: the scan's context is
// cancelled and its callback never blocks past that).
func (s *scanSource) Close() error {
	s.closing.Do(func() {
		close(s.closedCh)
		if s.cancel != nil {
			s.cancel()
			<-s.done
		}
	})
	return nil
}

// Err is the scan's failure, once Run has returned; nil when every query was scanned to its end.
func (s *scanSource) Err() error {
	select {
	case <-s.done:
		return s.err
	default:
		return nil
	}
}
