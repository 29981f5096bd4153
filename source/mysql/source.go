// Package mysql is the MySQL / MariaDB binlog source: it reads the server's binary log as a
// replica (go-mysql's BinlogSyncer) and hands the pipeline the INSERTs into the configured outbox
// tables, transaction by transaction in commit order, each in chunks of bounded size
// (Config.ChunkRows, Config.ChunkBytes).
//
// Positions (source.Position) are GTID positions when the server has GTIDs — MariaDB
// "domain-server-seq" per domain ("0-1-42", "0-1-42,1-2-7"), MySQL executed sets
// ("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-42") — else "binlog-file:pos" ("mysql-bin.000003:1234",
// the offset just after the transaction). See Config.UseGTID and ComparePosition.
//
// Column names come from the binlog itself when the server logs binlog_row_metadata=FULL;
// otherwise from information_schema, tracked across DDL along the stream (see schemaTracker).
// Open logs which of the two is in use.
//
// Idle progress: a transaction that touched no outbox table yields a Tx without rows at most once
// per Config.IdleProgressInterval, and an idle server's heartbeat yields one whenever the position
// moved; so stored offsets keep up with a busy server that writes no outbox rows.
//
// Refused or stopped, never skipped (preflight.go, guard.go): binlog filters that exclude an
// outbox database, binlog_row_metadata other than FULL (unless allowed), outbox columns in a
// charset that cannot be converted to UTF-8 (utf16, ucs2, utf32, latin1 and the common
// single-byte charsets are converted), outbox rows logged as statements or with a partial row
// image, and XA transactions prepared with outbox rows (the binlog splits them at XA PREPARE;
// see xaPrepare). Table names are compared as the server does (lower_case_table_names).
// Not supported: multi-source MariaDB setups where one captured table is written in several
// GTID domains (positions still work; ComparePosition is then only a heuristic).
package mysql

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outboxd/outboxd/internal/backoff"
	"github.com/outboxd/outboxd/source"
)

// ErrClosed is returned by Next after Close.
var ErrClosed = errors.New("mysql source closed")

// reconnectBackoff spaces the binlog reconnect attempts after a lost connection.
var reconnectBackoff = backoff.Policy{Min: 200 * time.Millisecond, Max: 5 * time.Second}

// Source is a binlog source. It implements source.Source; see that contract. Specific here:
//
//   - Open fails when the stored position's binlog was purged (the message names the missing
//     file or GTID and how to recover), when the server's binlog settings make capture
//     impossible (log_bin, binlog_format=ROW, binlog_row_image=FULL), and on connection or
//     privilege errors (REPLICATION SLAVE / REPLICATION CLIENT, or BINLOG MONITOR on MariaDB).
//   - Next delivers transactions with outbox inserts in chunks as their rows events arrive,
//     the last at their XID (or COMMIT) event, and empty idle-progress transactions (see
//     assembler). A lost connection is re-established from the last transaction boundary, for
//     up to Config.ReconnectTimeout; inside a chunked transaction, the rows already handed out
//     are skipped when it is read again.
//   - Confirm records the position and returns: MySQL keeps no server-side cursor for a
//     replica, so there is nothing to tell the server. Retention is the server's binlog expiry.
type Source struct {
	cfg      Config
	log      *slog.Logger
	dsn      dsn
	captured map[tableKey]string
	byDB     map[string]map[string]bool // captured, for allocation-free lookups by byte slices
	cfgErr   error

	info    serverInfo
	pre     preflight // what Open's server checks found (preflight.go)
	stamp   stamper   // adds the origin to positions handed out (startpos.go)
	asm     *assembler
	mu      sync.Mutex // guards closed, syncer, feed and stop (Close may run concurrently with Next)
	closed  bool
	syncer  *replication.BinlogSyncer
	feed    *eventFeed    // the current stream's events
	stop    chan struct{} // stops the current stream's watchdog
	live    liveness
	confirm atomic.Pointer[source.Position]
	snap    *snapshot // the initial snapshot while Next hands it out (snapshot.go); guarded by mu
	// The snapshot keeper (snapshot_keep.go): the Adapter's, shared by its Sources, or this
	// Source's own (New's: Close lets go of it). readKept is the kept snapshot this Source read
	// (guarded by mu); kept is that snapshot until a Confirm lets go of it.
	keeper    *snapKeeper
	ownKeeper bool
	readKept  *keptSnap
	kept      atomic.Pointer[keptSnap]

	// Events taken from the feed and not yet handled (pending[next:]); Next's goroutine only.
	pending []*replication.BinlogEvent
	next    int
}

