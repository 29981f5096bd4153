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

// mariaDeliberate: the id header's case. (A BOOLEAN is TINYINT(1): both write 1/0; typed header
// columns are written as Debezium does, outbox.header_values: debezium.)
var mariaDeliberate = []deliberate{
	{row: "upper-id", field: "header id", dbz: `"` + strings.ToUpper(cmpRow{label: "upper-id"}.id()) + `"`, obx: `"` + cmpRow{label: "upper-id"}.id() + `"`,
		why: "an event id in a text column that is a uuid in upper case: Debezium passes it as stored, outboxd writes the canonical lower-case uuid (its id header is always canonical, whatever the column type: BINARY(16), CHAR(32/36), uuid)"},
}

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
	cfgPath := filepath.Join(t.TempDir(), "outboxd.yaml")
	writeFile(t, cfgPath, fmt.Sprintf(`source:
  type: mysql
  dsn: %s
  tables: [app.outbox]
  mysql:
    server_id: 4343
    start: current
kafka:
  brokers: [%s]
offsets:
  path: %s
  commit_interval: 20ms
http:
  listen: ""
outbox:
  topic: obx.${routedByValue}
  null_key: produce
  headers: {type: eventType, tenant: tenant, attempt: attempt, urgent: urgent, amount: amount, at: at, ts: ts, day: day, raw: raw}
`, m.DSN("app"), k.Addr(), filepath.Join(filepath.Dir(cfgPath), "offsets.json")))
	p := startProc(t, cfgPath)
	harness.WaitFor(t, 60*time.Second, "outboxd's binlog dump connected", func() bool {
		select {
		case <-p.Done:
			t.Fatalf("outboxd exited with %d:\n%s", p.Code, p.Out.String())
		default:
		}
		if !strings.Contains(p.Out.String(), "mysql source opening") {
			return false
		}
		rows, _ := m.Query("", "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'")
		return len(rows) == 1 && rows[0][0] != "0"
	})
	cfg := testenv.DebeziumMariaDBOutbox(m.Conn("app"), 223344, "app.outbox", map[string]string{
		"transforms.outbox.route.topic.replacement": "dbz.${routedByValue}",
		"transforms.outbox.table.fields.additional.placement": "type:header:eventType,tenant:header:tenant,attempt:header:attempt,urgent:header:urgent," +
			"amount:header:amount,at:header:at,ts:header:ts,day:header:day,raw:header:raw",
	})
	t.Logf("Debezium connector config:\n%s", dumpConfig(cfg))
	c := testenv.NewConnect(t, testenv.ConnectOpts{Bootstrap: k.Addr(), Connector: cfg})
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
		VALUES ('%s', 'Order', 'order-typed', 'Typed', '{}', 12.5, '2026-01-02 03:04:05.123456', '2026-01-02 03:04:05.123456', '2026-01-02', X'0001ff')`, typed.id())); err != nil {
		t.Fatal(err)
	}
	rows = append(rows, typed)
	if err := m.Exec(ctx, "app", `UPDATE outbox SET payload = '{"updated": true}'`, `DELETE FROM outbox WHERE aggregatetype = 'Customer'`); err != nil {
		t.Fatal(err)
	}
	res := compareDebezium(t, k.Addr(), rows, mariaDeliberate)
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Errorf("outboxd exit code %d after SIGTERM", code)
	}
	t.Logf("compared %d events (%d transactions): %d fields equal, %d deliberate differences, took %v",
		len(rows), len(txs), res.equal, res.deliberate, time.Since(start).Round(time.Millisecond))
}
