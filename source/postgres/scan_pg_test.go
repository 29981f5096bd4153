package postgres

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/source"
)

// sameRow reports how a scanned row differs from the stream's (nil: the same).
func sameRow(stream, scanned source.Row) []string {
	var diffs []string
	if stream.Table != scanned.Table {
		diffs = append(diffs, fmt.Sprintf("table %q, stream %q", scanned.Table, stream.Table))
	}
	if !slices.Equal(stream.Columns, scanned.Columns) {
		return append(diffs, fmt.Sprintf("columns %v, stream %v", scanned.Columns, stream.Columns))
	}
	if !slices.Equal(stream.Types, scanned.Types) {
		for i := range stream.Types {
			if i < len(scanned.Types) && stream.Types[i] != scanned.Types[i] {
				diffs = append(diffs, fmt.Sprintf("column %s: type %+v, stream %+v", stream.Columns[i], scanned.Types[i], stream.Types[i]))
			}
		}
		if len(stream.Types) != len(scanned.Types) {
			diffs = append(diffs, fmt.Sprintf("%d types, stream %d", len(scanned.Types), len(stream.Types)))
		}
	}
	for i := range stream.Values {
		a, b := stream.Values[i], scanned.Values[i]
		if a.Null != b.Null || string(a.Bytes) != string(b.Bytes) || (a.Bytes == nil) != (b.Bytes == nil) {
			diffs = append(diffs, fmt.Sprintf("column %s: value %q (null %v), stream %q (null %v)", stream.Columns[i], b.Bytes, b.Null, a.Bytes, a.Null))
		}
	}
	return diffs
}

// scanAll runs ScanOutbox and returns its batches.
func scanAll(t *testing.T, a *Adapter, q source.ScanQuery) ([][]source.Row, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var batches [][]source.Row
	err := a.ScanOutbox(ctx, q, func(rows []source.Row) error {
		batches = append(batches, rows)
		return nil
	})
	return batches, err
}

func flatten(batches [][]source.Row) []source.Row {
	var out []source.Row
	for _, b := range batches {
		out = append(out, b...)
	}
	return out
}

