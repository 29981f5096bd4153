// Package cleanup decides which outbox rows outbox.cleanup may delete: only rows whose records
// are delivered (acked by Kafka or dead-lettered), that is, rows of a source transaction the
// stored position covers. It is pure (no I/O, no goroutines, no clock of its own); internal/app
// feeds it from the pipeline's OnAccept and OnCommit hooks and runs the DELETEs.
//
// # The guarantee and its argument
//
// The pipeline stores a position P only when every record of the transaction ending at P and of
// every transaction before it (in source order) is resolved: acked, or dead-lettered (the
// delivery core never lets the stored position pass an unresolved record). The pipeline calls
// Accept with each chunk in source order and Committed with each stored position, which is the
// Position of some transaction it accepted. The Tracker keeps the accepted, not yet committed
// transactions in a FIFO queue in that order; Committed(P) releases the transactions of the
// queue up to and including the first one whose Position equals P, and nothing else. Every
// transaction released that way is at or before P in source order, so its records are
// resolved: no id is released before a stored position covers its transaction.
//
// What keeps the queue in source order is Reset: a source session that ends (a source error in
// at_least_once, a redo from the source in exactly_once) is followed by a new one that re-reads
// from the stored position, so the queue's uncommitted tail and the open, partial transaction
// would be read again, possibly interleaved with what follows. Reset, called when the source is
// (re)opened, forgets them (they are accepted again by the new session); released ids stay.
// Without Reset, a chunk of a cut transaction could be merged into the re-read transaction
// before it and be released with it.
//
// A committed position the queue does not hold (the Tracker started after it was accepted, or
// it was dropped by the caps) releases nothing: it is counted (Stats.Unmatched) and the queue
// is kept whole; a later position that matches releases everything before it.
//
// Positions are compared only for equality: they are opaque strings.
//
// # Bounded memory
//
// The Tracker holds at most MaxIDs ids (uncommitted and released together) and MaxTxs
// uncommitted transactions. Past either cap it drops the oldest: released ids first (the oldest
// transaction's), then the ids of the oldest uncommitted transactions (their positions stay
// queued for matching), then whole uncommitted transactions. Dropped ids are never deleted:
// their rows stay in the table (Stats.Dropped counts them; the caller logs a WARN). Dropping is
// always safe (it only deletes less). With outbox.cleanup.retain the released ids wait in memory
// until they are old enough: retain × rows per second must stay under MaxIDs.
//
// # Age (outbox.cleanup.retain)
//
// A row's age is its transaction's commit time as the source reported it (source.Tx.CommitTime,
// set on every chunk); a transaction without one (zero) is aged from when it was accepted.
// Take hands out only ids whose transaction committed at least Retain before now. This measure
// is exact for both sources (it is the commit the log carries, not a column the writer fills)
// and needs no server setting (PostgreSQL's per-row alternative, the commit timestamp of the
// row's xmin, needs track_commit_timestamp = on and says the same thing).
//
// # Rows that cannot be deleted
//
// A row whose id column is absent or NULL cannot be deleted by id: it is delivered like any
// other, but left in the table (Stats.NoID counts them). Message rows (the tableless outbox,
// source.Row.Message) have no table row at all and are not tracked.
package cleanup

import (
	"time"

	"github.com/outboxd/outboxd/source"
)

// DefaultMaxIDs is Config.MaxIDs when zero: the most ids the Tracker holds. At about 100 bytes
// an id (a uuid in text form plus bookkeeping), some 20 MB.
const DefaultMaxIDs = 200_000

// DefaultMaxTxs is Config.MaxTxs when zero: the most accepted, uncommitted transactions the
// Tracker queues (idle-progress transactions, which carry no row, count too).
const DefaultMaxTxs = 100_000

// Config configures a Tracker.
type Config struct {
	// IDColumn is the outbox id column (outbox.columns.id).
	IDColumn string
	// Retain is outbox.cleanup.retain: ids are released for deletion only once their
	// transaction's commit time is at least this old (0: as soon as committed).
	Retain time.Duration
	// MaxIDs and MaxTxs are the memory caps (DefaultMaxIDs, DefaultMaxTxs when zero).
	MaxIDs, MaxTxs int
}

