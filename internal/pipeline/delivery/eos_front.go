package delivery

// The exactly_once half of the core. core.go dispatches every input to these methods when
// Config.Mode is ExactlyOnce; they write c.core.rd (the Ready being built) and call
// c.core.fail(err) for a fatal error.
//
// Atomicity (why read_committed never sees a partial source transaction, nor one twice):
//
//  1. A batch is whole source transactions: small ones grouped (≤ BatchRecords, ≤ BatchBytes,
//     ≤ Linger), a chunked one (its first chunk has More) alone. It is due only after a last
//     chunk, so its end — the position record written last in its Kafka transaction — is always
//     a transaction end. All of a batch's records and that position record are in ONE Kafka
//     transaction: the coordinator writes the commit markers to every partition only after it
//     logged PrepareCommit, and completes them across a coordinator failover, so read_committed
//     consumers see the whole batch together with its position, or nothing of it.
//  2. Nothing is committed that failed: a record error makes the attempt abort (never commit);
//     Commit is asked only when every send of the attempt was acked (Check enforces it).
//  3. A crash, a stop or a broken producer before EndTxn leaves the Kafka transaction open; the
//     next InitProducerID with the same transactional id (or the broker's transaction timeout)
//     aborts it: nothing visible. The source is confirmed only after a commit, so a restart
//     reads the committed position and the source re-reads the transaction whole.
//  4. After a commit (even one whose reply was lost, settled by reading the position back),
//     the committed position is the batch's end and the source skips every transaction ending
//     at or before it: nothing is visible twice.
//
// A Kafka transaction must end within the producer's transaction timeout, so a source
// transaction that would outlive it (its Kafka transaction is older than TxnTimeout −
// min(max(TxnTimeout/10, 2s), TxnTimeout/2) while its last chunk has not come) is aborted and
// the run fails loudly with the fix (guard in eos_batch.go).

import (
	"errors"
	"fmt"
	"time"

	"github.com/outboxd/outboxd/source"
)

// ErrFenced marks the error of a run whose transactional id another producer took over.
var ErrFenced = errors.New("producer fenced")

// eosPhase is the producer step the core waits for (its result comes after Advance).
type eosPhase uint8

const (
	phIdle eosPhase = iota
	phProducer
	phBegin
	phFlush
	phCommit
	phAbort
	phLoadTaken // ambiguous commit: read back before initialising the id again
	phLoadAfter // ambiguous commit: read back after initialising it
	phReopen    // Ready.Reopen handed out: waiting for Open
)

// afterAbort is what happens once the asked Abort is done.
type afterAbort uint8

const (
	abortRedo      afterAbort = iota // new findings: produce the batch again at once
	abortTransient                   // back off, then produce again
	abortFail                        // fail with e.pendingErr
	abortDrop                        // stop/source end inside an open transaction: drop the batch
	abortHalt                        // on_permanent_error: stop: commit what precedes the bad record's transaction, then fail (eos_stop.go)
)

// eosCore is the exactly_once state: the batch of source transactions in its Kafka
// transaction, the producer steps, and the committed position.
type eosCore struct {
	core      *Core
	cfg       *Config
	committed source.Position
	confirmed source.Position

	b     *batch
	held  *source.Tx // a chunk that starts the next batch (the current one is due)
	heldT time.Time
	inTx  bool // the last accepted chunk had More: the next one continues its transaction
	after source.Position

	phase       eosPhase
	then        afterAbort
	pendingErr  error
	needProd    bool
	pendingLoad eosPhase // a ReadBack to ask (again) once waitUntil passed
	attempt     uint32
	seq         uint32
	sends       map[uint64]*sent // outstanding sends of this attempt
	aloneOut    int              // outstanding sends that go alone
	waitUntil   time.Time        // backoff: the next attempt not before
	backoffCur  time.Duration
	breaker     Breaker // committed state (trial clones of it per attempt)

	closing    bool // Stop or SourceEnded: no more chunks
	stopping   bool // Stop (not a source end)
	deadline   time.Time
	lastCommit time.Time
	started    bool

	// redo of a spilled batch, carried across the reopen
	redo *redoInfo

	// on_permanent_error: stop (eos_stop.go)
	txStart     int             // the open source transaction's first ordinal in the batch
	txPrev      source.Position // the end of the transaction before it
	halted      *PermanentError // the earliest record halted on in this batch (nil: none)
	haltOrd     int
	haltTx      int             // its transaction's first ordinal: what precedes it is committed
	haltTxs     int             // the whole transactions of the batch before its one
	haltPrev    source.Position // the end of the transaction before its one
	haltStopped bool            // a Stop or SourceEnded came during the halt
	haltCut     int             // the haltTx the batch was cut at (-1: not cut): a later failure of the cut batch is retried as usual
}

type redoInfo struct {
	txs      int
	end      source.Position // "" when the batch failed before its last chunk
	findings map[int]*finding
	posSusp  bool
	logged   map[int]bool
}

func newEOS(c *Core, stored source.Position) *eosCore {
	return &eosCore{core: c, cfg: &c.cfg, committed: stored, confirmed: stored, sends: map[uint64]*sent{}, haltCut: -1,
		breaker: c.cfg.Breaker.Clone()}
}

