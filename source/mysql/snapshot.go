package mysql

// Snapshot (source.mysql.snapshot: initial): at a first start (no stored position), the rows
// already in the outbox tables are published from one consistent read, then the binlog is
// streamed from exactly the position of that read.
//
// Why there is no gap and no row twice: the read is an InnoDB consistent snapshot (START
// TRANSACTION WITH CONSISTENT SNAPSHOT, REPEATABLE READ) taken together with the binlog position
// it corresponds to, so every transaction committed before that position is in the snapshot and
// every one after it is not, and the binlog from the position holds exactly the latter.
//
//   - MariaDB: the binlog takes part in the snapshot (group commit's consistent snapshot): after
//     START TRANSACTION WITH CONSISTENT SNAPSHOT, the status variables binlog_snapshot_file and
//     binlog_snapshot_position are the binlog position of the snapshot, without any lock. With
//     GTID positions, BINLOG_GTID_POS(file, pos) turns it into the GTID position of the same
//     point (the global gtid_binlog_pos is not: it moves with commits after the snapshot).
//   - MySQL: the binlog position is not tied to a snapshot, so commits are stopped for an
//     instant: FLUSH TABLES WITH READ LOCK, START TRANSACTION WITH CONSISTENT SNAPSHOT, SHOW
//     BINARY LOG STATUS (SHOW MASTER STATUS before 8.2; file, pos and Executed_Gtid_Set), UNLOCK
//     TABLES, as mysqldump --single-transaction --source-data does. It needs the RELOAD
//     privilege, and FLUSH TABLES waits for running statements (a long query delays it, and
//     writers wait behind it). LOCK INSTANCE FOR BACKUP is not enough: it does not stop commits.
//
// The rows come out of Next as one source transaction, in chunks of Config.ChunkRows rows and
// Config.ChunkBytes bytes (More on all of them), table after table in source.tables order, each
// in Config.OrderColumn's order or the primary key's (scan.go); then a closing chunk without
// rows carries the snapshot's position, with CommitTime the time the snapshot was taken. So the
// pipeline stores no position until every row of the snapshot is delivered; a crash or stop in
// the middle leaves none stored, and the next start takes a new snapshot: rows may then be
// delivered again (same ids, so consumers deduplicate), none is lost. Within one process, a
// Source of the same Adapter opened again without a stored position (the pipeline's reopen,
// exactly_once's redo of a spilled transaction) reads the same snapshot again instead: the same
// rows, in the same order, ending at the same position (snapshot_keep.go). A stored position always
// wins: a start with one never snapshots. The binlog stream starts after the closing chunk, from
// the snapshot's position; the server must keep its binlogs from then on for as long as the
// snapshot takes.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/outboxd/outboxd/source"
)

// Snapshot modes (source.mysql.snapshot).
const (
	SnapshotNever   = "never"
	SnapshotInitial = "initial"
)

// snapshotInitial reports whether a source.mysql.snapshot value asks for the initial snapshot;
// an error for a value that is neither.
func snapshotInitial(v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", SnapshotNever:
		return false, nil
	case SnapshotInitial:
		return true, nil
	}
	return false, fmt.Errorf("%q is not never or initial", v)
}

// snapSQL is what openSnapshot needs of a connection (a fake in tests of the MySQL branch).
type snapSQL interface {
	exec(q string) error
	rows(q string, args ...any) ([][]string, error)
}

type connSQL struct{ c *client.Conn }

func (s connSQL) exec(q string) error {
	r, err := s.c.Execute(q)
	if err != nil {
		return cause(err)
	}
	r.Close()
	return nil
}

func (s connSQL) rows(q string, args ...any) ([][]string, error) { return query(s.c, q, args...) }

const startSnapshot = "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"

