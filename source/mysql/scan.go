package mysql

// Table scans: the rows already in an outbox table, read with plain SQL (not the binlog), for
// `outboxd republish` (Adapter.ScanOutbox, CountOutbox) and for source.mysql.snapshot: initial
// (snapshot.go). The rows are shaped exactly as the binlog stream shapes them (decode.go,
// types.go): same Columns (table order), same Types (columnFromCatalog + columnType, the
// TableMapEvent's view of the catalog), and Values in the same text or bytes.
//
// How each value reaches the stream's form (scanValue):
//
//   - The query runs as a prepared statement, so the server answers in the binary protocol:
//     integers, FLOAT and DOUBLE arrive as numbers (FLOAT as its exact float32, which MySQL's
//     and MariaDB's text form, six significant digits, would lose) and are rendered as decode.go
//     renders them (decimal text; shortest round-trip float text).
//   - The session has character_set_results=NULL: text arrives in the column's own charset, the
//     bytes the binlog carries, and is converted to UTF-8 by the same code as the stream
//     (charset.go), so both agree even where the server's own conversion would differ.
//   - time_zone='+00:00': TIMESTAMP values arrive in UTC, the stream's form. DATETIME, TIMESTAMP
//     and TIME are re-rendered with the column's fractional digits as go-mysql's binlog decoder
//     renders them (DATETIME/TIMESTAMP(n): always n digits; TIME(n): no fraction when it is 0).
//   - BIT: the bytes as a number in decimal text; BINARY(16): uuid text; BINARY(n): padded raw
//     bytes; BLOB/VARBINARY/GEOMETRY: raw bytes; YEAR 0000 is "0" as in the binlog.
//   - MySQL JSON: the text SELECT prints ({"a": 1}), which the stream reproduces
//     (mysqlJSONSpacing); MariaDB JSON is LONGTEXT: the bytes as written.
//   - MariaDB UUID: the server's uuid text; INET6 and INET4 are parsed back to the 16 or 4 bytes
//     the binlog carries (the stream renders INET6 like a BINARY(16)).
//
// Consistency and order: one SELECT inside START TRANSACTION WITH CONSISTENT SNAPSHOT, READ
// ONLY (REPEATABLE READ), streamed (Stmt.ExecuteSelectStreaming), so the rows are one snapshot
// however long the scan takes; net_write_timeout is raised for the session so a slow consumer
// (fn waiting on a broker) does not make the server drop the connection. Order: ScanQuery.OrderBy
// ascending, the primary key breaking ties; without OrderBy the primary key ascending, which is
// InnoDB's clustered order and the insertion order when the key grows with time
// (AUTO_INCREMENT, UUIDv7, a time-ordered BINARY(16)); with random keys (UUIDv4) set
// outbox.order_column. A table without a primary key is read in InnoDB's order for it (the
// hidden row id: insertion order), without ORDER BY.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outboxd/outboxd/source"
)

// scanColumnsQuery lists a table's columns for a scan: outboxColumnsQuery's columns, then the
// charset and whether the column is part of the primary key (and where).
const scanColumnsQuery = `SELECT c.COLUMN_NAME, LOWER(c.DATA_TYPE), LOWER(c.COLUMN_TYPE), c.IS_NULLABLE,
	IFNULL(c.NUMERIC_PRECISION, 0), IFNULL(c.NUMERIC_SCALE, 0), IFNULL(c.DATETIME_PRECISION, 0), IFNULL(c.CHARACTER_OCTET_LENGTH, 0),
	IFNULL(c.CHARACTER_SET_NAME, ''),
	IFNULL((SELECT s.SEQ_IN_INDEX FROM information_schema.STATISTICS s WHERE s.TABLE_SCHEMA = c.TABLE_SCHEMA
		AND s.TABLE_NAME = c.TABLE_NAME AND s.INDEX_NAME = 'PRIMARY' AND s.COLUMN_NAME = c.COLUMN_NAME), 0)
FROM information_schema.COLUMNS c WHERE LOWER(c.TABLE_SCHEMA) = LOWER(?) AND LOWER(c.TABLE_NAME) = LOWER(?) ORDER BY c.ORDINAL_POSITION`

