package postgres

// source.postgres.snapshot: initial — the rows already in the outbox tables at the first start
// of a new slot, then the stream from the slot's start, with no gap and no row twice.
//
// How. With no stored position, setup creates the slot with EXPORT_SNAPSHOT: the walsender
// returns the slot's consistent point C and the name of a snapshot that sees exactly the
// transactions committed before C (the slot decodes every transaction committing after C). The
// snapshot stays exported only while the replication connection runs no other command, so
// before START_REPLICATION a second, normal connection imports it (BEGIN ISOLATION LEVEL
// REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT): that transaction keeps it for as long as
// it runs, whatever the replication connection does next. Replication then starts at once, so
// the slot is held by this walsender and the stream loop answers the server (status updates,
// no wal_sender_timeout) during the scan; the loop holds its first decoded transaction back
// until Next asks, and Next hands out the whole snapshot first.
//
// What Next hands out. Every configured table in source.tables order, each read with the
// table scan of scan.go (rows shaped as the stream's; outbox.order_column ascending, else the
// heap's order), as ONE source transaction in chunks of the stream's caps (ChunkRows,
// ChunkBytes; More on all but the last). The last chunk has Position C and every chunk's
// CommitTime is the snapshot's time (now() of the importing transaction). So the pipeline
// stores no position until the whole snapshot is delivered; then C, after which the stream's
// transactions (all ending after C) follow. Empty tables give one Tx with no rows at C.
//
// Reopened before its position was stored. No position is stored, the slot exists. Within the
// process (the pipeline opening a new Source after an error, or exactly_once re-reading a
// transaction too big to keep in memory) the Adapter's snapshot keeper still holds the snapshot:
// the new Source reads the same snapshot from the same slot, the same rows in the same order
// (snapshot_keep.go). After a crash or a restart the exported snapshot is gone with its
// transaction, and a slot cannot export another one, so on the next start with no stored
// position and snapshot: initial, outboxd drops the slot (loud WARN saying why) and takes the
// snapshot again with a new one: every row in the tables is published (again for those already
// delivered: same ids, consumers deduplicate). Rows that were written after the old slot's start
// and are no longer in the tables when the new snapshot is taken (deleted by the application,
// e.g. an insert-then-delete outbox) are not published: snapshot: initial is for tables that
// keep their rows. The same happens when the stored position was lost while a slot exists (the
// offsets file removed, another offsets store): with snapshot: initial a missing position means
// "first start". A slot of another kind (not logical pgoutput on this database) is refused,
// never dropped; an active one (another process reads it) is refused with ErrSlotActive.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/source"
)

// Values of Config.Snapshot (source.postgres.snapshot); "" is SnapshotNever.
const (
	SnapshotNever   = "never"
	SnapshotInitial = "initial"
)

// snapshotRun is an imported snapshot waiting to be handed out.
type snapshotRun struct {
	conn *pgx.Conn     // its REPEATABLE READ transaction is open with the snapshot imported
	at   pglogrepl.LSN // the slot's consistent point: the snapshot's position
	time time.Time     // now() of the transaction that imported it from the slot
	kept *keptSnapshot // the keeper's transaction it was imported from (snapshot_keep.go)
}

// snapState is the Source's part of a snapshot (a Source field): set by start before the
// snapshot goroutine runs; over is Next's own (Next is called from one goroutine).
type snapState struct {
	ch          chan source.Tx // the snapshot's chunks, unbuffered; closed after the last
	failed      chan struct{}  // closed when the snapshot failed; err is set before
	done        chan struct{}  // closed when the snapshot goroutine ends
	err         error
	at          pglogrepl.LSN // the snapshot's position
	confirmedCh chan struct{} // a Confirm reached at (capacity 1)
	over        bool          // Next saw ch closed: the stream's transactions follow

	created func() // test hook: runs after the slot's creation, before the snapshot's import
}

// dropForSnapshot drops the existing slot si so that a new one exports a snapshot: there is no
// stored position and snapshot is initial (see the file comment). It refuses a slot of another
// kind, or one that another process reads.
func (s *Source) dropForSnapshot(ctx context.Context, admin *pgx.Conn, si slotInfo) error {
	if err := s.checkSlotKind(si); err != nil {
		return err
	}
	slot := s.cfg.Slot
	s.log.Warn("source.postgres.snapshot is initial and there is no stored position, but the slot exists: "+
		"an earlier snapshot did not complete (outboxd stopped before all of it was delivered) or the stored position was lost. "+
		"Dropping the slot and taking the snapshot again with a new one: every row in the tables is published again (consumers deduplicate by id); "+
		"rows written since the old slot's start that are no longer in the tables are not. To keep the slot and stream from its position instead, set source.postgres.snapshot: never",
		"confirmed_flush_lsn", deref(si.confirmedLSN), "wal_status", si.walStatus)
	deadline := time.Now().Add(slotActiveRetry)
	var err error
	for {
		_, err = admin.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, slot)
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" || !time.Now().Before(deadline) {
			break
		}
		// Still active for a previous walsender (ours, closing after a failure?): wait briefly,
		// as setup does before START_REPLICATION; after that another process holds it.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55006" {
			return fmt.Errorf("drop replication slot %q to take the snapshot again: %w (%w): another process (another outboxd?) is reading this slot", slot, ErrSlotActive, err)
		}
		return fmt.Errorf("drop replication slot %q to take the snapshot again (source.postgres.snapshot: initial, no stored position): %w: drop it yourself (SELECT pg_drop_replication_slot('%s')) or set source.postgres.snapshot: never", slot, err, slot)
	}
	s.log.Info("slot dropped", "why", "snapshot: initial with no stored position")
	return nil
}

