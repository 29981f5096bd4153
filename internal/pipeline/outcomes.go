package pipeline

import (
	"sync"
	"sync/atomic"

	"github.com/outboxd/outboxd/internal/pipeline/delivery"
)

// outcome is one done(err) of the producer; d is nil for a done called a second time.
type outcome struct {
	d   *doneRec
	err error
}

// outcomeQueue carries the producer's done callbacks (any goroutine) to the loop goroutine,
// which is woken on C and takes them in a batch. Two buffers swap, and the callbacks are
// pooled (doneFor), so a steady stream of acks allocates nothing. The loop never blocks on it
// and a callback never waits for the loop.
type outcomeQueue struct {
	C     chan struct{} // capacity 1: "outcomes are waiting"
	mu    sync.Mutex
	queue []outcome
	spare []outcome

	free []*doneRec // the loop's: callbacks whose outcome it took, for the next sends
}

func newOutcomeQueue() *outcomeQueue { return &outcomeQueue{C: make(chan struct{}, 1)} }

// doneRec is the done callback of one Produce: fn, its method value made once, is what the
// producer gets; the loop reuses the struct once it took the outcome (a closure per record was
// one allocation per event).
type doneRec struct {
	q     *outcomeQueue
	id    delivery.ID
	state atomic.Uint32 // doneIssued, then doneCalled; doneFree in the pool
	fn    func(error)
}

const (
	doneFree uint32 = iota
	doneIssued
	doneCalled
)

func (d *doneRec) done(err error) {
	if !d.state.CompareAndSwap(doneIssued, doneCalled) {
		// Called twice (a broken producer): the zero ID reaches the core, which refuses an
		// outcome for a send not in flight (at_least_once fails the run).
		d.q.push(nil, err)
		return
	}
	d.q.push(d, err)
}

// doneFor is the done callback for the send id (loop goroutine only).
func (q *outcomeQueue) doneFor(id delivery.ID) func(error) {
	var d *doneRec
	if n := len(q.free); n > 0 {
		d, q.free = q.free[n-1], q.free[:n-1]
	} else {
		d = &doneRec{q: q}
		d.fn = d.done
	}
	d.id = id
	d.state.Store(doneIssued)
	return d.fn
}

// push records one outcome and wakes the loop; it never blocks.
func (q *outcomeQueue) push(d *doneRec, err error) {
	q.mu.Lock()
	q.queue = append(q.queue, outcome{d: d, err: err})
	q.mu.Unlock()
	select {
	case q.C <- struct{}{}:
	default:
	}
}

// take hands the waiting outcomes to the loop; the slice is valid until the next take, and
// the caller gets each one's ID with id (which recycles its callback) and clears it.
func (q *outcomeQueue) take() []outcome {
	q.mu.Lock()
	batch := q.queue
	q.queue, q.spare = q.spare[:0], batch
	q.mu.Unlock()
	return batch
}

// id is the send o is the outcome of (the zero ID for a second call), and returns o's callback
// to the pool: the producer called it, and calls it no more (loop goroutine only).
func (q *outcomeQueue) id(o *outcome) delivery.ID {
	d := o.d
	if d == nil {
		return delivery.ID{}
	}
	id := d.id
	d.id = delivery.ID{}
	d.state.Store(doneFree)
	q.free = append(q.free, d)
	return id
}
