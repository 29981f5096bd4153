package e2e

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
)

// The byte-for-byte comparison with Debezium (issue 12 item 6, issue 15 item 10): the same outbox
// rows go through Debezium 3.6.1's PostgreSQL connector with the Outbox Event Router on Kafka
// Connect 4.4 and through outboxd, in each of the setups of dbzSetups (one Connect worker running
// one connector per setup, each with its own slot, publication and converters; one outboxd per
// setup with the matching options), on one Apache Kafka node and one PostgreSQL. Per setup and
// event (matched by the id header): topic (after each tool's prefix), partition, key, value,
// headers (names, order, bytes, null vs absent), timestamp type and timestamp, and per
// topic-partition the order of events must be equal (compareRecords), except for the differences
// in the setup's deliberate list, each of which must show up exactly as listed (the list is
// README's, kept honest by this test).

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
	// occurred is the PostgreSQL comparison's timestamp column (set when inserted; nil: NULL)
	occurred   *string
	noOccurred bool    // insert occurred as NULL
	tracing    *string // setup T's tracingspancontext
	upperID    bool    // the id stored in upper case (text id columns only)
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
	// a NULL aggregateid: a null key (outbox.null_key: produce)
	txs = append(txs, []cmpRow{{label: "null-key", aggType: "Order", aggID: nil, typ: sp("NoKey"), payload: sp(`{"k": null}`)}})
	return txs
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

// TestDebeziumByteForByte: see the top of the file.
func TestDebeziumByteForByte(t *testing.T) {
	apacheOnly(t, "Debezium runs on Kafka Connect, which needs a real broker (the test starts its own node)")
	start := time.Now()
	k, _ := newPrivateApache(t, testenv.ApacheOpts{})
	pg := testenv.NewPostgres(t)
	ctx := context.Background()
	if err := pg.Exec(ctx, "app", append([]string{testenv.OutboxDDL}, setupDDL...)...); err != nil {
		t.Fatal(err)
	}
	setups := dbzSetups()
	var cfgs []map[string]string
	for _, s := range setups {
		cfgs = append(cfgs, s.connectorConfig(pg.Conn("app")))
	}
	c := testenv.NewConnect(t, testenv.ConnectOpts{Bootstrap: k.Addr(), Connector: cfgs[0], More: cfgs[1:],
		// an idempotent producer per task: its producer id tells Debezium's records on a raw topic
		// (shared with outboxd) apart
		Worker: map[string]string{"producer.enable.idempotence": "true"},
		// OpenTelemetry's SDK (autoconfigured: W3C trace context and baggage, no exporter) for
		// Debezium's tracing in the EventRouter (setup T's tracingspancontext column)
		JVM: append([]string{"-Xms256m", "-Xmx1g", "-XX:+UseG1GC"}, otelJVM...)})
	t.Logf("Kafka Connect + Debezium, %d connectors, streaming %v after exec", len(cfgs), c.Started.Round(time.Millisecond))
	procs := make([]*harness.Proc, len(setups))
	for i, s := range setups {
		procs[i] = startSetupOutboxd(t, pg, k.Addr(), s)
	}
	t.Logf("outboxd x%d replicating after %v", len(setups), time.Since(start).Round(time.Millisecond))

	conn := pgConn(t, pg)
	rows, textRows, ntx := insertWorkload(t, conn)
	want := 0
	for _, s := range setups {
		want += 2 * len(s.rowsOf(rows, textRows))
	}
	all := readTopics(t, k.Addr(), `^[^_].*`, want, 3*time.Minute)
	t.Logf("read %d records (want %d) after %v", len(all), want, time.Since(start).Round(time.Millisecond))
	bySetup := splitBySetup(t, setups, all)
	if dir := goldenDir(); dir != "" {
		writeGolden(t, dir, setups, cfgs, rows, textRows, bySetup)
	}
	var summary []string
	var diffs []cmpDiff
	for _, s := range setups {
		rs := s.rowsOf(rows, textRows)
		o := s.cmpOpts()
		o.diffs = &diffs
		res := compareRecords(t, "setup "+s.name, rs, bySetup[s.name].dbz, bySetup[s.name].obx, s.deliberate, o)
		line := fmt.Sprintf("setup %s: %d events, %d fields equal, %d deliberate differences (%s)", s.name, res.events, res.equal, res.deliberate, s.what)
		summary = append(summary, line)
		t.Log(line)
	}
	t.Logf("compared after %v", time.Since(start).Round(time.Millisecond))
	if path := os.Getenv("OUTBOXD_DBZ_DIFFS"); path != "" {
		writeDiffs(t, path, summary, diffs)
	}

	for _, st := range taskStoppers() {
		checkTaskStopper(t, c, pg, k.Addr(), conn, setups, st)
	}
	for i, p := range procs {
		if code := p.Stop(t, syscall.SIGTERM); code != 0 {
			t.Errorf("setup %s: outboxd exit code %d after SIGTERM", setups[i].name, code)
		}
	}
	t.Logf("compared %d + %d rows (%d transactions) in %d setups, took %v:\n%s", len(rows), len(textRows), ntx, len(setups),
		time.Since(start).Round(time.Millisecond), strings.Join(summary, "\n"))
}
