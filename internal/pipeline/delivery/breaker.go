package delivery

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Breaker trips when more than Max of the last Window records were dead-lettered, so that a
// misconfiguration (a wrong column name, a missing ACL) stops the pipeline instead of dumping
// the whole stream into the DLQ. It is a pure ring of outcomes; the zero Breaker never trips.
type Breaker struct {
	Max, Window int
	ring        []bool
	i, n, bad   int
}

// ParseRate parses kafka.dlq_max_rate, "N/M": more than N dead letters among the last M records
// trips. "" disables.
func ParseRate(s string) (Breaker, error) {
	if s == "" {
		return Breaker{}, nil
	}
	a, b, ok := strings.Cut(s, "/")
	n, err1 := strconv.Atoi(strings.TrimSpace(a))
	m, err2 := strconv.Atoi(strings.TrimSpace(b))
	if !ok || err1 != nil || err2 != nil || n < 0 || m < 1 || n >= m {
		return Breaker{}, fmt.Errorf("%q must be N/M with 0 <= N < M (stop when more than N of the last M records were dead-lettered)", s)
	}
	return Breaker{Max: n, Window: m}, nil
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
