package postgres

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/source"
)

// kindText is the text form each Kind's doc comment (source/source.go) promises for PostgreSQL.
var kindText = map[source.Kind]*regexp.Regexp{
	source.KindBool:           regexp.MustCompile(`^[tf]$`),
	source.KindInt16:          regexp.MustCompile(`^-?[0-9]+$`),
	source.KindInt32:          regexp.MustCompile(`^-?[0-9]+$`),
	source.KindInt64:          regexp.MustCompile(`^-?[0-9]+$`),
	source.KindFloat32:        regexp.MustCompile(`^(-?[0-9.e+-]+|NaN|-?Infinity)$`),
	source.KindFloat64:        regexp.MustCompile(`^(-?[0-9.e+-]+|NaN|-?Infinity)$`),
	source.KindDecimal:        regexp.MustCompile(`^-?[0-9]+(\.[0-9]+)?$`),
	source.KindUUID:           regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`),
	source.KindTimestamp:      regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,3})?$`),
	source.KindMicroTimestamp: regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?$`),
	source.KindZonedTimestamp: regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?[+-][0-9]{2}(:[0-9]{2}(:[0-9]{2})?)?$`),
	source.KindDate:           regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}$`),
}

// sampleValue is a literal for a column of the type table.
var sampleValue = map[string]string{
	"bool": "true", "int2": "-32768", "int4": "2147483647", "int8": "-9223372036854775808", "oid": "4294967295",
	"float4": "1.5", "float8": "-2.25e-300", "numeric(10,2)": "12.5", "numeric(5)": "12345", "numeric(4,-2)": "123456",
	"numeric": "1.000100", "text": "t", "varchar(20)": "v", "char(3)": "c", "name": "n",
	"uuid": "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11", "json": `{"a": 1}`, "jsonb": `{"a": 1}`, "bytea": `\x00ff`,
	"timestamp(0)": "2024-05-06 07:08:09.6", "timestamp(3)": "2024-05-06 07:08:09.123456", "timestamp(4)": "2024-05-06 07:08:09.123456",
	"timestamp(6)": "2024-05-06 07:08:09.123456", "timestamp": "2024-05-06 07:08:09", "timestamptz": "2024-05-06 07:08:09.5+02",
	"timestamptz(3)": "2024-05-06 07:08:09.123456+05:30", "date": "2024-05-06", "time": "07:08:09", "interval": "1 day",
	"money": "12.34", "xml": "<a/>", "inet": "10.0.0.1", "mood": "happy",
}

// TestColumnTypesEndToEnd: a table of every mapped type on a real PostgreSQL; the Relation
// message's type modifiers and the catalog's NOT NULL give each column the Type the fixture
// table (typeCases) says, and each value has its Kind's text form.
func TestColumnTypesEndToEnd(t *testing.T) {
	dsn, conn := testDB(t, "coltypes")
	exec(t, conn, `CREATE TYPE mood AS ENUM ('sad', 'happy')`)
	var defs, lits []string
	for i, tc := range typeCases() {
		def := tc.col.Name + " " + tc.sql
		if i < 2 {
			def += " NOT NULL"
		}
		defs = append(defs, def)
		lit, ok := sampleValue[tc.sql]
		if !ok {
			t.Fatalf("no sample value for %s", tc.sql)
		}
		lits = append(lits, "'"+strings.ReplaceAll(lit, "'", "''")+"'::"+tc.sql)
	}
	exec(t, conn, `CREATE TABLE public.types (`+strings.Join(defs, ", ")+`)`)
	exec(t, conn, `CREATE TABLE public.parted (id int4 NOT NULL, note text, at timestamp(3)) PARTITION BY RANGE (id)`)
	exec(t, conn, `CREATE TABLE public.parted_1 PARTITION OF public.parted FOR VALUES FROM (0) TO (100)`)
	s := newTestSource(dsn, "coltypes", "public.types", "public.parted")
	open(t, s, "")
	exec(t, conn, `INSERT INTO public.types VALUES (`+strings.Join(lits, ", ")+`)`)
	nulls := []string{"true", "1"}
	for range typeCases()[2:] {
		nulls = append(nulls, "NULL")
	}
	exec(t, conn, `INSERT INTO public.types VALUES (`+strings.Join(nulls, ", ")+`)`)

	tx := nextRows(t, s)
	if len(tx.Rows) != 1 {
		tx.Rows = append(tx.Rows, nextRows(t, s).Rows...)
	}
	if len(tx.Rows) < 2 {
		tx.Rows = append(tx.Rows, nextRows(t, s).Rows...)
	}
	r := tx.Rows[0]
	if len(r.Types) != len(r.Columns) {
		t.Fatalf("len(Types) = %d, len(Columns) = %d", len(r.Types), len(r.Columns))
	}
	if &tx.Rows[1].Types[0] != &r.Types[0] {
		t.Error("two rows of one table carry separate Types slices")
	}
	for i, tc := range typeCases() {
		want := tc.want
		want.Optional = i >= 2
		if r.Types[i] != want {
			t.Errorf("column %s %s: %+v, want %+v", tc.col.Name, tc.sql, r.Types[i], want)
		}
		if re := kindText[want.Kind]; re != nil && !re.Match(r.Values[i].Bytes) {
			t.Errorf("column %s %s (kind %d): value %q is not the Kind's text form %s", tc.col.Name, tc.sql, want.Kind, r.Values[i].Bytes, re)
		}
		fmt.Fprintf(testWriter{t}, "%-16s %-14s kind=%-2d optional=%-5v scale=%d precision=%d value=%q\n",
			tc.col.Name, tc.sql, r.Types[i].Kind, r.Types[i].Optional, r.Types[i].Scale, r.Types[i].Precision, r.Values[i].Bytes)
	}

	// `outboxd check` lists the same columns and Types from the catalog (adapter_columns.go).
	ad := NewAdapter(Settings{DSN: dsn, Tables: []string{"public.types", "public.nope"}}, nil)
	cols, types, ok, err := ad.OutboxTableColumns(context.Background(), "public.types")
	if err != nil || !ok || !slices.Equal(cols, r.Columns) || !slices.Equal(types, r.Types) {
		t.Errorf("OutboxTableColumns = %v %+v %v %v, want the row's %v %+v", cols, types, ok, err, r.Columns, r.Types)
	}
	if _, _, ok, err := ad.OutboxTableColumns(context.Background(), "public.nope"); ok || err != nil {
		t.Errorf("OutboxTableColumns(missing table) = ok %v, err %v; want false, nil", ok, err)
	}

	// A partitioned table's rows (published via the root) carry the root's NOT NULL columns.
	exec(t, conn, `INSERT INTO public.parted VALUES (1, NULL, '2024-05-06 07:08:09.5')`)
	p := nextRows(t, s).Rows[0]
	want := []source.Type{{Kind: source.KindInt32}, {Kind: source.KindString, Optional: true}, {Kind: source.KindTimestamp, Optional: true}}
	if p.Table != "public.parted" || len(p.Types) != 3 || p.Types[0] != want[0] || p.Types[1] != want[1] || p.Types[2] != want[2] {
		t.Errorf("partitioned table row %s: Types %+v, want %+v", p.Table, p.Types, want)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}
