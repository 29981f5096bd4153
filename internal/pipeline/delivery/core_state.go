package delivery

import "github.com/outboxd/outboxd/source"

// Stored is the durably stored position (ALO: saved; EOS: committed in offsets.topic): where a
// reopened source starts.
func (c *Core) Stored() source.Position {
	if c.eos != nil {
		return c.eos.storedPos()
	}
	return c.alo.stored
}

// Inflight is the number of unresolved records (for the Inflight metric and the stall watch).
func (c *Core) Inflight() int {
	if c.eos != nil {
		return c.eos.inflight()
	}
	return c.alo.tracker.Records()
}

// Check verifies the core's invariants and returns the first one broken (tests call it after
// every step; it is not cheap): the stored position never covers an unresolved record; the
// confirmed position never passes the stored one; at most one save is in flight, with
// non-decreasing positions; the in-flight accounting matches the records.
func (c *Core) Check() error {
	if c.eos != nil {
		return c.eos.check()
	}
	return c.alo.check()
}
