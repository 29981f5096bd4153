package postgres

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDeleteByIDSQLCastsTheParameter(t *testing.T) {
	for _, c := range []struct{ typ, want string }{
		{"uuid", `DELETE FROM "public"."outbox" WHERE "id" = ANY($1::text[]::uuid[])`},
		{"bigint", `DELETE FROM "public"."outbox" WHERE "id" = ANY($1::text[]::bigint[])`},
		{"character varying(40)", `DELETE FROM "public"."outbox" WHERE "id" = ANY($1::text[]::character varying(40)[])`},
		{"text", `DELETE FROM "public"."outbox" WHERE "id" = ANY($1::text[])`},
		{"bytea", `DELETE FROM "public"."outbox" WHERE "id" = ANY($1::bytea[])`},
	} {
		got, arg := deleteByIDSQL("public.outbox", "id", c.typ, [][]byte{[]byte("1")})
		if got != c.want {
			t.Errorf("%s: %s, want %s", c.typ, got, c.want)
		}
		if _, ok := arg.([][]byte); ok != (c.typ == "bytea") {
			t.Errorf("%s: parameter %T", c.typ, arg)
		}
	}
}

// TestDeleteOutboxRows deletes by id for each id type, only the ids given, through the primary
// key's index, and reads the row estimate.
func TestDeleteOutboxRows(t *testing.T) {
	dsn, conn := testDB(t, "cleanup_delete")
	ctx := context.Background()
	types := map[string]string{"u": "uuid", "b": "bigint", "t": "text", "v": "varchar(40)", "y": "bytea"}
	ids := map[string][]string{
		"u": {"6f1c9b1e-7c1a-4c4e-9a57-000000000001", "6f1c9b1e-7c1a-4c4e-9a57-000000000002", "6f1c9b1e-7c1a-4c4e-9a57-000000000003"},
		"b": {"1", "2", "3"}, "t": {"a", "b b", "c'"}, "v": {"x", "y", "z"}, "y": {"\x00\x01", "\xff", "ab"},
	}
	var tables []string
	for k, typ := range types {
		tab := "public.ob_" + k
		tables = append(tables, tab)
		if _, err := conn.Exec(ctx, "CREATE TABLE "+tab+" (id "+typ+" PRIMARY KEY, payload text)"); err != nil {
			t.Fatal(err)
		}
		for _, id := range ids[k] {
			var arg any = id
			if typ == "bytea" {
				arg = []byte(id)
			}
			if _, err := conn.Exec(ctx, "INSERT INTO "+tab+" VALUES ($1, 'p')", arg); err != nil {
				t.Fatal(err)
			}
		}
	}
	a := NewAdapter(Settings{DSN: dsn, Tables: tables, Columns: []string{"id", "payload"}}, nil)
	defer a.CloseCleaner()
	for k := range types {
		tab := "public.ob_" + k
		del := [][]byte{[]byte(ids[k][0]), []byte(ids[k][2]), []byte("not-there-" + k)}
		if k == "b" {
			del[2] = []byte("42")
		}
		if k == "u" {
			del[2] = []byte("6f1c9b1e-7c1a-4c4e-9a57-0000000000ff")
		}
		n, err := a.DeleteOutboxRows(ctx, tab, del, 0)
		if err != nil || n != 2 {
			t.Fatalf("%s: deleted %d, %v", tab, n, err)
		}
		var left []string
		rows, _ := conn.Query(ctx, "SELECT id::text FROM "+tab)
		for rows.Next() {
			var s string
			rows.Scan(&s)
			left = append(left, s)
		}
		rows.Close()
		want := ids[k][1]
		if k == "y" {
			want = `\xff`
		}
		if !slices.Equal(left, []string{want}) {
			t.Fatalf("%s: left %v, want %s", tab, left, want)
		}
	}
	// The plan uses the primary key (a cast of the column would scan the table).
	if _, err := conn.Exec(ctx, "SET enable_seqscan = off"); err != nil {
		t.Fatal(err)
	}
	sql, arg := deleteByIDSQL("public.ob_u", "id", "uuid", [][]byte{[]byte(ids["u"][1])})
	var plan strings.Builder
	rows, err := conn.Query(ctx, "EXPLAIN "+sql, arg)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var l string
		rows.Scan(&l)
		plan.WriteString(l + "\n")
	}
	rows.Close()
	if !strings.Contains(plan.String(), "ob_u_pkey") {
		t.Fatalf("the DELETE does not use the primary key:\n%s", plan.String())
	}
	if _, err := a.DeleteOutboxRows(ctx, "public.other", [][]byte{[]byte("1")}, 0); err == nil {
		t.Fatal("a table outside source.tables was cleaned")
	}
	if _, err := a.DeleteOutboxRows(ctx, "public.ob_b", [][]byte{[]byte("2")}, time.Hour); err == nil || !strings.Contains(err.Error(), "track_commit_timestamp") {
		t.Fatalf("retain without track_commit_timestamp: %v", err)
	}
	if _, err := conn.Exec(ctx, "ANALYZE public.ob_b"); err != nil {
		t.Fatal(err)
	}
	if n, err := a.OutboxRowEstimate(ctx, "public.ob_b"); err != nil || n != 1 {
		t.Fatalf("estimate %d, %v", n, err)
	}
	// A closed connection is reopened.
	a.clean.conn.Close(ctx)
	if n, err := a.DeleteOutboxRows(ctx, "public.ob_b", [][]byte{[]byte("2")}, 0); err != nil || n != 1 {
		t.Fatalf("after the connection closed: %d, %v", n, err)
	}
}
