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
	"time"

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
	bytes      int             // source.RowBytes: the in-flight charge
	snd        sent            // its send in the current attempt (one per attempt: the record or its dead letter)
	txStart    int             // the ordinal of its source transaction's first row in the batch
	txIdx      int             // its source transaction's index in the batch (whole ones before it)
	prev       source.Position // the end of the source transaction before its one (on_permanent_error: stop)
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
	rec   *sink.Record // dead letter or position record (nil: the data record it.rec)
}

type batch struct {
	start    source.Position // the committed position it follows
	end      source.Position // end of its last whole transaction
	txs      int             // whole transactions
	chunked  bool            // a chunked transaction's batch of its own
	n        int             // records (ordinals handed out)
	bytes    int             // record bytes (rec.Size)
	firstRec time.Time
	kept     []*item // retained: every item, for an in-memory redo; nil once spilled
	spilled  bool
	findings map[int]*finding
	posSusp  bool
	due      bool // forced: the next chunk waits for it, or a stop
	drop     bool // abort it: its transaction's last chunk never comes
	redoTxs  int  // spilled redo: due after this many transactions (0: not a redo)
	redoEnd  source.Position

	// the current attempt
	begun     bool
	begunAt   time.Time
	queue     []*item // to send: queue[qi:]
	qi        int
	posSnd    sent
	posRec    sink.Record
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
	if e.lastCommit.IsZero() {
		e.lastCommit = now // idle progress waits IdleInterval from the start, as from a commit
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
	if !e.inTx { // ch begins a source transaction
		e.txStart, e.txPrev = b.n, e.after
	}
	items := make([]item, len(ch.Rows))
	for i := range ch.Rows {
		it := &items[i]
		it.ord, it.row, it.commitTime, it.where = b.n, &ch.Rows[i], ch.CommitTime, where
		it.bytes = source.RowBytes(it.row)
		it.txStart, it.prev, it.txIdx = e.txStart, e.txPrev, b.txs
		b.n++
		rec, err := e.cfg.Route(it.row, it.commitTime)
		it.rec = rec
		if err != nil && e.cfg.StopOnPermanent {
			e.halt(now, it, "transform", eosReason(err), err)
		} else if err != nil {
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
// aborted, before the broker's transaction timeout would: TxnTimeout − max(TxnTimeout/10, 2s),
// the margin at most half the timeout (a timeout of a few seconds still leaves half of it).
func (e *eosCore) guard() time.Duration {
	t := e.cfg.TxnTimeout
	return t - min(max(t/10, 2*time.Second), t/2)
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
	if e.halted != nil && !now.Before(e.deadline) && (e.b != nil || e.needProd) {
		e.halted.note("the stop deadline passed before the transactions before it were committed")
		e.failHalt()
		return
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
		case e.halted != nil && e.haltCut != e.haltTx:
			e.then = abortHalt
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
	// Every send acked: the DLQ breaker sees the batch's records in order before the commit
	// (under on_permanent_error: stop nothing is dead-lettered: it has nothing to count).
	if err := e.tripped(b); err != nil && !e.cfg.StopOnPermanent {
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
	case e.halted != nil && e.haltCut != e.haltTx:
		e.afterHalt(now)
	case b.drop:
		e.b = nil
		e.pump(now)
	default:
		e.restart(now, !b.newFind)
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
