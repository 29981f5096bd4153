package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/source"
)

// setup runs Open's preparation: publication, slot checks (and creation when allowed), then
// START_REPLICATION on a replication connection, which it returns in copy-both mode. With
// snapshot: initial and no stored position it also returns the snapshot to hand out first
// (snapshot.go): the slot is then created anew with its snapshot exported and imported by the
// snapshot's own transaction before replication starts.
func (s *Source) setup(ctx context.Context, from pglogrepl.LSN) (_ *pgconn.PgConn, snap *snapshotRun, err error) {
	admin, err := pgx.Connect(ctx, s.cfg.DSN)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to PostgreSQL (source.dsn): %w", err)
	}
	defer admin.Close(context.Background())
	defer func() {
		if err != nil && snap != nil {
			snap.conn.Close(context.Background())
			snap = nil
		}
	}()

	// source.postgres.failover_slot: on with a server below 17 is refused before anything is
	// created (failover.go).
	plan, err := s.failoverPlan(ctx, admin)
	if err != nil {
		return nil, nil, err
	}
	if err := s.ensurePublication(ctx, admin); err != nil {
		return nil, nil, err
	}
	if err := s.loadRelations(ctx, admin); err != nil { // relations.go
		return nil, nil, err
	}
	slot, err := s.querySlot(ctx, admin)
	if err != nil {
		return nil, nil, err
	}
	if slot.exists {
		s.warnFailoverMismatch(ctx, admin, plan) // an existing slot is left as it is (failover.go)
	}
	takeSnapshot := s.cfg.Snapshot == SnapshotInitial && from == 0
	if takeSnapshot && len(s.cfg.Tables) == 0 {
		// The tableless outbox keeps no rows to snapshot: events written before the slot
		// existed are in no table, and the slot streams from its own start either way.
		s.log.Info("snapshot: initial: source.tables is empty (the tableless outbox), so there is no table to snapshot; streaming from the slot's start")
		takeSnapshot = false
	}
	if from != 0 { // a stored position: any snapshot this process kept is behind it (snapshot_keep.go)
		s.keeper.releaseAny()
	}
	if takeSnapshot {
		if err := s.checkOrderColumn(ctx, admin); err != nil { // snapshot.go
			return nil, nil, err
		}
	}
	switch {
	case takeSnapshot && slot.exists: // snapshot.go
		if kept := s.keeper.reusable(ctx, s.cfg.Slot, slot); kept != nil {
			if err := s.checkResume(slot, from); err != nil {
				return nil, nil, err
			}
			if snap, err = readSnapshot(ctx, s.cfg.DSN, kept); err != nil {
				s.keeper.release(kept)
				return nil, nil, fmt.Errorf("snapshot: %w: outboxd stops; the next start drops the slot and takes the snapshot again", err)
			}
			s.log.Info("snapshot: reading again the snapshot this process took on this slot (its position is not stored yet): the same rows in the same order",
				"position", kept.at)
			break
		}
		if err := s.dropForSnapshot(ctx, admin, slot); err != nil {
			return nil, nil, err
		}
		slot.exists = false
	default:
		if err := s.checkResume(slot, from); err != nil {
			return nil, nil, err
		}
	}
	if slot.exists { // a slot outboxd creates below is younger than the publication
		if hits := s.ext.cov.base.Load().NewerThanSlot(); len(hits) > 0 {
			if err := s.settleAge(ctx, admin, hits, from, slot); err != nil { // coverageprobe.go
				return nil, nil, err
			}
		}
	}
	pluginArgs := []string{"proto_version '1'", "publication_names " + quoteLiteral(quoteIdent(s.cfg.Publication))}
	if s.cfg.HeartbeatInterval > 0 || s.cfg.MessagePrefix != "" {
		var version int
		if err := admin.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err == nil && version >= 140000 {
			pluginArgs = append(pluginArgs, "messages 'true'") // heartbeats (heartbeat.go), outbox messages
			s.ext.messages.Store(true)
		} else if s.cfg.MessagePrefix != "" {
			return nil, nil, fmt.Errorf("source.postgres.messages needs PostgreSQL 14 or later (pgoutput messages); server_version_num is %d: remove source.postgres.messages or upgrade", version)
		} else {
			s.log.Info("heartbeats need PostgreSQL 14 or later (pgoutput messages); source.postgres.heartbeat_interval is ignored", "server_version_num", version)
		}
	}

	deadline := time.Now().Add(slotActiveRetry)
	for {
		repl, err := s.connectReplication(ctx)
		if err != nil {
			return nil, nil, err
		}
		if !slot.exists {
			// With takeSnapshot the snapshot stays exported until the next command on repl: the
			// snapshot's own connection imports it before START_REPLICATION below (snapshot.go).
			// A failover slot on 17+ unless source.postgres.failover_slot is off (failover.go).
			created, err := createSlot(ctx, repl, s.cfg.Slot, plan.vnum, takeSnapshot, plan.failover)
			if err != nil {
				repl.Close(context.Background())
				if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "42710" {
					return nil, nil, fmt.Errorf("create logical replication slot %q: %w: another process created it at the same time (%w)", s.cfg.Slot, ErrSlotActive, err)
				}
				return nil, nil, fmt.Errorf("create logical replication slot %q (source.postgres.slot): %w: check wal_level = logical, max_replication_slots, and that the role has REPLICATION", s.cfg.Slot, err)
			}
			slot.exists = true
			s.log.Info("slot created", "plugin", "pgoutput", "consistent_point", created.ConsistentPoint, "failover", plan.failover)
			if takeSnapshot {
				if s.snap.created != nil {
					s.snap.created()
				}
				if snap, err = s.takeSnapshot(ctx, created); err != nil {
					repl.Close(context.Background())
					return nil, nil, err
				}
			}
		}
		err = pglogrepl.StartReplication(ctx, repl, s.cfg.Slot, from, pglogrepl.StartReplicationOptions{
			Mode:       pglogrepl.LogicalReplication,
			PluginArgs: pluginArgs,
		})
		if err == nil {
			s.log.Info("replication started", "publication", s.cfg.Publication, "from", startName(from),
				"standby_timeout", s.cfg.StandbyTimeout)
			return repl, snap, nil
		}
		repl.Close(context.Background())
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55006" && time.Now().Before(deadline) {
			// The slot is still active for a previous walsender (ours, after a reconnect?): wait
			// briefly for it to exit; after that another process holds it (ErrSlotActive).
			select {
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		if errors.As(err, &pgErr) && pgErr.Code == "55006" {
			return nil, nil, fmt.Errorf("start replication on slot %q: %w (%w): another process (another outboxd?) is reading this slot", s.cfg.Slot, ErrSlotActive, err)
		}
		if perr := s.publicationMissing(err); perr != nil {
			return nil, nil, perr
		}
		return nil, nil, fmt.Errorf("start replication on slot %q from %s with publication %q: %w", s.cfg.Slot, startName(from), s.cfg.Publication, err)
	}
}