func (e *eosCore) open() {
	if e.phase == phReopen {
		e.phase = phIdle
	}
	e.closing, e.stopping, e.held, e.inTx = false, false, nil, false
	e.after = e.committed
	if e.b != nil && e.redo == nil {
		e.core.fail(fmt.Errorf("delivery: Open with batch ending %s not finished", e.b.end))
	}
}

func (e *eosCore) canAccept(rows, bytes int) bool {
	if e.closing || e.held != nil || e.phase != phIdle {
		return false
	}
	b := e.b
	if b == nil {
		return true
	}
	if b.posSent || b.failed || b.drop {
		return false
	}
	return b.pendRecs == 0 || (b.pendRecs+rows <= e.cfg.MaxInflight && b.pendBytes+bytes <= e.cfg.MaxInflightBytes)
}

func (e *eosCore) accept(now time.Time, ch *source.Tx) error {
	if !e.canAccept(len(ch.Rows), source.ChunkBytes(ch)) {
		return fmt.Errorf("delivery: Accept of a chunk (%d rows) the core cannot accept now", len(ch.Rows))
	}
	if ch.More && len(ch.Rows) == 0 {
		return errors.New("delivery: a chunk with More and no rows")
	}
	if ch.More && ch.Position != "" {
		return fmt.Errorf("delivery: a chunk with More carries position %s", ch.Position)
	}
	e.started = true
	if e.b != nil && !e.inTx && !e.b.fits(e.cfg, ch) {
		cp := *ch
		e.held, e.heldT = &cp, now // the current batch is due; ch starts the next one
		e.b.due = true
		e.pump(now)
		return nil
	}
	e.add(now, ch)
	e.pump(now)
	return nil
}

func (e *eosCore) outcome(now time.Time, id ID, err error) {
	s, ok := e.sends[id.n]
	if !ok {
		return // a send of an earlier attempt (a dropped producer reports late)
	}
	delete(e.sends, id.n)
	e.resolve(now, s, err)
	e.pump(now)
}

// refused: Produce refused the send synchronously; the sends after it in the same Ready were
// not produced: they go back to the front of the queue.
func (e *eosCore) refused(now time.Time, id ID, err error) {
	s, ok := e.sends[id.n]
	if !ok || e.b == nil {
		return
	}
	b := e.b
	var back []*item
	found := false
	for _, x := range e.core.rd.Sends {
		if x.ID.n == id.n {
			found = true
			continue
		}
		if found {
			if t := e.sends[x.ID.n]; t != nil {
				delete(e.sends, x.ID.n)
				if t.alone {
					e.aloneOut--
				}
				if t.it != nil {
					back = append(back, t.it)
				} else {
					b.posSent = false
				}
			}
		}
	}
	delete(e.sends, id.n)
	if s.alone {
		e.aloneOut--
	}
	if s.it != nil {
		back = append([]*item{s.it}, back...)
	} else {
		b.posSent = false
	}
	b.queue, b.qi = append(back, b.queue[b.qi:]...), 0
	e.refusal(now, s, err)
}

func (e *eosCore) producerReady(now time.Time, err error) {
	e.phase = phIdle
	if err != nil {
		if e.fatal(err) {
			return
		}
		e.log(now, "cannot initialise the transactional producer, retrying", "err", err)
		e.backoff(now)
		return
	}
	e.needProd = false
	e.pump(now)
}

func (e *eosCore) began(now time.Time, err error) {
	e.phase = phIdle
	if err != nil {
		if e.fatal(err) {
			return
		}
		e.log(now, "transactional producer failed: replacing it", "call", "begin", "err", err)
		e.needProd = true
		e.b.begun = false
		e.restart(now, true)
		return
	}
	e.pump(now)
}

func (e *eosCore) flushed(now time.Time, err error) {
	e.phase = phIdle
	if err != nil {
		e.core.fail(e.shutdownErr("the stop deadline passed while waiting for Kafka's acks"))
		return
	}
	if len(e.sends) > 0 {
		e.core.fail(fmt.Errorf("delivery: Flushed with %d sends without an outcome", len(e.sends)))
		return
	}
	e.pump(now)
}

func (e *eosCore) aborted(now time.Time, err error) {
	e.phase = phIdle
	if err != nil {
		if e.fatal(err) {
			return
		}
		e.log(now, "abort of the Kafka transaction failed: replacing the producer", "err", err)
		e.needProd = true // a new producer aborts the transaction when it initialises
	}
	b := e.b
	switch e.then {
	case abortFail:
		e.core.fail(e.pendingErr)
	case abortDrop:
		e.b = nil
		e.pump(now)
	case abortHalt:
		e.afterHalt(now)
	case abortRedo:
		e.restart(now, false)
	case abortTransient:
		e.log(now, "Kafka transaction failed: producing the batch again", "records", b.n, "batch_end", string(b.end))
		e.restart(now, true)
	}
}

