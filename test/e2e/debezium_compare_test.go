package e2e

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
)

// The byte-for-byte comparison with Debezium (issue 12, item 6): the same outbox rows go through
// Debezium 3.6.1's PostgreSQL connector with the Outbox Event Router on Kafka Connect 4.4
// (StringConverter key and value, SimpleHeaderConverter, type as header eventType, no Debezium
// context headers; its own slot and publication) into topics dbz.<aggregatetype>, and through
// outboxd (outbox.headers {type: eventType, ...}) into obx.<aggregatetype>, on one Apache Kafka
// node. Per event (matched by the id header): topic suffix, partition, key, value, headers
// (names, order, bytes, null vs absent), timestamp type, and per topic-partition the order of
// events must be equal, except for the differences listed in pgDeliberate, each of which must
// show up exactly as listed (the list is README's, kept honest by this test).

func ip(i int) *int   { return &i }
func bp(b bool) *bool { return &b }

// cmpRow is one outbox row; nil fields are SQL NULL.
type cmpRow struct {
	label   string
	aggType string
	aggID   *string
	typ     *string
	payload *string // jsonb input text
	tenant  *string // extra header columns: text, int, boolean
	attempt *int
	urgent  *bool
	deleted bool // deleted again in the same transaction (Debezium's habit)
	upperID bool // the id stored in upper case (text id columns only)
}

// storedID is the id as written to the table.
func (r cmpRow) storedID() string {
	if r.upperID {
		return strings.ToUpper(r.id())
	}
	return r.id()
}

// id is the row's event id, a uuid derived from its label.
func (r cmpRow) id() string {
	h := sha256.Sum256([]byte(r.label))
	x := fmt.Sprintf("%x", h[:16])
	return x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}

// cmpTxs are the transactions of the comparison, in commit order: every jsonb shape, SQL NULL
// payload, non-ASCII keys, extra header columns (text, int, boolean, NULL), multi-row
// transactions, an insert deleted in its own transaction.
func cmpTxs() [][]cmpRow {
	one := func(label, payload string) []cmpRow {
		return []cmpRow{{label: label, aggType: "Order", aggID: sp("order-" + label), typ: sp("OrderCreated"), payload: sp(payload),
			tenant: sp("acme"), attempt: ip(1), urgent: bp(false)}}
	}
	txs := [][]cmpRow{
		one("object", `{"id": 1, "lineItems": [{"id": 1, "item": "Debezium in Action", "status": "ENTERED", "quantity": 2, "totalPrice": 39.98}], "orderDate": "2019-01-31T12:13:01", "customerId": 123}`),
		one("object-unsorted-spaced", `{ "zeta":1,"a" : [ ],"bb":{ } , "a2": "x"}`),
		one("object-duplicate-keys", `{"k": 1, "k": 2}`),
		one("empty-object", `{}`),
		one("array", `[1, "two", null, true, {"b": 2, "a": 1}, [[]]]`),
		one("empty-array", `[]`),
		one("string", `"hello"`),
		one("empty-string", `""`),
		one("number-int", `42`),
		one("number-negative-exp", `-1.50e10`),
		one("number-fraction", `0.1000`),
		one("number-big", `123456789012345678901234567890.123456789`),
		one("true", `true`),
		one("false", `false`),
		one("json-null", `null`),
		one("nested", `{"a": {"b": {"c": {"d": [1, {"e": [null, {"f": "deep"}]}]}}}}`),
		one("unicode", `{"name": "Zoë Ångström 日本語 Ελληνικά", "emoji": "😀🚀", "astral": "𝄞𐍈"}`),
		one("escapes", `{"s": "quote \" backslash \\ slash \/ nl \n tab \t cr \r bs \b ff \f ctl \u0001 \u001f", "u": "\u00e9\u65e5\ud83d\ude00"}`),
		one("escaped-key", `{"k\"ey\n": "v", "é": 1}`),
		one("whitespace-string", `"   "`),
		{{label: "null-payload", aggType: "Order", aggID: sp("order-null"), typ: sp("OrderDeleted"), payload: nil,
			tenant: sp("acme"), attempt: ip(2), urgent: bp(true)}},
		{{label: "null-headers", aggType: "Order", aggID: sp("order-nh"), typ: nil, payload: sp(`{"h": null}`)}},
		{{label: "header-values", aggType: "Order", aggID: sp("order-hv"), typ: sp("Typé 日本 😀"), payload: sp(`1`),
			tenant: sp(""), attempt: ip(-2147483648), urgent: bp(true)}},
	}
	// non-ASCII keys (aggregateid), each its own transaction
	for i, k := range []string{"Ünïcødé", "日本語-キー", "😀-astral-𝄞", "tab\tand space", "ümlaut"} {
		txs = append(txs, []cmpRow{{label: fmt.Sprintf("key-%d", i), aggType: "Customer", aggID: sp(k), typ: sp("CustomerUpdated"),
			payload: sp(fmt.Sprintf(`{"i": %d}`, i)), tenant: sp("ümlaut"), attempt: ip(i), urgent: bp(i%2 == 0)}})
	}
	// multi-row transactions: several aggregates and types, keys spread over the partitions
	for tx := 0; tx < 4; tx++ {
		var rows []cmpRow
		for j := 0; j < 6; j++ {
			typ := []string{"Order", "Customer", "a.b-c_D"}[(tx+j)%3]
			rows = append(rows, cmpRow{label: fmt.Sprintf("tx%d-%d", tx, j), aggType: typ, aggID: sp(fmt.Sprintf("agg-%d", j%4)),
				typ: sp("Multi"), payload: sp(fmt.Sprintf(`{"tx": %d, "row": %d, "list": [%d, "x"]}`, tx, j, j)),
				tenant: sp("t" + fmt.Sprint(j)), attempt: ip(j), urgent: bp(j%2 == 1)})
		}
		txs = append(txs, rows)
	}
	// insert then delete in one transaction: both publish the insert once
	txs = append(txs, []cmpRow{
		{label: "insert-delete", aggType: "Order", aggID: sp("order-id"), typ: sp("Transient"), payload: sp(`{"gone": true}`), deleted: true},
		{label: "after-delete", aggType: "Order", aggID: sp("order-id"), typ: sp("Kept"), payload: sp(`{"kept": true}`)},
	})
	// a NULL aggregateid: Debezium sends a null key, outboxd dead-letters the row (pgDeliberate)
	txs = append(txs, []cmpRow{{label: "null-key", aggType: "Order", aggID: nil, typ: sp("NoKey"), payload: sp(`{"k": null}`)}})
	return txs
}