var _ source.Source = (*Source)(nil)

// New returns an unopened source. Configuration errors are reported by Open.
func New(cfg Config, log *slog.Logger) *Source {
	if log == nil {
		log = slog.Default()
	}
	s := &Source{cfg: cfg.withDefaults(), log: log.With("source", "mysql"), keeper: &snapKeeper{}, ownKeeper: true}
	s.dsn, s.cfgErr = parseDSN(cfg.DSN)
	if s.cfgErr == nil {
		s.captured, s.cfgErr = parseTables(cfg.Tables, s.dsn.DB)
	}
	s.byDB = map[string]map[string]bool{}
	for k := range s.captured {
		if s.byDB[k.DB] == nil {
			s.byDB[k.DB] = map[string]bool{}
		}
		s.byDB[k.DB][k.Table] = true
	}
	if s.cfgErr == nil {
		if _, err := snapshotInitial(cfg.Snapshot); err != nil {
			s.cfgErr = fmt.Errorf("source.mysql.snapshot: %w", err)
		}
	}
	if s.cfgErr == nil && cfg.ServerID == 0 {
		s.cfgErr = errors.New("source.mysql.server_id is 0: set a replica id that no other replica of the server uses")
	}
	return s
}

// Open connects, checks the server and the start position, and starts streaming after from.
// An empty from starts where Config.Start says, or, with Config.Snapshot "initial", takes the
// initial snapshot (snapshot.go): Next then hands out its rows before the stream starts at the
// snapshot's position.
func (s *Source) Open(ctx context.Context, from source.Position) (err error) {
	if s.cfgErr != nil {
		return s.cfgErr
	}
	start, err := parsePosition(from)
	if err != nil {
		return fmt.Errorf("stored position: %w", err)
	}
	want, err := parseStart(s.cfg.Start)
	if err != nil {
		return err
	}
	snap, _ := snapshotInitial(s.cfg.Snapshot)
	if start.kind != kindNone {
		s.keeper.releaseAny() // a position is stored: no Source reads a kept snapshot again
	}
	snap = snap && start.kind == kindNone // a stored position always wins
	if start.kind == kindNone && want.mode == startUnset && !snap {
		return s.noStartError()
	}
	c, err := connect(ctx, s.dsn)
	if err != nil {
		return err
	}
	defer c.Close()
	if s.info, err = readServerInfo(c); err != nil {
		return fmt.Errorf("read server settings from %s: %w", s.dsn.Redacted(), err)
	}
	if err := s.info.checkPrerequisites(); err != nil {
		return err
	}
	if err := s.preflight(c); err != nil {
		return err
	}
	var (
		fromCfg bool
		sn      *snapshot
	)
	if snap {
		if want.mode != startUnset {
			s.log.Info("source.mysql.snapshot: initial takes the start position from the snapshot; source.mysql.start is ignored", "start", s.cfg.Start)
		}
		kind, err := s.positionKind(start)
		if err != nil {
			return err
		}
		if sn, start, err = s.beginSnapshot(ctx, kind); err != nil {
			return err
		}
		s.mu.Lock()
		s.snap = sn
		s.mu.Unlock()
		defer func() {
			if err != nil {
				s.mu.Lock()
				s.snap = nil
				s.mu.Unlock()
				sn.stop()
			}
		}()
	} else if start, fromCfg, err = s.startPosition(c, start, want); err != nil {
		return err
	}
	kind := start.kind

	// The tracker is also there in FULL mode, for events written before the server logged
	// column names; it then reads information_schema only if such an event shows up.
	tracker := newSchemaTracker(s.captured, s.loadSchema, s.info.mariadb, s.log)
	names := "binlog (binlog_row_metadata=FULL)"
	if s.info.rowMetadata != "FULL" {
		names = fmt.Sprintf("information_schema, tracked across DDL (binlog_row_metadata=%s; FULL is recommended)", orNone(s.info.rowMetadata))
		for k := range s.captured {
			var sch *tableSchema
			if sch, err = tracker.schema(k); err != nil {
				return err
			}
			if sch == nil {
				s.log.Warn("captured table does not exist (yet); its schema is taken from its CREATE TABLE", "table", k.String())
			}
		}
	}
	s.asm = newAssembler(start.core(), s.captured, tracker, s.info.mariadb, s.cfg.IdleProgressInterval, s.log)
	s.asm.capRows, s.asm.capBytes = s.cfg.ChunkRows, s.cfg.ChunkBytes
	s.configure(s.asm, tracker)
	s.log.Info("mysql source opening", "server", s.dsn.Redacted(), "version", s.info.version,
		"flavor", s.info.flavor(), "positions", kind.String(), "from", start.String(), "column_names", names,
		"server_id", s.cfg.ServerID, "start", s.startOrigin(fromCfg, snap))
	s.stamp.begin(s.info, start)
	if snap {
		// The stream starts after the snapshot's closing chunk (nextSnapshot); nothing is
		// stored before it.
		sn.final = s.stamp.position(source.Position(start.coreString()))
		return nil
	}
	if fromCfg && start.coreString() != "" {
		// Store the start position at once: a stop before the first transaction must not
		// leave the next run without a stored position.
		s.asm.idle()
		s.stamp.apply(s.asm, 0)
	}
	return s.startStream(ctx, start.core())
}

