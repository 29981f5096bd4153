package mysql

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/source"
)

// scanEdgeDDL has the values whose text form is easiest to get wrong: float32 digits, zero
// fractions, YEAR 0, empty ENUM/SET/strings, single-byte and UTF-16 charsets, BINARY(16) with
// trailing zero bytes, MariaDB's INET4/INET6/UUID, GEOMETRY.
const scanEdgeDDL = `CREATE TABLE edge (
	id BIGINT UNSIGNED NOT NULL PRIMARY KEY, f FLOAT, d DOUBLE, f2 FLOAT, dc DECIMAL(5,2), dcn DECIMAL(30,10),
	tm TIME(2), tm0 TIME, tml TIME(1), dt3 DATETIME(3), dt6 DATETIME(6), ts6 TIMESTAMP(6) NULL, ts0 TIMESTAMP NULL,
	y YEAR, b4 BIT(4), b64 BIT(64), e ENUM('x','y'), s SET('p','q'), vc VARCHAR(10), ch CHAR(5),
	l1 VARCHAR(10) CHARACTER SET latin1, cy VARCHAR(10) CHARACTER SET cp1251, u16 VARCHAR(10) CHARACTER SET utf16,
	le ENUM('é','ü') CHARACTER SET latin1, b16 BINARY(16), b3 BINARY(3), i6 INET6, i4 INET4, uu UUID,
	g GEOMETRY, ti TINYINT, tu TINYINT UNSIGNED, j JSON
) DEFAULT CHARSET=utf8mb4`

var scanEdgeRows = []string{
	`(1, 3.14159265, 0.1, 1e-30, 0.5, -12345678901234567890.0123456789, '12:00:00.00', '-838:59:59', '838:59:59.9',
	 '2024-01-02 03:04:05.000', '2024-01-02 03:04:05.000001', '2038-01-19 03:14:07.999999', '1970-01-01 02:00:01',
	 0, b'0000', b'1111111111111111111111111111111111111111111111111111111111111111', '', '', '', '',
	 '€Šž ÿ', 'Привет', 'héllo ☃', 'ü', UNHEX('AABB0000000000000000000000000000'), 0x61,
	 '2001:db8::1', '192.0.2.1', '6ccd780c-baba-1026-9564-5b8c656024db', ST_GeomFromText('POINT(1 2)'), -128, 0,
	 '{"a":[1, 2.50, "x\\"y"],  "b" : null}')`,
	`(2, -0, -1.7976931348623157e308, 16777217, -0.01, 0, '-00:00:00.5', '00:00:00', NULL, '1000-01-01 00:00:00',
	 '9999-12-31 23:59:59.999999', NULL, NULL, 2155, b'1', b'1', 'y', 'p,q', ' a ', 'ab   ', '', '', '', NULL,
	 UNHEX('00000000000000000000000000000000'), 0x000102, '::', '0.0.0.0', '00000000-0000-0000-0000-000000000000',
	 NULL, 127, 255, '[]')`,
	`(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
	 NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)`,
}

func scanAdapter(m *testenv.MariaDB, tables ...string) *Adapter {
	return NewAdapter(Settings{DSN: m.DSN("app"), Tables: tables}, testLogger())
}

func scanAll(t *testing.T, a *Adapter, q source.ScanQuery) ([]source.Row, []int) {
	t.Helper()
	var rows []source.Row
	var sizes []int
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.ScanOutbox(ctx, q, func(b []source.Row) error {
		rows, sizes = append(rows, b...), append(sizes, len(b))
		return nil
	}); err != nil {
		t.Fatalf("ScanOutbox(%+v): %v", q, err)
	}
	return rows, sizes
}

