package delivery

// exactly_once: a committed batch, the DLQ breaker, and the core's messages and events.

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/outboxd/outboxd/internal/backoff"
)

// tripped feeds the batch's records, in order, to a trial copy of the DLQ breaker.
func (e *eosCore) tripped(b *batch) error {
	if e.cfg.Breaker.Window == 0 {
		return nil
	}
	trial := e.breaker.Clone()
	for ord := 0; ord < b.n; ord++ {
		f := b.finding(ord)
		if trial.Record(f != nil && f.dead) {
			return fmt.Errorf("kafka.dlq_max_rate exceeded: %d of the last %d records were dead-lettered (latest: %s: %v); stopping before committing position %s — "+
				"this looks like a misconfiguration (outbox.columns, outbox.topic, topic ACLs); fix it and restart, or raise kafka.dlq_max_rate",
				trial.Count(), trial.Window, f.reason, f.cause, b.end)
		}
	}
	e.breaker = trial
	return nil
}

// committedBatch: b's Kafka transaction is committed.
func (e *eosCore) committedBatch(now time.Time) {
	b := e.b
	c := e.core
	e.committed, e.lastCommit = b.end, now
	e.backoffCur = 0
	c.rd.Confirm = b.end
	e.confirmed = b.end
	if b.n > 0 && c.rd.CrashPoint == "" {
		c.rd.CrashPoint = "after_commit"
	}
	if b.spilled {
		for topic, n := range b.tally {
			c.rd.Events = append(c.rd.Events, Event{Kind: EventProduced, Topic: topic, Time: b.tallyTime, Count: n})
		}
	} else {
		for _, it := range b.kept {
			if f := b.finding(it.ord); f != nil && f.dead {
				continue
			}
			if n := len(c.rd.Events); n > 0 {
				if ev := &c.rd.Events[n-1]; ev.Kind == EventProduced && ev.Topic == it.rec.Topic && ev.Time.Equal(it.commitTime) {
					ev.Count++
					continue
				}
			}
			c.rd.Events = append(c.rd.Events, Event{Kind: EventProduced, Topic: it.rec.Topic, Time: it.commitTime, Count: 1})
		}
	}
	e.b = nil
	e.pump(now)
}

func (b *batch) count(it *item) {
	if f := b.finding(it.ord); f != nil && f.dead {
		return
	}
	if b.tally == nil {
		b.tally = map[string]int{}
	}
	b.tally[it.rec.Topic]++
	b.tallyTime = it.commitTime
}

// nextBatch starts the batch of a held chunk, or finishes a stop / source end.
func (e *eosCore) nextBatch(now time.Time) {
	if e.held != nil {
		ch := e.held
		e.held = nil
		e.add(e.heldT, ch)
		e.pump(now)
		return
	}
	if e.halted != nil && e.redo == nil { // (a redo: the transactions before it are still to be re-read)
		e.failHalt() // what preceded the bad record's transaction is committed
		return
	}
	if e.closing {
		e.core.rd.Done = true
	}
}

func (e *eosCore) fatal(err error) bool {
	if fatal, why := e.cfg.Fatal(err); fatal {
		e.core.fail(e.fatalErr(err, why))
		return true
	}
	return false
}

func (e *eosCore) fatalErr(err error, why string) error {
	if e.cfg.Fenced(err) {
		return fmt.Errorf("%w: another producer initialised transactional id %q (kafka.transactional_id) — another outboxd with the same "+
			"transactional id, or the broker aborted this instance's transaction after its timeout; stopping without committing the current batch. "+
			"Nothing is lost: the instance that took over, or this one restarted, resumes from the committed position %s",
			ErrFenced, e.cfg.TransactionalID, e.committed)
	}
	return fmt.Errorf("%s (transactional id %q): %w", why, e.cfg.TransactionalID, err)
}

func (e *eosCore) dlqUnwritable(err error) error {
	return fmt.Errorf("dead-letter topic %s cannot be written (%v): stopping without committing past position %s — fix the DLQ topic (kafka.dlq_topic) and restart",
		e.cfg.DLQTopic, err, e.committed)
}

func (e *eosCore) shutdownErr(what string) error {
	n, txs := 0, 0
	if e.b != nil {
		n, txs = e.b.n, e.b.txs
	}
	return fmt.Errorf("%w: %s; %d records of %d transactions not committed; committed position %s (they will be delivered on restart)",
		ErrShutdownTimeout, what, n, txs, e.committed)
}

func (e *eosCore) nextBackoff() time.Duration {
	e.backoffCur = backoff.Policy{Min: e.cfg.RetryMin, Max: e.cfg.RetryMax}.Next(e.backoffCur)
	return e.backoffCur
}

func (e *eosCore) backoff(now time.Time) {
	e.waitUntil = now.Add(e.nextBackoff())
	e.pump(now)
}

func (e *eosCore) log(_ time.Time, msg string, args ...any) {
	e.core.rd.Events = append(e.core.rd.Events, Event{Kind: EventLog, Level: slog.LevelWarn, Msg: msg, Args: args})
	if msg == "the batch was committed" || msg == "the batch was not committed: producing it again" {
		e.core.rd.Events[len(e.core.rd.Events)-1].Level = slog.LevelInfo
	}
}

func (e *eosCore) deadLetterEvent(it *item, f *finding) {
	id := e.core.eventID(it.row, &it.rec)
	e.core.rd.Events = append(e.core.rd.Events, Event{Kind: EventDeadLetter, Reason: f.reason, Stage: f.stage, Msg: f.cause.Error(),
		Topic: it.rec.Topic, Table: it.row.Table, Position: it.where.Position, After: it.where.After, RowID: id})
}
