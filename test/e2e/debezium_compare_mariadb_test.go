package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
)

// The byte-for-byte comparison on MariaDB 10.11: Debezium's MariaDB connector (3.5.0.Final, the
// newest Maven Central serves; see testenv.DebeziumMariaDBVersion) with the Outbox Event Router,
// and outboxd's mysql source, on the same rows as the PostgreSQL comparison (payload as stored:
// MariaDB's JSON is LONGTEXT, so no normalisation), plus an event id in upper case.

// upperIDDeliberate: an event id stored as an upper-case uuid text.
var upperIDDeliberate = deliberate{row: "upper-id", field: "header id", dbz: `"` + strings.ToUpper(cmpRow{label: "upper-id"}.id()) + `"`, obx: `"` + cmpRow{label: "upper-id"}.id() + `"`,
	why: "an event id in a text column that is a uuid in upper case: Debezium passes it as stored, outboxd writes the canonical lower-case uuid (its id header is always canonical, whatever the column type: BINARY(16), CHAR(32/36), uuid)"}

// mariaDeliberate: the StringConverter pair's (typed header columns, outbox.header_values:
// debezium; a BOOLEAN is TINYINT(1): both write 1/0) and the JsonConverter pair's (schemas on,
// every column an envelope field).
var (
	mariaDeliberate     = []deliberate{upperIDDeliberate}
	mariaJSONDeliberate = []deliberate{upperIDDeliberate,
		{row: "*", field: "value schema defaults", dbz: `"1970-01-01T00:00:00Z"`, obx: "none",
			why: "not yet implemented: Debezium puts a column's DEFAULT into its envelope field's schema (created_at TIMESTAMP(6) DEFAULT CURRENT_TIMESTAMP(6): \"default\":\"1970-01-01T00:00:00Z\"); outboxd's mysql source reads no defaults (PostgreSQL's does, 4a81e22)"}}
)

// mariaOutboxDDL is MariaDBOutboxDDL with the comparison's header columns, utf8mb4 text and a
// nullable aggregateid (to show the NULL key row as on PostgreSQL).
const mariaOutboxDDL = `CREATE TABLE app.outbox (
	id CHAR(36) NOT NULL PRIMARY KEY,
	aggregatetype VARCHAR(255) NOT NULL,
	aggregateid VARCHAR(255),
	type VARCHAR(255),
	payload JSON,
	tenant VARCHAR(64),
	attempt INT,
	urgent BOOLEAN,
	amount DECIMAL(10,2),
	at DATETIME(6),
	ts TIMESTAMP(6) NULL,
	day DATE,
	raw VARBINARY(8),
	created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`

// sqlLit is a MariaDB string literal for s (default sql_mode: backslash escapes on), NULL for nil.
func sqlLit(s *string) string {
	if s == nil {
		return "NULL"
	}
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `''`, "\x00", `\0`).Replace(*s) + "'"
}

