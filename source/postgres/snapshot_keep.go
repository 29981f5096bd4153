package postgres

// The snapshot kept across Sources of one process (snapshot.go).
//
// The pipeline opens a new Source after any failure, and exactly_once re-reads a transaction
// too big to keep in memory (a spilled batch) from the stored position to redo it, applying what
// it learnt about failed records by their ordinal in the transaction: a re-read must give the
// same rows in the same order. A new snapshot on a new slot would not when the tables changed
// in between (a row inserted into free space, a row deleted). So the Adapter's Sources share a
// snapshotKeeper: the transaction that imported the slot's exported snapshot stays open, idle,
// and exports it again (pg_export_snapshot); every scan of the snapshot imports that. A Source
// opened without a stored position while the keeper holds the snapshot of the slot as it stands
// (its confirmed_flush_lsn still the snapshot's consistent point) reads the same snapshot from
// the same slot instead of dropping it. The keeper lets go of the snapshot once its position is
// confirmed, when a Source opens at a stored position, or keptIdle after the last Source closed
// with no other taking it (a process that lost the active role to a standby must not hold back
// VACUUM for ever); a process that ends loses it (then the
// next start drops the slot and takes a new snapshot, snapshot.go). Only a table rewrite (VACUUM
// FULL, CLUSTER) between two reads can change the heap order of the same snapshot; with
// outbox.order_column the scan breaks ties by ctid.

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// snapshotKeeper holds the snapshot the last Source took (see the file comment). Safe for
// concurrent use.
type snapshotKeeper struct {
	mu   sync.Mutex
	held *keptSnapshot
	idle *time.Timer // lets go of held keptIdle after the last Source closed (closed)
}

// keptIdle is how long a kept snapshot outlives the Source that read it, waiting for the next
// Source of the process (the pipeline reopens within seconds). A variable for tests.
var keptIdle = 5 * time.Minute

// keptSnapshot is an imported snapshot kept open.
type keptSnapshot struct {
	conn *pgx.Conn     // REPEATABLE READ READ ONLY transaction with the slot's snapshot, idle
	name string        // pg_export_snapshot() of that transaction
	slot string        // the slot whose creation exported it
	at   pglogrepl.LSN // the slot's consistent point
	time time.Time     // now() of the transaction
}

// keep imports the snapshot the slot's creation exported into a new kept transaction, replacing
// (and closing) any snapshot held before. It must run before any other command on the
// replication connection.
func (k *snapshotKeeper) keep(ctx context.Context, dsn, slot string, created pglogrepl.CreateReplicationSlotResult) (*keptSnapshot, error) {
	at, err := pglogrepl.ParseLSN(created.ConsistentPoint)
	if err != nil {
		return nil, fmt.Errorf("create replication slot %q: unreadable consistent point %q: %w", slot, created.ConsistentPoint, err)
	}
	if created.SnapshotName == "" {
		return nil, fmt.Errorf("create replication slot %q with EXPORT_SNAPSHOT: the server exported no snapshot", slot)
	}
	conn, err := connectSession(ctx, dsn)
	if err != nil {
		return nil, err
	}
	kept := &keptSnapshot{conn: conn, slot: slot, at: at}
	for _, q := range []string{"BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
		"SET TRANSACTION SNAPSHOT " + quoteLiteral(created.SnapshotName),
		"SET LOCAL idle_in_transaction_session_timeout = 0"} { // it idles by design
		if _, err = conn.Exec(ctx, q); err != nil {
			break
		}
	}
	if err == nil {
		err = conn.QueryRow(ctx, `SELECT pg_export_snapshot(), now()`).Scan(&kept.name, &kept.time)
	}
	if err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("import the slot's exported snapshot %s: %w", created.SnapshotName, err)
	}
	k.set(kept)
	return kept, nil
}

func (k *snapshotKeeper) set(kept *keptSnapshot) {
	k.mu.Lock()
	old := k.held
	k.held = kept
	k.stopIdle()
	k.mu.Unlock()
	if old != nil {
		old.conn.Close(context.Background())
	}
}

// reusable returns the held snapshot when it is the snapshot of slot as si shows it now (the
// slot's confirmed_flush_lsn is still its consistent point: nothing after the snapshot was
// confirmed) and its transaction is still open; else it lets go of it and returns nil.
func (k *snapshotKeeper) reusable(ctx context.Context, slot string, si slotInfo) *keptSnapshot {
	k.mu.Lock()
	kept := k.held
	k.mu.Unlock()
	if kept == nil {
		return nil
	}
	ok := kept.slot == slot && si.confirmedLSN != nil && *si.confirmedLSN == kept.at.String()
	if ok {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := kept.conn.Exec(pctx, "SELECT 1")
		cancel()
		ok = err == nil
	}
	if !ok {
		k.release(kept)
		return nil
	}
	k.mu.Lock()
	k.stopIdle()
	k.mu.Unlock()
	return kept
}

// stopIdle stops the idle timer; k.mu is held.
func (k *snapshotKeeper) stopIdle() {
	if k.idle != nil {
		k.idle.Stop()
		k.idle = nil
	}
}

// closed is called when a Source sharing k closed: the held snapshot, if any, is let go of
// unless another Source takes it within keptIdle.
func (k *snapshotKeeper) closed(log *slog.Logger) {
	k.mu.Lock()
	defer k.mu.Unlock()
	kept := k.held
	if kept == nil {
		return
	}
	k.stopIdle()
	k.idle = time.AfterFunc(keptIdle, func() {
		if k.release(kept) {
			log.Info("snapshot released: no source opened again within the time a kept snapshot waits", "position", kept.at, "waited", keptIdle)
		}
	})
}

// release lets go of kept if it is still the held snapshot, and reports whether it was.
func (k *snapshotKeeper) release(kept *keptSnapshot) bool {
	k.mu.Lock()
	if k.held != kept || kept == nil {
		k.mu.Unlock()
		return false
	}
	k.held = nil
	k.stopIdle()
	k.mu.Unlock()
	kept.conn.Close(context.Background())
	return true
}

// releaseAny lets go of the held snapshot, if any.
func (k *snapshotKeeper) releaseAny() {
	k.mu.Lock()
	kept := k.held
	k.mu.Unlock()
	k.release(kept)
}

// readSnapshot opens a connection whose REPEATABLE READ transaction reads kept's snapshot.
func readSnapshot(ctx context.Context, dsn string, kept *keptSnapshot) (*snapshotRun, error) {
	conn, err := connectSession(ctx, dsn)
	if err != nil {
		return nil, err
	}
	if _, err = conn.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"); err == nil {
		_, err = conn.Exec(ctx, "SET TRANSACTION SNAPSHOT "+quoteLiteral(kept.name))
	}
	if err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("import the kept snapshot %s: %w", kept.name, err)
	}
	return &snapshotRun{conn: conn, at: kept.at, time: kept.time, kept: kept}, nil
}

// awaitConfirmed waits, after the snapshot was handed out, until its position is confirmed,
// then lets the keeper go of it; it returns early on Close (ctx), keeping it for the next
// Source of the process.
func (s *Source) awaitConfirmed(ctx context.Context, run *snapshotRun) {
	select {
	case <-s.snap.confirmedCh:
	case <-ctx.Done():
		return
	}
	s.keeper.release(run.kept)
	s.log.Info("snapshot released: its position is confirmed", "position", run.at)
}

// noteConfirmed wakes awaitConfirmed when a Confirm reaches the snapshot's position.
func (s *Source) noteConfirmed(lsn pglogrepl.LSN) {
	if c := s.snap.confirmedCh; c != nil && lsn >= s.snap.at {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}