func startName(from pglogrepl.LSN) string {
	if from == 0 {
		return "the slot's confirmed position"
	}
	return from.String()
}

// sessionParams are the session settings outboxd's connections pin unless the DSN sets them:
// the ones that shape value text forms, so the replication stream (pgoutput prints values in
// the walsender's session) and table scans (scan.go) print the same text, whatever the server's
// defaults.
var sessionParams = map[string]string{"application_name": "outboxd", "timezone": "UTC",
	"datestyle": "ISO", "bytea_output": "hex"}

// connectReplication opens a replication=database connection. Unless the DSN says otherwise it
// pins the session settings that shape value text forms, so outboxd's output does not depend on
// server defaults: TimeZone UTC, DateStyle ISO, bytea_output hex.
func (s *Source) connectReplication(ctx context.Context) (*pgconn.PgConn, error) {
	cfg, err := pgconn.ParseConfig(s.cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("parse source.dsn: %w", err)
	}
	cfg.RuntimeParams["replication"] = "database"
	for k, v := range sessionParams {
		if _, ok := cfg.RuntimeParams[k]; !ok {
			cfg.RuntimeParams[k] = v
		}
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open replication connection (source.dsn): %w: the role needs the REPLICATION attribute and pg_hba.conf must allow it", err)
	}
	return conn, nil
}

