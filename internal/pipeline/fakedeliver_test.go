package pipeline

import "sync"

// deliverer is the one goroutine a fake producer calls its dones from, as the Kafka producers
// call them from their result goroutine: in order, one at a time, never on the goroutine that
// called Produce, Flush or Commit. It starts with the first push and ends with close.
type deliverer struct {
	mu      sync.Mutex
	work    *sync.Cond // nil until started
	pending []fakeDelivery
	head    int  // pending[head:] is still to call
	running bool // a done is being called
	closed  bool
	stopped chan struct{}
}

// fakeDelivery is one done call; ran (if set) is closed once it returned.
type fakeDelivery struct {
	done func(error)
	err  error
	ran  chan struct{}
}

// push queues done calls. Not after close.
func (d *deliverer) push(xs ...fakeDelivery) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.work == nil {
		d.work = sync.NewCond(&d.mu)
		d.stopped = make(chan struct{})
		go d.loop()
	}
	d.pending = append(d.pending, xs...)
	d.work.Broadcast()
}

func (d *deliverer) loop() {
	d.mu.Lock()
	for {
		for d.head == len(d.pending) && !d.closed {
			d.work.Wait()
		}
		if d.head == len(d.pending) {
			d.mu.Unlock()
			close(d.stopped)
			return
		}
		x := d.pending[d.head]
		d.pending[d.head] = fakeDelivery{}
		if d.head++; d.head == len(d.pending) {
			d.pending, d.head = d.pending[:0], 0 // reuse the array
		}
		d.running = true
		d.mu.Unlock()
		x.done(x.err)
		if x.ran != nil {
			close(x.ran)
		}
		d.mu.Lock()
		d.running = false
		d.work.Broadcast()
	}
}

// idle returns once every pushed done has returned.
func (d *deliverer) idle() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for d.work != nil && (d.head < len(d.pending) || d.running) {
		d.work.Wait()
	}
}

// close calls what is pending, then ends the goroutine. Idempotent.
func (d *deliverer) close() {
	d.mu.Lock()
	d.closed = true
	if d.work == nil {
		d.mu.Unlock()
		return
	}
	d.work.Broadcast()
	stopped := d.stopped
	d.mu.Unlock()
	<-stopped
}
