package postgres

import (
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outboxd/outboxd/source"
)

// The hand-off between the stream loop and Next, in batches.
//
// The loop decodes chunks ahead of Next into a bounded queue (a txBatch) and hands the whole
// queue over in one channel operation; Next returns the chunks of the batch it holds one by one
// and takes the next batch only when it has returned them all. One goroutine hand-off (the
// park/unpark of a channel operation) then serves a batch, not a chunk: draining single-row
// transactions it was most of the loop's cost besides the decoding.
//
// When the loop hands over (loop, stream.go), so that batching costs no latency:
//   - when the next read would wait on the socket: pgconn's read buffer is empty (or holds only
//     part of a message, whose rest is being sent). Reading on then means waiting for the
//     server, so the loop hands over what it has and waits in the hand-off instead, exactly as
//     it waited with one chunk before: a chunk never waits for a WAL message that has not yet
//     arrived, and while Next is busy the chunk waits for Next, not for the server. While the
//     buffer holds messages the loop keeps decoding them (microseconds each) — that is where
//     batches come from (a read fills up to pgproto3's 8 KiB buffer);
//   - when the queue is full (queueChunks, queueRows, queueBytes): it stops reading until Next
//     takes the batch, so backpressure reaches the socket as before, with at most one queue of
//     read-ahead;
//   - when the next decoded chunk waits for the coverage watch (stream.cleared): the queue
//     (every chunk in it was cleared: the cleared prefix) goes to Next while the loop waits.
//
// Emptied batches go back from Next to the loop (Source.spares), so a steady stream allocates
// none. spares holds two: Next may empty the batch it just took before the loop has taken the
// spare it left before (a fast Next), so one slot would drop a batch per hand-off.

// queueChunks, queueRows and queueBytes bound the loop's queue of chunks decoded ahead of Next:
// it is full, and the loop reads nothing more until Next takes it, once any bound is reached
// (bytes as source.Tx.Bytes counts them). A chunk is queued whole, so the queue may exceed
// queueRows/queueBytes by one chunk (up to ChunkRows/ChunkBytes). 256 single-row transactions
// spread one hand-off (a park and unpark, about a microsecond) to a few nanoseconds each, while
// the read-ahead stays small: 256 KiB plus one chunk beyond what Next holds. A chunk of 256
// rows or more (a large transaction's, ChunkRows) fills the queue alone: one chunk per
// hand-off, as before, which its size amortizes.
const (
	queueChunks = 256
	queueRows   = 256
	queueBytes  = 256 << 10
)

// txBatch is a queue of chunks, in stream order, cleared by the coverage watch (stream.cleared).
type txBatch struct {
	txs  []source.Tx
	ends []pglogrepl.LSN // parallel to txs: the position parsed, 0 for a More chunk
	rows int
	size int // sum of source.Tx.Bytes
}

func (b *txBatch) full() bool {
	return len(b.txs) >= queueChunks || b.rows >= queueRows || b.size >= queueBytes
}

// reset empties b for reuse (Next cleared each chunk as it returned it).
func (b *txBatch) reset() {
	b.txs, b.ends, b.rows, b.size = b.txs[:0], b.ends[:0], 0, 0
}

// queued reports whether the loop holds chunks for Next.
func (st *stream) queued() bool { return st.q != nil && len(st.q.txs) > 0 }

// queueFull reports whether the loop must not queue more before Next takes the queue.
func (st *stream) queueFull() bool { return st.q != nil && st.q.full() }

// enqueue moves out, cleared, into the queue: from here on it is handed out (lastHanded: the
// loop's order checks and idle progress count it) even before Next takes it. The handed-out
// position the coverage watch reports (cov.handed) moves only when Next returns a chunk.
func (st *stream) enqueue() {
	if st.q == nil {
		select {
		case st.q = <-st.s.spares:
		default:
			st.q = &txBatch{}
		}
	}
	var end pglogrepl.LSN
	if !st.out.More {
		end = st.outLSN
		st.lastHanded = st.outLSN
	}
	st.q.txs = append(st.q.txs, st.out)
	st.q.ends = append(st.q.ends, end)
	st.q.rows += len(st.out.Rows)
	st.q.size += st.out.Bytes
	st.out, st.hasOut = source.Tx{}, false
}

// handed records that Next took the queue.
func (st *stream) handed() { st.q = nil }

// mustHandOff reports whether the loop hands its queue over now instead of reading on (see the
// file comment): the queue is full, the next chunk waits for coverage, or a read would wait
// for the server.
func (st *stream) mustHandOff() bool {
	if !st.queued() {
		return false
	}
	return st.hasOut || st.q.full() || st.conn.Frontend().ReadBufferLen() == 0
}

// batchState is Next's side of the hand-off; only Next's goroutine touches it.
type batchState struct {
	cur *txBatch // the batch Next returns chunks from; nil: take the next one
	i   int      // next chunk of cur
	at  int64    // when cur was taken (unix nanos): the hand-out time cov.handedAt reports
}

// nextChans are the channels Next waits on, as start made them.
type nextChans struct {
	txCh             chan *txBatch
	done, snapFailed chan struct{}
	snapCh           chan source.Tx
}

// fromBatch returns the next chunk of the batch Next holds, or false when it holds none (the
// batch it emptied goes back to the loop: spares). A chunk with a position updates the
// coverage watch's handed-out position: it reports the last position Next returned, the one
// the stored and confirmed positions cannot be past.
func (s *Source) fromBatch() (source.Tx, bool) {
	b := s.nb.cur
	if b == nil {
		return source.Tx{}, false
	}
	if s.nb.i == len(b.txs) {
		b.reset()
		select {
		case s.spares <- b:
		default: // the loop holds enough: let it go
		}
		s.nb.cur = nil
		return source.Tx{}, false
	}
	tx, end := b.txs[s.nb.i], b.ends[s.nb.i]
	b.txs[s.nb.i] = source.Tx{} // the batch does not keep the chunk's rows alive after the pipeline let go
	s.nb.i++
	if end != 0 {
		s.ext.cov.handed.Store(uint64(end))
		s.ext.cov.handedAt.Store(s.nb.at)
	}
	return tx, true
}

// takeBatch makes b the batch Next returns chunks from.
func (s *Source) takeBatch(b *txBatch) {
	s.nb = batchState{cur: b, at: time.Now().UnixNano()}
}

// isClosed reports whether ch is closed (it is never sent on), without blocking.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