// TestScanMatchesStream is the scan's key property: every type of the type table (typeCases),
// plus DEFAULTs, a dropped and a generated column, a TOASTed value, NULLs and empty strings,
// scans to the same Columns, Values and Types as the replication stream delivers for the same
// rows. The database's own settings differ from outboxd's pinned ones (time zone, DateStyle,
// bytea_output), which both connections must override alike.
func TestScanMatchesStream(t *testing.T) {
	dsn, conn := testDB(t, "scanshape")
	exec(t, conn, `ALTER DATABASE scanshape SET timezone = 'Asia/Kolkata'`)
	exec(t, conn, `ALTER DATABASE scanshape SET datestyle = 'SQL, DMY'`)
	exec(t, conn, `ALTER DATABASE scanshape SET bytea_output = 'escape'`)
	exec(t, conn, `CREATE TYPE mood AS ENUM ('sad', 'happy')`)
	var defs, lits []string
	for i, tc := range typeCases() {
		def := tc.col.Name + " " + tc.sql
		if i < 2 {
			def += " NOT NULL"
		}
		defs = append(defs, def)
		lits = append(lits, "'"+strings.ReplaceAll(sampleValue[tc.sql], "'", "''")+"'::"+tc.sql)
	}
	defs = append(defs, "c_gone int4", "c_def int8 NOT NULL DEFAULT 5", "c_defts timestamptz DEFAULT now()",
		"c_gen int8 GENERATED ALWAYS AS (c_def * 2) STORED", "c_big text")
	exec(t, conn, `CREATE TABLE public.types (`+strings.Join(defs, ", ")+`)`)
	exec(t, conn, `ALTER TABLE public.types DROP COLUMN c_gone`)
	s := newTestSource(dsn, "scanshape", "public.types")
	open(t, s, "")
	big := strings.Repeat("0123456789", 20000)
	exec(t, conn, `INSERT INTO public.types VALUES (`+strings.Join(lits, ", ")+`, 7, '2024-05-06 07:08:09.5+02', DEFAULT, $1)`, big)
	nulls := []string{"false", "0"}
	for range typeCases()[2:] {
		nulls = append(nulls, "NULL")
	}
	exec(t, conn, `INSERT INTO public.types VALUES (`+strings.Join(nulls, ", ")+`, DEFAULT, NULL, DEFAULT, '')`)
	exec(t, conn, `INSERT INTO public.types (c_bool, c_int2, c_bytea, c_text, c_float8, c_float4, c_num) VALUES
		(true, 1, '\x'::bytea, '', 'NaN', '-Infinity', '1e-20'), (true, 2, E'\\x5c00'::bytea, 'tëxt ''q''', 0.1, 3.4028235e38, '-0.0')`)
	var streamed []source.Row
	for len(streamed) < 4 {
		streamed = append(streamed, nextRows(t, s).Rows...)
	}

	a := NewAdapter(Settings{DSN: dsn, Tables: []string{"public.types"}}, nil)
	batches, err := scanAll(t, a, source.ScanQuery{Table: "public.types"})
	if err != nil {
		t.Fatal(err)
	}
	scanned := flatten(batches)
	if len(scanned) != len(streamed) {
		t.Fatalf("scanned %d rows, streamed %d", len(scanned), len(streamed))
	}
	for i := range streamed {
		for _, d := range sameRow(streamed[i], scanned[i]) {
			t.Errorf("row %d: %s", i, d)
		}
	}
	if slices.Contains(scanned[0].Columns, "c_gen") || slices.Contains(scanned[0].Columns, "c_gone") {
		t.Errorf("scanned columns %v include a generated or dropped column", scanned[0].Columns)
	}
	if v, _ := scanned[3].Get("c_bytea"); string(v.Bytes) != "\\\x00" {
		t.Errorf("bytea = %q, want the raw bytes", v.Bytes)
	}
	if &scanned[0].Types[0] != &scanned[1].Types[0] {
		t.Error("two scanned rows of one table carry separate Types slices")
	}
	if _, typ, _ := scanned[0].Lookup("c_def"); !typ.HasDefault || typ.Default != "5" {
		t.Errorf("c_def type %+v, want default 5", typ)
	}
}

