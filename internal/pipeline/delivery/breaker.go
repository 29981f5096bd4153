package delivery

import (
	"slices"
)

// Breaker trips when more than Max of the last Window records were dead-lettered, so that a
// misconfiguration (a wrong column name, a missing ACL) stops the pipeline instead of dumping
// the whole stream into the DLQ. It is a pure ring of outcomes; the zero Breaker never trips.
type Breaker struct {
	Max, Window int
	ring        []bool
	i, n, bad   int
}

// Record adds one record's outcome and reports whether the breaker tripped.
func (b *Breaker) Record(deadLettered bool) bool {
	if b.Window == 0 {
		return false
	}
	if b.ring == nil {
		b.ring = make([]bool, b.Window)
	}
	if b.n == b.Window {
		if b.ring[b.i] {
			b.bad--
		}
	} else {
		b.n++
	}
	b.ring[b.i] = deadLettered
	if deadLettered {
		b.bad++
	}
	b.i = (b.i + 1) % b.Window
	return b.bad > b.Max
}

// Count is the number of dead letters in the window.
func (b *Breaker) Count() int { return b.bad }

// Clone returns an independent copy (a trial run that may be thrown away).
func (b Breaker) Clone() Breaker {
	b.ring = slices.Clone(b.ring)
	return b
}
