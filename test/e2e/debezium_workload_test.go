package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
)

// The PostgreSQL comparison's tables, rows and record bookkeeping (TestDebeziumByteForByte).

// setupDDL follows testenv.OutboxDDL: the header columns of setup A (text, int, boolean and
// typed ones), the timestamp column of setup B (timestamp without time zone: Debezium's
// MicroTimestamp, read as UTC), setup C's partition column (integer: Debezium's int32), and a
// table with a text payload for setup T's blank payloads.
var setupDDL = []string{
	"ALTER SYSTEM SET timezone = 'UTC'", "SELECT pg_reload_conf()", // the text of timestamptz columns
	`ALTER TABLE public.outbox ADD COLUMN tenant text, ADD COLUMN attempt int, ADD COLUMN urgent boolean,
		ADD COLUMN amount numeric(10,2), ADD COLUMN at timestamptz, ADD COLUMN day date, ADD COLUMN ref uuid,
		ADD COLUMN doc jsonb, ADD COLUMN raw bytea, ADD COLUMN occurred timestamp, ADD COLUMN part integer,
		ADD COLUMN prio integer NOT NULL DEFAULT 5, ADD COLUMN label text DEFAULT 'none'`,
	`CREATE TABLE public.outbox_text (id uuid PRIMARY KEY, aggregatetype text, aggregateid text, type text, payload text, tracingspancontext text)`,
}

// occurredBase is the occurred value of the first row; row i has occurredBase + i*1.001001 s.
var occurredBase = time.Date(2026, 3, 4, 5, 6, 7, 123456000, time.UTC)

// workloadExtra are the rows of public.outbox beyond cmpTxs: numbers in every shape Jackson and
// PostgreSQL print differently, a NULL timestamp column, an aggregatetype setup A's regex does
// not match.
func workloadExtra() [][]cmpRow {
	return [][]cmpRow{
		{{label: "numbers", aggType: "Order", aggID: sp("order-numbers"), typ: sp("Numbers"), tenant: sp("acme"), attempt: ip(3), urgent: bp(false),
			payload: sp(`{"f": 39.98, "e": 1e10, "small": 1E-7, "big": 12345678901234567890, "bigger": 123456789012345678901234567890, "neg0": -0, "i32": 2147483647, "i32over": 2147483648, "one": 1.0, "neg": -12.50, "arr": [39.98, 1e10, 0]}`)}},
		{{label: "numbers-top", aggType: "Order", aggID: sp("order-numbers-top"), typ: sp("Numbers"), payload: sp(`[1e10, 39.98, -0.0, 9223372036854775808]`)}},
		// objects without mixed arrays: expanded (Jackson's int, long, double and BigInteger text)
		{{label: "numbers-expandable", aggType: "Order", aggID: sp("order-numbers-exp"), typ: sp("Numbers"),
			payload: sp(`{"f": 39.98, "e": 1e10, "small": 1E-7, "i32over": 2147483648, "i64max": 9223372036854775807, "neg0": -0.0, "one": 1.0, "frac": 0.1000, "tiny": 4.9e-324, "neg": -12.50, "nested": {"d": 1e-3}}`)}},
		{{label: "null-occurred", aggType: "Order", aggID: sp("order-no-time"), typ: sp("NoTime"), payload: sp(`{"t": null}`), noOccurred: true}},
		{{label: "no-regex-match", aggType: "lower_case", aggID: sp("order-lower"), typ: sp("Lower"), payload: sp(`{"lower": true}`)}},
	}
}

