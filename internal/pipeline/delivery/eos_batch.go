package delivery

// exactly_once batches: records flow into the open Kafka transaction as chunks arrive; the
// batch is committed when due (see eos_front.go for the atomicity argument).
//
// Redo without unbounded memory: a batch keeps its items for an in-memory redo while its record
// bytes stay ≤ RetainBytes ("retained"). Past that it is "spilled": acked items are released and
// only findings are kept, by the record's ordinal in the batch (a failure-sized map); a redo is
// then Abort + Ready.Reopen: the session ends, the source is re-read from the committed position,
// and the same rows get the same ordinals (the log is immutable and the batch restarts at the
// same place), so the findings apply again. Transform dead letters need no memory: the
// transform is deterministic.

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/outboxd/outboxd/offsets"
	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
)

// item is one row of the batch.
type item struct {
	ord        int
	row        *source.Row
	rec        sink.Record
	commitTime time.Time
	where      Where
	bytes      int  // source.RowBytes: the in-flight charge
	snd        sent // its send in the current attempt (one per attempt: the record or its dead letter)
}

// finding is what an attempt learnt about one record; it survives redos.
type finding struct {
	dead       bool // dead-lettered (stage, reason, cause)
	stage      string
	reason     string
	cause      error
	suspect    bool // failed together with others: send alone next time
	dlqSuspect bool // its dead letter failed together with others
	logged     bool
}

// sent is one outstanding send.
type sent struct {
	it    *item // nil: the position record
	dlq   bool
	alone bool
	rec   sink.Record // dead letter or position record (data records use it.rec)
}

type batch struct {
	start    offsets.Position // the committed position it follows
	end      offsets.Position // end of its last whole transaction
	txs      int              // whole transactions
	chunked  bool             // a chunked transaction's batch of its own
	n        int              // records (ordinals handed out)
	bytes    int              // record bytes (rec.Size)
	firstRec time.Time
	kept     []*item // retained: every item, for an in-memory redo; nil once spilled
	spilled  bool
	findings map[int]*finding
	posSusp  bool
	due      bool // forced: the next chunk waits for it, or a stop
	drop     bool // abort it: its transaction's last chunk never comes
	redoTxs  int  // spilled redo: due after this many transactions (0: not a redo)
	redoEnd  offsets.Position

	// the current attempt
	begun     bool
	begunAt   time.Time
	queue     []*item // to send: queue[qi:]
	qi        int
	posSnd    sent
	posSent   bool
	failed    bool
	newFind   bool
	fatalErr  error
	pendRecs  int // items not yet acked in this attempt (queued or outstanding)
	pendBytes int
	midFired  bool
	tally     map[string]int // spilled: committed-record counts by topic (metrics)
	tallyTime time.Time
}

func (b *batch) fits(cfg *Config, ch *source.Tx) bool {
	if b.redoTxs > 0 {
		return b.txs < b.redoTxs
	}
	if b.n == 0 && b.txs == 0 {
		return true
	}
	if b.chunked || ch.More {
		return false // a chunked transaction gets a batch of its own
	}
	if len(ch.Rows) == 0 {
		return true
	}
	return b.n == 0 || b.n+len(ch.Rows) <= cfg.BatchRecords && b.bytes+source.ChunkBytes(ch) <= cfg.BatchBytes
}

func (b *batch) queued() int { return len(b.queue) - b.qi }

func (b *batch) pop() {
	b.queue[b.qi] = nil
	if b.qi++; b.qi == len(b.queue) {
		b.queue, b.qi = b.queue[:0], 0
	}
}

func (b *batch) finding(ord int) *finding {
	if b.findings == nil {
		return nil
	}
	return b.findings[ord]
}

func (b *batch) find(ord int) *finding {
	if b.findings == nil {
		b.findings = map[int]*finding{}
	}
	f := b.findings[ord]
	if f == nil {
		f = &finding{}
		b.findings[ord] = f
	}
	return f
}

func (e *eosCore) newBatch() *batch {
	b := &batch{start: e.committed}
	if r := e.redo; r != nil {
		e.redo = nil
		b.redoTxs, b.redoEnd, b.findings, b.posSusp = r.txs, r.end, r.findings, r.posSusp
		b.spilled = true
	}
	return b
}