// scanTable is what a scan knows about one outbox table.
type scanTable struct {
	name  string   // as configured (Row.Table)
	key   tableKey // as configured
	names []string
	cols  []column
	dts   []string // DATA_TYPE
	fsp   []int    // DATETIME_PRECISION
	types []source.Type
	pk    []string // primary key columns in key order; nil: none
}

// scanTableFromRows builds a scanTable from scanColumnsQuery's rows; an error when the table has
// no columns (it does not exist) or a text column's charset cannot be converted.
func scanTableFromRows(name string, key tableKey, rows [][]string) (*scanTable, error) {
	if len(rows) == 0 {
		return nil, fmt.Errorf("table %s does not exist on the server (information_schema lists no columns for %s): create it, or fix source.tables", name, key)
	}
	t := &scanTable{name: name, key: key}
	pk := map[int]string{}
	for _, r := range rows {
		dt := r[1]
		col, meta := columnFromCatalog(dt, r[2], atoi(r[4]), atoi(r[5]), atoi(r[6]), atoi(r[7]))
		col.name = r[0]
		if col.charset == csUTF8 && r[8] != "" {
			col.charset, col.cmap = charsetByName(r[8])
			if col.charset == csUnsupported {
				return nil, unsupportedCharsetError(name, col.name, r[8])
			}
		}
		t.names = append(t.names, r[0])
		t.cols = append(t.cols, col)
		t.dts = append(t.dts, dt)
		t.fsp = append(t.fsp, atoi(r[6]))
		t.types = append(t.types, columnType(&col, meta, true, strings.EqualFold(r[3], "YES")))
		if seq := atoi(r[9]); seq > 0 {
			pk[seq] = r[0]
		}
	}
	for i := 1; i <= len(pk); i++ {
		c, ok := pk[i]
		if !ok {
			return nil, fmt.Errorf("table %s: information_schema lists primary key columns out of sequence", name)
		}
		t.pk = append(t.pk, c)
	}
	return t, nil
}

// column returns the table's spelling of column name (compared case-insensitively, as MySQL
// compares column names), or false.
func (t *scanTable) column(name string) (string, int, bool) {
	name = strings.Trim(strings.TrimSpace(name), "`")
	for i, n := range t.names {
		if strings.EqualFold(n, name) {
			return n, i, true
		}
	}
	return "", -1, false
}

// sqlIdent quotes a MySQL identifier.
func sqlIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

func (t *scanTable) from() string { return sqlIdent(t.key.DB) + "." + sqlIdent(t.key.Table) }

// scanTimeText renders a ScanQuery bound as the session (time_zone '+00:00') reads it.
func scanTimeText(tm time.Time) string { return tm.UTC().Format("2006-01-02 15:04:05.999999") }

// where returns q's WHERE clause ("" for none) and its arguments. Pure.
func (t *scanTable) where(q source.ScanQuery) (string, []any, error) {
	var conds []string
	var args []any
	if !q.Since.IsZero() || !q.Until.IsZero() {
		if q.TimeColumn == "" {
			return "", nil, errors.New("a scan with since/until needs a time column (outbox.order_column or the outbox time column)")
		}
		col, i, ok := t.column(q.TimeColumn)
		if !ok {
			return "", nil, fmt.Errorf("table %s has no column %q for since/until (its columns: %s)", t.name, q.TimeColumn, strings.Join(t.names, ", "))
		}
		switch t.dts[i] {
		case "datetime", "timestamp", "date":
		default:
			return "", nil, fmt.Errorf("table %s: since/until need a DATETIME, TIMESTAMP or DATE column; %s is %s", t.name, col, t.dts[i])
		}
		if !q.Since.IsZero() {
			conds, args = append(conds, sqlIdent(col)+" >= ?"), append(args, scanTimeText(q.Since))
		}
		if !q.Until.IsZero() {
			conds, args = append(conds, sqlIdent(col)+" < ?"), append(args, scanTimeText(q.Until))
		}
	}
	if w := strings.TrimSpace(q.Where); w != "" {
		// On lines of their own: a trailing "-- comment" in the operator's SQL ends there.
		conds = append(conds, "(\n"+w+"\n)")
	}
	if len(conds) == 0 {
		return "", nil, nil
	}
	return " WHERE " + strings.Join(conds, " AND "), args, nil
}

