package offsets

import (
	"errors"
	"fmt"

	"github.com/outboxd/outboxd/source"
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
	pos       source.Position
	remaining int
	open      bool // the transaction's last chunk has not been added yet
	abandoned bool // dropped by Abandon: Commit passes it without yielding a position
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

// Track appends a whole transaction ending at pos with n records still to resolve and returns its
// sequence number: Add(n, false, pos). It is an error while a chunked transaction is open.
func (t *Tracker) Track(pos source.Position, n int) (Seq, error) {
	if t.tailOpen() {
		return 0, fmt.Errorf("offsets: Track(%s) while a chunked transaction is open (its last chunk has not come)", pos)
	}
	return t.Add(n, false, pos)
}

// Add adds one chunk of n records of a source transaction and returns the transaction's sequence
// number. When the newest transaction is open (an earlier chunk had more set), the chunk belongs
// to it; otherwise it starts a new transaction. more says further chunks follow: the transaction
// stays open, and Commit never passes it. The last chunk (more false) carries pos, the
// transaction's end, and closes it (it may have n == 0).
//
// It returns ErrFull when a new transaction would pass the transaction cap (a continuing chunk
// needs no new slot), or when n records would pass the record cap — except that a chunk is
// accepted whatever its size when nothing is unresolved, so that one huge chunk cannot wedge
// the pipeline. The open transaction's records resolve without its later chunks, so waiting
// for room never deadlocks.
func (t *Tracker) Add(n int, more bool, pos source.Position) (Seq, error) {
	if n < 0 {
		return 0, fmt.Errorf("offsets: negative record count %d", n)
	}
	if !t.CanAdd(n) {
		return 0, ErrFull
	}
	if t.tailOpen() {
		e := &t.entries[(t.head+t.n-1)%t.maxTxs]
		e.remaining += n
		t.records += n
		if !more {
			e.open, e.pos = false, pos
		}
		return Seq(t.first + uint64(t.n-1)), nil
	}
	i := (t.head + t.n) % t.maxTxs
	t.entries[i] = entry{pos: pos, remaining: n, open: more}
	if more {
		t.entries[i].pos = ""
	}
	t.n++
	t.records += n
	return Seq(t.first + uint64(t.n-1)), nil
}

// CanAdd reports whether Add would accept a chunk of n records now.
func (t *Tracker) CanAdd(n int) bool {
	return (t.tailOpen() || t.n < t.maxTxs) && t.fits(n)
}

// CanTrack reports whether Track would accept a whole transaction of n records now.
func (t *Tracker) CanTrack(n int) bool {
	return !t.tailOpen() && t.CanAdd(n)
}

func (t *Tracker) tailOpen() bool {
	return t.n > 0 && t.entries[(t.head+t.n-1)%t.maxTxs].open
}

func (t *Tracker) fits(n int) bool {
	return n == 0 || t.records == 0 || t.records+n <= t.maxRecords
}

// Done resolves one record of transaction s (acked by Kafka, or dead-lettered and that write
// acked). Resolving more records than were tracked, or an unknown, committed or abandoned
// transaction, is an error: it means an outcome was reported twice, which the caller must
// treat as a bug.
func (t *Tracker) Done(s Seq) error {
	if uint64(s) < t.first || uint64(s) >= t.first+uint64(t.n) {
		return fmt.Errorf("offsets: outcome for unknown transaction %d (tracking %d..%d)", s, t.first, t.first+uint64(t.n))
	}
	e := &t.entries[(t.head+int(uint64(s)-t.first))%t.maxTxs]
	if e.abandoned {
		return fmt.Errorf("offsets: outcome for abandoned transaction %d", s)
	}
	if e.remaining == 0 {
		return fmt.Errorf("offsets: transaction %d (position %s) resolved more often than it has records", s, e.pos)
	}
	e.remaining--
	t.records--
	return nil
}

// Commit removes the longest prefix of fully resolved, closed transactions and returns the
// position of the last one removed. ok is false when the oldest transaction is still unresolved
// or open (or nothing is tracked): then nothing may be stored.
func (t *Tracker) Commit() (pos source.Position, ok bool) {
	for t.n > 0 {
		e := &t.entries[t.head]
		if e.remaining > 0 || e.open {
			break
		}
		if !e.abandoned {
			pos, ok = e.pos, true
		}
		*e = entry{}
		t.head = (t.head + 1) % t.maxTxs
		t.n--
		t.first++
	}
	return pos, ok
}

// Abandon drops the open transaction (the session ended before its last chunk came: it is
// re-read whole from the stored position, never half-stored). Its records must all be resolved
// first; with records outstanding it is an error. Without an open transaction it does nothing.
// A later Add starts a new transaction; Done for the abandoned Seq is an error; Commit passes
// the abandoned transaction without yielding a position for it.
func (t *Tracker) Abandon() error {
	if !t.tailOpen() {
		return nil
	}
	e := &t.entries[(t.head+t.n-1)%t.maxTxs]
	if e.remaining > 0 {
		return fmt.Errorf("offsets: abandon the open transaction with %d records unresolved", e.remaining)
	}
	// The entry stays (closed, marked) until Commit passes it, so its Seq is never reused.
	e.open, e.abandoned, e.pos = false, true, ""
	return nil
}

// Open reports whether the newest transaction is open (its last chunk not added yet).
func (t *Tracker) Open() bool { return t.tailOpen() }

// Next is the sequence number the next new transaction gets; every transaction before First()
// is committed. Together they number positions for ordering checks.
func (t *Tracker) Next() Seq { return Seq(t.first + uint64(t.n)) }

// First is the sequence number of the oldest uncommitted transaction (the count of committed
// ones since NewTracker).
func (t *Tracker) First() Seq { return Seq(t.first) }

// Transactions returns the number of tracked, uncommitted transactions.
func (t *Tracker) Transactions() int { return t.n }

// Records returns the number of unresolved records.
func (t *Tracker) Records() int { return t.records }
