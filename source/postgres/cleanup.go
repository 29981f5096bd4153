package postgres

// outbox.cleanup's SQL (internal/app's cleaner): DELETE delivered outbox rows by id, on one
// normal connection opened on first use and kept (reopened after a failure), and the table's
// row estimate. Which ids are delivered is decided upstream (internal/cleanup.Tracker); this
// file only deletes the ids it is given.
//
// The ids arrive in the text form the stream gives them (bytea: the raw bytes). The statement
// is `DELETE FROM t WHERE id = ANY($1::text[]::<id type>[])` with <id type> read from the
// catalog (format_type of the column), so the comparison is on the column's own type and its
// index (the primary key) is used; `id::text = ANY(...)` would cast every row's id and scan the
// table. A bytea id is sent as a bytea[] as is.
//
// Deleted rows are not published: outboxd's publication publishes inserts only, and the
// decoder ignores Delete messages of any other publication. A DELETE leaves dead tuples:
// autovacuum reclaims them (README "Housekeeping").

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgCleaner is the Adapter's cleanup connection and what it read of the catalog.
type pgCleaner struct {
	conn    *pgx.Conn
	idTypes map[string]string // table → the id column's format_type
}

// idTypeQuery reads the type of column $2 of table $1 (a quoted identifier).
const idTypeQuery = `SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
WHERE a.attrelid = $1::regclass AND a.attname = $2 AND a.attnum > 0 AND NOT a.attisdropped`

// cleanIDColumn is the id column: Settings.Columns' first (internal/app puts outbox.columns.id
// first).
func (a *Adapter) cleanIDColumn() (string, error) {
	if len(a.set.Columns) == 0 {
		return "", errors.New("outbox.cleanup: no outbox columns configured (the id column comes first)")
	}
	return a.set.Columns[0], nil
}

func (a *Adapter) cleanConn(ctx context.Context) (*pgx.Conn, error) {
	if a.clean.conn != nil && !a.clean.conn.IsClosed() {
		return a.clean.conn, nil
	}
	conn, err := connectSession(ctx, a.cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("outbox.cleanup: %w", err)
	}
	a.clean.conn = conn
	return conn, nil
}

// cleanFailed drops the connection after a failure (the next call opens a new one).
func (a *Adapter) cleanFailed() {
	if a.clean.conn != nil {
		a.clean.conn.Close(context.Background())
		a.clean.conn = nil
	}
}

// DeleteOutboxRows deletes the rows of table whose id is one of ids, in one statement
// (autocommit); with retain > 0 only rows whose inserting transaction committed at least retain
// ago by pg_xact_commit_timestamp(xmin), which needs track_commit_timestamp = on (an error
// otherwise). outboxd itself passes 0: the Tracker already held the ids back by their
// transaction's commit time from the log (internal/cleanup), which needs no server setting.
func (a *Adapter) DeleteOutboxRows(ctx context.Context, table string, ids [][]byte, retain time.Duration) (int64, error) {
	if !slices.Contains(a.set.Tables, table) {
		return 0, fmt.Errorf("outbox.cleanup: table %q is not in source.tables: only outbox tables are cleaned", table)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	col, err := a.cleanIDColumn()
	if err != nil {
		return 0, err
	}
	conn, err := a.cleanConn(ctx)
	if err != nil {
		return 0, err
	}
	typ, err := a.cleanIDType(ctx, conn, table, col)
	if err != nil {
		return 0, err
	}
	sql, arg := deleteByIDSQL(table, col, typ, ids)
	args := []any{arg}
	if retain > 0 {
		var on string
		if err := conn.QueryRow(ctx, "SELECT current_setting('track_commit_timestamp')").Scan(&on); err != nil {
			a.cleanFailed()
			return 0, fmt.Errorf("outbox.cleanup: read track_commit_timestamp: %w", err)
		}
		if on != "on" {
			return 0, errors.New("outbox.cleanup: a row's age by its xmin needs track_commit_timestamp = on")
		}
		sql += " AND pg_xact_commit_timestamp(xmin) <= now() - $2::interval"
		args = append(args, retain.String())
	}
	tag, err := conn.Exec(ctx, sql, args...)
	if err != nil {
		a.cleanFailed()
		return 0, fmt.Errorf("outbox.cleanup: delete %d delivered rows from %s: %w (retried next cycle)", len(ids), table, err)
	}
	return tag.RowsAffected(), nil
}

// deleteByIDSQL is the DELETE of ids from table and its one parameter (see the file comment).
func deleteByIDSQL(table, col, typ string, ids [][]byte) (string, any) {
	head := "DELETE FROM " + tableIdent(table) + " WHERE " + pgx.Identifier{col}.Sanitize()
	if typ == "bytea" {
		return head + " = ANY($1::bytea[])", ids
	}
	text := make([]string, len(ids))
	for i, id := range ids {
		text[i] = string(id)
	}
	if typ == "text" {
		return head + " = ANY($1::text[])", text
	}
	return head + " = ANY($1::text[]::" + typ + "[])", text
}

func (a *Adapter) cleanIDType(ctx context.Context, conn *pgx.Conn, table, col string) (string, error) {
	if t, ok := a.clean.idTypes[table]; ok {
		return t, nil
	}
	var typ string
	if err := conn.QueryRow(ctx, idTypeQuery, tableIdent(table), col).Scan(&typ); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return "", fmt.Errorf("outbox.cleanup: table %s has no column %q (outbox.columns.id)", table, col)
		}
		a.cleanFailed()
		return "", fmt.Errorf("outbox.cleanup: read the type of %s.%s from the catalog: %w", table, col, err)
	}
	if a.clean.idTypes == nil {
		a.clean.idTypes = map[string]string{}
	}
	a.clean.idTypes[table] = typ
	return typ, nil
}

// OutboxRowEstimate is pg_class.reltuples of table (summed over the leaf partitions of a
// partitioned table): the planner's estimate, refreshed by VACUUM and ANALYZE (autovacuum);
// -1 when the table was never vacuumed or analyzed.
func (a *Adapter) OutboxRowEstimate(ctx context.Context, table string) (int64, error) {
	conn, err := a.cleanConn(ctx)
	if err != nil {
		return 0, err
	}
	var n int64
	err = conn.QueryRow(ctx, `SELECT CASE WHEN bool_and(c.reltuples < 0) THEN -1 ELSE sum(greatest(c.reltuples, 0)) END::bigint
FROM pg_class c WHERE c.relkind <> 'p'
	AND c.oid IN (SELECT $1::regclass UNION ALL SELECT relid FROM pg_partition_tree($1::regclass) WHERE isleaf)`, tableIdent(table)).Scan(&n)
	if err != nil {
		a.cleanFailed()
		return 0, fmt.Errorf("outbox.cleanup: read the row estimate of %s: %w", table, err)
	}
	return n, nil
}

// CloseCleaner closes the cleanup connection.
func (a *Adapter) CloseCleaner() { a.cleanFailed() }
