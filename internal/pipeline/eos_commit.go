package pipeline

// Exactly-once: committing a batch (one Kafka transaction, retried until committed or fatal),
// the transactional producer's lifecycle, and dead letters (see eos.go).

import (
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/outboxd/outboxd/offsets"
	"github.com/outboxd/outboxd/sink"
)

// attemptResult is what one try at committing a batch came to.
type attemptResult int

const (
	committedOK attemptResult = iota
	redo                      // new dead letters or suspects: produce again at once
	transient                 // back off, then produce again
	ambiguous                 // the commit may or may not have happened
)

// commitBatch commits b in one Kafka transaction, retrying until it is committed or a fatal
// error. On success the source is confirmed up to b.end.
func (r *eosRunner) commitBatch(b *eosBatch) error {
	r.o.Metrics.Inflight(len(b.items))
	defer r.o.Metrics.Inflight(0)
	for attempt := 1; ; attempt++ {
		if err := r.work.Err(); err != nil {
			return fmt.Errorf("%w: %d records of %d transactions not committed; committed position %s (they will be delivered on restart)",
				ErrShutdownTimeout, len(b.items), b.txs, r.committed)
		}
		if r.prod == nil || !r.prod.Usable() {
			if err := r.renewProducer(); err != nil {
				return err
			}
		}
		trial := r.o.DLQBreaker // counted again from scratch by every attempt
		trial.ring = slices.Clone(trial.ring)
		res, err := r.attempt(b, &trial)
		if err != nil {
			return err
		}
		switch res {
		case committedOK:
			r.o.DLQBreaker = trial
			r.backoff = newBackoff(r.o.RetryMin, r.o.RetryMax)
			r.committedBatch(b)
			return nil
		case redo:
			continue
		case ambiguous:
			r.log.Warn("the Kafka commit failed and its outcome is unknown: re-initialising the transactional id and reading the committed position back",
				"batch_end", string(b.end))
			r.dropProducer()
			if err := r.takenOver(b); err != nil {
				return err
			}
			if err := r.renewProducer(); err != nil {
				return err
			}
			pos, err := r.loadWithRetry()
			if err != nil {
				return err
			}
			switch pos {
			case b.end:
				r.log.Info("the batch was committed", "position", string(pos))
				r.o.DLQBreaker = trial
				r.committedBatch(b)
				return nil
			case r.committed:
				r.log.Info("the batch was not committed: producing it again", "position", string(pos))
				continue
			default:
				return fmt.Errorf("offsets.topic holds position %s, neither this instance's last commit %s nor its batch end %s: "+
					"another writer changed the position (`outboxd offsets set`, or a second instance with another transactional id?); restart outboxd",
					pos, r.committed, b.end)
			}
		case transient:
			d := r.backoff.next()
			r.log.Warn("Kafka transaction failed: producing the batch again", "attempt", attempt, "in", d,
				"records", len(b.items), "batch_end", string(b.end))
			if !sleep(r.work, d) {
				continue // reported at the top of the loop
			}
		}
	}
}

func (r *eosRunner) committedBatch(b *eosBatch) {
	r.committed = b.end
	r.lastCommit = time.Now()
	if err := r.src.Confirm(r.work, b.end); err != nil {
		r.log.Warn("confirm position to the source failed (committed; will confirm again)", "position", string(b.end), "err", err)
	}
	for _, it := range b.items {
		if it.dead {
			r.o.Metrics.DeadLettered(it.reason)
		} else {
			r.o.Metrics.Produced(it.rec.Topic, it.commitTime)
		}
	}
	r.o.Metrics.Committed(b.end)
	if r.o.OnCommit != nil {
		r.o.OnCommit(b.end)
	}
}