// TestScanMatchesStream is the scan's correctness test: on a real MariaDB, every column type of
// the stream's type tests (colTypes, typesDDL) and the edge values of scanEdgeDDL scan to
// exactly the Columns, Types and Values the binlog stream delivers for the same rows, whatever
// the writer's time zone; generated (VIRTUAL, PERSISTENT) and INVISIBLE columns included.
func TestScanMatchesStream(t *testing.T) {
	t.Parallel()
	m := testenv.NewMariaDB(t, testenv.MariaDBOptions{RowMetadata: true})
	c := db(t, m)
	var defs, lits []string
	for _, ct := range colTypes {
		defs, lits = append(defs, ct.name+" "+ct.sql), append(lits, ct.lit)
	}
	mustExec(t, c, `CREATE TABLE coltypes (`+strings.Join(defs, ", ")+`) DEFAULT CHARSET=utf8mb4`)
	mustExec(t, c, typesDDL)
	mustExec(t, c, scanEdgeDDL)
	mustExec(t, c, "CREATE TABLE gen (id INT NOT NULL PRIMARY KEY, a INT, v INT AS (a * 2) VIRTUAL, p VARCHAR(10) AS (CONCAT('p', a)) PERSISTENT, z INT INVISIBLE DEFAULT 7)")
	tables := []string{"app.coltypes", "app.types", "app.edge", "app.gen"}
	s := open(t, m, "", nil, tables...)
	mustExec(t, c, "SET time_zone = '+02:00'")
	mustExec(t, c, `INSERT INTO coltypes VALUES (`+strings.Join(lits, ", ")+`)`)
	lits[0] = "2" // a row of NULLs (NOT NULL columns keep their sample)
	for i, ct := range colTypes[1:] {
		if !strings.Contains(ct.sql, "NOT NULL") {
			lits[i+1] = "NULL"
		}
	}
	mustExec(t, c, `INSERT INTO coltypes VALUES (`+strings.Join(lits, ", ")+`)`)
	mustExec(t, c, typesInsert)
	mustExec(t, c, "SET SESSION sql_mode = ''") // the empty ENUM value needs a non-strict mode
	for _, r := range scanEdgeRows {
		mustExec(t, c, "INSERT INTO edge VALUES "+r)
	}
	mustExec(t, c, "INSERT INTO gen (id, a) VALUES (1, 20), (2, NULL)")
	streamed := map[string][]source.Row{}
	for n := 0; n < 8; {
		tx := nextRows(t, s)
		for _, r := range tx.Rows {
			streamed[r.Table] = append(streamed[r.Table], r)
			n++
		}
	}
	a := scanAdapter(m, tables...)
	for _, table := range tables {
		scanned, _ := scanAll(t, a, source.ScanQuery{Table: table})
		want := streamed[table]
		if len(scanned) != len(want) {
			t.Fatalf("%s: scanned %d rows, streamed %d", table, len(scanned), len(want))
		}
		for i, w := range want {
			g := scanned[i]
			if g.Table != w.Table || !slices.Equal(g.Columns, w.Columns) || !slices.Equal(g.Types, w.Types) {
				t.Errorf("%s row %d: table %q columns %v types %+v; stream: %q %v %+v", table, i, g.Table, g.Columns, g.Types, w.Table, w.Columns, w.Types)
				continue
			}
			for j, col := range w.Columns {
				gv, wv := g.Values[j], w.Values[j]
				if gv.Null != wv.Null || string(gv.Bytes) != string(wv.Bytes) || (gv.Bytes == nil) != (wv.Bytes == nil) {
					t.Errorf("%s row %d column %s: scanned %q (null %v), streamed %q (null %v)", table, i, col, gv.Bytes, gv.Null, wv.Bytes, wv.Null)
				}
			}
		}
	}
}

