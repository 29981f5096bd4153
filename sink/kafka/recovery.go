package kafka

import (
	"cmp"
	"slices"
	"time"
)

// The gate keeps per-partition order when sarama fails a record transiently (see the package
// doc). States:
//
//	open        Produce hands records straight to sarama.
//	recovering  a record failed; Produce appends to held. When nothing is left inside sarama
//	            (inSarama == 0) the recovery goroutine re-sends the failed records in their
//	            original order: refused-batch members one at a time, the rest together after a
//	            backoff. Any new failure restarts this.
//	releasing   nothing left to re-send; held records are handed to sarama in order, then the
//	            gate opens. A failure during releasing goes back to recovering.
//
// All fields are guarded by Producer.mu. Produce, the result goroutine and the recovery
// goroutine are the only writers.
type gateState struct {
	state    gate
	held     []*inflight // produced while not open, in Produce order
	retry    []*inflight // failed, waiting to be re-sent (sorted by seq before use)
	inSarama int         // records handed to sarama and not yet returned by it
	rounds   int         // consecutive backoff rounds of this recovery
	episodes int         // recoveries started so far (for tests and logs)
}

type gate int

const (
	gateOpen gate = iota
	gateRecovering
	gateReleasing
)

// nudgeLocked wakes the recovery goroutine when it may have work: recovering with sarama
// drained. Caller holds p.mu.
func (p *Producer) nudgeLocked() {
	if p.state == gateRecovering && p.inSarama == 0 {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

// recoverLoop is the recovery goroutine. It exits once the producer is drained after Close,
// or when Shutdown gives up.
func (p *Producer) recoverLoop() {
	defer close(p.recovDone)
	for {
		select {
		case <-p.wake:
		case <-p.drained:
			return
		case <-p.abortCh:
			return
		}
		for p.recoverStep() {
		}
	}
}

// recoverStep does one unit of recovery work and reports whether to continue immediately.
func (p *Producer) recoverStep() bool {
	p.mu.Lock()
	switch p.state {
	case gateOpen:
		p.mu.Unlock()
		return false
	case gateReleasing:
		if len(p.held) == 0 {
			p.state = gateOpen
			p.rounds = 0
			p.mu.Unlock()
			p.log.Info("kafka: recovered, producing normally again")
			return false
		}
		batch := p.held
		p.held = nil
		p.inSarama += len(batch)
		p.mu.Unlock()
		return p.send(batch)
	}

	// recovering
	if p.inSarama > 0 {
		p.mu.Unlock()
		return false // the result goroutine nudges us when sarama has drained
	}
	if len(p.retry) == 0 {
		p.state = gateReleasing
		p.mu.Unlock()
		return true
	}
	slices.SortFunc(p.retry, func(a, b *inflight) int { return cmp.Compare(a.seq, b.seq) })
	if !p.retry[0].isolate {
		// Transient failures: back off before re-sending. Nothing else is in flight and
		// nothing else can enter (the gate is closed), so the state cannot change while we
		// sleep, except through Shutdown giving up.
		wait := p.ctl.backoff(p.rounds)
		p.rounds++
		n := len(p.retry)
		p.mu.Unlock()
		p.log.Info("kafka: re-sending failed records", "records", n, "round", p.rounds, "backoff", wait)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-p.abortCh:
			t.Stop()
			return false
		}
		p.mu.Lock()
		if p.aborted || len(p.retry) == 0 {
			p.mu.Unlock()
			return false
		}
	}
	// The next step: one refused-batch record alone, or the leading run of the others.
	n := 1
	if !p.retry[0].isolate {
		for n < len(p.retry) && !p.retry[n].isolate {
			n++
		}
	}
	batch := slices.Clone(p.retry[:n])
	p.retry = slices.Delete(p.retry, 0, n)
	for _, it := range batch {
		it.alone = n == 1
		it.isolate = false
	}
	p.inSarama += n
	p.mu.Unlock()
	return p.send(batch)
}

// send hands records to sarama in order. It returns false if Shutdown gave up meanwhile.
func (p *Producer) send(batch []*inflight) bool {
	for _, it := range batch {
		select {
		case p.input <- &it.msg:
		case <-p.abortCh:
			return false
		}
	}
	return true
}