// textRows are the rows of public.outbox_text (setup T): SQL NULL, empty and blank payloads
// (Java's String.trim() drops every char <= U+0020, not NBSP or U+3000), and text that is no JSON.
func textRows() []cmpRow {
	row := func(label string, payload *string) cmpRow {
		return cmpRow{label: "text-" + label, aggType: "Order", aggID: sp("text-" + label), typ: sp("Text"), payload: payload}
	}
	return []cmpRow{
		row("null", nil),
		row("empty", sp("")),
		row("blank", sp(" \t\n\r ")),
		row("control-chars", sp("\x01\x1f ")),
		row("nbsp", sp("\u00a0")),
		row("ideographic-space", sp("\u3000")),
		row("plain", sp("hello world")),
		row("json-as-text", sp(`{"b": 1,  "a": [ ]}`)),
		row("astral", sp("😀 𝄞 ünï")),
		{label: "text-null-key", aggType: "Customer", aggID: nil, typ: sp("Text"), payload: sp("k")},
		trace("valid", "traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
		trace("state-baggage", "#written by the app\ntraceparent=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00\ntracestate=rojo=00f067aa0ba902b7,congo=t61rcWkgMzE\nbaggage=userId=alice,isProduction=false\n"),
		trace("spaced-state", "traceparent:00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\ntracestate = k=v ,  x=y\nbaggage=a=1,  b=2"),
		trace("escaped-key", "traceparent\\u003d00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
		trace("malformed", "traceparent=00-XYZ-b7ad6b7169203331-01"),
		trace("no-traceparent", "tracestate=k=v"),
	}
}

// trace is a setup T row with a tracing column (java.util.Properties text).
func trace(label, props string) cmpRow {
	return cmpRow{label: "trace-" + label, aggType: "Order", aggID: sp("trace-" + label), typ: sp("Traced"), payload: sp("t"), tracing: sp(props)}
}

func pgConn(t *testing.T, pg *testenv.Postgres) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), pg.DSN("app"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// insertWorkload commits the comparison's rows: cmpTxs and workloadExtra into public.outbox
// (one transaction each, occurred set), the typed-headers row, textRows into public.outbox_text
// (one transaction), then an update and a delete on both tables (no events for either tool). It
// returns the rows in commit order.
func insertWorkload(t *testing.T, conn *pgx.Conn) (rows, text []cmpRow, ntx int) {
	t.Helper()
	ctx := context.Background()
	txs := append(cmpTxs(), workloadExtra()...)
	for _, tx := range txs {
		b, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range tx {
			if !r.noOccurred {
				r.occurred = sp(occurredBase.Add(time.Duration(len(rows)) * 1001001 * time.Microsecond).Format("2006-01-02 15:04:05.999999"))
			}
			// part: the n-th row's partition n%3, NULL for every fourth (the partitioner's choice)
			var part *int
			if n := len(rows); n%4 != 3 {
				part = ip(n % 3)
			}
			if _, err := b.Exec(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, tenant, attempt, urgent, occurred, part)
				VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8, $9::timestamp, $10)`, r.id(), r.aggType, r.aggID, r.typ, r.payload, r.tenant, r.attempt, r.urgent, r.occurred, part); err != nil {
				t.Fatalf("insert %s: %v", r.label, err)
			}
			if r.deleted {
				if _, err := b.Exec(ctx, `DELETE FROM outbox WHERE id = $1`, r.id()); err != nil {
					t.Fatal(err)
				}
			}
			rows = append(rows, r)
		}
		if err := b.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	typed := cmpRow{label: "typed-headers", aggType: "Order", aggID: sp("order-typed"), typ: sp("Typed"), payload: sp(`{}`),
		occurred: sp("2026-01-02 03:04:05.999999")}
	// label NULL although it has a DEFAULT: JsonConverter's replace.null.with.default
	if _, err := conn.Exec(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, label, amount, at, day, ref, doc, raw, occurred)
		VALUES ($1, $2, $3, $4, $5::jsonb, NULL, 12.5, '2026-01-02 03:04:05.12345+00', '2026-01-02', 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11', '{"b": 1, "a": [true]}', '\x0001ff', $6::timestamp)`,
		typed.id(), typed.aggType, typed.aggID, typed.typ, typed.payload, typed.occurred); err != nil {
		t.Fatal(err)
	}
	rows = append(rows, typed)
	text = textRows()
	b, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range text {
		if _, err := b.Exec(ctx, `INSERT INTO outbox_text (id, aggregatetype, aggregateid, type, payload, tracingspancontext) VALUES ($1, $2, $3, $4, $5, $6)`,
			r.id(), r.aggType, r.aggID, r.typ, r.payload, r.tracing); err != nil {
			t.Fatalf("insert %s: %v", r.label, err)
		}
	}
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Updates and deletes are no events for either.
	for _, q := range []string{`UPDATE outbox SET payload = '{"updated": true}'`, `DELETE FROM outbox WHERE aggregatetype = 'Customer'`,
		`UPDATE outbox_text SET payload = 'updated'`, `DELETE FROM outbox_text WHERE aggregatetype = 'Customer'`} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	return rows, text, len(txs) + 2
}

// rowsOf is the rows setup s reads.
func (s dbzSetup) rowsOf(rows, text []cmpRow) []cmpRow {
	if s.table == "public.outbox_text" {
		return text
	}
	return rows
}

func (s dbzSetup) cmpOpts() cmpOpts {
	o := cmpOpts{dbzPrefix: "dbz" + s.name + ".", obxPrefix: "obx" + s.name + ".", dlq: "obx" + s.name + ".dlq", nullKeyPartition: s.keyNullBytes,
		schemaDefaults: true}
	if s.tsColumn != "" {
		o.exactTS = func(r cmpRow) bool { return r.occurred != nil }
	}
	return o
}

// startSetupOutboxd starts setup s's outboxd and waits until its walsender streams.
func startSetupOutboxd(t *testing.T, pg *testenv.Postgres, brokers string, s dbzSetup) *harness.Proc {
	t.Helper()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "outboxd.yaml")
	writeFile(t, cfgPath, s.outboxdConfig(pg.DSN("app"), brokers, filepath.Join(dir, "offsets.json")))
	p := startProc(t, cfgPath)
	c := pgConn(t, pg)
	slot := "obx_" + strings.ToLower(s.name)
	harness.WaitFor(t, 60*time.Second, "setup "+s.name+": outboxd's slot "+slot+" active", func() bool {
		var active bool
		c.QueryRow(context.Background(), "SELECT active FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&active)
		select {
		case <-p.Done:
			t.Fatalf("setup %s: outboxd exited with %d:\n%s", s.name, p.Code, p.Out.String())
		default:
		}
		return active && strings.Contains(p.Out.String(), "replication started")
	})
	return p
}

type setupRecords struct{ dbz, obx []cmpRecord }

// splitBySetup sorts the records read by tool and setup: by topic prefix (dbz<S>. / obx<S>.),
// and on a topic neither prefix marks by the producer id seen on the prefixed topics (each
// connector's task and each outboxd has its own idempotent producer).
func splitBySetup(t *testing.T, setups []dbzSetup, all []cmpRecord) map[string]*setupRecords {
	t.Helper()
	out := map[string]*setupRecords{}
	type owner struct {
		setup string
		dbz   bool
	}
	pids := map[int64]owner{}
	var raw []cmpRecord
	for _, s := range setups {
		out[s.name] = &setupRecords{}
	}
	for _, r := range all {
		found := false
	setups:
		for _, s := range setups {
			sr := out[s.name]
			switch {
			case strings.HasPrefix(r.Topic, "dbz"+s.name+"."):
				sr.dbz = append(sr.dbz, r)
				if r.ProducerID >= 0 {
					pids[r.ProducerID] = owner{s.name, true}
				}
			case strings.HasPrefix(r.Topic, "obx"+s.name+"."):
				sr.obx = append(sr.obx, r)
				if r.ProducerID >= 0 {
					pids[r.ProducerID] = owner{s.name, false}
				}
			default:
				continue
			}
			found = true
			break setups
		}
		if !found {
			raw = append(raw, r)
		}
	}
	// outboxd's producer (sarama) may be non-idempotent (producer id -1, shared by all outboxd
	// instances): a record with a producer id no connector has is the outboxd's of the one setup
	// whose topics can be raw (a route.topic.regex).
	var rawSetup string
	for _, s := range setups {
		if s.connector["transforms.outbox.route.topic.regex"] != "" {
			if rawSetup != "" {
				t.Fatalf("setups %s and %s both route by a regex: their raw topics cannot be told apart", rawSetup, s.name)
			}
			rawSetup = s.name
		}
	}
	t.Logf("producer ids: %v; %d records on raw topics", pids, len(raw))
	for _, r := range raw {
		o, ok := pids[r.ProducerID]
		if !ok && rawSetup != "" {
			o, ok = owner{rawSetup, false}, true
		}
		if !ok || (o.dbz && r.ProducerID < 0) {
			t.Errorf("record on %s/%d@%d: producer id %d is none of the tools' (seen %v)", r.Topic, r.Partition, r.Offset, r.ProducerID, pids)
			continue
		}
		if o.dbz {
			out[o.setup].dbz = append(out[o.setup].dbz, r)
		} else {
			out[o.setup].obx = append(out[o.setup].obx, r)
		}
	}
	return out
}

// goldenDir is where TestDebeziumByteForByte writes Debezium's records per setup
// (OUTBOXD_DBZ_GOLDEN; empty: not written).
func goldenDir() string { return os.Getenv("OUTBOXD_DBZ_GOLDEN") }

// writeGolden writes <dir>/<setup>.txt (Debezium's records, in commit order, with the connector
// config) and <dir>/outboxd/<setup>.txt (outboxd's, the same format, with its config).
func writeGolden(t *testing.T, dir string, setups []dbzSetup, cfgs []map[string]string, rows, text []cmpRow, by map[string]*setupRecords) {
	t.Helper()
	for i, s := range setups {
		rs := s.rowsOf(rows, text)
		how := func(row cmpRow) string {
			switch {
			case s.tsColumn != "" && row.occurred != nil:
				return "deterministic: column " + s.tsColumn + " = " + *row.occurred
			case s.tsColumn != "":
				return "column " + s.tsColumn + " is NULL: processing time, not deterministic"
			}
			return "processing time, not deterministic"
		}
		head := "setup " + s.name + ": " + s.what
		writeGoldenFile(t, filepath.Join(dir, s.name+".txt"), head, "Debezium "+testenv.DebeziumVersion+" connector config:\n"+dumpConfig(cfgs[i]), rs, by[s.name].dbz, how)
		writeGoldenFile(t, filepath.Join(dir, "outboxd", s.name+".txt"), head, "outboxd config:\n"+s.outboxdConfig("<dsn>", "<brokers>", "<offsets>"), rs, by[s.name].obx,
			func(cmpRow) string { return "outboxd" })
	}
	t.Logf("golden records written to %s", dir)
}

// writeGoldenFile writes one tool's records of rows to path (format: dbz-golden's README.md):
// head and config as # lines, then per row in commit order its record, how(row) saying how the
// timestamp came about.
func writeGoldenFile(t *testing.T, path, head, config string, rows []cmpRow, recs []cmpRecord, how func(cmpRow) string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n# %s\n", head, strings.ReplaceAll(config, "\n", "\n#   "))
	fmt.Fprintf(&b, "# %d rows, %d records read, in commit order\n\n", len(rows), len(recs))
	byID := map[string]cmpRecord{}
	for _, r := range recs {
		id, _ := r.header("id")
		byID[strings.ToLower(id)] = r
	}
	for _, row := range rows {
		fmt.Fprintf(&b, "record %s id=%s\n", row.label, row.id())
		r, ok := byID[row.id()]
		if !ok {
			b.WriteString("  MISSING\n\n")
			continue
		}
		fmt.Fprintf(&b, "  topic: %q\n  partition: %d\n  key: %s\n  value: %s\n", r.Topic, r.Partition, render(r.Key), render(r.Value))
		for _, h := range r.Headers {
			fmt.Fprintf(&b, "  header %s: %s\n", h.Key, render(h.Value))
		}
		tsType := map[int8]string{0: "CreateTime", 1: "LogAppendTime"}[r.TSType]
		fmt.Fprintf(&b, "  timestamp: %d %s (%s)\n\n", r.Timestamp.UnixMilli(), tsType, how(row))
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeDiffs writes every difference of the setups' comparison (deliberate or not) as markdown to
// path (OUTBOXD_DBZ_DIFFS), after the per-setup summary lines.
func writeDiffs(t *testing.T, path string, summary []string, diffs []cmpDiff) {
	t.Helper()
	var b strings.Builder
	for _, l := range summary {
		fmt.Fprintf(&b, "- %s\n", l)
	}
	cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	setup := ""
	for _, d := range diffs {
		if d.setup != setup {
			setup = d.setup
			fmt.Fprintf(&b, "\n## %s\n\n| row | field | Debezium | outboxd | deliberate (why) |\n|---|---|---|---|---|\n", setup)
		}
		why := "**NO: unexpected**"
		if d.why != "" {
			why = d.why
		}
		fmt.Fprintf(&b, "| %s | %s | `%s` | `%s` | %s |\n", cell(d.row), cell(d.field), cell(d.dbz), cell(d.obx), cell(why))
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}
