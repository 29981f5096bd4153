package delivery

// The exactly_once half of the core (owned by helper "eos"; see /work/notes/i13/core-api.md).
// core.go dispatches every input to these methods when Config.Mode is ExactlyOnce. They may
// read and write c.core.rd (the Ready being built), call c.core.fail(err) for a fatal error,
// and read c.core.cfg.

import (
	"errors"
	"time"

	"github.com/outboxd/outboxd/offsets"
	"github.com/outboxd/outboxd/source"
)

var errEOSNotBuilt = errors.New("delivery: exactly_once core not built yet")

// eosCore is the exactly_once state: batches of source transactions, one Kafka transaction
// each, the producer steps, and the committed position.
type eosCore struct {
	core      *Core
	committed offsets.Position
}

func newEOS(c *Core, stored offsets.Position) *eosCore {
	return &eosCore{core: c, committed: stored}
}

func (e *eosCore) open()                                     { e.core.fail(errEOSNotBuilt) }
func (e *eosCore) canAccept(rows, bytes int) bool            { return false }
func (e *eosCore) accept(now time.Time, ch *source.Tx) error { return errEOSNotBuilt }
func (e *eosCore) outcome(now time.Time, id ID, err error)   { e.core.fail(errEOSNotBuilt) }
func (e *eosCore) refused(now time.Time, id ID, err error)   { e.core.fail(errEOSNotBuilt) }
func (e *eosCore) producerReady(now time.Time, err error)    { e.core.fail(errEOSNotBuilt) }
func (e *eosCore) loaded(now time.Time, p offsets.Position, err error) {
	e.core.fail(errEOSNotBuilt)
}
func (e *eosCore) aborted(now time.Time, err error)      { e.core.fail(errEOSNotBuilt) }
func (e *eosCore) began(now time.Time, err error)        { e.core.fail(errEOSNotBuilt) }
func (e *eosCore) flushed(now time.Time, err error)      { e.core.fail(errEOSNotBuilt) }
func (e *eosCore) commitResult(now time.Time, err error) { e.core.fail(errEOSNotBuilt) }
func (e *eosCore) tick(now time.Time)                    { e.core.fail(errEOSNotBuilt) }
func (e *eosCore) stop(now, deadline time.Time)          { e.core.fail(errEOSNotBuilt) }
func (e *eosCore) sourceEnded(now, deadline time.Time)   { e.core.fail(errEOSNotBuilt) }

// advance: the loop executed the last Ready (called before core.rd is reset).
func (e *eosCore) advance() {}

// wakeAt is Ready.WakeAt (zero: none).
func (e *eosCore) wakeAt() time.Time           { return time.Time{} }
func (e *eosCore) storedPos() offsets.Position { return e.committed }
func (e *eosCore) inflight() int               { return 0 }
func (e *eosCore) check() error                { return errEOSNotBuilt }