// openSnapshot starts a consistent snapshot on a connection in REPEATABLE READ (scanSession) and
// returns the binlog position of it in the given form, without origin (see the file comment).
func openSnapshot(db snapSQL, mariadb bool, kind posKind) (position, error) {
	if mariadb {
		if err := db.exec(startSnapshot); err != nil {
			return position{}, fmt.Errorf("start a consistent snapshot: %w", err)
		}
		rows, err := db.rows("SHOW STATUS LIKE 'binlog_snapshot_%'")
		if err != nil {
			return position{}, fmt.Errorf("read the snapshot's binlog position (SHOW STATUS LIKE 'binlog_snapshot_%%'): %w", err)
		}
		file, pos, err := parseSnapshotStatus(rows)
		if err != nil {
			return position{}, err
		}
		if kind != kindMariaGTID {
			return position{kind: kindFile, file: file, pos: pos}, nil
		}
		g, err := db.rows("SELECT IFNULL(BINLOG_GTID_POS(?, ?), '')", file, pos)
		if err != nil || len(g) != 1 || len(g[0]) != 1 {
			return position{}, fmt.Errorf("turn the snapshot's binlog position %s:%d into a GTID position (BINLOG_GTID_POS): %v %w", file, pos, g, err)
		}
		p, err := parsePosition2(g[0][0], kindMariaGTID)
		if err != nil {
			return position{}, fmt.Errorf("GTID position of the snapshot (%s:%d): %w", file, pos, err)
		}
		p.binlog, p.binlogPos = file, pos
		return p, nil
	}
	if err := db.exec("FLUSH TABLES WITH READ LOCK"); err != nil {
		return position{}, fmt.Errorf("FLUSH TABLES WITH READ LOCK, to read a binlog position consistent with the snapshot (source.mysql.snapshot: initial on MySQL needs the RELOAD privilege: GRANT RELOAD ON *.* TO the outboxd user): %w", err)
	}
	st, err := func() (binlogStat, error) {
		if err := db.exec(startSnapshot); err != nil {
			return binlogStat{}, fmt.Errorf("start a consistent snapshot: %w", err)
		}
		rows, err := db.rows("SHOW BINARY LOG STATUS") // MySQL 8.2+
		if err != nil {
			if rows, err = db.rows("SHOW MASTER STATUS"); err != nil {
				return binlogStat{}, fmt.Errorf("read the binlog position under the read lock: %w", err)
			}
		}
		return binlogStatFromRows(rows)
	}()
	if uerr := db.exec("UNLOCK TABLES"); uerr != nil && err == nil {
		err = fmt.Errorf("UNLOCK TABLES after reading the snapshot's position: %w", uerr)
	}
	if err != nil {
		return position{}, err
	}
	if kind != kindMySQLGTID {
		return position{kind: kindFile, file: st.file, pos: st.pos}, nil
	}
	p, err := parsePosition2(st.executed, kindMySQLGTID)
	if err != nil {
		return position{}, fmt.Errorf("Executed_Gtid_Set of the snapshot: %w", err)
	}
	p.binlog, p.binlogPos = st.file, st.pos
	return p, nil
}

// parseSnapshotStatus reads MariaDB's binlog_snapshot_file and binlog_snapshot_position. Pure.
func parseSnapshotStatus(rows [][]string) (string, uint32, error) {
	var file, pos string
	for _, r := range rows {
		if len(r) < 2 {
			continue
		}
		switch strings.ToLower(r[0]) {
		case "binlog_snapshot_file":
			file = r[1]
		case "binlog_snapshot_position":
			pos = r[1]
		}
	}
	n, err := strconv.ParseUint(pos, 10, 32)
	if file == "" || err != nil {
		return "", 0, fmt.Errorf("the server reports no binlog position for the snapshot (binlog_snapshot_file %q, binlog_snapshot_position %q): is log_bin on?", file, pos)
	}
	return file, uint32(n), nil
}

// binlogStatFromRows reads a SHOW BINARY LOG STATUS answer. Pure.
func binlogStatFromRows(rows [][]string) (binlogStat, error) {
	if len(rows) == 0 || len(rows[0]) < 2 {
		return binlogStat{}, errors.New("the server reports no binlog position (is log_bin on?)")
	}
	n, err := strconv.ParseUint(rows[0][1], 10, 32)
	if err != nil {
		return binlogStat{}, fmt.Errorf("binlog status position %q: %w", rows[0][1], err)
	}
	st := binlogStat{file: rows[0][0], pos: uint32(n)}
	if len(rows[0]) > 4 {
		st.executed = rows[0][4]
	}
	return st, nil
}

