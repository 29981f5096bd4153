package delivery

import (
	"fmt"

	"github.com/outboxd/outboxd/source"
)

// ledger is the save queue from the committed prefix to the stored and confirmed positions:
// at most one save in flight, the newest committed prefix queued behind it (only the newest
// matters), positions saved in order, and a position confirmed to the source only once stored.
// Positions are opaque; the *Seq fields order them (the count of transactions the position
// covers since New).
type ledger struct {
	c                    *Core
	committed            source.Position // newest resolved, closed prefix (may be unsaved)
	saving, queued       source.Position // "" = none
	stored, confirmed    source.Position
	committedSeq         uint64
	savingSeq, queuedSeq uint64
	storedSeq            uint64
	confirmedSeq         uint64
	lastSaveSeq          uint64 // the newest save started (saves are non-decreasing)
	broken               error  // an invariant broken at the moment it happened
}

func (l *ledger) init(c *Core, stored source.Position) {
	l.c, l.stored, l.confirmed, l.committed = c, stored, stored, stored
}

// commitPrefix takes the resolved, closed prefix from the tracker (freeing its room at once).
func (a *alo) commitPrefix() {
	if pos, ok := a.tracker.Commit(); ok {
		a.committed, a.committedSeq = pos, uint64(a.tracker.First())
	}
}

// scheduleSave hands the committed prefix to the save queue (a commit tick).
func (l *ledger) scheduleSave() {
	switch {
	case l.committedSeq <= l.storedSeq:
	case l.saving != "":
		if l.committedSeq > l.savingSeq {
			l.queued, l.queuedSeq = l.committed, l.committedSeq
		}
	default:
		l.startSave(l.committed, l.committedSeq)
	}
}

func (l *ledger) startSave(pos source.Position, seq uint64) {
	if l.saving != "" || seq < l.lastSaveSeq {
		l.broken = fmt.Errorf("save of %s (%d) started with %q in flight, or after a newer save (%d)", pos, seq, l.saving, l.lastSaveSeq)
	}
	l.saving, l.savingSeq, l.lastSaveSeq = pos, seq, seq
	l.c.rd.Save = pos
}

// saveResult: the save of p ended. Stored: confirm it, then save the queued position.
func (a *alo) saveResult(p source.Position, err error, cancelled bool) {
	if a.saving == "" || p != a.saving {
		a.c.fail(fmt.Errorf("delivery: SaveResult(%s) while saving %q", p, a.saving))
		return
	}
	seq := a.savingSeq
	a.saving, a.savingSeq = "", 0
	switch {
	case err == nil:
		a.stored, a.storedSeq = p, seq
		a.confirmed, a.confirmedSeq = p, seq
		a.c.rd.Confirm = p
	case cancelled:
		// A stop cancelled it: the committed prefix is saved again (the final save).
	default:
		a.c.fail(fmt.Errorf("store position %s: %w", p, err))
		return
	}
	if q, qs := a.queued, a.queuedSeq; q != "" {
		a.queued, a.queuedSeq = "", 0
		if qs > a.storedSeq {
			a.startSave(q, qs)
		}
	}
	a.maybeFinish()
}

// check: confirmed ≤ stored ≤ committed; a save in flight is newer than stored and not past
// committed; the queued one newer than it; saves started in order.
func (l *ledger) check() error {
	switch {
	case l.broken != nil:
		return l.broken
	case l.confirmedSeq > l.storedSeq || l.confirmed != l.stored && l.confirmedSeq == l.storedSeq && l.storedSeq != 0:
		return fmt.Errorf("confirmed %s (%d) passes stored %s (%d)", l.confirmed, l.confirmedSeq, l.stored, l.storedSeq)
	case l.storedSeq > l.committedSeq:
		return fmt.Errorf("stored %s (%d) passes the resolved prefix %s (%d)", l.stored, l.storedSeq, l.committed, l.committedSeq)
	case l.saving != "" && (l.savingSeq <= l.storedSeq || l.savingSeq > l.committedSeq):
		return fmt.Errorf("saving %s (%d) outside (stored %d, committed %d]", l.saving, l.savingSeq, l.storedSeq, l.committedSeq)
	case l.queued != "" && (l.saving == "" || l.queuedSeq <= l.savingSeq || l.queuedSeq > l.committedSeq):
		return fmt.Errorf("queued %s (%d) without a save in flight or not newer than it (%d)", l.queued, l.queuedSeq, l.savingSeq)
	}
	return nil
}