// TestScanQueries: ordering, time bounds, WHERE, batches, counts, a partitioned table, an empty
// table, and the errors of a bad query or a missing table.
func TestScanQueries(t *testing.T) {
	dsn, conn := testDB(t, "scanq")
	exec(t, conn, `CREATE TABLE public.ev (n int4 NOT NULL, at timestamptz NOT NULL, k text)`)
	exec(t, conn, `CREATE INDEX ev_n ON public.ev (n)`)
	exec(t, conn, `CREATE TABLE public.empty (n int4)`)
	exec(t, conn, `CREATE TABLE public.parted (n int4 NOT NULL, note text) PARTITION BY RANGE (n)`)
	exec(t, conn, `CREATE TABLE public.parted_a PARTITION OF public.parted FOR VALUES FROM (0) TO (10)`)
	exec(t, conn, `CREATE TABLE public.parted_b PARTITION OF public.parted FOR VALUES FROM (10) TO (20)`)
	// Physical (insertion) order differs from n's order.
	base := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	var inserted []int
	for i := 0; i < 25; i++ {
		n := (i * 7) % 25
		inserted = append(inserted, n)
		k := "even"
		if n%2 == 1 {
			k = "odd"
		}
		exec(t, conn, `INSERT INTO public.ev VALUES ($1, $2, $3)`, n, base.Add(time.Duration(n)*time.Minute), k)
	}
	exec(t, conn, `ANALYZE public.ev`)
	// A planner that prefers the index whenever it can (the table is too small to make it do so
	// by cost): the scan in table order must still read the heap.
	exec(t, conn, `ALTER DATABASE scanq SET enable_seqscan = off`)
	exec(t, conn, `INSERT INTO public.parted VALUES (15, 'b'), (3, 'a'), (12, 'b')`)
	a := NewAdapter(Settings{DSN: dsn, Tables: []string{"public.ev", "public.empty", "public.parted", "public.nope"}}, nil)

	ns := func(rows []source.Row) []int {
		var out []int
		for _, r := range rows {
			v, _ := r.Get("n")
			n, err := strconv.Atoi(string(v.Bytes))
			if err != nil {
				t.Fatalf("n = %q", v.Bytes)
			}
			out = append(out, n)
		}
		return out
	}
	run := func(name string, q source.ScanQuery, want []int, wantBatches int) {
		t.Helper()
		batches, err := scanAll(t, a, q)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			return
		}
		if got := ns(flatten(batches)); !slices.Equal(got, want) {
			t.Errorf("%s: rows %v, want %v", name, got, want)
		}
		if wantBatches >= 0 && len(batches) != wantBatches {
			t.Errorf("%s: %d batches, want %d", name, len(batches), wantBatches)
		}
		for _, b := range batches {
			if q.Batch > 0 && len(b) > q.Batch {
				t.Errorf("%s: a batch of %d rows, Batch %d", name, len(b), q.Batch)
			}
		}
		n, err := a.CountOutbox(context.Background(), q)
		if err != nil || n != int64(len(want)) {
			t.Errorf("%s: CountOutbox = %d, %v; want %d", name, n, err, len(want))
		}
	}
	var sorted, odd, since, physicalSel []int
	for n := 0; n < 25; n++ {
		sorted = append(sorted, n)
		if n%2 == 1 {
			odd = append(odd, n)
		}
		if n >= 5 && n < 10 {
			since = append(since, n)
		}
	}
	for _, n := range inserted {
		if n > 20 {
			physicalSel = append(physicalSel, n)
		}
	}
	run("table order", source.ScanQuery{Table: "public.ev"}, inserted, 1)
	// An index on n would serve the WHERE in n's order: the table order stays physical.
	run("table order with an indexable WHERE", source.ScanQuery{Table: "public.ev", Where: "n > 20"}, physicalSel, 1)
	run("order column", source.ScanQuery{Table: "public.ev", OrderBy: "n", Batch: 10}, sorted, 3)
	run("batch dividing the rows", source.ScanQuery{Table: "public.ev", OrderBy: "n", Batch: 5}, sorted, 5)
	run("where", source.ScanQuery{Table: "public.ev", OrderBy: "n", Where: "k = 'odd'"}, odd, 1)
	run("since/until", source.ScanQuery{Table: "public.ev", OrderBy: "n", TimeColumn: "at",
		Since: base.Add(5 * time.Minute), Until: base.Add(10 * time.Minute)}, since, 1)
	run("since/until and where", source.ScanQuery{Table: "public.ev", OrderBy: "n", TimeColumn: "at",
		Since: base.Add(5 * time.Minute), Until: base.Add(10 * time.Minute), Where: "k = 'odd'"}, []int{5, 7, 9}, 1)
	run("nothing selected", source.ScanQuery{Table: "public.ev", Where: "false"}, nil, 0)
	run("empty table", source.ScanQuery{Table: "public.empty"}, nil, 0)
	run("partitioned table (its partitions in bound order)", source.ScanQuery{Table: "public.parted"}, []int{3, 15, 12}, 1)
	run("partitioned table, ordered", source.ScanQuery{Table: "public.parted", OrderBy: "n"}, []int{3, 12, 15}, 1)
	if b, err := scanAll(t, a, source.ScanQuery{Table: "public.parted"}); err != nil || flatten(b)[0].Table != "public.parted" {
		t.Errorf("a partition's row: %v, want it under the configured name public.parted (err %v)", flatten(b), err)
	}

	// One snapshot: rows committed while the scan runs are not in it.
	got := 0
	err := a.ScanOutbox(context.Background(), source.ScanQuery{Table: "public.ev", Batch: 3}, func(rows []source.Row) error {
		if got == 0 {
			exec(t, conn, `INSERT INTO public.ev VALUES (100, now(), 'late')`)
		}
		got += len(rows)
		return nil
	})
	if err != nil || got != 25 {
		t.Errorf("scan with a concurrent insert: %d rows, %v; want the 25 of its snapshot", got, err)
	}

	for _, c := range []struct {
		name string
		q    source.ScanQuery
		want string
	}{
		{"missing table", source.ScanQuery{Table: "public.nope"}, "public.nope does not exist"},
		{"unconfigured table", source.ScanQuery{Table: "public.other"}, "not in source.tables"},
		{"bad order column", source.ScanQuery{Table: "public.ev", OrderBy: "nope"}, `outbox.order_column "nope" is not a column of public.ev`},
		{"bad time column", source.ScanQuery{Table: "public.ev", TimeColumn: "nope", Since: base}, `time column "nope"`},
		{"time bound without a column", source.ScanQuery{Table: "public.ev", Until: base}, "needs a time column"},
		{"bad where", source.ScanQuery{Table: "public.ev", Where: "nope = 1"}, "nope"},
		{"second statement", source.ScanQuery{Table: "public.ev", Where: "true; DELETE FROM public.ev"}, "scan public.ev"},
	} {
		_, err := scanAll(t, a, c.q)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want one saying %q", c.name, err, c.want)
		}
	}
	var left int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM public.ev`).Scan(&left); err != nil || left != 26 {
		t.Errorf("rows left after the scans: %d, %v; want 26", left, err)
	}

	// A consumer slower than the server's idle_in_transaction_session_timeout: the scan's
	// transaction idles between batches by design and must survive it.
	exec(t, conn, `ALTER DATABASE scanq SET idle_in_transaction_session_timeout = '100ms'`)
	got = 0
	err = a.ScanOutbox(context.Background(), source.ScanQuery{Table: "public.ev", Batch: 10}, func(rows []source.Row) error {
		if got == 0 {
			time.Sleep(300 * time.Millisecond) // the slow consumer itself, not a wait for a condition
		}
		got += len(rows)
		return nil
	})
	if err != nil || got != 26 {
		t.Errorf("scan with a slow consumer and idle_in_transaction_session_timeout 100ms: %d rows, %v; want 26", got, err)
	}

	// Large rows: after a FETCH holding more than the byte bound, fewer rows a FETCH.
	exec(t, conn, `CREATE TABLE public.big (n int4, p text)`)
	exec(t, conn, `INSERT INTO public.big SELECT g, repeat(md5(g::text), 3125) FROM generate_series(1, 20) g`) // 100 kB each
	a.set.Tables = append(a.set.Tables, "public.big")
	a.cfg.ChunkBytes = 250_000
	bigBatches, err := scanAll(t, a, source.ScanQuery{Table: "public.big", Batch: 10})
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int
	for _, b := range bigBatches {
		sizes = append(sizes, len(b))
	}
	if len(flatten(bigBatches)) != 20 || sizes[0] != 10 || slices.Max(sizes[1:]) > 2 {
		t.Errorf("batches of 100 kB rows with a 250 kB bound: %v, want 10 then at most 2 each, 20 in all", sizes)
	}

	// fn's error ends the scan with it.
	stop := fmt.Errorf("stop here")
	calls := 0
	err = a.ScanOutbox(context.Background(), source.ScanQuery{Table: "public.ev", Batch: 2}, func([]source.Row) error { calls++; return stop })
	if err != stop || calls != 1 {
		t.Errorf("fn's error: scan returned %v after %d calls, want it after 1", err, calls)
	}
}