func TestDebeziumByteForByteMariaDB(t *testing.T) {
	apacheOnly(t, "Debezium runs on Kafka Connect, which needs a real broker (the test starts its own node)")
	start := time.Now()
	m := testenv.NewMariaDB(t, testenv.MariaDBOptions{RowMetadata: true})
	ctx := context.Background()
	if err := m.Exec(ctx, "app", mariaOutboxDDL, "SET GLOBAL time_zone = '+00:00'"); err != nil {
		t.Fatal(err)
	}
	k, _ := newPrivateApache(t, testenv.ApacheOpts{})
	// outboxd twice: StringConverter's bytes with typed headers (as connector dbz-mariadb-outbox),
	// and JsonConverter's with schemas and every column as an envelope field (as dbz-mariadb-json)
	var envPlacement, envFields []string
	for _, c := range []string{"type:eventType", "tenant:tenant", "attempt:attempt", "urgent:urgent", "amount:amount", "at:at", "ts:ts", "day:day", "raw:raw", "created_at:createdAt"} {
		col, alias, _ := strings.Cut(c, ":")
		envPlacement = append(envPlacement, col+":envelope:"+alias)
		envFields = append(envFields, "    - {column: "+col+", placement: envelope, alias: "+alias+"}")
	}
	procs := []*harness.Proc{
		startMariaOutboxd(t, m, k.Addr(), 4343, "outboxd.dlq", `  topic: obx.${routedByValue}
  null_key: produce
  headers: {type: eventType, tenant: tenant, attempt: attempt, urgent: urgent, amount: amount, at: at, ts: ts, day: day, raw: raw}
`),
		startMariaOutboxd(t, m, k.Addr(), 4344, "obxJ.dlq", `  topic: obxJ.${routedByValue}
  null_key: produce
  encoding: json_schema
  schema_name_prefix: dbserver1
  fields:
`+strings.Join(envFields, "\n")+"\n"),
	}
	harness.WaitFor(t, 60*time.Second, "both outboxd's binlog dumps connected", func() bool {
		for _, p := range procs {
			select {
			case <-p.Done:
				t.Fatalf("outboxd exited with %d:\n%s", p.Code, p.Out.String())
			default:
			}
			if !strings.Contains(p.Out.String(), "mysql source opening") {
				return false
			}
		}
		rows, _ := m.Query("", "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'")
		return len(rows) == 1 && rows[0][0] == "2"
	})
	cfg := testenv.DebeziumMariaDBOutbox(m.Conn("app"), 223344, "app.outbox", map[string]string{
		"transforms.outbox.route.topic.replacement": "dbz.${routedByValue}",
		"transforms.outbox.table.fields.additional.placement": "type:header:eventType,tenant:header:tenant,attempt:header:attempt,urgent:header:urgent," +
			"amount:header:amount,at:header:at,ts:header:ts,day:header:day,raw:header:raw",
	})
	cfgJ := testenv.DebeziumMariaDBOutbox(m.Conn("app"), 223345, "app.outbox", mergeMaps(jsonConverters(true), map[string]string{
		"name":                                  "dbz-mariadb-json",
		"topic.prefix":                          "dbserver1",
		"schema.history.internal.file.filename": testenv.ConnectDirVar + "/schema-history-json.dat",
		"transforms.outbox.route.topic.replacement":           "dbzJ.${routedByValue}",
		"transforms.outbox.table.fields.additional.placement": strings.Join(envPlacement, ","),
	}))
	t.Logf("Debezium connector configs:\n%s\n\n%s", dumpConfig(cfg), dumpConfig(cfgJ))
	c := testenv.NewConnect(t, testenv.ConnectOpts{Bootstrap: k.Addr(), Connector: cfg, More: []map[string]string{cfgJ}})
	t.Logf("Kafka Connect + Debezium %s streaming %v after exec", testenv.DebeziumMariaDBVersion, c.Started.Round(time.Millisecond))

	txs := append(cmpTxs(), []cmpRow{{label: "upper-id", aggType: "Order", aggID: sp("order-upper"), typ: sp("Upper"), payload: sp(`{"u": 1}`), upperID: true}})
	var rows []cmpRow
	for _, tx := range txs {
		stmts := []string{"SET NAMES utf8mb4", "BEGIN"}
		for _, r := range tx {
			attempt, urgent := "NULL", "NULL"
			if r.attempt != nil {
				attempt = fmt.Sprint(*r.attempt)
			}
			if r.urgent != nil {
				urgent = fmt.Sprint(*r.urgent)
			}
			id := r.storedID()
			stmts = append(stmts, fmt.Sprintf(`INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, tenant, attempt, urgent) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)`,
				sqlLit(&id), sqlLit(&r.aggType), sqlLit(r.aggID), sqlLit(r.typ), sqlLit(r.payload), sqlLit(r.tenant), attempt, urgent))
			if r.deleted {
				stmts = append(stmts, fmt.Sprintf("DELETE FROM outbox WHERE id = %s", sqlLit(&id)))
			}
			rows = append(rows, r)
		}
		if err := m.Exec(ctx, "app", append(stmts, "COMMIT")...); err != nil {
			t.Fatal(err)
		}
	}
	typed := cmpRow{label: "typed-headers", aggType: "Order", aggID: sp("order-typed"), typ: sp("Typed"), payload: sp(`{}`)}
	if err := m.Exec(ctx, "app", "SET time_zone = '+00:00'", fmt.Sprintf(`INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, amount, at, ts, day, raw)
		VALUES ('%s', 'Order', 'order-typed', 'Typed', '{}', 12.5, '2026-01-02 03:04:05.123456', '2026-01-02 03:04:05.123450', '2026-01-02', X'0001ff')`, typed.id())); err != nil {
		t.Fatal(err)
	}
	rows = append(rows, typed)
	if err := m.Exec(ctx, "app", `UPDATE outbox SET payload = '{"updated": true}'`, `DELETE FROM outbox WHERE aggregatetype = 'Customer'`); err != nil {
		t.Fatal(err)
	}
	res := compareDebezium(t, k.Addr(), rows, mariaDeliberate)
	dbzJ := readTopics(t, k.Addr(), `^dbzJ\..*`, len(rows), 2*time.Minute)
	obxJ := readTopics(t, k.Addr(), `^obxJ\..*`, len(rows), time.Minute)
	resJ := compareRecords(t, "json_schema", rows, dbzJ, obxJ, mariaJSONDeliberate,
		cmpOpts{dbzPrefix: "dbzJ.", obxPrefix: "obxJ.", dlq: "obxJ.dlq", nullKeyPartition: true, schemaDefaults: true})
	if dir := goldenDir(); dir != "" {
		dbzS := readTopics(t, k.Addr(), `^dbz\..*`, len(rows), time.Minute)
		obxS := readTopics(t, k.Addr(), `^(obx\..*|outboxd\.dlq)$`, len(rows), time.Minute)
		proc := func(cmpRow) string { return "processing time, not deterministic" }
		for _, g := range []struct {
			name, what string
			cfg        map[string]string
			obx        string
			dbz, recs  []cmpRecord
		}{{"mariadb-S", "MariaDB, StringConverter, typed header columns", cfg, "headers (obx.${routedByValue})", dbzS, obxS},
			{"mariadb-J", "MariaDB, JsonConverter schemas.enable=true, every column an envelope field", cfgJ, "json_schema envelope (obxJ.${routedByValue})", dbzJ, obxJ}} {
			writeGoldenFile(t, filepath.Join(dir, g.name+".txt"), g.name+": "+g.what, "Debezium "+testenv.DebeziumMariaDBVersion+" connector config:\n"+dumpConfig(g.cfg), rows, g.dbz, proc)
			writeGoldenFile(t, filepath.Join(dir, "outboxd", g.name+".txt"), g.name+": "+g.what, "outboxd: "+g.obx, rows, g.recs, func(cmpRow) string { return "outboxd" })
		}
	}
	for _, p := range procs {
		if code := p.Stop(t, syscall.SIGTERM); code != 0 {
			t.Errorf("outboxd exit code %d after SIGTERM", code)
		}
	}
	t.Logf("compared %d events (%d transactions), took %v:\nStringConverter with typed headers: %d fields equal, %d deliberate differences\n"+
		"JsonConverter with schemas, every column an envelope field: %d fields equal, %d deliberate differences",
		len(rows), len(txs), time.Since(start).Round(time.Millisecond), res.equal, res.deliberate, resJ.equal, resJ.deliberate)
}

// startMariaOutboxd starts an outboxd on m's app.outbox (binlog client serverID, from the current
// position) with DLQ topic dlq and the given outbox: block.
func startMariaOutboxd(t *testing.T, m *testenv.MariaDB, brokers string, serverID int, dlq, outbox string) *harness.Proc {
	t.Helper()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "outboxd.yaml")
	writeFile(t, cfgPath, fmt.Sprintf(`source:
  type: mysql
  dsn: %s
  tables: [app.outbox]
  mysql:
    server_id: %d
    start: current
kafka:
  brokers: [%s]
  dlq_topic: %s
offsets:
  path: %s
  commit_interval: 20ms
http:
  listen: ""
outbox:
%s`, m.DSN("app"), serverID, brokers, dlq, filepath.Join(dir, "offsets.json"), outbox))
	return startProc(t, cfgPath)
}