// snapshot is a running initial snapshot: a goroutine streams the tables' rows (scanRows) on
// the snapshot's connection and hands them to Next in chunks.
type snapshot struct {
	ch     chan snapChunk
	cancel context.CancelFunc // ends the goroutine (the kept connection stays: snapshot_keep.go)
	at     time.Time          // when the snapshot was taken: every chunk's CommitTime
	final  source.Position    // the snapshot's position, as the closing chunk carries it
	rows   int64              // rows handed out
	err    error              // the failure, returned by every later Next
	done   bool               // the closing chunk was handed out
	logged time.Time          // the last progress log line
	once   sync.Once
	// complete is set by run before it closes ch when every table was read to its end: a
	// channel closed without it (stopped) must never pass for the end of the snapshot.
	complete bool
}

type snapChunk struct {
	rows []source.Row
	err  error
}

func (sn *snapshot) stop() { sn.once.Do(sn.cancel) }

// beginSnapshot takes the snapshot and starts reading it; the position is the binlog position
// of the snapshot in the given form, with its origin. A snapshot the Adapter's keeper still
// holds (snapshot_keep.go) is read again instead of taking a new one. ctx bounds this call only.
func (s *Source) beginSnapshot(ctx context.Context, kind posKind) (*snapshot, position, error) {
	kept, err := s.keeper.take(ctx, kind, s.info.origin(), s.log)
	switch {
	case err == nil:
		s.log.Info("snapshot read again: the snapshot this process took and has not yet delivered (the same rows in the same order, the same position; source.mysql.snapshot: initial)",
			"tables", len(kept.tables), "position", kept.pos.String(), "taken", kept.at.UTC().Format(time.RFC3339))
	case errors.Is(err, errNoKept):
		if kept, err = s.takeSnapshot(ctx, kind); err != nil {
			return nil, position{}, ctxErr(ctx, fmt.Errorf("snapshot (source.mysql.snapshot: initial): %w", err))
		}
		s.keeper.keep(kept)
		s.log.Info("snapshot taken: publishing the rows already in the outbox tables (source.mysql.snapshot: initial)",
			"tables", len(kept.tables), "position", kept.pos.String())
	default:
		return nil, position{}, fmt.Errorf("snapshot (source.mysql.snapshot: initial): wait for the kept snapshot: %w", err)
	}
	s.mu.Lock()
	s.readKept = kept
	s.mu.Unlock()
	s.kept.Store(kept)
	sctx, cancel := context.WithCancel(context.Background())
	sn := &snapshot{ch: make(chan snapChunk), cancel: cancel, at: kept.at, logged: time.Now()}
	batch, maxBytes := s.cfg.ChunkRows, max(s.cfg.ChunkBytes, 0)
	if batch <= 0 {
		batch = source.ScanBatch // no row cap: the scan still reads in batches
	}
	go sn.run(sctx, s.keeper, kept, source.ScanQuery{OrderBy: s.cfg.OrderColumn, Batch: batch}, maxBytes)
	return sn, kept.pos, nil
}

// takeSnapshot connects, reads the tables' columns and takes a new consistent snapshot; its
// connection is busy for the caller. ctx bounds this call only.
func (s *Source) takeSnapshot(ctx context.Context, kind posKind) (*keptSnap, error) {
	c, err := connect(ctx, s.dsn)
	if err != nil {
		return nil, err
	}
	unbind := context.AfterFunc(ctx, func() { c.Close() }) // Open's ctx bounds the setup
	defer unbind()
	if err := scanSession(c); err != nil {
		c.Close()
		return nil, err
	}
	var tables []*scanTable
	for _, name := range s.cfg.Tables {
		t, err := s.loadScanTable(c, name)
		if err == nil {
			_, err = t.orderBy(s.cfg.OrderColumn)
		}
		if err != nil {
			c.Close()
			return nil, err
		}
		tables = append(tables, t)
	}
	at := time.Now()
	p, err := openSnapshot(connSQL{c}, s.info.mariadb, kind)
	if err != nil {
		c.Close()
		return nil, err
	}
	o := s.info.origin()
	p.serverID, p.serverUUID = o.serverID, o.serverUUID
	return newKept(c, p, at, tables), nil
}

