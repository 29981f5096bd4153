package mysql

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
)

func TestCleanupIDParam(t *testing.T) {
	for _, c := range []struct {
		col  idColumn
		id   string
		want any
	}{
		{idColumn{dataType: "bigint"}, "-7", int64(-7)},
		{idColumn{dataType: "bigint", unsigned: true}, "18446744073709551615", uint64(18446744073709551615)},
		{idColumn{dataType: "varchar"}, "a'b", "a'b"},
		{idColumn{dataType: "uuid"}, "6f1c9b1e-7c1a-4c4e-9a57-000000000001", "6f1c9b1e-7c1a-4c4e-9a57-000000000001"},
		{idColumn{dataType: "binary", columnType: "binary(16)"}, "00010203-0405-0607-0809-0a0b0c0d0e0f",
			[]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}},
		{idColumn{dataType: "varbinary"}, "\x00\xff", []byte("\x00\xff")},
	} {
		got, err := c.col.param([]byte(c.id))
		if err != nil {
			t.Fatalf("%+v %q: %v", c.col, c.id, err)
		}
		if b, ok := c.want.([]byte); ok {
			if g, _ := got.([]byte); string(g) != string(b) {
				t.Errorf("%+v %q: %v", c.col, c.id, got)
			}
		} else if got != c.want {
			t.Errorf("%+v %q: %v (%T)", c.col, c.id, got, got)
		}
	}
	for _, bad := range []string{"abc", "00010203-0405-0607-0809-0a0b0c0d0e"} {
		if _, err := (idColumn{dataType: "binary", columnType: "binary(16)"}).param([]byte(bad)); err == nil {
			t.Errorf("%q accepted as a BINARY(16) uuid", bad)
		}
	}
	if _, err := (idColumn{dataType: "int"}).param([]byte("x")); err == nil {
		t.Error("x accepted as an int")
	}
}

// TestDeleteOutboxRowsOnMariaDB deletes by id for BINARY(16) (uuid text), INT, VARCHAR and
// VARBINARY ids, only the ids given, and reads the row estimate.
func TestDeleteOutboxRowsOnMariaDB(t *testing.T) {
	m := testenv.NewMariaDB(t, testenv.MariaDBOptions{RowMetadata: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cases := []struct {
		table, typ, lit string // lit: SQL literal of an id given as text
		ids             []string
		left            string // SELECT of the remaining id as text
	}{
		{"app.ob_bin", "BINARY(16)", "UNHEX(REPLACE('%s', '-', ''))",
			[]string{"00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002", "00000000-0000-4000-8000-000000000003"}, "LOWER(HEX(id))"},
		{"app.ob_int", "BIGINT UNSIGNED", "%s", []string{"1", "2", "3"}, "id"},
		{"app.ob_chr", "VARCHAR(40)", "'%s'", []string{"a", "b", "c"}, "id"},
		{"app.ob_vb", "VARBINARY(8)", "'%s'", []string{"x1", "x2", "x3"}, "id"},
	}
	var tables []string
	for _, c := range cases {
		tables = append(tables, c.table)
		stmts := []string{"CREATE TABLE " + c.table + " (id " + c.typ + " PRIMARY KEY, payload TEXT)"}
		for _, id := range c.ids {
			stmts = append(stmts, "INSERT INTO "+c.table+" VALUES ("+strings.ReplaceAll(c.lit, "%s", id)+", 'p')")
		}
		if err := m.Exec(ctx, "app", stmts...); err != nil {
			t.Fatal(err)
		}
	}
	a := NewAdapter(Settings{DSN: m.DSN("app"), Tables: tables, ServerID: 77, Columns: []string{"id", "payload"}}, nil)
	defer a.CloseCleaner()
	for _, c := range cases {
		del := [][]byte{[]byte(c.ids[0]), []byte(c.ids[2])}
		n, err := a.DeleteOutboxRows(ctx, c.table, del, 0)
		if err != nil || n != 2 {
			t.Fatalf("%s: deleted %d, %v", c.table, n, err)
		}
		rows, err := m.Query("app", "SELECT "+c.left+" FROM "+c.table)
		if err != nil {
			t.Fatal(err)
		}
		want := c.ids[1]
		if c.typ == "BINARY(16)" {
			want = strings.ReplaceAll(want, "-", "")
		}
		if len(rows) != 1 || rows[0][0] != want {
			t.Fatalf("%s: left %v, want %s", c.table, rows, want)
		}
	}
	if _, err := a.DeleteOutboxRows(ctx, "app.other", [][]byte{[]byte("1")}, 0); err == nil {
		t.Fatal("a table outside source.tables was cleaned")
	}
	if _, err := a.DeleteOutboxRows(ctx, "app.ob_int", [][]byte{[]byte("2")}, time.Hour); err == nil {
		t.Fatal("retain accepted")
	}
	// An id that cannot be a BIGINT is skipped (logged), the others go.
	if n, err := a.DeleteOutboxRows(ctx, "app.ob_int", [][]byte{[]byte("zz"), []byte("2")}, 0); err != nil || n != 1 {
		t.Fatalf("with a bad id: %d, %v", n, err)
	}
	if err := m.Exec(ctx, "app", "ANALYZE TABLE app.ob_chr"); err != nil {
		t.Fatal(err)
	}
	if n, err := a.OutboxRowEstimate(ctx, "app.ob_chr"); err != nil || !slices.Contains([]int64{0, 1, 2}, n) {
		t.Fatalf("estimate %d, %v", n, err)
	}
	// A broken connection fails the call and is replaced by the next one.
	a.clean.c.Close()
	if _, err := a.DeleteOutboxRows(ctx, "app.ob_chr", [][]byte{[]byte("b")}, 0); err == nil {
		t.Fatal("a closed connection deleted")
	}
	if n, err := a.DeleteOutboxRows(ctx, "app.ob_chr", [][]byte{[]byte("b")}, 0); err != nil || n != 1 {
		t.Fatalf("after the connection broke: %d, %v", n, err)
	}
}