// attempt produces b in one transaction and commits it. Only fatal conditions return an error.
func (r *eosRunner) attempt(b *eosBatch, breaker *Breaker) (attemptResult, error) {
	p := r.prod
	if err := p.Begin(); err != nil {
		return r.producerFailed("begin", err)
	}
	type sent struct {
		it    *item // nil: the position record
		dlq   bool
		alone bool
		rec   sink.Record
		err   error
	}
	var failed atomic.Bool
	var all []*sent
	doneFor := func(s *sent) func(error) {
		return func(err error) {
			s.err = err
			if err != nil {
				failed.Store(true)
			}
		}
	}
	// send queues one record; alone records go with nothing else in flight. It returns false
	// when producing should stop (something failed already, or the stop deadline passed).
	send := func(s *sent) (bool, error) {
		if s.alone {
			if p.Flush(r.work) != nil || failed.Load() {
				return false, nil
			}
		}
		for {
			err := p.Produce(r.work, &s.rec, doneFor(s))
			if err == nil {
				break
			}
			if r.work.Err() != nil {
				return false, nil
			}
			// Refused before sending: certain, and the transaction is untouched.
			perm, reason := r.o.Classify(err)
			if !perm {
				r.log.Warn("cannot queue a record in the Kafka transaction", "topic", s.rec.Topic, "err", err)
				return false, nil // abort, back off, produce the batch again
			}
			switch {
			case s.it == nil:
				return false, fmt.Errorf("the position record for offsets.topic %s cannot be written: %w", s.rec.Topic, err)
			case s.dlq:
				return false, r.dlqUnwritable(s.it, err)
			}
			r.markDead(s.it, "produce", reason, err)
			s.dlq, s.alone = true, s.it.dlqSuspect
			s.rec = r.deadLetterRecord(s.it)
		}
		all = append(all, s)
		if s.alone {
			if p.Flush(r.work) != nil {
				return false, nil
			}
		}
		return !failed.Load(), nil
	}
	ok := true
	for i, it := range b.items {
		if r.o.Crash != nil && i > 0 && i == len(b.items)/2 {
			// Test crash point: the first half is acked in the open transaction.
			if p.Flush(r.work) == nil && !failed.Load() {
				r.o.Crash("mid_batch")
			}
		}
		s := &sent{it: it, alone: it.suspect}
		if it.dead {
			s.dlq, s.alone, s.rec = true, it.dlqSuspect, r.deadLetterRecord(it)
		} else {
			s.rec = it.rec
		}
		var err error
		if ok, err = send(s); err != nil {
			r.abort()
			return 0, err
		}
		if !ok {
			break
		}
	}
	if ok {
		var err error
		if ok, err = send(&sent{rec: r.o.Store.Record(b.end), alone: b.posSusp}); err != nil {
			r.abort()
			return 0, err
		}
	}
	if err := p.Flush(r.work); err != nil {
		r.abort()
		return transient, nil // the stop deadline passed: reported by the caller
	}

	// Every queued record has its outcome.
	newFindings := false
	var fatalErr error
	anyErr := false
	for _, s := range all {
		if s.err == nil {
			continue
		}
		anyErr = true
		if fatal, why := r.o.Fatal(s.err); fatal {
			fatalErr = r.fatalErr(s.err, why)
			break
		}
		perm, reason := r.o.Classify(s.err)
		if !perm {
			continue
		}
		switch {
		case s.it == nil: // the position record
			if s.alone {
				fatalErr = fmt.Errorf("the position record for offsets.topic %s cannot be written: %w", s.rec.Topic, s.err)
			} else if !b.posSusp {
				b.posSusp, newFindings = true, true
			}
		case s.dlq:
			if s.alone {
				fatalErr = r.dlqUnwritable(s.it, s.err)
			} else if !s.it.dlqSuspect {
				s.it.dlqSuspect, newFindings = true, true
			}
		case s.alone:
			r.markDead(s.it, "produce", reason, s.err)
			newFindings = true
		case !s.it.suspect:
			s.it.suspect, newFindings = true, true
		}
		if fatalErr != nil {
			break
		}
	}
	if fatalErr != nil {
		r.abort()
		return 0, fatalErr
	}
	if anyErr || !ok {
		if err := r.abortChecked(); err != nil {
			return 0, err
		}
		if newFindings {
			susp := 0
			for _, it := range b.items {
				if it.suspect || it.dlqSuspect {
					susp++
				}
			}
			r.log.Info("Kafka refused records of the transaction: aborted; producing it again, the records that failed together one at a time",
				"records", len(b.items), "suspects", susp, "batch_end", string(b.end))
			return redo, nil
		}
		return transient, nil
	}

	// All acked. The DLQ breaker sees the batch's records in order before anything commits.
	for _, it := range b.items {
		if breaker.Record(it.dead) {
			r.abort()
			return 0, fmt.Errorf("kafka.dlq_max_rate exceeded: %d of the last %d records were dead-lettered (latest: %s: %v); stopping before committing position %s — "+
				"this looks like a misconfiguration (outbox.columns, outbox.topic, topic ACLs); fix it and restart, or raise kafka.dlq_max_rate",
				breaker.Count(), breaker.Window, it.reason, it.cause, it.pos)
		}
	}
	if len(b.items) > 0 && r.o.Crash != nil {
		r.o.Crash("before_commit")
	}
	if err := p.Commit(); err != nil {
		if fatal, why := r.o.Fatal(err); fatal {
			return 0, r.fatalErr(err, why)
		}
		r.log.Warn("Kafka commit failed", "err", err)
		return ambiguous, nil
	}
	if len(b.items) > 0 && r.o.Crash != nil {
		r.o.Crash("after_commit")
	}
	return committedOK, nil
}

// producerFailed handles an error of a transactional call outside produce/commit.
func (r *eosRunner) producerFailed(what string, err error) (attemptResult, error) {
	if fatal, why := r.o.Fatal(err); fatal {
		return 0, r.fatalErr(err, why)
	}
	r.log.Warn("transactional producer failed: replacing it", "call", what, "err", err)
	r.dropProducer()
	return transient, nil
}