// orderBy returns the scan's ORDER BY clause ("" without order column and primary key). Pure.
func (t *scanTable) orderBy(orderCol string) (string, error) {
	var keys []string
	if orderCol != "" {
		col, _, ok := t.column(orderCol)
		if !ok {
			return "", fmt.Errorf("table %s has no column %q to order the scan by (outbox.order_column; its columns: %s)", t.name, orderCol, strings.Join(t.names, ", "))
		}
		keys = append(keys, col)
	}
	for _, k := range t.pk {
		if len(keys) == 0 || !strings.EqualFold(keys[0], k) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return "", nil
	}
	for i, k := range keys {
		keys[i] = sqlIdent(k)
	}
	return " ORDER BY " + strings.Join(keys, ", "), nil
}

// selectSQL is the scan's statement and arguments. Pure.
func (t *scanTable) selectSQL(q source.ScanQuery) (string, []any, error) {
	where, args, err := t.where(q)
	if err != nil {
		return "", nil, err
	}
	order, err := t.orderBy(q.OrderBy)
	if err != nil {
		return "", nil, err
	}
	cols := make([]string, len(t.names))
	for i, n := range t.names {
		cols[i] = sqlIdent(n)
	}
	return "SELECT " + strings.Join(cols, ", ") + " FROM " + t.from() + where + order, args, nil
}

// countSQL is the statement counting the rows q selects. Pure.
func (t *scanTable) countSQL(q source.ScanQuery) (string, []any, error) {
	where, args, err := t.where(q)
	if err != nil {
		return "", nil, err
	}
	return "SELECT COUNT(*) FROM " + t.from() + where, args, nil
}

// scanSession sets up a connection for scans (see the file comment).
func scanSession(c *client.Conn) error {
	for _, q := range []string{
		"SET SESSION time_zone = '+00:00'",
		"SET SESSION character_set_results = NULL",
		"SET SESSION net_write_timeout = 31536000",
		"SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
	} {
		if _, err := c.Execute(q); err != nil {
			return fmt.Errorf("prepare the scan session (%s): %w", q, cause(err))
		}
	}
	return nil
}

// scanConn opens a connection set up for scans whose blocking operations end when ctx does
// (the connection is then closed); release must be called when done.
func scanConn(ctx context.Context, d dsn) (c *client.Conn, release func(), err error) {
	if c, err = connect(ctx, d); err != nil {
		return nil, nil, err
	}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	release = func() { stop(); c.Close() }
	if err := scanSession(c); err != nil {
		release()
		return nil, nil, ctxErr(ctx, err)
	}
	return c, release, nil
}

// ctxErr prefers ctx's error: a connection closed because ctx ended fails with a network error.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil && err != nil {
		return fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	return err
}

// loadScanTable reads the table's columns and primary key on c.
func (s *Source) loadScanTable(c *client.Conn, name string) (*scanTable, error) {
	var key tableKey
	found := false
	for k, n := range s.captured {
		if n == name {
			key, found = k, true
		}
	}
	if !found {
		return nil, fmt.Errorf("table %s is not in source.tables", name)
	}
	rows, err := query(c, scanColumnsQuery, key.DB, key.Table)
	if err != nil {
		return nil, fmt.Errorf("list the columns of %s from information_schema: %w", name, err)
	}
	return scanTableFromRows(name, key, rows)
}

