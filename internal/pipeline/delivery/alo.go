package delivery

// at_least_once: the state and the session lifecycle (Open, Stop, SourceEnded, Tick) and
// Check. Admission is in admit.go, outcomes in outcome.go, the save queue in ledger.go.

import (
	"fmt"
	"time"

	"github.com/outboxd/outboxd/offsets"
	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
)

// flight is one record of at_least_once on its way to Kafka (or, after a permanent error, its
// dead letter on its way to the DLQ). A chunk's flights are one allocation.
type flight struct {
	seq        offsets.Seq
	rec        sink.Record
	row        *source.Row
	commitTime time.Time
	where      Where
	bytes      int
	ord        uint64 // the record's number in source order (since New)
	state      flightState
	blk        *flightBlk // the block it was carved from (nil: a big chunk's own allocation)
}

type flightState uint8

const (
	flightRecord flightState = iota // the record is being produced
	flightDLQ                       // its dead letter is being produced
	flightDone                      // resolved
	flightStuck                     // never resolves: halted on it, or withheld after a halt (permanent.go)
)

// phase is where the at_least_once session is.
type phase uint8

const (
	phaseIdle      phase = iota // no session: before Open, or after a SourceEnded drain
	phaseRunning                // accepting chunks
	phaseDraining               // Stop or SourceEnded: resolving what is in flight
	phaseFinishing              // all resolved (or the deadline passed): the final save
	phaseStopped                // the stop is complete
)

// alo is the at_least_once state.
type alo struct {
	c       *Core
	tracker *offsets.Tracker
	live    int          // unresolved flights (== tracker.Records())
	bytes   int          // their bytes
	blocks  flightBlocks // where small chunks' flights come from (flights.go)

	// At most MaxInflight sends are handed to the loop without an outcome (the producer's own
	// cap is the same number: Produce then never blocks on it, so the loop stays responsive);
	// the sends of a chunk larger than that wait here, in order, until outcomes make room.
	outstanding int
	backlog     []Send
	bhead       int

	ledger

	phase    phase
	stopping bool      // the drain is a Stop's (else a SourceEnded's)
	deadline time.Time // the drain's
	timedOut string    // set when the deadline passed: what was unresolved then
	after    source.Position

	// kafka.on_permanent_error: stop (permanent.go)
	nrec    uint64          // records accepted (numbers them: flight.ord)
	halted  *PermanentError // the earliest record halted on (nil: none)
	haltOrd uint64
	stuck   int // unresolved flights that never resolve (halted, withheld)
}

func newALO(c *Core, stored source.Position) *alo {
	a := &alo{c: c, tracker: offsets.NewTracker(c.cfg.MaxInflight, c.cfg.MaxTxs)}
	a.blocks.maxFree = freeBlocksFor(c.cfg.MaxInflight)
	a.ledger.init(c, stored)
	return a
}

func (a *alo) open() {
	if a.phase != phaseIdle {
		a.c.fail(fmt.Errorf("delivery: Open in phase %d (a session is running, or the core stopped)", a.phase))
		return
	}
	a.phase = phaseRunning
	a.after = a.stored
}

func (a *alo) stop(now, deadline time.Time) {
	switch a.phase {
	case phaseStopped:
		return
	case phaseDraining, phaseFinishing:
		if deadline.Before(a.deadline) {
			a.deadline = deadline
		}
	default:
		a.deadline = deadline
		a.phase = phaseDraining
	}
	a.stopping = true
	a.tick(now)
}

func (a *alo) sourceEnded(now, deadline time.Time) {
	if a.halted != nil && (a.phase == phaseDraining || a.phase == phaseFinishing) {
		return // already draining for the halt; the loop's reader failed meanwhile
	}
	if a.phase != phaseRunning {
		a.c.fail(fmt.Errorf("delivery: SourceEnded in phase %d (no session running)", a.phase))
		return
	}
	a.phase, a.deadline, a.stopping = phaseDraining, deadline, false
	a.tick(now)
}

// tick: a commit tick (the resolved prefix goes to the save queue) and the drain's deadline.
func (a *alo) tick(now time.Time) {
	if a.phase == phaseDraining && !now.Before(a.deadline) {
		a.timedOut = fmt.Sprintf("%d records of %d transactions unresolved", a.tracker.Records(), a.tracker.Transactions())
		a.phase = phaseFinishing
	}
	a.scheduleSave()
	a.maybeFinish()
}

// maybeFinish moves a drain on: once nothing is in flight the open transaction (if any) is
// abandoned and the final save runs; once it is stored, the session is Done (or, past the
// deadline, the timeout is the error).
func (a *alo) maybeFinish() {
	if a.phase == phaseDraining && a.halted != nil && a.live == a.stuck {
		a.commitPrefix() // ends before the halted record's transaction (it never resolves)
		a.phase = phaseFinishing
	}
	if a.phase == phaseDraining && a.live == 0 {
		if err := a.tracker.Abandon(); err != nil {
			a.c.fail(fmt.Errorf("delivery: %w", err))
			return
		}
		a.commitPrefix()
		a.phase = phaseFinishing
	}
	if a.phase != phaseFinishing || a.saving != "" {
		return
	}
	if a.committedSeq > a.storedSeq {
		a.startSave(a.committed, a.committedSeq)
		return
	}
	if a.halted != nil {
		a.finishHalt()
		return
	}
	if a.timedOut != "" {
		a.c.fail(fmt.Errorf("%w: %s; stored position %s (they will be re-delivered on restart)", ErrShutdownTimeout, a.timedOut, a.stored))
		return
	}
	a.c.rd.Done = true
	if a.stopping {
		a.phase = phaseStopped
	} else {
		a.phase = phaseIdle
	}
}

func (a *alo) wakeAt() time.Time {
	if a.phase == phaseDraining {
		return a.deadline
	}
	return time.Time{}
}

// check verifies the at_least_once invariants (see Core.Check).
func (a *alo) check() error {
	if a.live != a.tracker.Records() {
		return fmt.Errorf("%d flights unresolved, the tracker counts %d records", a.live, a.tracker.Records())
	}
	if a.outstanding > a.c.cfg.MaxInflight || a.outstanding+len(a.backlog)-a.bhead != a.live-a.stuck {
		return fmt.Errorf("%d sends outstanding (cap %d) and %d waiting for %d unresolved records (%d stuck after a halt)",
			a.outstanding, a.c.cfg.MaxInflight, len(a.backlog)-a.bhead, a.live, a.stuck)
	}
	if a.stuck > 0 && a.halted == nil || a.halted != nil && (a.stuck == 0 || a.phase == phaseRunning) {
		return fmt.Errorf("%d stuck records with halt %v in phase %d", a.stuck, a.halted != nil, a.phase)
	}
	if a.bytes < 0 || (a.bytes == 0) != (a.live == 0) {
		return fmt.Errorf("%d in-flight bytes with %d records in flight", a.bytes, a.live)
	}
	if a.committedSeq > uint64(a.tracker.First()) {
		return fmt.Errorf("committed prefix %d passes the tracker's first uncommitted transaction %d", a.committedSeq, a.tracker.First())
	}
	if (a.phase == phaseIdle || a.phase == phaseStopped) && a.tracker.Open() {
		return fmt.Errorf("a transaction is still open after the session ended (it must be abandoned and re-read whole)")
	}
	if a.phase == phaseFinishing && a.timedOut == "" && a.live != a.stuck {
		return fmt.Errorf("final save with %d records in flight", a.live)
	}
	return a.ledger.check()
}