// ensurePublication creates the publication when absent (WITH publish_via_partition_root when a
// configured table is partitioned) and refuses one that does not stream every outbox row whole
// (coverage.go, Problems). The shape it read becomes the coverage baseline (coveragewatch.go).
func (s *Source) ensurePublication(ctx context.Context, conn *pgx.Conn) error {
	pub := s.cfg.Publication
	version, err := serverVersion(ctx, conn)
	if err != nil {
		return err
	}
	s.ext.cov.version = version
	shape, err := queryShape(ctx, conn, version, pub, s.cfg.Slot, s.cfg.Tables)
	if err != nil {
		return err
	}
	if !shape.Exists {
		sql := createPublicationSQL(shape)
		if _, err := conn.Exec(ctx, sql); err != nil {
			if len(s.cfg.Tables) == 0 {
				return fmt.Errorf("create publication %q (source.postgres.publication) with no table (source.tables is empty: the tableless outbox): %w: the role needs CREATE on the database; or create it as a role that has (%s)", pub, err, sql)
			}
			return fmt.Errorf("create publication %q (source.postgres.publication) for %s: %w: check that the tables in source.tables exist and the role owns them", pub, strings.Join(s.cfg.Tables, ", "), err)
		}
		s.log.Info("publication created", "publication", pub, "tables", s.cfg.Tables, "sql", sql)
		if shape, err = queryShape(ctx, conn, version, pub, s.cfg.Slot, s.cfg.Tables); err != nil {
			return err
		}
	} else {
		s.log.Info("publication exists, leaving it as it is", "publication", pub, "all_tables", shape.AllTables,
			"publishes_insert", shape.Insert, "publish_via_partition_root", shape.ViaRoot)
	}
	if problems := shape.Problems(s.cfg.Columns); len(problems) > 0 {
		return s.refuseShape(problems)
	}
	s.ext.cov.base.Store(shape)
	s.ext.cov.single = shape.singleRelation()
	s.ext.cov.none = len(shape.Tables) == 0
	return nil
}

// createPublicationSQL is outboxd's publication for the configured tables: inserts only, and
// partitioned tables published under the root's name. With no table (the tableless outbox) it
// is an empty publication: pgoutput sends logical decoding messages whatever the publication
// lists (messages 'true'), but START_REPLICATION needs one to exist.
func createPublicationSQL(shape *PubShape) string {
	if len(shape.Tables) == 0 {
		return fmt.Sprintf("CREATE PUBLICATION %s WITH (publish = 'insert')", quoteIdent(shape.Name))
	}
	idents := make([]string, len(shape.Tables))
	viaRoot := false
	for i, t := range shape.Tables {
		idents[i] = t.Ident
		viaRoot = viaRoot || t.Relkind == "p"
	}
	with := "publish = 'insert'"
	if viaRoot {
		with += ", publish_via_partition_root = true"
	}
	return fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (%s)", quoteIdent(shape.Name), strings.Join(idents, ", "), with)
}

// slotInfo is the slot's row in pg_replication_slots.
type slotInfo struct {
	exists                          bool
	slotType, plugin, db, walStatus string
	restartLSN, confirmedLSN        *string
	activePID                       *int32
	currentDB, serverWALEnd         string
}