// Stats are the Tracker's counters, cumulative since New.
type Stats struct {
	// Dropped counts ids dropped by the caps: their rows are never deleted by this Tracker.
	Dropped int64
	// NoID counts rows without an id (column absent or NULL): left in the table.
	NoID int64
	// Unmatched counts committed positions not in the queue (nothing released for them);
	// LastUnmatched is the latest one.
	Unmatched     int64
	LastUnmatched string
	// Held is the number of ids held now (uncommitted and released); Releasable of them are
	// released (committed), waiting for Take.
	Held, Releasable int
}

// Batch is what Take hands out: ids of one table, released, old enough. Give it back with
// Putback when its DELETE failed.
type Batch struct {
	Table string
	IDs   [][]byte
	segs  []segment
}

// segment is the ids of one transaction in one table, with the transaction's age.
type segment struct {
	at  time.Time
	ids [][]byte
}

// txEntry is an accepted transaction (or the open one) not yet committed.
type txEntry struct {
	pos  string
	at   time.Time
	segs map[string][][]byte // table → ids
	tabs []string            // tables in first-seen order (deterministic release)
	n    int                 // ids held
}

// Tracker is the decision logic of outbox.cleanup. Not safe for concurrent use: the caller
// serializes (internal/app holds a mutex around each call).
type Tracker struct {
	cfg     Config
	open    *txEntry   // the transaction whose chunks are being accepted (More set); nil if none
	queue   []*txEntry // accepted, complete, not yet committed, in source order
	ready   map[string][]segment
	tables  []string // tables of ready, in first-seen order
	held    int
	relN    int
	stats   Stats
	scratch []string
}

// New returns a Tracker for cfg.
func New(cfg Config) *Tracker {
	if cfg.MaxIDs <= 0 {
		cfg.MaxIDs = DefaultMaxIDs
	}
	if cfg.MaxTxs <= 0 {
		cfg.MaxTxs = DefaultMaxTxs
	}
	return &Tracker{cfg: cfg, ready: map[string][]segment{}}
}

// Accept records one chunk the pipeline accepted, in source order; now ages a transaction
// without a CommitTime. It copies what it keeps of tx.
func (t *Tracker) Accept(tx *source.Tx, now time.Time) {
	if t.open == nil {
		at := tx.CommitTime
		if at.IsZero() {
			at = now
		}
		t.open = &txEntry{at: at}
	}
	e := t.open
	for i := range tx.Rows {
		r := &tx.Rows[i]
		if r.Message {
			continue // no table row: nothing to delete
		}
		v, ok := r.Get(t.cfg.IDColumn)
		if !ok || v.Null {
			t.stats.NoID++
			continue
		}
		if e.segs == nil {
			e.segs = map[string][][]byte{}
		}
		if _, seen := e.segs[r.Table]; !seen {
			e.tabs = append(e.tabs, r.Table)
		}
		e.segs[r.Table] = append(e.segs[r.Table], append([]byte(nil), v.Bytes...))
		e.n++
		t.held++
	}
	if !tx.More {
		e.pos = string(tx.Position)
		t.open = nil
		t.queue = append(t.queue, e)
	}
	t.enforce()
}

// Committed records that pos is stored: the queue's transactions up to and including the first
// whose position is pos are released. It returns false (and releases nothing) when pos is not
// queued.
func (t *Tracker) Committed(pos source.Position) bool {
	p := string(pos)
	i := -1
	for j, e := range t.queue {
		if e.pos == p {
			i = j
			break
		}
	}
	if i < 0 {
		t.stats.Unmatched++
		t.stats.LastUnmatched = p
		return false
	}
	for j := 0; j <= i; j++ {
		e := t.queue[j]
		for _, tab := range e.tabs {
			ids := e.segs[tab]
			if len(ids) == 0 {
				continue
			}
			if _, ok := t.ready[tab]; !ok {
				t.tables = append(t.tables, tab)
			}
			t.ready[tab] = append(t.ready[tab], segment{at: e.at, ids: ids})
			t.relN += len(ids)
		}
		t.queue[j] = nil
	}
	t.queue = t.queue[i+1:]
	return true
}

// Reset forgets the open transaction and every uncommitted one: the source is (re)opened at
// the stored position and hands them out again (see the package comment). Released ids stay.
func (t *Tracker) Reset() {
	if t.open != nil {
		t.held -= t.open.n
		t.open = nil
	}
	for i, e := range t.queue {
		t.held -= e.n
		t.queue[i] = nil
	}
	t.queue = t.queue[:0]
}

