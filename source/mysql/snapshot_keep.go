package mysql

// The snapshot kept across the Sources of one process (snapshot.go).
//
// The pipeline opens a new Source after any failure, and exactly_once re-reads a transaction
// too big to keep in memory (a spilled batch) from the stored position to redo it, applying what
// it learnt about failed records by their ordinal in the transaction: the re-read must give the
// same rows in the same order and end at the same position. A snapshot not yet delivered has no
// stored position, so the re-opened Source opens at "" and, left alone, would take a new
// consistent read at a new binlog position: rows committed in between (say uuid keys that sort
// before rows already read) would shift the ordinals, and the redo would dead-letter the wrong
// row, or fail on the changed end position (internal/pipeline/delivery's redo check).
//
// So the Adapter's Sources share a snapKeeper: the connection whose transaction holds the
// consistent snapshot (START TRANSACTION WITH CONSISTENT SNAPSHOT, REPEATABLE READ) stays open
// after it was read, with the snapshot's binlog position and the tables' columns as they were
// read. MySQL cannot hand a snapshot to another connection, so the re-read runs on that same
// connection, in that same transaction: every SELECT of it reads the same snapshot, in the same
// ORDER BY (the order column, then the primary key: a total order; a table without a primary
// key is read in its hidden row id order), so the rows, their order and the closing position
// are those of the first read. A Source closed in the middle of a table reads (and drops) the
// rest of that table's result set, so the connection can run the next Source's SELECT; one that
// failed on it (a network error, a value that cannot be converted) lets the snapshot go, and
// the next Source takes a new one.
//
// The keeper lets go of the snapshot (closing its connection ends the read-only transaction):
//   - when a Source that read it gets its position confirmed (Confirm): it is stored, no Source
//     of this process opens at "" again;
//   - when a Source opens at a stored position;
//   - keptIdle after the last Source that read it closed, with none taking it again;
//   - when the process ends (then the next start takes a new snapshot, as before).
//
// keptIdle is short (2 minutes; the pipeline reopens a source within its 30 s backoff cap) on
// purpose: while the transaction is open it holds the outbox tables' shared metadata locks, so
// an ALTER TABLE of an outbox table waits for it, and the writers queue behind that ALTER; and
// InnoDB cannot purge the row versions it may still read. Sources built with New (not through
// the Adapter) keep nothing: Close lets the snapshot go at once.

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
)

// keptIdle is how long a kept snapshot outlives the last Source that read it. A variable for
// tests.
var keptIdle = 2 * time.Minute

// snapKeeper holds the snapshot the Sources of one Adapter share (see the file comment). The
// zero value holds nothing; safe for concurrent use.
type snapKeeper struct {
	mu    sync.Mutex
	held  *keptSnap
	users int         // Sources that took held and have not closed
	idle  *time.Timer // lets go of held keptIdle after its last user closed
}

// keptSnap is a consistent snapshot kept open on its connection. One user at a time has the
// connection (acquire, free); only that user closes it while it has it (go-mysql's Conn is not
// safe for a Close beside a read): close then interrupts the user's read and free closes.
type keptSnap struct {
	conn   *client.Conn // REPEATABLE READ transaction WITH CONSISTENT SNAPSHOT, READ ONLY
	pos    position     // its binlog position, with the origin
	at     time.Time    // when it was taken: the CommitTime of its chunks
	tables []*scanTable // the tables as first read, in source.tables order
	busy   chan struct{}
	mu     sync.Mutex
	inUse  bool // a user has the connection
	dead   bool // let go of: closed by close, or by free when it was in use
	once   sync.Once
}

// newKept returns a kept snapshot whose connection is in use by its creator (free when done).
func newKept(c *client.Conn, p position, at time.Time, tables []*scanTable) *keptSnap {
	k := &keptSnap{conn: c, pos: p, at: at, tables: tables, busy: make(chan struct{}, 1), inUse: true}
	k.busy <- struct{}{}
	return k
}

