package pipeline

import (
	"sync"

	"github.com/outboxd/outboxd/source"
)

// txQueue carries chunks from the reader goroutine to the loop in batches: the reader pushes
// each chunk (a lock, and a wake-up only when none is pending), the loop is woken on C and takes
// every chunk waiting. Under load the loop wakes once per batch instead of once per source
// transaction (a channel receive and a select per chunk showed as ~25% of the CPU). Two buffers
// swap, so a steady stream allocates nothing. Its size is bounded by the read budget, not here.
type txQueue struct {
	C     chan struct{} // capacity 1: "chunks are waiting"
	mu    sync.Mutex
	queue []source.Tx
	spare []source.Tx
}

func newTxQueue() *txQueue { return &txQueue{C: make(chan struct{}, 1)} }

// push appends one chunk and wakes the loop; it never blocks.
func (q *txQueue) push(tx source.Tx) {
	q.mu.Lock()
	q.queue = append(q.queue, tx)
	q.mu.Unlock()
	select {
	case q.C <- struct{}{}:
	default:
	}
}

// take hands every waiting chunk, in read order, to the loop, which returns the previous batch
// as done (its elements are cleared here, so the chunks' rows are not kept alive by it). The
// result is valid until the next take; it may be empty (a wake-up for chunks already taken).
func (q *txQueue) take(done []source.Tx) []source.Tx {
	clear(done)
	q.mu.Lock()
	batch := q.queue
	q.queue = done[:0]
	q.mu.Unlock()
	return batch
}

// empty reports whether no chunk is waiting.
func (q *txQueue) empty() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queue) == 0
}

// txBatch is the batch the loop took and accepts from, in order: the chunks before next are
// accepted (or dropped by a stop), the rest wait for room in the core.
type txBatch struct {
	txs  []source.Tx
	next int
}

// head is the next chunk to accept, or nil when the batch is used up.
func (b *txBatch) head() *source.Tx {
	if b.next < len(b.txs) {
		return &b.txs[b.next]
	}
	return nil
}

// refill takes the waiting chunks from q, handing back the used-up batch.
func (b *txBatch) refill(q *txQueue) {
	b.txs, b.next = q.take(b.txs), 0
}

// drop forgets the chunks not accepted yet (a stop, or a source error: they are read again from
// the stored position by the next session) and returns how many chunks, rows and bytes that was,
// for the read budget.
func (b *txBatch) drop() (chunks, rows, bytes int) {
	for i := b.next; i < len(b.txs); i++ {
		chunks, rows, bytes = chunks+1, rows+len(b.txs[i].Rows), bytes+b.txs[i].Bytes
	}
	b.next = len(b.txs)
	return chunks, rows, bytes
}
