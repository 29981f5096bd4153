package delivery

import (
	"fmt"
	"time"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
)

// outcome resolves a send: an ack resolves its record; a permanent error sends the record's
// dead letter (the record stays unresolved until that is acked); a transient error (after the
// producer's own retries) or a failed dead letter is fatal, and nothing is stored past it.
func (a *alo) outcome(now time.Time, id ID, err error) {
	f := id.f
	if f == nil || f.state == flightDone || f.state == flightStuck {
		a.c.fail(fmt.Errorf("delivery: outcome for a send that is not in flight (reported twice?)"))
		return
	}
	a.outstanding--
	defer a.release()
	switch {
	case err == nil:
		if f.state == flightRecord {
			a.c.rd.Events = append(a.c.rd.Events, Event{Kind: EventProduced, Topic: f.rec.Topic, Time: f.commitTime})
			a.c.cfg.Breaker.Record(false)
		}
		a.resolve(f)
	case f.state == flightDLQ:
		a.c.fail(fmt.Errorf("dead-letter topic %s cannot be written (%v): stopping without storing past position %s — fix the DLQ topic (kafka.dlq_topic) and restart",
			a.c.cfg.DLQTopic, err, f.where.bound()))
	default:
		permanent, reason := a.c.cfg.Classify(err)
		if !permanent && a.halted != nil {
			// Halting anyway: this record stays unresolved (the stored prefix stops before it
			// too) and the run ends with the halt's error.
			a.stickAt(f)
			a.halted.note(fmt.Sprintf("while stopping, a record for topic %s also failed (%v)", f.rec.Topic, err))
			a.maybeFinish()
			return
		}
		if !permanent {
			a.c.fail(fmt.Errorf("record for topic %s failed with a transient error after the producer's retries (%w); stopping without storing past position %s",
				f.rec.Topic, err, f.where.bound()))
			return
		}
		a.deadLetter(now, f, "produce", reason, err)
		if a.halted != nil {
			a.maybeFinish()
		}
	}
}

// resolve marks f resolved, frees its room, and moves the committed prefix on.
func (a *alo) resolve(f *flight) {
	f.state = flightDone
	a.live--
	a.bytes -= f.bytes
	if err := a.tracker.Done(f.seq); err != nil {
		a.c.fail(fmt.Errorf("delivery: %w", err))
		return
	}
	f.rec, f.row = sink.Record{}, nil // the chunk's allocation may live on; its payloads need not
	a.blocks.resolved(f)
	a.commitPrefix()
	a.maybeFinish()
}

// deadLetter sends f's dead letter in place of its record; f stays unresolved until that write
// is acked. The breaker (kafka.dlq_max_rate) counts it first.
func (a *alo) deadLetter(now time.Time, f *flight, stage, reason string, cause error) {
	if a.c.cfg.StopOnPermanent {
		a.halt(now, f, stage, reason, cause)
		return
	}
	if b := &a.c.cfg.Breaker; b.Record(true) {
		a.c.fail(fmt.Errorf("kafka.dlq_max_rate exceeded: %d of the last %d records were dead-lettered (latest: %s: %v); stopping before storing past position %s — "+
			"this looks like a misconfiguration (outbox.columns, outbox.topic, topic ACLs); fix it and restart, or raise kafka.dlq_max_rate",
			b.Count(), b.Window, reason, cause, f.where.bound()))
		return // not dead-lettered: no EventDeadLetter for it
	}
	id := a.c.eventID(f.row, &f.rec)
	a.c.rd.Events = append(a.c.rd.Events, Event{Kind: EventDeadLetter, Reason: reason, Stage: stage, Msg: cause.Error(),
		Topic: f.rec.Topic, Table: f.row.Table, Position: f.where.Position, After: f.where.After, RowID: id})
	f.rec = a.c.cfg.DeadLetter(f.rec, f.row, stage, reason, cause.Error(), f.where, now)
	f.state = flightDLQ
	a.send(f)
}

// bound is the position nothing is stored past while the row is unresolved: its transaction's
// end, or (a chunk with More) the end of the transaction before it.
func (w Where) bound() source.Position {
	if w.Position != "" {
		return w.Position
	}
	return w.After
}