func (s *Source) querySlot(ctx context.Context, conn *pgx.Conn) (slotInfo, error) {
	var si slotInfo
	if err := conn.QueryRow(ctx, `SELECT current_database(), pg_current_wal_lsn()::text`).
		Scan(&si.currentDB, &si.serverWALEnd); err != nil {
		return si, fmt.Errorf("query server WAL position: %w", err)
	}
	var plugin, db, walStatus *string
	err := conn.QueryRow(ctx, `SELECT slot_type, plugin, database, wal_status, restart_lsn::text, confirmed_flush_lsn::text, active_pid
		FROM pg_replication_slots WHERE slot_name = $1`, s.cfg.Slot).
		Scan(&si.slotType, &plugin, &db, &walStatus, &si.restartLSN, &si.confirmedLSN, &si.activePID)
	if errors.Is(err, pgx.ErrNoRows) {
		return si, nil
	}
	if err != nil {
		return si, fmt.Errorf("look up replication slot %q: %w", s.cfg.Slot, err)
	}
	si.exists = true
	si.plugin, si.db, si.walStatus = deref(plugin), deref(db), deref(walStatus)
	return si, nil
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// checkSlotKind refuses an existing slot that is not a logical pgoutput slot of this database
// (another consumer's: outboxd neither reads nor drops it).
func (s *Source) checkSlotKind(si slotInfo) error {
	if si.slotType != "logical" || si.plugin != "pgoutput" || si.db != si.currentDB {
		slot := s.cfg.Slot
		return fmt.Errorf("replication slot %q (source.postgres.slot) exists but is %s/%s on database %q, not logical/pgoutput on %q: use another slot name or drop it (SELECT pg_drop_replication_slot('%s'))",
			slot, si.slotType, si.plugin, si.db, si.currentDB, slot)
	}
	return nil
}

// checkResume decides whether streaming after from is possible without losing transactions.
func (s *Source) checkResume(si slotInfo, from pglogrepl.LSN) error {
	slot := s.cfg.Slot
	if si.exists {
		if err := s.checkSlotKind(si); err != nil {
			return err
		}
		s.log.Info("slot exists", "confirmed_flush_lsn", deref(si.confirmedLSN), "restart_lsn", deref(si.restartLSN), "wal_status", si.walStatus)
	}
	if from == 0 {
		if si.exists && si.walStatus == "lost" {
			return fmt.Errorf("replication slot %q is lost (wal_status = lost: the server removed WAL it still needed): drop it (SELECT pg_drop_replication_slot('%s')) and restart outboxd to create a new one: %w", slot, slot, source.ErrPositionLost)
		}
		return nil
	}
	walEnd, err := pglogrepl.ParseLSN(si.serverWALEnd)
	if err == nil && from > walEnd {
		return fmt.Errorf("stored position %s is ahead of the server's current WAL position %s: the offsets belong to another cluster or the server was restored from a backup; check source.dsn, or reset the position with `outboxd offsets set`: %w", from, walEnd, source.ErrPositionLost)
	}
	// acceptGap tells how to give up the undeliverable transactions, once the slot serves at.
	acceptGap := func(at string) string {
		return fmt.Sprintf("to accept the gap, run `outboxd offsets set -c FILE --position %s` and restart: this gives up the transactions committed after %s, so re-publish them from the outbox table if they matter", at, from)
	}
	if !si.exists {
		return fmt.Errorf("replication slot %q (source.postgres.slot) does not exist, but the stored position is %s: the transactions after it can no longer be read, and outboxd never creates a slot past a stored position. If the slot was renamed, fix source.postgres.slot; otherwise create it (SELECT pg_create_logical_replication_slot('%s', 'pgoutput')) and %s: %w",
			slot, from, slot, acceptGap("<its confirmed_flush_lsn>"), source.ErrPositionLost)
	}
	if si.walStatus == "lost" || si.confirmedLSN == nil {
		return fmt.Errorf("replication slot %q is lost (wal_status = %s: the server removed WAL it needed, see max_slot_wal_keep_size): the transactions after the stored position %s can no longer be read. Drop and recreate the slot (SELECT pg_drop_replication_slot('%s'); SELECT pg_create_logical_replication_slot('%s', 'pgoutput')), then %s: %w",
			slot, si.walStatus, from, slot, slot, acceptGap("<its confirmed_flush_lsn>"), source.ErrPositionLost)
	}
	confirmed, err := pglogrepl.ParseLSN(*si.confirmedLSN)
	if err != nil {
		return fmt.Errorf("replication slot %q: unreadable confirmed_flush_lsn %q: %w", slot, *si.confirmedLSN, err)
	}
	if confirmed > from {
		return fmt.Errorf("replication slot %q has confirmed_flush_lsn %s, beyond the stored position %s: the server would skip the transactions committed between them, which outboxd never delivered (was the slot used by another consumer, the offsets restored from an older copy, or a hot standby given its own offsets file? HA across hosts needs offsets.store: kafka or a shared offsets volume); %s: %w",
			slot, confirmed, from, acceptGap(confirmed.String()), source.ErrPositionLost)
	}
	return nil
}

// publicationMissing turns the walsender's `publication "X" does not exist` (SQLSTATE 42704) into
// a permanent error with the fix, or returns nil for any other error. pgoutput looks the
// publication up with the catalog as of the change it decodes, so a slot created before its
// publication (or a publication dropped, or re-created, while the slot decodes older changes)
// fails this way on every reconnect: retrying cannot help.
func (s *Source) publicationMissing(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42704" || !strings.Contains(pgErr.Message, "publication") {
		return nil
	}
	slot, pub := s.cfg.Slot, s.cfg.Publication
	return fmt.Errorf("replication slot %q (source.postgres.slot): %w: the slot decodes changes from before publication %q existed (the slot was created before the publication, or the publication was dropped or created again). "+
		"Retrying cannot help, so outboxd stops. Drop the slot (SELECT pg_drop_replication_slot('%s')) and start outboxd again: it creates a new slot after the publication; rows committed before that are not streamed: re-publish them from the outbox table if they matter "+
		"(with a stored position, also run `outboxd offsets set -c FILE --position <the new slot's confirmed_flush_lsn>`): %w",
		slot, err, pub, slot, source.ErrPositionLost)
}

// quoteIdent quotes a SQL identifier.
func quoteIdent(s string) string { return pgx.Identifier{s}.Sanitize() }

// quoteLiteral quotes a SQL string literal (standard_conforming_strings).
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