// TestScanQueries: order (primary key by default, the order column with the key breaking ties),
// since/until on a time column, where, batch sizes, the count, one snapshot for the whole scan,
// and the errors (missing table, unknown columns, fn's error).
func TestScanQueries(t *testing.T) {
	t.Parallel()
	m := testenv.NewMariaDB(t, testenv.MariaDBOptions{RowMetadata: true})
	c := db(t, m)
	mustExec(t, c, `CREATE TABLE ob (id INT NOT NULL PRIMARY KEY, seq INT NOT NULL, created DATETIME(3) NOT NULL, kind VARCHAR(10))`)
	mustExec(t, c, `CREATE TABLE nopk (n INT, note VARCHAR(10))`)
	// ids descending while seq ascends; seq 5 twice (ties broken by id).
	for i := 1; i <= 10; i++ {
		seq := 11 - i
		if i == 7 {
			seq = 5
		}
		mustExec(t, c, fmt.Sprintf("INSERT INTO ob VALUES (%d, %d, '2024-01-01 00:00:%02d.500', '%s')", i, seq, i, map[bool]string{true: "even", false: "odd"}[i%2 == 0]))
		mustExec(t, c, fmt.Sprintf("INSERT INTO nopk VALUES (%d, 'n')", 100-i))
	}
	a := scanAdapter(m, "app.ob", "app.nopk", "app.missing")
	ids := func(rows []source.Row) string {
		var out []string
		for _, r := range rows {
			out = append(out, string(r.Values[0].Bytes))
		}
		return strings.Join(out, ",")
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		q     source.ScanQuery
		want  string
		sizes []int
	}{
		{"primary key", source.ScanQuery{Table: "app.ob"}, "1,2,3,4,5,6,7,8,9,10", []int{10}},
		{"order column, key breaks ties", source.ScanQuery{Table: "app.ob", OrderBy: "SEQ", Batch: 4}, "10,9,8,6,7,5,4,3,2,1", []int{4, 4, 2}},
		{"batches", source.ScanQuery{Table: "app.ob", Batch: 3}, "1,2,3,4,5,6,7,8,9,10", []int{3, 3, 3, 1}},
		{"since until", source.ScanQuery{Table: "app.ob", TimeColumn: "created", Since: time.Date(2024, 1, 1, 0, 0, 3, 500e6, time.UTC),
			Until: time.Date(2024, 1, 1, 0, 0, 6, 500e6, time.UTC)}, "3,4,5", nil},
		{"where and since", source.ScanQuery{Table: "app.ob", TimeColumn: "created", Since: time.Date(2024, 1, 1, 0, 0, 4, 0, time.UTC),
			Where: "kind = 'even' -- a comment"}, "4,6,8,10", nil},
		{"no primary key: insertion order", source.ScanQuery{Table: "app.nopk", Batch: 100}, "99,98,97,96,95,94,93,92,91,90", nil},
	} {
		rows, sizes := scanAll(t, a, tc.q)
		got := ids(rows)
		if got != tc.want {
			t.Errorf("%s: ids %s, want %s", tc.name, got, tc.want)
		}
		if tc.sizes != nil && !slices.Equal(sizes, tc.sizes) {
			t.Errorf("%s: batch sizes %v, want %v", tc.name, sizes, tc.sizes)
		}
		n, err := a.CountOutbox(ctx, tc.q)
		if err != nil || n != int64(len(rows)) {
			t.Errorf("%s: CountOutbox = %d, %v; want %d", tc.name, n, err, len(rows))
		}
	}

	// One snapshot: rows written while the scan runs are not in it.
	var seen int
	err := a.ScanOutbox(ctx, source.ScanQuery{Table: "app.ob", Batch: 2}, func(b []source.Row) error {
		if seen == 0 {
			mustExec(t, c, "INSERT INTO ob VALUES (11, 0, NOW(), 'late')")
			mustExec(t, c, "DELETE FROM ob WHERE id = 10")
		}
		seen += len(b)
		return nil
	})
	if err != nil || seen != 10 {
		t.Errorf("scan beside a writer: %d rows, %v; want the 10 of the snapshot", seen, err)
	}

	// ctx ends the scan: the connection is closed and the error says why.
	cctx, cancel := context.WithCancel(ctx)
	err = a.ScanOutbox(cctx, source.ScanQuery{Table: "app.ob", Batch: 1}, func([]source.Row) error { cancel(); return nil })
	if !errors.Is(err, context.Canceled) {
		t.Errorf("scan with its ctx cancelled: %v; want context.Canceled", err)
	}

	// fn's error ends the scan with it.
	stop := errors.New("stop here")
	calls := 0
	err = a.ScanOutbox(ctx, source.ScanQuery{Table: "app.ob", Batch: 2}, func([]source.Row) error { calls++; return stop })
	if !errors.Is(err, stop) || calls != 1 {
		t.Errorf("fn error: %v after %d calls; want %v after 1", err, calls, stop)
	}
	for _, tc := range []struct {
		q    source.ScanQuery
		want string
	}{
		{source.ScanQuery{Table: "app.missing"}, "does not exist"},
		{source.ScanQuery{Table: "app.other"}, "not in source.tables"},
		{source.ScanQuery{Table: "app.ob", OrderBy: "nope"}, `no column "nope"`},
		{source.ScanQuery{Table: "app.ob", TimeColumn: "kind", Since: time.Now()}, "DATETIME, TIMESTAMP or DATE"},
		{source.ScanQuery{Table: "app.ob", Since: time.Now()}, "needs a time column"},
		{source.ScanQuery{Table: "app.ob", Where: "no_such_col = 1"}, "no_such_col"},
	} {
		err := a.ScanOutbox(ctx, tc.q, func([]source.Row) error { return nil })
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ScanOutbox(%+v) = %v; want an error with %q", tc.q, err, tc.want)
		}
		if _, err := a.CountOutbox(ctx, tc.q); err == nil && tc.q.OrderBy == "" {
			t.Errorf("CountOutbox(%+v) succeeded; want an error", tc.q)
		}
	}
}

// BenchmarkScanOutbox measures the scan's rate on a private MariaDB: OUTBOXD_SCAN_ROWS rows
// (default 100000) of the demo outbox table, read with a no-op callback.
//
//	CI=true go test -run '^$' -bench BenchmarkScanOutbox -benchtime 1x ./source/mysql/
func BenchmarkScanOutbox(b *testing.B) {
	n := 100000
	if v, err := strconv.Atoi(os.Getenv("OUTBOXD_SCAN_ROWS")); err == nil && v > 0 {
		n = v
	}
	m := testenv.NewMariaDB(b, testenv.MariaDBOptions{RowMetadata: true})
	c := db(b, m)
	mustExec(b, c, testenv.MariaDBOutboxDDL("outbox", "BINARY(16)"))
	mustExec(b, c, "SET SESSION sql_log_bin = 0")
	mustExec(b, c, fmt.Sprintf(`INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
		SELECT UNHEX(LPAD(HEX(seq), 32, '0')), 'order', CONCAT('K', seq %% 100), 'created', CONCAT('{"n": ', seq, ', "pad": "', REPEAT('x', 200), '"}')
		FROM seq_1_to_%d`, n))
	a := scanAdapter(m, "app.outbox")
	b.ResetTimer()
	start := time.Now()
	total := 0
	for i := 0; i < b.N; i++ {
		if err := a.ScanOutbox(context.Background(), source.ScanQuery{Table: "app.outbox"}, func(rows []source.Row) error {
			total += len(rows)
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	if total != n*b.N {
		b.Fatalf("scanned %d rows, want %d", total, n*b.N)
	}
	b.ReportMetric(float64(total)/time.Since(start).Seconds(), "rows/s")
}