// abort aborts the open transaction, ignoring errors (the producer is replaced if it broke).
func (r *eosRunner) abort() {
	if err := r.prod.Abort(); err != nil {
		r.dropProducer()
	}
}

// abortChecked aborts the open transaction: a fatal error is returned, any other replaces the
// producer (a new one aborts the transaction when it initialises).
func (r *eosRunner) abortChecked() error {
	err := r.prod.Abort()
	if err == nil {
		return nil
	}
	if fatal, why := r.o.Fatal(err); fatal {
		return r.fatalErr(err, why)
	}
	r.log.Warn("abort of the Kafka transaction failed: replacing the producer", "err", err)
	r.dropProducer()
	return nil
}

func (r *eosRunner) dropProducer() {
	if r.prod == nil {
		return
	}
	p := r.prod
	r.prod = nil
	go p.Close() // it may wait for sarama's bounded retries; a new one fences it anyway
}

func (r *eosRunner) closeProducer() {
	done := make(chan struct{})
	p := r.prod
	r.prod = nil
	go func() { p.Close(); close(done) }()
	select {
	case <-done:
	case <-r.budget.wait(): // after a stop: what is left of shutdown_timeout
		r.log.Warn("closing the transactional producer timed out")
	}
}

// renewProducer replaces a missing or broken producer, retrying with backoff.
func (r *eosRunner) renewProducer() error {
	if r.prod != nil {
		r.dropProducer()
	}
	for {
		p, err := r.o.NewProducer()
		if err == nil {
			r.prod = p
			return nil
		}
		if fatal, why := r.o.Fatal(err); fatal {
			return r.fatalErr(err, why)
		}
		d := r.backoff.next()
		r.log.Warn("cannot initialise the transactional producer, retrying", "err", err, "in", d)
		if !sleep(r.work, d) {
			return fmt.Errorf("%w: the transactional producer could not be initialised; committed position %s", ErrShutdownTimeout, r.committed)
		}
	}
}

// takenOver reads the committed position after a commit with an unknown outcome, BEFORE the
// transactional id is initialised again. A position that is neither this instance's last commit
// nor its batch's end was committed by someone else since: another instance with the same
// transactional id took over while this one was paused or cut off (a zombie whose broker
// answered the late commit with an error other than PRODUCER_FENCED), or an operator set it.
// Initialising the id now would fence the instance that took over and swap roles; stop instead.
func (r *eosRunner) takenOver(b *eosBatch) error {
	pos, err := r.loadWithRetry()
	if err != nil {
		return err
	}
	if pos == r.committed || pos == b.end {
		return nil
	}
	return fmt.Errorf("%w: this instance's commit failed with an unknown outcome, and the committed position is now %s, neither its last commit %s "+
		"nor its batch end %s: another outboxd with transactional id %q (kafka.transactional_id) took over, or `outboxd offsets set` changed it; "+
		"stopping without initialising the id again (that would fence the instance that took over). Nothing is lost: the committed position is where delivery resumes",
		ErrFenced, pos, r.committed, b.end, r.o.TransactionalID)
}

func (r *eosRunner) loadWithRetry() (offsets.Position, error) {
	for {
		pos, err := r.o.Store.Load(r.work)
		if err == nil {
			return pos, nil
		}
		d := r.backoff.next()
		r.log.Warn("cannot read the committed position, retrying", "err", err, "in", d)
		if !sleep(r.work, d) {
			return "", fmt.Errorf("%w: the committed position could not be read back after a failed commit: %v", ErrShutdownTimeout, err)
		}
	}
}

func (r *eosRunner) markDead(it *item, stage, reason string, cause error) {
	it.dead, it.stage, it.reason, it.cause = true, stage, reason, cause
	it.suspect = false
}

func (r *eosRunner) deadLetterRecord(it *item) sink.Record {
	dl := DeadLetter(it.rec, it.row, it.stage, it.reason, it.cause.Error(), it.pos, time.Now())
	dl.Topic = r.o.DLQTopic
	if size := dl.Size(); size > r.o.MaxRecordBytes {
		// As in the at-least-once pipeline: the dead letter would be refused too; keep the
		// headers, drop the value (the row is still in the outbox table under its id).
		dl.Value = nil
		dl.Headers = append(dl.Headers, sink.Header{Key: HeaderValueDropped, Value: []byte(strconv.Itoa(size))})
	}
	if !it.logged {
		it.logged = true
		id := ""
		if v, ok := it.row.Get("id"); ok {
			id = string(v.Bytes)
		}
		r.log.Warn("dead-lettering record", "reason", it.reason, "stage", it.stage, "error", it.cause.Error(),
			"topic", it.rec.Topic, "table", it.row.Table, "position", string(it.pos), "id", id)
	}
	return dl
}

func (r *eosRunner) dlqUnwritable(it *item, err error) error {
	return fmt.Errorf("dead-letter topic %s cannot be written (%v): stopping without committing past position %s — fix the DLQ topic (kafka.dlq_topic) and restart",
		r.o.DLQTopic, err, r.committed)
}
