package postgres

// Table scans: the rows already in an outbox table, read on a normal connection and shaped as
// the replication stream shapes them (`outboxd republish` through the Adapter's ScanOutbox, and
// source.postgres.snapshot: initial through the Source, snapshot.go).
//
// Shape. A scan selects the columns pgoutput's Relation message carries (outboxColumnsQuery: in
// table order, without dropped and generated columns) and asks for every column in text format,
// so each value is the text the type's output function prints, which is what pgoutput sends
// (proto_version 1 never sends binary). The session pins the same settings as the replication
// connection (sessionParams, setup.go: TimeZone UTC, DateStyle ISO, bytea_output hex), so the
// text is the same byte for byte; bytea is then decoded to raw bytes by the decoder's
// appendBytea, and each column's source.Type comes from columnType and columnDefault on the
// same catalog facts the stream's Relation message and loadRelations give. The scan reads every
// column and row of the table, as the stream does: the source refuses a publication with a row
// filter or a column list that leaves a column out (coverage.go). Known differences from the
// stream, both rare: an inheritance child's rows come with the parent's columns (the stream sends
// the child's own Relation); a partition published without publish_via_partition_root
// (outboxd's own publication sets it) has the root's column order and NOT NULL flags here, the
// leaf's on the stream.
//
// Order. With ScanQuery.OrderBy (outbox.order_column) rows come by that column ascending, ties
// in heap order (ORDER BY col, ctid; an index on col makes it cheap: an incremental sort of the
// ties). Without it they come in the order the table keeps: the
// heap's physical order (a sequential scan from block 0: synchronized scans and index scans
// are turned off for the transaction, so a WHERE cannot turn it into index order; a partitioned
// table is its partitions one after another in partition bound order). For an append-only
// outbox table that is insertion order. It is not once rows were deleted or updated (cleanup,
// VACUUM reusing freed space): new rows then fill old gaps; set outbox.order_column (e.g. a
// bigserial or the creation timestamp) when the order matters.
//
// Consistency. One REPEATABLE READ READ ONLY transaction, read through a server-side cursor
// (DECLARE … NO SCROLL CURSOR, FETCH FORWARD Batch), so every batch comes from one snapshot,
// whatever runs beside it. A long scan keeps that snapshot open, which holds back VACUUM's
// horizon on the whole server for its duration. The operator's Where is one statement's
// condition: the cursor is declared through the extended protocol, which refuses a second
// statement, and the transaction is READ ONLY.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/source"
)

// scanCursor is the server-side cursor of a scan.
const scanCursor = "outboxd_scan"

// ScanOutbox calls fn with the rows q selects, at most q.Batch a call (default source.ScanBatch),
// in q's order (see the file comment: outbox.order_column ascending, else the heap's physical
// order), shaped as the stream shapes them, read from one REPEATABLE READ snapshot on a
// connection of its own. q.Table must be one of source.tables. An error from fn ends the scan
// with it.
func (a *Adapter) ScanOutbox(ctx context.Context, q source.ScanQuery, fn func(rows []source.Row) error) error {
	if err := a.checkScanTable(q.Table); err != nil {
		return err
	}
	conn, err := connectSession(ctx, a.cfg.DSN)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"); err != nil {
		return fmt.Errorf("scan %s: begin: %w", q.Table, err)
	}
	if err := scanTable(ctx, conn, q, a.cfg.ChunkBytes, fn); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("scan %s: commit: %w", q.Table, err)
	}
	return nil
}

// CountOutbox returns how many rows q selects (its own snapshot: a count for progress).
func (a *Adapter) CountOutbox(ctx context.Context, q source.ScanQuery) (int64, error) {
	if err := a.checkScanTable(q.Table); err != nil {
		return 0, err
	}
	conn, err := connectSession(ctx, a.cfg.DSN)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"); err != nil {
		return 0, fmt.Errorf("count %s: begin: %w", q.Table, err)
	}
	defer conn.Exec(context.Background(), "ROLLBACK") //nolint:errcheck // read only
	cols, err := readScanColumns(ctx, conn, q.Table)
	if err != nil {
		return 0, err
	}
	where, err := scanWhere(q, cols.names)
	if err != nil {
		return 0, err
	}
	var n int64
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+tableIdent(q.Table)+where).Scan(&n); err != nil {
		return 0, fmt.Errorf("count the rows of %s: %w", q.Table, err)
	}
	return n, nil
}

func (a *Adapter) checkScanTable(table string) error {
	if !slices.Contains(a.set.Tables, table) {
		return fmt.Errorf("table %q is not in source.tables (%s): only configured outbox tables are scanned", table, strings.Join(a.set.Tables, ", "))
	}
	return nil
}

// connectSession opens a normal connection with the session settings that shape value text
// forms pinned as on the replication connection (sessionParams).
func connectSession(ctx context.Context, dsn string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse source.dsn: %w", err)
	}
	for k, v := range sessionParams {
		if _, ok := cfg.RuntimeParams[k]; !ok {
			cfg.RuntimeParams[k] = v
		}
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL (source.dsn): %w", err)
	}
	return conn, nil
}

