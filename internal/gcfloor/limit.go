package gcfloor

import (
	"math"
	"runtime/debug"
)

// Caps are the caps that bound outboxd's live heap. outboxd run passes every field from the
// pipeline's own values (cmd/outboxd); a zero field stands for today's default there.
type Caps struct {
	InflightRecords int // kafka.max_inflight: unresolved records (default 4096)
	InflightBytes   int // their row bytes, the delivery core's byte cap (default 4 MiB)
	ReadAheadBytes  int // chunk bytes read ahead of the delivery core (default 2 MiB)
	MaxRecordBytes  int // kafka.max_record_bytes: the largest record (default 1 MiB)
}

const (
	defaultInflightRecords = 4096
	// perRecord is the live heap of one unresolved record besides its row bytes: the record, its
	// key and headers, the producer's message and the tracker entry (measured: ~2 KiB).
	perRecord = 2 << 10
)

// Limit is the default soft memory limit (debug.SetMemoryLimit) of outboxd run for the heap
// goal floor and the caps:
//
//	floor                                          (the live heap at the default record cap, small rows)
//	  + 2 × InflightBytes                          (the rows in flight and the producer's encoded batches of them)
//	  + ReadAheadBytes                             (chunks read ahead)
//	  + 2 × MaxRecordBytes                         (the chunk being assembled, a record being encoded)
//	  + perRecord × (InflightRecords − 4096)       (records beyond the default cap, when raised)
//
// With the defaults: 32 + 8 + 2 + 2 = 44 MiB. Why: without a limit the heap goal is
// max(floor, 2 × live), and while one big transaction keeps the caps full the live heap is
// 19–23 MiB for small rows and 28–35 MiB for 1 MB rows (outboxd-bench memory-large-tx,
// gctrace), so the doubling alone would put the peak RSS past 64 MiB, resp. near 96 MiB. The
// limit trims that doubling: it lowers the goal only when the live heap is more than half of it,
// and it stays above the largest live heap of the caps by about the floor's headroom, so the
// collector runs more often while the caps are full but never thrashes. Being derived from the
// caps, it grows when a user raises kafka.max_inflight or kafka.max_record_bytes. It is soft:
// a live heap past it makes the runtime exceed it (with the collector's CPU capped at about
// half) rather than fail.
func Limit(floor uint64, c Caps) uint64 {
	if c.InflightRecords <= 0 {
		c.InflightRecords = defaultInflightRecords
	}
	if c.InflightBytes <= 0 {
		c.InflightBytes = 4 << 20
	}
	if c.ReadAheadBytes <= 0 {
		c.ReadAheadBytes = 2 << 20
	}
	if c.MaxRecordBytes <= 0 {
		c.MaxRecordBytes = 1 << 20
	}
	l := floor + 2*uint64(c.InflightBytes) + uint64(c.ReadAheadBytes) + 2*uint64(c.MaxRecordBytes)
	if c.InflightRecords > defaultInflightRecords {
		l += uint64(c.InflightRecords-defaultInflightRecords) * perRecord
	}
	return l
}

// StartWithLimit is Start(floor) plus the soft memory limit limit (see Limit), when neither GOGC
// nor GOMEMLIMIT is set: the user's setting wins. stop also lifts the limit.
func StartWithLimit(floor, limit uint64) (stop func(), started bool) {
	stopFloor, ok := Start(floor)
	if !ok {
		return stopFloor, false
	}
	if limit > 0 && limit < math.MaxInt64 {
		debug.SetMemoryLimit(int64(limit))
	}
	return func() {
		stopFloor()
		debug.SetMemoryLimit(math.MaxInt64)
	}, true
}