func orNone(s string) string {
	if s == "" {
		return "not supported by this server"
	}
	return s
}

// positionKind decides the position form: a stored position keeps its form; otherwise GTIDs
// when the server has them and UseGTID allows.
func (s *Source) positionKind(start position) (posKind, error) {
	gtids := s.info.mariadb || s.info.gtidMode == "ON"
	switch start.kind {
	case kindMariaGTID:
		if !s.info.mariadb {
			return 0, fmt.Errorf("stored position %s is a MariaDB GTID but the server is MySQL %s", start, s.info.version)
		}
		return kindMariaGTID, nil
	case kindMySQLGTID:
		if s.info.mariadb || !gtids {
			return 0, fmt.Errorf("stored position %s is a MySQL GTID set but the server (%s) has no MySQL GTIDs (gtid_mode=%s)", start, s.info.version, s.info.gtidMode)
		}
		return kindMySQLGTID, nil
	case kindFile:
		return kindFile, nil
	}
	if s.cfg.UseGTID != nil && !*s.cfg.UseGTID {
		return kindFile, nil
	}
	if !gtids {
		if s.cfg.UseGTID != nil {
			return 0, fmt.Errorf("source.mysql asks for GTID positions but the server has gtid_mode=%s: enable GTIDs or drop the setting", s.info.gtidMode)
		}
		return kindFile, nil
	}
	if s.info.mariadb {
		return kindMariaGTID, nil
	}
	return kindMySQLGTID, nil
}

// loadSchema reads one table's schema from information_schema on a fresh connection.
func (s *Source) loadSchema(k tableKey) (*tableSchema, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := connect(ctx, s.dsn)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	rows, err := query(c, loadSchemaQuery, k.DB, k.Table)
	if err != nil {
		return nil, err
	}
	return schemaFromRows(rows), nil
}

// decodeRows is go-mysql's RowsEventDecodeFunc: only inserts into captured tables have their
// row data decoded; other rows events stop after the header.
func (s *Source) decodeRows(e *replication.RowsEvent, data []byte) error {
	pos, err := e.DecodeHeader(data)
	if err != nil {
		return err
	}
	if e.Type() != replication.EnumRowsEventTypeInsert {
		return nil
	}
	if !s.capturedTable(e.Table.Schema, e.Table.Table) {
		return nil
	}
	if err := checkTableMap(e.Table); err != nil {
		return err
	}
	if e.ColumnCount != e.Table.ColumnCount { // go-mysql allocates and loops by it
		return fmt.Errorf("malformed rows event for %s.%s: %d columns, its table map event %d: the binlog event cannot be decoded",
			e.Table.Schema, e.Table.Table, e.ColumnCount, e.Table.ColumnCount)
	}
	if !anyColumn(e.ColumnBitmap1, int(e.ColumnCount)) { // an empty image: go-mysql would loop forever on the event
		return fmt.Errorf("rows event for %s.%s carries no column (outboxd needs binlog_row_image=FULL): the binlog event cannot be decoded",
			e.Table.Schema, e.Table.Table)
	}
	return e.DecodeData(pos, data)
}

// event returns the next event of the stream f, taking the feed's queued events when the
// pending ones are handled.
func (s *Source) event(ctx context.Context, f *eventFeed) (*replication.BinlogEvent, error) {
	if s.next == len(s.pending) {
		evs, err := f.take(ctx, s.pending)
		if err != nil {
			s.pending, s.next = s.pending[:0], 0
			return nil, err
		}
		s.pending, s.next = evs, 0
	}
	ev := s.pending[s.next]
	s.pending[s.next] = nil
	s.next++
	return ev, nil
}