// The differences outboxd keeps on purpose (README lists them), for both sources and for
// PostgreSQL. Each must show up at least once, and every difference must match one.
var nullKeyDeliberate = deliberate{row: "null-key", field: "routed", dbz: "topic Order, key null", obx: "dead-lettered: missing_column",
	why: "a NULL aggregateid: Debezium produces a record with a null key (spread over the partitions), outboxd dead-letters the row (reason missing_column): it never sends an event without its aggregate's key"}

var pgDeliberate = []deliberate{nullKeyDeliberate,
	{row: "*", field: "header urgent", dbz: `"true"`, obx: `"t"`,
		why: "a boolean header column: Debezium writes Connect's rendering (true/false), outboxd PostgreSQL's text output (t/f); every header column is sent as the database's text"},
	{row: "*", field: "header urgent", dbz: `"false"`, obx: `"f"`, why: "as above"},
	{row: "typed-headers", field: "header at", dbz: `"2026-01-02T03:04:05.123456Z"`, obx: `"2026-01-02 03:04:05.123456+00"`,
		why: "a timestamptz header column: Debezium writes its ZonedTimestamp (ISO-8601, UTC), outboxd PostgreSQL's text output (in the server's TimeZone)"},
	{row: "typed-headers", field: "header day", dbz: `"20455"`, obx: `"2026-01-02"`,
		why: "a date header column: Debezium writes its Date logical type (days since 1970-01-01, time.precision.mode=adaptive), outboxd the date text"},
	{row: "typed-headers", field: "header raw", dbz: `"AAH/"`, obx: `"\x00\x01\xff"`,
		why: "a bytea header column: Debezium's SimpleHeaderConverter writes Base64, outboxd the raw bytes"},
}

