package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/internal/testenv"
)

// headersRow is one row of TestHeadersE2E: its typed header columns and tracing context (nil =
// NULL) and the headers Debezium 3.6.1 (PostgreSQL connector defaults, SimpleHeaderConverter,
// the EventRouter's tracing) writes for them after id.
type headersRow struct {
	label string
	vals  []any
	trace any
	want  []string // "name=value", "name=<null>"; tracing headers first, as Debezium puts them before id
}

// TestHeadersE2E runs the real binary on kfake with a PostgreSQL outbox table of typed header
// columns and reads every record back: the header values as Debezium renders them (boolean, int,
// bigint, numeric(10,2), numeric without typmod, float4, float8, timestamp, timestamp(3),
// timestamptz, date, bytea; NULL columns as headers with null values), the W3C traceparent from
// the tracingspancontext column in front of id (none for a NULL or a malformed context), and the
// record timestamp equal to the source transaction's commit time (outbox.timestamp: commit, the
// default), read back from PostgreSQL's own commit timestamp (track_commit_timestamp) of the row.
func TestHeadersE2E(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	cols := []string{"flag", "n", "big", "amount", "free", "f4", "f8", "at", "at3", "atz", "day", "raw"}
	// Values as text, cast in the INSERT (the database's own parsing).
	rows := []headersRow{
		{label: "typed", vals: []any{"true", "-7", "9223372036854775807", "12.5", "12.50", "1.1", "100",
			"2019-03-24 20:52:59.123456", "2019-03-24 20:52:59.123", "2026-01-02 03:04:05.123456+00", "2026-01-02", `\x0001ff`},
			trace: "#written by Properties.store\ntraceparent=" + tp + "\n",
			want: []string{"traceparent=" + tp, "id", "flag=true", "n=-7", "big=9223372036854775807", "amount=12.50",
				`free={"scale":1,"value":"fQ=="}`, "f4=1.1", "f8=100.0", "at=1553460779123456", "at3=1553460779123",
				"atz=2026-01-02T03:04:05.123456Z", "day=20455", "raw=AAH/"}},
		{label: "nulls", vals: make([]any, len(cols)), trace: nil,
			want: []string{"id", "flag=<null>", "n=<null>", "big=<null>", "amount=<null>", "free=<null>", "f4=<null>", "f8=<null>",
				"at=<null>", "at3=<null>", "atz=<null>", "day=<null>", "raw=<null>"}},
		{label: "malformed trace", vals: []any{"false", "0", "-1", "0.0000001", "-0.5", "-0", "1e-5",
			"1970-01-01 00:00:00", "1969-12-31 23:59:59.999", "2026-01-02 03:04:05.654321+05:30", "1969-12-31", `\x`},
			trace: "traceparent=00-00000000000000000000000000000000-00f067aa0ba902b7-01",
			want: []string{"id", "flag=false", "n=0", "big=-1", "amount=0.00", `free={"scale":1,"value":"+w=="}`, "f4=-0.0", "f8=1.0E-5",
				"at=0", "at3=-1", "atz=2026-01-01T21:34:05.654321Z", "day=-1", "raw="}},
	}
	var headers strings.Builder
	for _, c := range cols {
		headers.WriteString("    " + c + ": " + c + "\n")
	}
	e := newEnv(t, "outbox:\n  headers:\n"+headers.String())
	ctx := context.Background()
	// PostgreSQL's commit timestamps, to compare the record timestamps with (a restart to apply).
	if err := e.pg.Exec(ctx, "postgres", "ALTER SYSTEM SET track_commit_timestamp = on"); err != nil {
		t.Fatal(err)
	}
	e.pg.Stop()
	if err := e.pg.Start(); err != nil {
		t.Fatalf("restart PostgreSQL with track_commit_timestamp: %v", err)
	}
	c := e.conn()
	if _, err := c.Exec(ctx, `ALTER TABLE outbox ADD COLUMN flag boolean, ADD COLUMN n int4, ADD COLUMN big int8,
		ADD COLUMN amount numeric(10,2), ADD COLUMN free numeric, ADD COLUMN f4 float4, ADD COLUMN f8 float8,
		ADD COLUMN at timestamp, ADD COLUMN at3 timestamp(3), ADD COLUMN atz timestamptz, ADD COLUMN day date,
		ADD COLUMN raw bytea, ADD COLUMN tracingspancontext text`); err != nil {
		t.Fatal(err)
	}
	e.start()
	ids := map[string]string{} // id → label
	for _, r := range rows {
		args := append([]any{r.label, r.trace}, r.vals...)
		got := e.insertRows(c, 1, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, tracingspancontext,
				flag, n, big, amount, free, f4, f8, at, at3, atz, day, raw)
			VALUES (gen_random_uuid(), 'Typed', $1, 'created', '{}', $2, $3::text::boolean, $4::text::int4, $5::text::int8,
				$6::text::numeric, $7::text::numeric, $8::text::float4, $9::text::float8, $10::text::timestamp,
				$11::text::timestamp, $12::text::timestamptz, $13::text::date, $14::text::bytea) RETURNING id::text`,
			func(int) []any { return args }, nil)
		ids[got[0]] = r.label
	}
	e.waitStored(e.walLSN(c), 60*time.Second)

	recs := testenv.ReadAll(t, []string{e.broker.Addr()}, `^outbox\.event\.Typed$`)
	if len(recs) != len(rows) {
		t.Fatalf("read %d records, want %d", len(recs), len(rows))
	}
	for _, rec := range recs {
		id := ""
		for _, h := range rec.Headers {
			if h.Key == "id" {
				id = string(h.Value)
			}
		}
		label, ok := ids[id]
		if !ok {
			t.Fatalf("a record with id %q that no row has", id)
		}
		var want headersRow
		for _, r := range rows {
			if r.label == label {
				want = r
			}
		}
		if got := fmtRecordHeaders(rec.Headers); got != strings.Join(want.want, " ") {
			t.Errorf("row %s: headers\n%s\nwant\n%s", label, got, strings.Join(want.want, " "))
		}
		var commit time.Time
		if err := c.QueryRow(ctx, "SELECT pg_xact_commit_timestamp(xmin) FROM outbox WHERE id = $1", id).Scan(&commit); err != nil {
			t.Fatalf("row %s: commit timestamp: %v", label, err)
		}
		if rec.Timestamp.UnixMilli() != commit.UnixMilli() {
			t.Errorf("row %s: record timestamp %s (%d ms), want the transaction's commit time %s (%d ms)",
				label, rec.Timestamp.UTC().Format(time.RFC3339Nano), rec.Timestamp.UnixMilli(), commit.UTC().Format(time.RFC3339Nano), commit.UnixMilli())
		}
	}
}

// fmtRecordHeaders writes headers in order as "name=value" (id alone: its value is the row's),
// a null value as <null>.
func fmtRecordHeaders(hs []kgo.RecordHeader) string {
	out := make([]string, 0, len(hs))
	for _, h := range hs {
		switch {
		case h.Key == "id":
			out = append(out, "id")
		case h.Value == nil:
			out = append(out, h.Key+"=<null>")
		default:
			out = append(out, h.Key+"="+string(h.Value))
		}
	}
	return strings.Join(out, " ")
}