// add puts ch into the current batch (a new one if none) and queues its records.
func (e *eosCore) add(now time.Time, ch *source.Tx) {
	if e.b == nil {
		e.b = e.newBatch()
	}
	b := e.b
	if !e.inTx && ch.More {
		b.chunked = true
	}
	where := Where{Position: ch.Position}
	if ch.More || e.inTx {
		where = Where{After: e.after}
		if !ch.More {
			where.Position = ch.Position
		}
	}
	if len(ch.Rows) > 0 && b.firstRec.IsZero() {
		b.firstRec = now
	}
	items := make([]item, len(ch.Rows))
	for i := range ch.Rows {
		it := &items[i]
		it.ord, it.row, it.commitTime, it.where = b.n, &ch.Rows[i], ch.CommitTime, where
		it.bytes = source.RowBytes(it.row)
		b.n++
		rec, err := e.cfg.Route(it.row)
		it.rec = rec
		if err != nil {
			if f := b.find(it.ord); !f.dead {
				f.dead, f.stage, f.reason, f.cause = true, "transform", eosReason(err), err
			}
		}
		b.bytes += rec.Size()
		b.pendRecs++
		b.pendBytes += it.bytes
		b.queue = append(b.queue, it)
		if !b.spilled {
			b.kept = append(b.kept, it)
		}
	}
	if !b.spilled && b.bytes > e.cfg.RetainBytes {
		b.spilled, b.kept = true, nil // acked items are released from here on
	}
	e.inTx = ch.More
	if !ch.More {
		b.txs++
		b.end = ch.Position
		e.after = ch.Position
		if b.redoTxs > 0 && b.txs == b.redoTxs {
			if b.redoEnd != "" && b.end != b.redoEnd {
				e.core.fail(fmt.Errorf("redo of a spilled batch: the source transactions re-read after position %s end at %s, not at %s as before: "+
					"the source log changed under the same positions; restart outboxd", b.start, b.end, b.redoEnd))
			}
			b.due = true
		}
	}
}

// eosReason is the dead-letter reason of a transform error (as pipeline's reasonOf).
func eosReason(err error) string {
	var re interface{ ReasonCode() string }
	if errors.As(err, &re) {
		return re.ReasonCode()
	}
	return "invalid_value"
}

// dueAt is when b is due (zero: not yet known).
func (e *eosCore) dueAt(b *batch) time.Time {
	switch {
	case e.inTx || b.txs == 0:
		return time.Time{}
	case b.due || b.drop || b.chunked || b.n >= e.cfg.BatchRecords || b.bytes >= e.cfg.BatchBytes:
		return time.Unix(0, 1) // now
	case b.redoTxs > 0:
		return time.Time{} // due at its last transaction
	case !b.firstRec.IsZero():
		return b.firstRec.Add(e.cfg.Linger)
	default:
		return e.lastCommit.Add(e.cfg.IdleInterval)
	}
}

func (e *eosCore) isDue(now time.Time, b *batch) bool {
	t := e.dueAt(b)
	return !t.IsZero() && !now.Before(t)
}

// guard is the age at which a Kafka transaction whose source transaction has not ended is
// aborted: before the broker's transaction timeout would.
func (e *eosCore) guard() time.Duration {
	t := e.cfg.TxnTimeout
	return t - max(t/10, 2*time.Second)
}

// pump asks for the next step, if the core waits for none.
func (e *eosCore) pump(now time.Time) {
	c := e.core
	if c.err != nil || e.phase != phIdle {
		return
	}
	if !e.waitUntil.IsZero() {
		if now.Before(e.waitUntil) {
			return
		}
		e.waitUntil = time.Time{}
	}
	if e.closing && !now.Before(e.deadline) && (e.b != nil || e.needProd) {
		c.fail(e.shutdownErr("the stop deadline passed"))
		return
	}
	if e.pendingLoad == phLoadTaken {
		e.pendingLoad, e.phase, c.rd.ReadBack = 0, phLoadTaken, true
		return
	}
	if e.needProd {
		e.phase, c.rd.NewProducer = phProducer, true
		return
	}
	if e.pendingLoad == phLoadAfter {
		e.pendingLoad, e.phase, c.rd.ReadBack = 0, phLoadAfter, true
		return
	}
	b := e.b
	if b == nil {
		e.nextBatch(now)
		return
	}
	if b.begun && e.inTx && !b.failed && !b.drop && now.Sub(b.begunAt) >= e.guard() {
		e.pendingErr = fmt.Errorf("a source transaction after position %s is still arriving after %v (%d records so far): exactly_once delivers it in one Kafka "+
			"transaction, which the broker aborts after kafka.transaction_timeout (%v); aborted it: raise kafka.transaction_timeout (≤ the brokers' "+
			"transaction.max.timeout.ms, default 15m) or use kafka.delivery: at_least_once", b.start, now.Sub(b.begunAt).Round(time.Millisecond), b.n, e.cfg.TxnTimeout)
		b.fatalErr, b.failed = e.pendingErr, true
	}
	if b.failed || b.drop {
		if len(e.sends) > 0 {
			e.phase, c.rd.Flush = phFlush, true
			return
		}
		if !b.begun {
			e.afterFailure(now)
			return
		}
		e.phase, c.rd.Abort = phAbort, true
		switch {
		case b.fatalErr != nil:
			e.then, e.pendingErr = abortFail, b.fatalErr
		case b.drop:
			e.then = abortDrop
		case b.newFind:
			e.then = abortRedo
		default:
			e.then = abortTransient
		}
		return
	}
	due := e.isDue(now, b)
	if b.queued() > 0 || due && !b.posSent {
		if !b.begun {
			b.begun, b.begunAt = true, now
			c.rd.Begin, e.phase = true, phBegin // the sends below go in the same Ready
		}
		if !e.sendQueued(now, due) {
			return
		}
	}
	if e.phase != phIdle || !due || !b.posSent {
		return
	}
	if len(e.sends) > 0 {
		e.phase, c.rd.Flush = phFlush, true
		return
	}
	// Every send acked: the DLQ breaker sees the batch's records in order before the commit.
	if err := e.tripped(b); err != nil {
		b.fatalErr, b.failed = err, true
		e.pump(now)
		return
	}
	if b.n > 0 {
		c.rd.CrashPoint = "before_commit"
	}
	e.phase, c.rd.Commit = phCommit, true
}