func (s *Source) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Next returns the next transaction (see Source and source.Source).
func (s *Source) Next(ctx context.Context) (source.Tx, error) {
	if s.asm == nil {
		return source.Tx{}, errors.New("mysql source: Next before Open")
	}
	if tx, ok, err := s.nextSnapshot(ctx); ok || err != nil {
		return tx, err
	}
	for {
		if tx, ok := s.asm.pop(); ok {
			return tx, nil
		}
		var (
			ev  *replication.BinlogEvent
			err error
		)
		if s.next < len(s.pending) {
			ev = s.pending[s.next]
			s.pending[s.next] = nil
			s.next++
		} else {
			s.mu.Lock()
			f, closed := s.feed, s.closed
			s.mu.Unlock()
			if closed {
				return source.Tx{}, ErrClosed
			}
			if f == nil {
				return source.Tx{}, errors.New("mysql source: Next without a successful Open")
			}
			s.live.waiting.Store(true)
			ev, err = s.event(ctx, f)
			s.live.waiting.Store(false)
		}
		if err != nil {
			if ctx.Err() != nil {
				return source.Tx{}, ctx.Err()
			}
			if s.isClosed() {
				return source.Tx{}, ErrClosed
			}
			if err := s.recover(ctx, err); err != nil {
				return source.Tx{}, err
			}
			continue
		}
		if err := s.handle(ev); err != nil {
			return source.Tx{}, err
		}
	}
}

// recover handles a stream error: server errors and undecodable events are final; a lost
// connection is re-established from the last transaction boundary until ReconnectTimeout.
func (s *Source) recover(ctx context.Context, streamErr error) error {
	streamErr = cause(streamErr)
	resume := s.asm.resume()
	if fatalServerError(streamErr) {
		return explainStreamError(streamErr, resume)
	}
	var evErr *replication.EventError
	if errors.As(streamErr, &evErr) {
		return fmt.Errorf("binlog event at %s:%d cannot be decoded: %w", s.asm.file, evErr.Header.LogPos, streamErr)
	}
	s.log.Warn("binlog connection lost; reconnecting from the last transaction boundary", "error", streamErr.Error(), "from", resume.String())
	deadline := time.Now().Add(s.cfg.ReconnectTimeout)
	backoff := reconnectBackoff.Next(0)
	for {
		s.closeSyncer()
		s.asm.dropPartial()
		err := s.startStream(ctx, s.asm.resume())
		if err == nil {
			if n := s.asm.skipRows; n > 0 {
				s.log.Info("binlog connection re-established inside a transaction handed out in chunks: it is read again from its start, skipping the rows already handed out",
					"from", resume.String(), "skip_rows", n)
			} else {
				s.log.Info("binlog connection re-established", "from", resume.String())
			}
			return nil
		}
		if errors.Is(err, ErrClosed) || fatalServerError(err) || ctx.Err() != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("binlog connection lost (%v) and not re-established within %s: %w", streamErr, s.cfg.ReconnectTimeout, err)
		}
		s.log.Warn("binlog reconnect failed; retrying", "error", err.Error(), "in", backoff)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = reconnectBackoff.Next(backoff)
	}
}

// Confirm records p as delivered. MySQL has no replica cursor to advance, so this never
// blocks and never fails; the server's binlog expiry alone decides retention.
func (s *Source) Confirm(_ context.Context, p source.Position) error {
	s.confirm.Store(&p)
	if p != "" && s.kept.Load() != nil {
		// The first position confirmed after a snapshot is its own (or later): it is stored,
		// so its kept transaction is no longer needed (snapshot_keep.go).
		if kept := s.kept.Swap(nil); kept != nil {
			go func() {
				if s.keeper.release(kept) {
					s.log.Info("snapshot released: its position is confirmed", "position", string(p))
				}
			}()
		}
	}
	return nil
}

// Confirmed returns the last position passed to Confirm ("" if none).
func (s *Source) Confirmed() source.Position {
	if p := s.confirm.Load(); p != nil {
		return *p
	}
	return ""
}

// Close stops the binlog stream and releases the connection. A Next blocked concurrently
// returns ErrClosed. Close is idempotent.
func (s *Source) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	sy, f, sn, kept := s.syncer, s.feed, s.snap, s.readKept
	s.syncer, s.snap = nil, nil
	s.stopWatch()
	s.mu.Unlock()
	if f != nil {
		f.abandon()
	}
	if sy != nil {
		sy.Close()
	}
	if sn != nil {
		sn.stop()
	}
	if s.ownKeeper { // no other Source reads its snapshot again (snapshot_keep.go)
		s.keeper.releaseAny()
	} else if kept != nil {
		s.keeper.closed(kept, s.log)
	}
	return nil
}