// acquire waits (bounded by ctx) for the connection; errNoKept once it was let go of.
func (k *keptSnap) acquire(ctx context.Context) error {
	select {
	case k.busy <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	k.mu.Lock()
	k.inUse = true
	dead := k.dead
	k.mu.Unlock()
	if dead {
		k.free()
		return errNoKept
	}
	return nil
}

// free gives the connection back (its last SELECT read to the end, or failed); it closes it
// when it was let go of meanwhile.
func (k *keptSnap) free() {
	k.mu.Lock()
	k.inUse = false
	dead := k.dead
	k.mu.Unlock()
	if dead {
		k.once.Do(func() { k.conn.Close() })
	}
	<-k.busy
}

// close lets go of the connection, ending the transaction: at once when no one uses it, else
// by interrupting the user's read (a past deadline) and leaving the Close to its free.
func (k *keptSnap) close() {
	k.mu.Lock()
	k.dead = true
	inUse := k.inUse
	k.mu.Unlock()
	if !inUse {
		k.once.Do(func() { k.conn.Close() })
		return
	}
	if pc := k.conn.Conn; pc != nil && pc.Conn != nil {
		_ = pc.Conn.SetDeadline(time.Unix(1, 0))
	}
}

// keep makes kept, just taken by a Source, the held snapshot, letting go of any other.
func (k *snapKeeper) keep(kept *keptSnap) {
	k.mu.Lock()
	old := k.held
	k.held, k.users = kept, 1
	k.stopIdle()
	k.mu.Unlock()
	if old != nil && old != kept {
		old.close()
	}
}

// errNoKept: no snapshot to take again (a new one is taken).
var errNoKept = errors.New("no kept snapshot")

// take returns the held snapshot for a Source that opens without a stored position, its
// connection busy for the caller, when it can be read again: its position has the form kind,
// it was taken on the server o, and its connection answers. Otherwise it lets go of it and
// returns errNoKept. It waits (bounded by ctx) for a closed Source's read of it to end.
func (k *snapKeeper) take(ctx context.Context, kind posKind, o origin, log *slog.Logger) (*keptSnap, error) {
	k.mu.Lock()
	kept := k.held
	k.mu.Unlock()
	if kept == nil {
		return nil, errNoKept
	}
	if kept.pos.kind != kind || kept.pos.serverID != o.serverID || kept.pos.serverUUID != o.serverUUID {
		log.Info("kept snapshot not read again: the server or the position form changed; taking a new snapshot", "position", kept.pos.String())
		k.release(kept)
		return nil, errNoKept
	}
	if err := kept.acquire(ctx); err != nil {
		return nil, err
	}
	if err := kept.conn.Ping(); err != nil {
		kept.free()
		k.release(kept)
		log.Warn("kept snapshot lost (its connection does not answer); taking a new snapshot", "position", kept.pos.String(), "error", cause(err).Error())
		return nil, errNoKept
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.held != kept { // let go of meanwhile (timer, Confirm)
		kept.free()
		return nil, errNoKept
	}
	k.users++
	k.stopIdle()
	return kept, nil
}

// stopIdle stops the idle timer; k.mu is held.
func (k *snapKeeper) stopIdle() {
	if k.idle != nil {
		k.idle.Stop()
		k.idle = nil
	}
}

// closed is called when a Source that kept or took kept closed: once no Source uses it, it is
// let go of unless another takes it within keptIdle.
func (k *snapKeeper) closed(kept *keptSnap, log *slog.Logger) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.held != kept {
		return
	}
	if k.users--; k.users > 0 {
		return
	}
	k.stopIdle()
	d := keptIdle
	k.idle = time.AfterFunc(d, func() {
		if k.release(kept) {
			log.Info("snapshot released: no source opened again within the time a kept snapshot waits", "position", kept.pos.String(), "waited", d.String())
		}
	})
}

// release lets go of kept if it is still the held snapshot, and reports whether it was. The
// connection is closed in any case (by its user, if it is in use).
func (k *snapKeeper) release(kept *keptSnap) bool {
	if kept == nil {
		return false
	}
	k.mu.Lock()
	was := k.held == kept
	if was {
		k.held, k.users = nil, 0
		k.stopIdle()
	}
	k.mu.Unlock()
	kept.close()
	return was
}

// releaseAny lets go of the held snapshot, if any.
func (k *snapKeeper) releaseAny() {
	k.mu.Lock()
	kept := k.held
	k.mu.Unlock()
	k.release(kept)
}

// holding reports whether a snapshot is held (tests).
func (k *snapKeeper) holding() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.held != nil
}

// share makes s use k (the Adapter's keeper) instead of its own.
func (k *snapKeeper) share(s *Source) *Source {
	s.keeper, s.ownKeeper = k, false
	return s
}