// afterFailure settles a failed attempt that never began a Kafka transaction.
func (e *eosCore) afterFailure(now time.Time) {
	b := e.b
	switch {
	case b.fatalErr != nil:
		e.core.fail(b.fatalErr)
	case b.drop:
		e.b = nil
		e.pump(now)
	default:
		e.restart(now, !b.newFind)
	}
}

// sendQueued hands queued records (and, when due, the position record) to the Ready. A record
// to be sent alone waits until nothing is outstanding and is followed by a Flush. It returns
// false when it asked for a Flush (or the batch failed).
func (e *eosCore) sendQueued(now time.Time, due bool) bool {
	c, b := e.core, e.b
	if e.aloneOut > 0 { // a record sent alone: nothing else until its outcome
		if e.phase == phIdle {
			e.phase, c.rd.Flush = phFlush, true
		}
		return false
	}
	for b.queued() > 0 {
		it := b.queue[b.qi]
		f := b.finding(it.ord)
		alone := f != nil && (f.dead && f.dlqSuspect || !f.dead && f.suspect)
		if alone && (len(e.sends) > 0 || len(c.rd.Sends) > 0) {
			if e.phase == phIdle {
				e.phase, c.rd.Flush = phFlush, true
			}
			return false
		}
		b.pop()
		s := &it.snd
		*s = sent{it: it, alone: alone}
		if f != nil && f.dead {
			s.dlq = true
			s.rec = e.cfg.DeadLetter(it.rec, it.row, f.stage, f.reason, f.cause.Error(), it.where, now)
			if !f.logged {
				f.logged = true
				e.deadLetterEvent(it, f)
			}
		}
		e.emit(s)
		if alone {
			if e.phase == phIdle {
				e.phase, c.rd.Flush = phFlush, true
			}
			return false
		}
	}
	if due && !b.posSent && !e.inTx {
		if b.posSusp && (len(e.sends) > 0 || len(c.rd.Sends) > 0) {
			if e.phase == phIdle {
				e.phase, c.rd.Flush = phFlush, true
			}
			return false
		}
		b.posSent = true
		b.posSnd = sent{alone: b.posSusp, rec: e.cfg.PositionRecord(b.end)}
		e.emit(&b.posSnd)
		if b.posSusp {
			if e.phase == phIdle {
				e.phase, c.rd.Flush = phFlush, true
			}
			return false
		}
	}
	return true
}

func (e *eosCore) emit(s *sent) {
	e.seq++
	id := uint64(e.attempt)<<32 | uint64(e.seq)
	e.sends[id] = s
	if s.alone {
		e.aloneOut++
	}
	rec := &s.rec
	if s.it != nil && !s.dlq {
		rec = &s.it.rec
	}
	e.core.rd.Sends = append(e.core.rd.Sends, Send{ID: ID{n: id}, Rec: rec, Alone: s.alone})
}