// TestDebeziumByteForByte: see the top of the file.
func TestDebeziumByteForByte(t *testing.T) {
	apacheOnly(t, "Debezium runs on Kafka Connect, which needs a real broker (the test starts its own node)")
	start := time.Now()
	k, b := newPrivateApache(t, testenv.ApacheOpts{})
	e := newEnvOn(t, b, `outbox:
  topic: obx.${routedByValue}
  headers: {type: eventType, tenant: tenant, attempt: attempt, urgent: urgent, amount: amount, at: at, day: day, ref: ref, doc: doc, raw: raw}
`)
	ctx := context.Background()
	if err := e.pg.Exec(ctx, "app", "ALTER SYSTEM SET timezone = 'UTC'", "SELECT pg_reload_conf()", // the text of timestamptz headers
		"ALTER TABLE public.outbox ADD COLUMN tenant text, ADD COLUMN attempt int, ADD COLUMN urgent boolean",
		// typed header columns, NULL but in row typed-headers
		"ALTER TABLE public.outbox ADD COLUMN amount numeric(10,2), ADD COLUMN at timestamptz, ADD COLUMN day date, ADD COLUMN ref uuid, ADD COLUMN doc jsonb, ADD COLUMN raw bytea"); err != nil {
		t.Fatal(err)
	}
	cfg := testenv.DebeziumPostgresOutbox(e.pg.Conn("app"), "dbz_cmp", "dbz_cmp", "public.outbox", map[string]string{
		"transforms.outbox.route.topic.replacement": "dbz.${routedByValue}",
		"transforms.outbox.table.fields.additional.placement": "type:header:eventType,tenant:header:tenant,attempt:header:attempt,urgent:header:urgent," +
			"amount:header:amount,at:header:at,day:header:day,ref:header:ref,doc:header:doc,raw:header:raw",
	})
	t.Logf("Debezium connector config:\n%s", dumpConfig(cfg))
	c := testenv.NewConnect(t, testenv.ConnectOpts{Bootstrap: k.Addr(), Connector: cfg})
	t.Logf("Kafka Connect + Debezium streaming %v after exec", c.Started.Round(time.Millisecond))
	p := e.start()

	txs := cmpTxs()
	conn := e.conn()
	var rows []cmpRow
	for _, tx := range txs {
		b, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range tx {
			if _, err := b.Exec(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, tenant, attempt, urgent)
				VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8)`, r.id(), r.aggType, r.aggID, r.typ, r.payload, r.tenant, r.attempt, r.urgent); err != nil {
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
	typed := cmpRow{label: "typed-headers", aggType: "Order", aggID: sp("order-typed"), typ: sp("Typed"), payload: sp(`{}`)}
	if _, err := conn.Exec(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, amount, at, day, ref, doc, raw)
		VALUES ($1, $2, $3, $4, $5::jsonb, 12.5, '2026-01-02 03:04:05.123456+00', '2026-01-02', 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11', '{"b": 1, "a": [true]}', '\x0001ff')`,
		typed.id(), typed.aggType, typed.aggID, typed.typ, typed.payload); err != nil {
		t.Fatal(err)
	}
	rows = append(rows, typed)
	// Updates and deletes are no events for either.
	if _, err := conn.Exec(ctx, `UPDATE outbox SET payload = '{"updated": true}'`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `DELETE FROM outbox WHERE aggregatetype = 'Customer'`); err != nil {
		t.Fatal(err)
	}
	res := compareDebezium(t, k.Addr(), rows, pgDeliberate)
	t.Logf("compared after %v", time.Since(start).Round(time.Millisecond))

	// A topic name Kafka refuses (a space): outboxd dead-letters the row and goes on, Debezium's
	// task fails and stops there (Connect: errors.tolerance=none, no DLQ for source connectors).
	bad := cmpRow{label: "invalid-topic", aggType: "order lines", aggID: sp("o-bad"), typ: sp("Bad"), payload: sp(`{}`)}
	if _, err := conn.Exec(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ($1, $2, $3, $4, $5::jsonb)`,
		bad.id(), bad.aggType, bad.aggID, bad.typ, bad.payload); err != nil {
		t.Fatal(err)
	}
	var task, trace string
	badAt := time.Now()
	harness.WaitFor(t, 2*time.Minute, "Debezium's task FAILED on the invalid topic name", func() bool {
		_, task, trace, _ = c.Status()
		return task == "FAILED"
	})
	t.Logf("Debezium on topic \"dbz.order lines\": task %s after %v: %s", task, time.Since(badAt).Round(time.Millisecond), firstLine(trace))
	var badDL *cmpRecord
	for _, r := range readTopics(t, k.Addr(), `^outboxd\.dlq$`, 2, time.Minute) {
		if id, _ := r.header("id"); id == bad.id() {
			badDL = &r
		}
	}
	if badDL == nil {
		t.Fatalf("outboxd did not dead-letter %s (aggregatetype %q)", bad.id(), bad.aggType)
	}
	if reason, _ := badDL.header("outboxd.error.reason"); reason != "invalid_topic" {
		t.Errorf("outboxd dead-lettered the invalid topic with reason %q, want invalid_topic", reason)
	}
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Errorf("outboxd exit code %d after SIGTERM", code)
	}
	t.Logf("compared %d events (%d transactions): %d fields equal, %d deliberate differences, took %v",
		len(rows), len(txs), res.equal, res.deliberate, time.Since(start).Round(time.Millisecond))
}

func firstLine(s string) string { return strings.SplitN(s, "\n", 2)[0] }

// dumpConfig prints a connector config as sorted key=value lines.
func dumpConfig(cfg map[string]string) string {
	var lines []string
	for k, v := range cfg {
		lines = append(lines, k+"="+v)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
