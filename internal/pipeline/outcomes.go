package pipeline

import (
	"sync"

	"github.com/outboxd/outboxd/internal/pipeline/delivery"
)

// outcome is one done(err) of the producer.
type outcome struct {
	id  delivery.ID
	err error
}

// outcomeQueue carries the producer's done callbacks (any goroutine) to the loop goroutine,
// which is woken on C and takes them in a batch. Two buffers swap, so a steady stream of acks
// allocates nothing. The loop never blocks on it and a callback never waits for the loop.
type outcomeQueue struct {
	C     chan struct{} // capacity 1: "outcomes are waiting"
	mu    sync.Mutex
	queue []outcome
	spare []outcome
}

func newOutcomeQueue() *outcomeQueue { return &outcomeQueue{C: make(chan struct{}, 1)} }

// push records one outcome and wakes the loop; it never blocks.
func (q *outcomeQueue) push(id delivery.ID, err error) {
	q.mu.Lock()
	q.queue = append(q.queue, outcome{id: id, err: err})
	q.mu.Unlock()
	select {
	case q.C <- struct{}{}:
	default:
	}
}

// take hands the waiting outcomes to the loop; the slice is valid until the next take, and
// the caller clears it (so the records' IDs do not keep anything alive).
func (q *outcomeQueue) take() []outcome {
	q.mu.Lock()
	batch := q.queue
	q.queue, q.spare = q.spare[:0], batch
	q.mu.Unlock()
	return batch
}