// scanColumns are a table's columns as the stream's Relation message carries them.
type scanColumns struct {
	names []string
	oids  []uint32
	types []source.Type
}

// readScanColumns reads table's columns from the catalog (in the caller's transaction); a
// missing table, or one that is not a table or partitioned table, is an error.
func readScanColumns(ctx context.Context, conn *pgx.Conn, table string) (scanColumns, error) {
	var sc scanColumns
	schema, name := splitTable(table)
	var kind string
	err := conn.QueryRow(ctx, `SELECT c.relkind::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2`, schema, name).Scan(&kind)
	if errors.Is(err, pgx.ErrNoRows) {
		return sc, fmt.Errorf("table %s does not exist (names are schema.table, case-sensitive as in the catalog): create it or fix source.tables", table)
	}
	if err != nil {
		return sc, fmt.Errorf("look up table %s: %w", table, err)
	}
	if kind != "r" && kind != "p" {
		return sc, fmt.Errorf("%s has relkind %q, not a table ('r') or partitioned table ('p'): list the table itself in source.tables", table, kind)
	}
	rows, err := conn.Query(ctx, outboxColumnsQuery, schema, name)
	if err != nil {
		return sc, fmt.Errorf("list the columns of %s: %w", table, err)
	}
	var col string
	var oid uint32
	var typmod int32
	var notNull bool
	var def *string
	_, err = pgx.ForEachRow(rows, []any{&col, &oid, &typmod, &notNull, &def}, func() error {
		t := columnType(oid, typmod, notNull)
		if def != nil {
			t.Default, t.HasDefault = columnDefault(oid, t, *def)
		}
		sc.names, sc.oids, sc.types = append(sc.names, col), append(sc.oids, oid), append(sc.types, t)
		return nil
	})
	if err != nil {
		return sc, fmt.Errorf("list the columns of %s: %w", table, err)
	}
	if len(sc.names) == 0 {
		return sc, fmt.Errorf("table %s has no columns to scan", table)
	}
	return sc, nil
}

// tableIdent quotes "schema.table" as a qualified identifier.
func tableIdent(table string) string {
	schema, name := splitTable(table)
	return pgx.Identifier{schema, name}.Sanitize()
}

// scanWhere is the scan's WHERE clause (with a leading space; "" for none): Since and Until on
// TimeColumn and the operator's Where, ANDed. Columns it names must be in cols.
func scanWhere(q source.ScanQuery, cols []string) (string, error) {
	var conds []string
	if !q.Since.IsZero() || !q.Until.IsZero() {
		if q.TimeColumn == "" {
			return "", errors.New("a scan bounded by time (--since/--until) needs a time column")
		}
		if !slices.Contains(cols, q.TimeColumn) {
			return "", fmt.Errorf("time column %q is not a column of %s (columns: %s)", q.TimeColumn, q.Table, strings.Join(cols, ", "))
		}
		c := quoteIdent(q.TimeColumn)
		if !q.Since.IsZero() {
			conds = append(conds, c+" >= "+timeLiteral(q.Since))
		}
		if !q.Until.IsZero() {
			conds = append(conds, c+" < "+timeLiteral(q.Until))
		}
	}
	if w := strings.TrimSpace(q.Where); w != "" {
		conds = append(conds, "("+w+")")
	}
	if len(conds) == 0 {
		return "", nil
	}
	return " WHERE " + strings.Join(conds, " AND "), nil
}

// timeLiteral is t as a timestamptz literal (microseconds, UTC). A timestamp column without a
// time zone compares to it in the session's TimeZone, which the scan pins to UTC.
func timeLiteral(t time.Time) string {
	return "'" + t.UTC().Format("2006-01-02 15:04:05.999999Z07:00") + "'::timestamptz"
}

// scanSQL is the scan's query: every column of cols, the WHERE of scanWhere, ORDER BY OrderBy.
func scanSQL(q source.ScanQuery, cols []string) (string, error) {
	where, err := scanWhere(q, cols)
	if err != nil {
		return "", err
	}
	idents := make([]string, len(cols))
	for i, c := range cols {
		idents[i] = quoteIdent(c)
	}
	sql := "SELECT " + strings.Join(idents, ", ") + " FROM " + tableIdent(q.Table) + where
	if q.OrderBy != "" {
		if !slices.Contains(cols, q.OrderBy) {
			return "", fmt.Errorf("outbox.order_column %q is not a column of %s (columns: %s)", q.OrderBy, q.Table, strings.Join(cols, ", "))
		}
		sql += " ORDER BY " + quoteIdent(q.OrderBy) + ", ctid" // ties in heap order: the same order every time
	}
	return sql, nil
}

