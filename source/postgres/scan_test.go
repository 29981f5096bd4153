package postgres

import (
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/source"
)

func TestScanSQL(t *testing.T) {
	cols := []string{"id", "created at", "Payload"}
	at := time.Date(2026, 1, 2, 3, 4, 5, 600000000, time.FixedZone("x", 3600))
	for _, c := range []struct {
		q    source.ScanQuery
		want string
	}{
		{source.ScanQuery{Table: "public.outbox"}, `SELECT "id", "created at", "Payload" FROM "public"."outbox"`},
		{source.ScanQuery{Table: `My"S.t`, OrderBy: "Payload"}, `SELECT "id", "created at", "Payload" FROM "My""S"."t" ORDER BY "Payload", ctid`},
		{source.ScanQuery{Table: "outbox", TimeColumn: "created at", Since: at, Where: " k = 'x' OR k = 'y' "},
			`SELECT "id", "created at", "Payload" FROM "public"."outbox" WHERE "created at" >= '2026-01-02 02:04:05.6Z'::timestamptz AND (k = 'x' OR k = 'y')`},
		{source.ScanQuery{Table: "s.t", TimeColumn: "created at", Since: at, Until: at.Add(time.Hour), OrderBy: "id"},
			`SELECT "id", "created at", "Payload" FROM "s"."t" WHERE "created at" >= '2026-01-02 02:04:05.6Z'::timestamptz AND "created at" < '2026-01-02 03:04:05.6Z'::timestamptz ORDER BY "id", ctid`},
	} {
		got, err := scanSQL(c.q, cols)
		if err != nil || got != c.want {
			t.Errorf("scanSQL(%+v) =\n  %s, %v\nwant\n  %s", c.q, got, err, c.want)
		}
	}
	for _, c := range []struct {
		q    source.ScanQuery
		want string
	}{
		{source.ScanQuery{Table: "s.t", OrderBy: "payload"}, `outbox.order_column "payload" is not a column of s.t`},
		{source.ScanQuery{Table: "s.t", Since: at}, "needs a time column"},
		{source.ScanQuery{Table: "s.t", Until: at, TimeColumn: "at"}, `time column "at" is not a column`},
	} {
		if _, err := scanSQL(c.q, cols); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("scanSQL(%+v): err %v, want one saying %q", c.q, err, c.want)
		}
	}
}

func TestNextFetch(t *testing.T) {
	for _, c := range []struct{ n, size, batch, maxBytes, want int }{
		{1000, 100_000, 1000, 1 << 20, 1000}, // small rows: the whole batch
		{1000, 10 << 20, 1000, 1 << 20, 100}, // 10 MiB in 1000 rows: a tenth
		{100, 1 << 20, 1000, 1 << 20, 100},   // at the bound: the same again
		{100, 100_000, 1000, 1 << 20, 1000},  // rows got small: back up, capped at batch
		{1, 50 << 20, 1000, 1 << 20, 1},      // one huge row: at least one
		{1000, 10 << 20, 1000, 0, 1000},      // no byte bound
		{1000, 10 << 20, 1000, -1, 1000},     // no byte bound
		{10, 0, 1000, 1 << 20, 1000},         // nothing measured
	} {
		if got := nextFetch(c.n, c.size, c.batch, c.maxBytes); got != c.want {
			t.Errorf("nextFetch(%d, %d, %d, %d) = %d, want %d", c.n, c.size, c.batch, c.maxBytes, got, c.want)
		}
	}
}