// Take removes and returns up to max released ids of one table whose transactions committed
// at least Retain before now: the table whose oldest released transaction is the oldest. ok is
// false when no id is due.
func (t *Tracker) Take(max int, now time.Time) (b Batch, ok bool) {
	if max <= 0 {
		return Batch{}, false
	}
	cutoff := now.Add(-t.cfg.Retain)
	best := ""
	var bestAt time.Time
	for _, tab := range t.tables {
		segs := t.ready[tab]
		if len(segs) == 0 || !t.due(segs[0].at, cutoff) {
			continue
		}
		if best == "" || segs[0].at.Before(bestAt) {
			best, bestAt = tab, segs[0].at
		}
	}
	if best == "" {
		return Batch{}, false
	}
	segs := t.ready[best]
	b.Table = best
	n := 0
	for len(segs) > 0 && n < max && t.due(segs[0].at, cutoff) {
		s := segs[0]
		k := min(len(s.ids), max-n)
		b.segs = append(b.segs, segment{at: s.at, ids: s.ids[:k:k]})
		b.IDs = append(b.IDs, s.ids[:k]...)
		n += k
		if k == len(s.ids) {
			segs[0] = segment{}
			segs = segs[1:]
		} else {
			segs[0].ids = s.ids[k:]
		}
	}
	t.setReady(best, segs)
	t.held -= n
	t.relN -= n
	return b, true
}

// Putback returns a Batch whose DELETE failed to the front of its table's released ids, so the
// next Take hands it out again (the caps still apply).
func (t *Tracker) Putback(b Batch) {
	if len(b.segs) == 0 {
		return
	}
	if _, ok := t.ready[b.Table]; !ok {
		t.tables = append(t.tables, b.Table)
	}
	t.ready[b.Table] = append(append([]segment(nil), b.segs...), t.ready[b.Table]...)
	for _, s := range b.segs {
		t.held += len(s.ids)
		t.relN += len(s.ids)
	}
	t.enforce()
}

// Stats returns the counters.
func (t *Tracker) Stats() Stats {
	s := t.stats
	s.Held, s.Releasable = t.held, t.relN
	return s
}

func (t *Tracker) due(at, cutoff time.Time) bool {
	return t.cfg.Retain <= 0 || !at.After(cutoff)
}

func (t *Tracker) setReady(tab string, segs []segment) {
	if len(segs) > 0 {
		t.ready[tab] = segs
		return
	}
	delete(t.ready, tab)
	t.scratch = t.scratch[:0]
	for _, x := range t.tables {
		if x != tab {
			t.scratch = append(t.scratch, x)
		}
	}
	t.tables, t.scratch = t.scratch, t.tables
}

// enforce applies the caps, dropping the oldest ids first (see the package comment).
func (t *Tracker) enforce() {
	for t.held > t.cfg.MaxIDs && t.relN > 0 {
		t.dropOldestReleased(t.held - t.cfg.MaxIDs)
	}
	for i := 0; t.held > t.cfg.MaxIDs && i < len(t.queue); i++ {
		t.dropEntryIDs(t.queue[i])
	}
	if t.held > t.cfg.MaxIDs && t.open != nil {
		t.dropEntryIDs(t.open)
	}
	for len(t.queue) > t.cfg.MaxTxs {
		t.dropEntryIDs(t.queue[0])
		t.queue[0] = nil
		t.queue = t.queue[1:]
	}
}

// dropOldestReleased drops up to n released ids from the table whose oldest segment is oldest.
func (t *Tracker) dropOldestReleased(n int) {
	best := ""
	var bestAt time.Time
	for _, tab := range t.tables {
		if segs := t.ready[tab]; len(segs) > 0 && (best == "" || segs[0].at.Before(bestAt)) {
			best, bestAt = tab, segs[0].at
		}
	}
	segs := t.ready[best]
	s := segs[0]
	k := min(n, len(s.ids))
	if k == len(s.ids) {
		segs[0] = segment{}
		segs = segs[1:]
	} else {
		segs[0].ids = s.ids[k:]
	}
	t.setReady(best, segs)
	t.held -= k
	t.relN -= k
	t.stats.Dropped += int64(k)
}

func (t *Tracker) dropEntryIDs(e *txEntry) {
	t.held -= e.n
	t.stats.Dropped += int64(e.n)
	e.n, e.segs, e.tabs = 0, nil, nil
}
