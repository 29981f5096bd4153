// Package gcfloor keeps the Go garbage collector's heap goal at or above a floor.
//
// With the default GOGC=100 the collector runs whenever the heap doubles its live size. outboxd's
// live heap is small while it drains (a few MiB of in-flight records and buffers) and its
// allocation rate is high (every binlog/WAL message, every Kafka batch), so it would collect about
// a hundred times a second and spend ~10% of its CPU doing so. A floor makes the heap goal
// max(floor, 2 × live): small live heaps collect when the heap reaches the floor, large ones
// behave exactly as GOGC=100. This is the "GC tuner" pattern (a GC-cycle hook that adjusts
// GOGC from the live heap); Go has no built-in minimum heap goal, and GOMEMLIMIT is a ceiling,
// which with GOGC=off would spin the collector once the live heap nears it.
//
// Start (or StartWithLimit, which adds a soft memory limit derived from outboxd's caps; see
// Limit) it once, from main; it does nothing when the user set GOGC or GOMEMLIMIT.
package gcfloor

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// heapMinimum is the runtime's minimum heap goal at GOGC=100 (runtime.defaultHeapMinimum); the
// runtime scales it by GOGC/100, so a large GOGC would also raise the minimum goal past the floor.
const heapMinimum = 4 << 20

// Percent is the GOGC value that puts the heap goal, live × (1 + GOGC/100), at floor: never
// below 100 (the default), never so high that the runtime's scaled minimum heap goal
// (4 MiB × GOGC/100) exceeds the floor. Pure: the tuner's whole policy.
func Percent(floor, live uint64) int {
	maxP := int(floor * 100 / heapMinimum)
	if maxP <= 100 || floor <= 2*live {
		return 100
	}
	if live == 0 {
		return maxP
	}
	p := int((floor - live) * 100 / live)
	return min(max(p, 100), maxP)
}

// Start keeps the heap goal at or above floor bytes until stop is called. It returns false (and
// a no-op stop) when GOGC or GOMEMLIMIT is set in the environment: the user's setting wins.
func Start(floor uint64) (stop func(), started bool) {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return func() {}, false
	}
	t := &tuner{floor: floor, current: 100, sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	t.arm()
	return func() {
		t.stopped.Store(true)
		debug.SetGCPercent(100)
	}, true
}

type tuner struct {
	floor   uint64
	current int // last GOGC set; only the finalizer goroutine touches it
	sample  []metrics.Sample
	stopped atomic.Bool
}

// sentinel is garbage from birth; its finalizer runs on the runtime's finalizer goroutine after
// the GC cycle that found it unreachable, adjusts GOGC and re-arms with a new sentinel.
type sentinel struct{ t *tuner }

func (t *tuner) arm() {
	s := &sentinel{t: t}
	runtime.SetFinalizer(s, func(s *sentinel) { s.t.afterGC() })
}

func (t *tuner) afterGC() {
	if t.stopped.Load() {
		return
	}
	metrics.Read(t.sample)
	if t.sample[0].Value.Kind() == metrics.KindUint64 {
		p := Percent(t.floor, t.sample[0].Value.Uint64())
		// Re-set only on a real change: each SetGCPercent recomputes the pacer's goal.
		if d := p - t.current; d > t.current/10 || -d > t.current/10 {
			debug.SetGCPercent(p)
			t.current = p
		}
	}
	t.arm()
}