// scanRows streams the rows of t that q selects on c (a scan session inside a consistent
// snapshot) to fn, at most q.Batch rows a call and, when maxBytes > 0, at most maxBytes bytes
// (source.RowBytes summed; a row bigger than that is a batch alone). Each batch's rows and
// values are its own.
func scanRows(c *client.Conn, t *scanTable, q source.ScanQuery, maxBytes int, fn func([]source.Row) error) error {
	sql, args, err := t.selectSQL(q)
	if err != nil {
		return err
	}
	batch := q.Batch
	if batch <= 0 {
		batch = source.ScanBatch
	}
	st, err := c.Prepare(sql)
	if err != nil {
		return fmt.Errorf("scan %s: prepare %q: %w", t.name, sql, cause(err))
	}
	defer st.Close()
	n := len(t.cols)
	var (
		rows    []source.Row
		vals    []source.Value
		size    int
		fnErr   error
		scanned int64
	)
	tmp := make([]source.Value, n)
	flush := func() error {
		if len(rows) == 0 {
			return nil
		}
		out := rows
		rows, vals, size = nil, nil, 0
		return fn(out)
	}
	var res gomysql.Result
	err = st.ExecuteSelectStreaming(&res, func(row []gomysql.FieldValue) error {
		if len(row) != n {
			return fmt.Errorf("the server returned %d columns, the table has %d", len(row), n)
		}
		rowSize := source.RowOverhead
		for i := range row {
			v, err := scanValue(&t.cols[i], t.dts[i], t.fsp[i], &row[i])
			if err != nil {
				return fmt.Errorf("row %d, column %s: %w", scanned+1, t.names[i], err)
			}
			tmp[i] = v
			rowSize += len(v.Bytes)
		}
		scanned++
		if maxBytes > 0 && len(rows) > 0 && size+rowSize > maxBytes {
			if fnErr = flush(); fnErr != nil {
				return fnErr
			}
		}
		if rows == nil {
			rows, vals = make([]source.Row, 0, batch), make([]source.Value, 0, batch*n)
		}
		start := len(vals)
		vals = append(vals, tmp...)
		rows = append(rows, source.Row{Table: t.name, Columns: t.names, Values: vals[start:len(vals):len(vals)], Types: t.types})
		size += rowSize
		if len(rows) == batch {
			if fnErr = flush(); fnErr != nil {
				return fnErr
			}
		}
		return nil
	}, nil, args...)
	if fnErr != nil {
		return fnErr
	}
	if err != nil {
		return fmt.Errorf("scan %s: %w", t.name, cause(err))
	}
	return flush()
}

// ScanOutbox implements `outboxd republish`'s scan (internal/app's scanner; see that contract
// and this file's comment for the values, the order and the consistency). It opens its own
// connection; ctx bounds it (the connection is closed when ctx ends).
func (a *Adapter) ScanOutbox(ctx context.Context, q source.ScanQuery, fn func(rows []source.Row) error) error {
	s := New(a.Config(), a.log)
	if s.cfgErr != nil {
		return s.cfgErr
	}
	c, release, err := scanConn(ctx, s.dsn)
	if err != nil {
		return err
	}
	defer release()
	t, err := s.loadScanTable(c, q.Table)
	if err != nil {
		return ctxErr(ctx, err)
	}
	if _, err := c.Execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"); err != nil {
		return ctxErr(ctx, fmt.Errorf("scan %s: start a consistent snapshot: %w", q.Table, cause(err)))
	}
	if err := scanRows(c, t, q, 0, fn); err != nil {
		return ctxErr(ctx, err)
	}
	if _, err := c.Execute("COMMIT"); err != nil {
		return ctxErr(ctx, fmt.Errorf("scan %s: end the snapshot: %w", q.Table, cause(err)))
	}
	return nil
}

// CountOutbox returns how many rows q selects (q.Batch ignored), on its own connection.
func (a *Adapter) CountOutbox(ctx context.Context, q source.ScanQuery) (int64, error) {
	s := New(a.Config(), a.log)
	if s.cfgErr != nil {
		return 0, s.cfgErr
	}
	c, release, err := scanConn(ctx, s.dsn)
	if err != nil {
		return 0, err
	}
	defer release()
	t, err := s.loadScanTable(c, q.Table)
	if err != nil {
		return 0, ctxErr(ctx, err)
	}
	sql, args, err := t.countSQL(q)
	if err != nil {
		return 0, err
	}
	rows, err := query(c, sql, args...)
	if err != nil {
		return 0, ctxErr(ctx, fmt.Errorf("count the rows of %s: %w", q.Table, err))
	}
	if len(rows) != 1 || len(rows[0]) != 1 {
		return 0, fmt.Errorf("count the rows of %s: unexpected answer %v", q.Table, rows)
	}
	n, err := strconv.ParseInt(rows[0][0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("count the rows of %s: %q is not a number", q.Table, rows[0][0])
	}
	return n, nil
}