// physicalOrder are the settings that make a scan without ORDER BY read the heap from its first
// block: no synchronized scan joining another one midway, no index or TID plan for a WHERE, and
// sequential scans allowed whatever the role or database says. (A cursor never gets a parallel
// plan.)
var physicalOrder = []string{"synchronize_seqscans = off", "enable_indexscan = off", "enable_indexonlyscan = off",
	"enable_bitmapscan = off", "enable_tidscan = off", "enable_seqscan = on"}

// scanTable runs q's scan in the transaction open on conn (REPEATABLE READ: one snapshot) and
// calls fn with each batch. The rows are freshly allocated (fn may keep them). maxBytes > 0
// bounds a batch's memory as well as q.Batch its rows: after a FETCH whose rows held more bytes
// than that, the next FETCH asks for proportionally fewer rows (at least one), and grows back up
// to q.Batch as rows get smaller, so a table of large payloads is not read 1000 at a time.
func scanTable(ctx context.Context, conn *pgx.Conn, q source.ScanQuery, maxBytes int, fn func(rows []source.Row) error) error {
	cols, err := readScanColumns(ctx, conn, q.Table)
	if err != nil {
		return err
	}
	sql, err := scanSQL(q, cols.names)
	if err != nil {
		return err
	}
	// The transaction idles while fn blocks (a slow broker, the snapshot waiting for the
	// pipeline): a server or role idle_in_transaction_session_timeout must not end it.
	if _, err := conn.Exec(ctx, "SET LOCAL idle_in_transaction_session_timeout = 0"); err != nil {
		return fmt.Errorf("scan %s: SET LOCAL idle_in_transaction_session_timeout: %w", q.Table, err)
	}
	if q.OrderBy == "" {
		for _, p := range physicalOrder {
			if _, err := conn.Exec(ctx, "SET LOCAL "+p); err != nil {
				return fmt.Errorf("scan %s: SET LOCAL %s: %w", q.Table, p, err)
			}
		}
	}
	pc := conn.PgConn()
	// The extended protocol: one statement, so the operator's WHERE cannot append another.
	if _, err := pc.ExecParams(ctx, "DECLARE "+scanCursor+" NO SCROLL CURSOR FOR "+sql, nil, nil, nil, nil).Close(); err != nil {
		return fmt.Errorf("scan %s: %w (query: %s)", q.Table, err, sql)
	}
	batch := q.Batch
	if batch <= 0 {
		batch = source.ScanBatch
	}
	n := batch
	for {
		fetch := "FETCH FORWARD " + strconv.Itoa(n) + " FROM " + scanCursor
		rows, err := fetchRows(ctx, pc, fetch, q.Table, cols, n)
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			break
		}
		size := 0
		for i := range rows {
			size += source.RowBytes(&rows[i])
		}
		if err := fn(rows); err != nil {
			return err
		}
		if len(rows) < n {
			break
		}
		n = nextFetch(n, size, batch, maxBytes)
	}
	if _, err := conn.Exec(ctx, "CLOSE "+scanCursor); err != nil {
		return fmt.Errorf("scan %s: close cursor: %w", q.Table, err)
	}
	return nil
}

// nextFetch is the row count of the next FETCH after one of n rows and size bytes: n scaled to
// maxBytes (0 or less: no byte bound), within 1..batch.
func nextFetch(n, size, batch, maxBytes int) int {
	if maxBytes <= 0 || size <= 0 {
		return batch
	}
	next := int(int64(n) * int64(maxBytes) / int64(size))
	return max(1, min(batch, next))
}

// fetchRows runs one FETCH (every column in text format) and builds its rows as the decoder
// builds an Insert's: one buffer per row for all its values, bytea decoded to raw bytes.
func fetchRows(ctx context.Context, pc *pgconn.PgConn, fetch, table string, cols scanColumns, batch int) ([]source.Row, error) {
	rr := pc.ExecParams(ctx, fetch, nil, nil, nil, nil) // nil result formats: text for every column
	out := make([]source.Row, 0, batch)
	for rr.NextRow() {
		raw := rr.Values()
		if len(raw) != len(cols.names) {
			rr.Close()
			return nil, fmt.Errorf("scan %s: a row has %d columns, the catalog %d", table, len(raw), len(cols.names))
		}
		size := 0
		for _, v := range raw {
			size += len(v)
		}
		buf := make([]byte, 0, size)
		vals := make([]source.Value, len(raw))
		for i, v := range raw {
			if v == nil {
				vals[i] = source.Value{Null: true}
				continue
			}
			start := len(buf)
			if cols.oids[i] == oidBytea {
				var err error
				if buf, err = appendBytea(buf, v); err != nil {
					rr.Close()
					return nil, fmt.Errorf("scan %s: column %s: %w", table, cols.names[i], err)
				}
			} else {
				buf = append(buf, v...)
			}
			vals[i] = source.Value{Bytes: buf[start:len(buf):len(buf)]}
		}
		out = append(out, source.Row{Table: table, Columns: cols.names, Values: vals, Types: cols.types})
	}
	if _, err := rr.Close(); err != nil {
		return nil, fmt.Errorf("scan %s: fetch: %w", table, err)
	}
	return out, nil
}