func (e *eosCore) commitResult(now time.Time, err error) {
	e.phase = phIdle
	if err == nil {
		e.committedBatch(now)
		return
	}
	if e.fatal(err) {
		return
	}
	e.log(now, "the Kafka commit failed and its outcome is unknown: re-initialising the transactional id and reading the committed position back",
		"err", err, "batch_end", string(e.b.end))
	e.needProd = true
	e.pendingLoad = phLoadTaken // before the new producer: see loaded
	e.pump(now)
}

func (e *eosCore) loaded(now time.Time, p source.Position, err error) {
	ph := e.phase
	e.phase = phIdle
	if err != nil {
		e.log(now, "cannot read the committed position, retrying", "err", err)
		e.waitUntil = now.Add(e.nextBackoff())
		e.pendingLoad = ph
		e.pump(now)
		return
	}
	b := e.b
	if ph == phLoadTaken {
		if p != e.committed && p != b.end {
			e.core.fail(fmt.Errorf("%w: this instance's commit failed with an unknown outcome, and the committed position is now %s, neither its last commit %s "+
				"nor its batch end %s: another outboxd with transactional id %q (kafka.transactional_id) took over, or `outboxd offsets set` changed it; "+
				"stopping without initialising the id again (that would fence the instance that took over). Nothing is lost: the committed position is where delivery resumes",
				ErrFenced, p, e.committed, b.end, e.cfg.TransactionalID))
			return
		}
		e.pendingLoad = phLoadAfter // after the new producer
		e.pump(now)
		return
	}
	switch p {
	case b.end:
		e.log(now, "the batch was committed", "position", string(p))
		e.committedBatch(now)
	case e.committed:
		e.log(now, "the batch was not committed: producing it again", "position", string(p))
		e.restart(now, false)
	default:
		e.core.fail(fmt.Errorf("offsets.topic holds position %s, neither this instance's last commit %s nor its batch end %s: "+
			"another writer changed the position (`outboxd offsets set`, or a second instance with another transactional id?); restart outboxd",
			p, e.committed, b.end))
	}
}

func (e *eosCore) tick(now time.Time) { e.pump(now) }

func (e *eosCore) stop(now, deadline time.Time) {
	e.end(now, deadline)
	e.stopping = true
	e.pump(now)
}

func (e *eosCore) sourceEnded(now, deadline time.Time) {
	e.end(now, deadline)
	e.pump(now)
}

func (e *eosCore) end(now, deadline time.Time) {
	if e.halted != nil && !e.haltStopped {
		e.haltStopped = true
		e.halted.note("a stop or a source failure came while stopping: the source transactions between the stored position and it may not all be committed " +
			"(they are delivered after the restart; `outboxd offsets set` past it would skip them too)")
	}
	if !e.closing || deadline.Before(e.deadline) {
		e.deadline = deadline
	}
	e.closing = true
	e.held = nil // re-read after the reopen or restart
	if b := e.b; b != nil {
		if e.inTx {
			b.drop = true // its last chunk never comes: abort it
		} else {
			b.due = true
		}
	}
}

// advance: the loop executed the last Ready.
func (e *eosCore) advance() {}

// wakeAt is Ready.WakeAt (zero: none).
func (e *eosCore) wakeAt() time.Time {
	var t time.Time
	min := func(x time.Time) {
		if !x.IsZero() && (t.IsZero() || x.Before(t)) {
			t = x
		}
	}
	if !e.waitUntil.IsZero() {
		return e.waitUntil // tick (pump) does nothing before it: an earlier wake would spin the loop
	}
	if e.closing || e.halted != nil {
		min(e.deadline)
	}
	if b := e.b; b != nil {
		if !b.posSent && !b.failed {
			min(e.dueAt(b))
		}
		if b.begun && e.inTx {
			min(b.begunAt.Add(e.guard()))
		}
	}
	return t
}

func (e *eosCore) storedPos() source.Position { return e.committed }

func (e *eosCore) inflight() int {
	if e.b == nil {
		return 0
	}
	return e.b.pendRecs
}

func (e *eosCore) check() error {
	b := e.b
	if e.core.rd.Confirm != "" && e.core.rd.Confirm != e.committed {
		return fmt.Errorf("eos: Confirm %s is not the committed position %s", e.core.rd.Confirm, e.committed)
	}
	if b == nil {
		if len(e.sends) != 0 {
			return fmt.Errorf("eos: %d sends outstanding without a batch", len(e.sends))
		}
		return nil
	}
	if b.pendRecs < 0 || b.pendBytes < 0 {
		return fmt.Errorf("eos: negative in-flight accounting %d records %d bytes", b.pendRecs, b.pendBytes)
	}
	if b.posSent && e.inTx {
		return errors.New("eos: the position record was sent before the last chunk of the batch's transaction")
	}
	if e.core.rd.Commit {
		if b.failed || len(e.sends) != 0 || !b.posSent || b.queued() != 0 || b.pendRecs != 0 || e.inTx {
			return fmt.Errorf("eos: Commit asked with failed=%v, %d sends outstanding, position sent %v, %d queued, %d unresolved, open transaction %v",
				b.failed, len(e.sends), b.posSent, b.queued(), b.pendRecs, e.inTx)
		}
	}
	return nil
}
