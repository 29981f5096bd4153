package delivery

import (
	"errors"
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
	state      uint8
}

// alo is the at_least_once state.
type alo struct {
	c       *Core
	tracker *offsets.Tracker
	stored  offsets.Position
}

var errALONotBuilt = errors.New("delivery: at_least_once core not built yet")

func newALO(c *Core, stored offsets.Position) *alo {
	return &alo{c: c, stored: stored, tracker: offsets.NewTracker(c.cfg.MaxInflight, c.cfg.MaxTxs)}
}

func (a *alo) open()                                            { a.c.fail(errALONotBuilt) }
func (a *alo) canAccept(rows, bytes int) bool                   { return false }
func (a *alo) accept(now time.Time, ch *source.Tx) error        { return errALONotBuilt }
func (a *alo) outcome(now time.Time, id ID, err error)          { a.c.fail(errALONotBuilt) }
func (a *alo) saveResult(p offsets.Position, err error, c bool) { a.c.fail(errALONotBuilt) }
func (a *alo) tick(now time.Time)                               { a.c.fail(errALONotBuilt) }
func (a *alo) stop(now, deadline time.Time)                     { a.c.fail(errALONotBuilt) }
func (a *alo) sourceEnded(now, deadline time.Time)              { a.c.fail(errALONotBuilt) }
func (a *alo) wakeAt() time.Time                                { return time.Time{} }
func (a *alo) check() error                                     { return errALONotBuilt }