// resolve applies one send's outcome.
func (e *eosCore) resolve(now time.Time, s *sent, err error) {
	b := e.b
	if s.alone {
		e.aloneOut--
	}
	if err == nil {
		if s.it != nil {
			b.pendRecs--
			b.pendBytes -= s.it.bytes
			if b.spilled && !s.dlq {
				b.count(s.it)
			}
			if e.core.rd.CrashPoint == "" && !b.midFired && !e.isDue(now, b) {
				b.midFired = true
				e.core.rd.CrashPoint = "mid_batch"
			}
		}
		return
	}
	b.failed = true
	if b.fatalErr != nil {
		return
	}
	if fatal, why := e.cfg.Fatal(err); fatal {
		b.fatalErr = e.fatalErr(err, why)
		return
	}
	perm, reason := e.cfg.Classify(err)
	if !perm {
		return
	}
	switch {
	case s.it == nil:
		if s.alone {
			b.fatalErr = fmt.Errorf("the position record for offsets.topic %s cannot be written: %w", s.rec.Topic, err)
		} else if !b.posSusp {
			b.posSusp, b.newFind = true, true
		}
	case s.dlq:
		f := b.find(s.it.ord)
		if s.alone {
			b.fatalErr = e.dlqUnwritable(err)
		} else if !f.dlqSuspect {
			f.dlqSuspect, b.newFind = true, true
		}
	case s.alone:
		f := b.find(s.it.ord)
		f.dead, f.stage, f.reason, f.cause, f.suspect = true, "produce", reason, err, false
		b.newFind = true
	default:
		if f := b.find(s.it.ord); !f.suspect {
			f.suspect, b.newFind = true, true
		}
	}
}

// refusal handles Produce refusing s synchronously (s is back at the head of the queue).
func (e *eosCore) refusal(s *sent, err error) {
	b := e.b
	perm, reason := e.cfg.Classify(err)
	switch {
	case !perm:
		e.log(time.Time{}, "cannot queue a record in the Kafka transaction", "topic", s.rec.Topic, "err", err)
		b.failed = true // abort, back off, produce the batch again
	case s.it == nil:
		b.failed, b.fatalErr = true, fmt.Errorf("the position record for offsets.topic %s cannot be written: %w", s.rec.Topic, err)
	case s.dlq:
		b.failed, b.fatalErr = true, e.dlqUnwritable(err)
	default:
		f := b.find(s.it.ord)
		f.dead, f.stage, f.reason, f.cause, f.suspect = true, "produce", reason, err, false
	}
}

// restart begins a new attempt of the batch: from memory if retained, else by re-reading it.
func (e *eosCore) restart(now time.Time, transient bool) {
	b := e.b
	e.attempt++
	e.seq, e.aloneOut = 0, 0
	clear(e.sends)
	if transient {
		e.waitUntil = now.Add(e.nextBackoff())
	}
	if b.spilled {
		txs := b.txs
		if e.inTx {
			txs++
		}
		end := b.end
		if e.inTx {
			end = ""
		}
		e.redo = &redoInfo{txs: txs, end: end, findings: b.findings, posSusp: b.posSusp}
		e.b = nil
		if e.redo.txs == 0 {
			e.redo = nil
		}
		if e.closing {
			e.redo = nil // the next run re-reads it anyway
			e.pump(now)
			return
		}
		susp := 0
		for _, f := range b.findings {
			if f.suspect || f.dlqSuspect {
				susp++
			}
		}
		e.log(now, "Kafka refused records of a transaction too large to keep in memory: aborted; re-reading it from the committed position",
			"records", b.n, "suspects", susp, "position", string(e.committed))
		e.phase, e.core.rd.Reopen = phReopen, true
		return
	}
	if b.newFind {
		susp := 0
		for _, f := range b.findings {
			if f.suspect || f.dlqSuspect {
				susp++
			}
		}
		e.log(now, "Kafka refused records of the transaction: aborted; producing it again, the records that failed together one at a time",
			"records", b.n, "suspects", susp, "batch_end", string(b.end))
	}
	b.begun, b.posSent, b.failed, b.newFind = false, false, false, false
	b.queue, b.qi = append(b.queue[:0], b.kept...), 0
	b.pendRecs, b.pendBytes = 0, 0
	for _, it := range b.kept {
		b.pendRecs++
		b.pendBytes += it.bytes
	}
	e.pump(now)
}

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
	if e.backoffCur == 0 {
		e.backoffCur = e.cfg.RetryMin
	} else if e.backoffCur *= 2; e.backoffCur > e.cfg.RetryMax {
		e.backoffCur = e.cfg.RetryMax
	}
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
	id := ""
	if v, ok := it.row.Get("id"); ok {
		id = string(v.Bytes)
	}
	e.core.rd.Events = append(e.core.rd.Events, Event{Kind: EventDeadLetter, Reason: f.reason, Stage: f.stage, Msg: f.cause.Error(),
		Topic: it.rec.Topic, Table: it.row.Table, Position: it.where.Position, After: it.where.After, RowID: id})
}
