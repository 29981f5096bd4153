package offsets

import (
	"errors"
	"fmt"
)

// ErrFull is returned by Track when the tracker already holds its cap of pending records or
// transactions. The caller must wait for outcomes (Done) and Commit before tracking more.
var ErrFull = errors.New("offsets: tracker full")

// Tracker records source transactions in source order, resolves their records in any order, and
// yields the end position of the longest prefix of fully resolved transactions.
//
// It is a pure, single-owner data structure: no goroutines, no I/O, no locks. Memory is bounded by
// the caps given to NewTracker: Track refuses (ErrFull) rather than grow past them.
//
// A transaction with zero records is resolved as soon as it is tracked (idle progress).
type Tracker struct {
	maxRecords int // cap on unresolved records
	maxTxs     int // cap on tracked transactions (resolved or not) not yet committed

	entries []entry // ring buffer of tracked transactions, oldest first
	head    int     // index of the oldest entry in entries
	n       int     // number of entries in the ring
	first   uint64  // sequence number of the oldest entry
	records int     // unresolved records across all entries
}

type entry struct {
	pos       Position
	remaining int
}

// NewTracker returns a tracker that holds at most maxRecords unresolved records and maxTxs
// uncommitted transactions. Both must be positive.
func NewTracker(maxRecords, maxTxs int) *Tracker {
	if maxRecords < 1 || maxTxs < 1 {
		panic("offsets.NewTracker: caps must be positive")
	}
	return &Tracker{maxRecords: maxRecords, maxTxs: maxTxs, entries: make([]entry, maxTxs)}
}

// Seq identifies a tracked transaction.
type Seq uint64

// Track appends a transaction ending at pos with n records still to resolve and returns its
// sequence number. It returns ErrFull when the transaction count is at its cap, or when adding n
// records would pass the record cap — except that a transaction larger than the whole cap is
// accepted when nothing else is pending, so that one huge transaction cannot wedge the pipeline.
func (t *Tracker) Track(pos Position, n int) (Seq, error) {
	if n < 0 {
		return 0, fmt.Errorf("offsets: negative record count %d", n)
	}
	if t.n == t.maxTxs {
		return 0, ErrFull
	}
	if !t.fits(n) {
		return 0, ErrFull
	}
	i := (t.head + t.n) % t.maxTxs
	t.entries[i] = entry{pos: pos, remaining: n}
	t.n++
	t.records += n
	return Seq(t.first + uint64(t.n-1)), nil
}

// CanTrack reports whether a transaction with n records would be accepted by Track now.
func (t *Tracker) CanTrack(n int) bool {
	return t.n < t.maxTxs && t.fits(n)
}

func (t *Tracker) fits(n int) bool {
	return n == 0 || t.records == 0 || t.records+n <= t.maxRecords
}

// Done resolves one record of transaction s (acked by Kafka, or dead-lettered and that write
// acked). Resolving more records than were tracked, or an unknown or committed transaction, is
// an error: it means an outcome was reported twice, which the caller must treat as a bug.
func (t *Tracker) Done(s Seq) error {
	if uint64(s) < t.first || uint64(s) >= t.first+uint64(t.n) {
		return fmt.Errorf("offsets: outcome for unknown transaction %d (tracking %d..%d)", s, t.first, t.first+uint64(t.n))
	}
	e := &t.entries[(t.head+int(uint64(s)-t.first))%t.maxTxs]
	if e.remaining == 0 {
		return fmt.Errorf("offsets: transaction %d (position %s) resolved more often than it has records", s, e.pos)
	}
	e.remaining--
	t.records--
	return nil
}

// Commit removes the longest prefix of fully resolved transactions and returns the position of
// the last one removed. ok is false when the oldest transaction is still unresolved (or nothing
// is tracked): then nothing may be stored.
func (t *Tracker) Commit() (pos Position, ok bool) {
	for t.n > 0 {
		e := &t.entries[t.head]
		if e.remaining > 0 {
			break
		}
		pos, ok = e.pos, true
		*e = entry{}
		t.head = (t.head + 1) % t.maxTxs
		t.n--
		t.first++
	}
	return pos, ok
}

// Transactions returns the number of tracked, uncommitted transactions.
func (t *Tracker) Transactions() int { return t.n }

// Records returns the number of unresolved records.
func (t *Tracker) Records() int { return t.records }
