package delivery

// kafka.on_permanent_error: stop (Config.StopOnPermanent). The first record that can never be
// delivered — the transform refuses its row, or Kafka refuses it for good (Classify: permanent)
// — is not dead-lettered: the core halts. What is in flight is still resolved (until
// StopTimeout), the contiguous resolved prefix is stored (it ends before the bad record's
// transaction: that record never resolves), and then Ready.Err is a *PermanentError naming the
// record and the fix. Nothing not yet handed to the loop is produced after the halt (the rest
// of the chunk, the sends waiting for room, later chunks); records already handed to the
// producer may still be delivered (they are re-delivered after the restart: at-least-once).

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
)

// PermanentError is the error of a run stopped by kafka.on_permanent_error: stop. It names the
// first record (in source order) that could not be delivered; Unwrap is the transform's or
// Kafka's error.
type PermanentError struct {
	Stage  string // "transform" (the row was refused) or "produce" (Kafka refused the record)
	Reason string // the dead-letter reason it would have had (missing_column, record_too_large, ...)
	Topic  string // the record's topic ("" if the transform failed before routing it)
	Table  string // the row's source table (or pg_logical_emit_message:<prefix>)
	RowID  string // the row's id column (the event id), if any
	// Where locates the row: its transaction's end, or (a transaction still arriving in chunks)
	// the end of the transaction before it.
	Where Where
	// Stored is the position stored when the run stopped: delivery resumes there, at or before
	// the bad record's transaction.
	Stored source.Position
	// Note says what else went wrong while stopping ("" nothing).
	Note  string
	Cause error
}

func (e *PermanentError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "kafka.on_permanent_error: stop: a record cannot be delivered (%s stage, reason %s): table %s", e.Stage, e.Reason, e.Table)
	if e.RowID != "" {
		fmt.Fprintf(&b, ", event id %s", e.RowID)
	}
	if e.Where.Position != "" {
		fmt.Fprintf(&b, ", source position %s", e.Where.Position)
	} else {
		fmt.Fprintf(&b, ", in the source transaction after position %s", e.Where.After)
	}
	if e.Topic != "" {
		fmt.Fprintf(&b, ", topic %s", e.Topic)
	}
	fmt.Fprintf(&b, ": %v. It was not dead-lettered; stored position %s (a restart resumes at or before its transaction; "+
		"records of later transactions already handed to Kafka may have been delivered and are delivered again then)", e.Cause, orStart(e.Stored))
	if e.Note != "" {
		fmt.Fprintf(&b, "; %s", e.Note)
	}
	b.WriteString(". To get past it: fix the cause (the row's producer, outbox.columns, outbox.topic, kafka.max_record_bytes, the topic) and restart; " +
		"or set kafka.on_permanent_error: dlq to dead-letter it and go on; or skip its transaction with ")
	if e.Where.Position != "" {
		fmt.Fprintf(&b, "`outboxd offsets set -c FILE --position %s`", e.Where.Position)
	} else {
		b.WriteString("`outboxd offsets set -c FILE --position <its end>` (its end is not known yet: the transaction was still arriving; find its commit in the source)")
	}
	return b.String()
}

func (e *PermanentError) Unwrap() error { return e.Cause }

func (e *PermanentError) note(s string) {
	if e.Note != "" {
		e.Note += "; "
	}
	e.Note += s
}

func orStart(p source.Position) string {
	if p == "" {
		return `"" (none: the source's start)`
	}
	return string(p)
}

func newPermanentError(id string, row *source.Row, topic string, where Where, stage, reason string, cause error) *PermanentError {
	return &PermanentError{Stage: stage, Reason: reason, Topic: topic, Table: row.Table, RowID: id, Where: where, Cause: cause}
}

func (e *PermanentError) event() Event {
	return Event{Kind: EventLog, Level: slog.LevelError, Msg: "record cannot be delivered: stopping (kafka.on_permanent_error: stop), not dead-lettering it",
		Args: []any{"reason", e.Reason, "stage", e.Stage, "error", e.Cause.Error(), "topic", e.Topic, "table", e.Table,
			"position", string(e.Where.Position), "after", string(e.Where.After), "id", e.RowID}}
}

// halt (ALO) stops on f, a record that can never be delivered: f never resolves (so the
// resolved prefix, and every save, ends before its transaction), nothing not yet handed to the
// loop is sent, no chunk is accepted, and the drain resolves what is in flight. The earliest
// such record in source order is the one reported.
func (a *alo) halt(now time.Time, f *flight, stage, reason string, cause error) {
	a.stickAt(f)
	if a.halted != nil && f.ord > a.haltOrd {
		return
	}
	first := a.halted == nil
	a.halted, a.haltOrd = newPermanentError(a.c.eventID(f.row, &f.rec), f.row, f.rec.Topic, f.where, stage, reason, cause), f.ord
	a.c.rd.Events = append(a.c.rd.Events, a.halted.event())
	if !first {
		return
	}
	for i := a.bhead; i < len(a.backlog); i++ { // withheld: handed to nobody
		a.stickAt(a.backlog[i].ID.f)
		a.backlog[i] = Send{}
	}
	a.backlog, a.bhead = a.backlog[:0], 0
	deadline := now.Add(a.c.cfg.StopTimeout)
	switch a.phase {
	case phaseRunning:
		a.phase, a.deadline = phaseDraining, deadline
	case phaseDraining:
		if deadline.Before(a.deadline) {
			a.deadline = deadline
		}
	}
}

// stickAt marks f as never resolving (halted, or withheld after a halt).
func (a *alo) stickAt(f *flight) {
	if f.state != flightStuck {
		f.state = flightStuck
		a.stuck++
	}
}

// finishHalt: the final save after a halt is done: fail with the PermanentError.
func (a *alo) finishHalt() {
	e := a.halted
	e.Stored = a.stored
	if a.timedOut != "" {
		e.note("the drain timed out (" + a.timedOut + ")")
	}
	a.c.fail(e)
}

// eventID is the event id of a record that cannot be delivered, for logs and errors: its "id"
// header when the transform built one (also a tableless-outbox message's), else the row's
// IDColumn (outbox.columns.id), else "".
func (c *Core) eventID(row *source.Row, rec *sink.Record) string {
	for _, h := range rec.Headers {
		if h.Key == "id" {
			return string(h.Value)
		}
	}
	col := c.cfg.IDColumn
	if col == "" {
		col = "id"
	}
	if row != nil {
		if v, ok := row.Get(col); ok && !v.Null {
			return string(v.Bytes)
		}
	}
	return ""
}