// run reads every table of the kept snapshot in turn and hands the chunks over. Stopped, it
// reads the rest of the current table's result set without handing it over, so the connection
// (and its transaction) can be read again by the next Source; it gives the connection back to
// the keeper when done or stopped, and lets go of the snapshot when a read failed.
func (sn *snapshot) run(ctx context.Context, k *snapKeeper, kept *keptSnap, q source.ScanQuery, maxBytes int) {
	defer close(sn.ch)
	draining := false
	for _, t := range kept.tables {
		if ctx.Err() != nil {
			break
		}
		q.Table = t.name
		err := scanRows(kept.conn, t, q, maxBytes, func(rows []source.Row) error {
			if draining {
				return nil
			}
			select {
			case sn.ch <- snapChunk{rows: rows}:
			case <-ctx.Done():
				draining = true // read the result set to its end: the connection stays usable
			}
			return nil
		})
		if err != nil {
			k.release(kept) // the connection is in an unknown state: no Source reads it again
			kept.free()
			select {
			case sn.ch <- snapChunk{err: ctxErr(ctx, err)}:
			case <-ctx.Done():
			}
			return
		}
	}
	sn.complete = ctx.Err() == nil
	kept.free()
}

// snapshotNext returns the snapshot's next chunk; ok false once the closing chunk is out (the
// stream then starts).
func (s *Source) snapshotNext(ctx context.Context, sn *snapshot) (tx source.Tx, ok bool, err error) {
	if sn.err != nil {
		return source.Tx{}, true, sn.err
	}
	if sn.done {
		return source.Tx{}, false, nil
	}
	select {
	case <-ctx.Done():
		return source.Tx{}, true, ctx.Err()
	case c, open := <-sn.ch:
		switch {
		case c.err != nil:
			sn.err = fmt.Errorf("snapshot of the outbox tables (source.mysql.snapshot: initial) failed after %d row(s); no position was stored, "+
				"so the next start takes a new snapshot (rows already published are published again, with the same ids): %w", sn.rows, c.err)
			return source.Tx{}, true, sn.err
		case !open:
			if s.isClosed() {
				return source.Tx{}, true, ErrClosed
			}
			if !sn.complete {
				sn.err = fmt.Errorf("snapshot of the outbox tables (source.mysql.snapshot: initial) stopped after %d row(s) before its end; no position was stored, "+
					"so the next start takes a new snapshot", sn.rows)
				return source.Tx{}, true, sn.err
			}
			sn.done = true
			s.log.Info("snapshot delivered: streaming the binlog from the snapshot's position", "rows", sn.rows, "position", string(sn.final),
				"took", time.Since(sn.at).Round(time.Millisecond).String())
			return source.Tx{Position: sn.final, CommitTime: sn.at}, true, nil
		}
		sn.rows += int64(len(c.rows))
		if time.Since(sn.logged) >= 10*time.Second {
			sn.logged = time.Now()
			s.log.Info("snapshot in progress", "rows", sn.rows, "table", c.rows[0].Table, "since", time.Since(sn.at).Round(time.Second).String())
		}
		tx := source.Tx{Rows: c.rows, More: true, CommitTime: sn.at}
		tx.Bytes = source.ChunkBytes(&tx)
		return tx, true, nil
	}
}

// nextSnapshot is Next while a snapshot runs: its chunks, then (once) the start of the stream
// from the snapshot's position. ok false: the stream runs, Next goes on with it.
func (s *Source) nextSnapshot(ctx context.Context) (source.Tx, bool, error) {
	s.mu.Lock()
	sn, closed := s.snap, s.closed
	s.mu.Unlock()
	if sn == nil {
		return source.Tx{}, false, nil
	}
	if closed {
		return source.Tx{}, true, ErrClosed
	}
	tx, ok, err := s.snapshotNext(ctx, sn)
	if ok || err != nil {
		return tx, true, err
	}
	s.mu.Lock()
	s.snap = nil
	s.mu.Unlock()
	sn.stop()
	if s.ownKeeper { // read to its end and no other Source reads it again: end its transaction
		s.keeper.releaseAny()
	}
	if err := s.startStream(ctx, s.asm.resume()); err != nil {
		if errors.Is(err, ErrClosed) || ctx.Err() != nil {
			return source.Tx{}, true, err
		}
		if err := s.recover(ctx, err); err != nil {
			return source.Tx{}, true, fmt.Errorf("start the binlog stream at the snapshot's position %s: %w", sn.final, err)
		}
	}
	return source.Tx{}, false, nil
}
