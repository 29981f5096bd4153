package delivery

// exactly_once under kafka.on_permanent_error: stop (Config.StopOnPermanent). A record found to
// be undeliverable — the transform refused its row, or Kafka refused it for good when sent
// alone (after the poison isolation of eos_send.go) — is never dead-lettered: the batch's
// attempt fails and its Kafka transaction is aborted (nothing of it becomes visible to
// read_committed consumers); then the source transactions of the batch before the bad
// record's one are produced again and committed with their position (so the committed
// position ends right before the bad transaction), and the run fails with the
// *PermanentError. No chunk is accepted after the halt. A batch too large to redo in memory
// (spilled) is not redone: the committed position stays at the batch's start (see Note).

import (
	"time"
)

// halt stops on it (of the current batch): the earliest such record in the batch is reported.
func (e *eosCore) halt(now time.Time, it *item, stage, reason string, cause error) {
	b := e.b
	b.failed = true
	if e.halted != nil && it.ord >= e.haltOrd {
		return
	}
	first := e.halted == nil
	e.halted, e.haltOrd, e.haltTx, e.haltPrev, e.haltTxs = newPermanentError(e.core.eventID(it.row, &it.rec), it.row, it.rec.Topic, it.where, stage, reason, cause), it.ord, it.txStart, it.prev, it.txIdx
	e.core.rd.Events = append(e.core.rd.Events, e.halted.event())
	if first {
		deadline := now.Add(e.cfg.StopTimeout)
		if !e.closing || deadline.Before(e.deadline) {
			e.deadline = deadline
		}
		e.closing, e.held = true, nil // nothing more is read (re-read after the restart)
	}
}

// afterHalt: the failed attempt is aborted (or never began). Commit the transactions before the
// bad one, or fail now when there are none (or the batch cannot be redone from memory).
func (e *eosCore) afterHalt(now time.Time) {
	b := e.b
	if e.haltPrev == b.start { // nothing before it in the batch (a chunked transaction has a batch of its own)
		e.b = nil
		e.failHalt()
		return
	}
	e.haltCut = e.haltTx
	if b.spilled { // redo the transactions before it by re-reading them (see eos_batch.go)
		findings := map[int]*finding{}
		for ord, f := range b.findings {
			if ord < e.haltTx {
				findings[ord] = f
			}
		}
		e.redo = &redoInfo{txs: e.haltTxs, end: e.haltPrev, findings: findings, posSusp: b.posSusp}
		e.b = nil
		e.attempt++
		e.seq, e.aloneOut = 0, 0
		clear(e.sends)
		e.log(now, "on_permanent_error: stop: re-reading the source transactions before the record that cannot be delivered (too large to keep in memory) to commit them, then stopping",
			"transactions", e.haltTxs, "position", string(e.haltPrev))
		e.phase, e.core.rd.Reopen = phReopen, true
		return
	}
	kept := b.kept[:0]
	starts := map[int]bool{}
	b.bytes = 0
	for _, it := range b.kept {
		if it.ord < e.haltTx {
			kept = append(kept, it)
			starts[it.txStart] = true
			b.bytes += it.rec.Size()
		}
	}
	clear(b.kept[len(kept):])
	b.kept, b.n, b.end, b.txs = kept, e.haltTx, e.haltPrev, max(1, len(starts))
	for ord := range b.findings {
		if ord >= e.haltTx {
			delete(b.findings, ord)
		}
	}
	b.due, b.drop, b.chunked = true, false, false
	e.inTx = false
	e.log(now, "on_permanent_error: stop: committing the source transactions before the record that cannot be delivered, then stopping",
		"records", b.n, "position", string(b.end))
	e.restart(now, false)
}

// failHalt ends the run with the PermanentError.
func (e *eosCore) failHalt() {
	e.halted.Stored = e.committed
	e.core.fail(e.halted)
}