// checkOrderColumn refuses, before any slot is created or dropped, an outbox.order_column that
// a table lacks (the snapshot would fail at that table's scan, and again at every start).
func (s *Source) checkOrderColumn(ctx context.Context, admin *pgx.Conn) error {
	if s.cfg.OrderColumn == "" || s.rel.loaded == nil {
		return nil
	}
	for _, t := range s.rel.loaded.Tables {
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_attribute WHERE attrelid = $1 AND attname = $2 AND attnum > 0 AND NOT attisdropped`,
			t.OID, s.cfg.OrderColumn).Scan(&n); err != nil {
			return fmt.Errorf("look up outbox.order_column %q in %s: %w", s.cfg.OrderColumn, t.Name, err)
		}
		if n == 0 {
			return fmt.Errorf("outbox.order_column %q is not a column of %s, and source.postgres.snapshot: initial orders the snapshot's rows by it: add the column, fix outbox.order_column, or remove it (the table's own order)", s.cfg.OrderColumn, t.Name)
		}
	}
	return nil
}

// takeSnapshot returns the snapshot to hand out from the slot just created: imported into the
// keeper (snapshot_keep.go) and read by a transaction of its own. It must run before any other
// command on the replication connection.
func (s *Source) takeSnapshot(ctx context.Context, created pglogrepl.CreateReplicationSlotResult) (*snapshotRun, error) {
	kept, err := s.keeper.keep(ctx, s.cfg.DSN, s.cfg.Slot, created)
	if err == nil {
		var run *snapshotRun
		if run, err = readSnapshot(ctx, s.cfg.DSN, kept); err == nil {
			s.log.Info("snapshot imported", "snapshot", created.SnapshotName, "position", kept.at, "tables", s.cfg.Tables)
			return run, nil
		}
		s.keeper.release(kept)
	}
	return nil, fmt.Errorf("snapshot: %w: outboxd stops; the next start drops the slot and takes the snapshot again", err)
}

// runSnapshot hands out the snapshot over s.snap.ch (snapshot.go's file comment), then ends;
// on Close (ctx) its error is ErrClosed.
func (s *Source) runSnapshot(ctx context.Context, run *snapshotRun) {
	defer close(s.snap.done)
	err := s.handOutSnapshot(ctx, run)
	run.conn.Close(context.Background())
	if err != nil {
		if ctx.Err() != nil {
			err = ErrClosed
		} else {
			err = fmt.Errorf("snapshot (source.postgres.snapshot: initial): %w: outboxd stops; no position was stored, so the next start takes the snapshot again", err)
		}
		s.snap.err = err
		close(s.snap.failed)
		return
	}
	close(s.snap.ch)
	s.awaitConfirmed(ctx, run) // snapshot_keep.go
}

func (s *Source) handOutSnapshot(ctx context.Context, run *snapshotRun) error {
	start := time.Now()
	c := snapshotChunker{rows: s.cfg.ChunkRows, bytes: s.cfg.ChunkBytes, at: run.time}
	batch := source.ScanBatch
	if s.cfg.ChunkRows > 0 {
		batch = s.cfg.ChunkRows
	}
	send := func(tx source.Tx) error {
		select {
		case s.snap.ch <- tx:
			s.noteChange()
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	total := 0
	for _, table := range s.cfg.Tables {
		n := 0
		err := scanTable(ctx, run.conn, source.ScanQuery{Table: table, OrderBy: s.cfg.OrderColumn, Batch: batch}, s.cfg.ChunkBytes, func(rows []source.Row) error {
			n += len(rows)
			for _, r := range rows {
				if chunk, ok := c.add(r); ok {
					if err := send(chunk); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		total += n
		s.log.Info("snapshot: table read", "table", table, "rows", n)
	}
	if _, err := run.conn.Exec(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("end the snapshot's transaction: %w", err)
	}
	if err := send(c.last(lsnPosition(run.at))); err != nil {
		return err
	}
	s.log.Info("snapshot handed out; the stream follows from its position", "rows", total, "position", run.at,
		"elapsed", time.Since(start).Round(time.Millisecond))
	return nil
}

// snapshotChunker cuts the snapshot's rows into the chunks of one source transaction, as the
// Decoder cuts a transaction's (Decoder.add): at most rows rows and bytes bytes a chunk
// (source.RowBytes per row; a single bigger row is a chunk alone; 0 or less: no cap).
type snapshotChunker struct {
	rows, bytes int
	at          time.Time // every chunk's CommitTime
	pending     []source.Row
	size        int
}

// add appends r; when the pending rows were full, they come back first as a More chunk.
func (c *snapshotChunker) add(r source.Row) (source.Tx, bool) {
	rb := source.RowBytes(&r)
	var chunk source.Tx
	cut := false
	if n := len(c.pending); n > 0 && (c.rows > 0 && n >= c.rows || c.bytes > 0 && c.size+rb > c.bytes) {
		chunk = source.Tx{CommitTime: c.at, Rows: c.pending, More: true, Bytes: c.size}
		c.pending, c.size, cut = make([]source.Row, 0, n), 0, true
	}
	c.pending = append(c.pending, r)
	c.size += rb
	return chunk, cut
}

// last is the closing chunk: the pending rows (none when every table was empty) at pos.
func (c *snapshotChunker) last(pos source.Position) source.Tx {
	tx := source.Tx{Position: pos, CommitTime: c.at, Rows: c.pending, Bytes: c.size}
	c.pending, c.size = nil, 0
	return tx
}
