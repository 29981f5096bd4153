package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The outbox table lines of `outboxd check` (internal/app/checkoutbox.go): the table's columns
// and types, as the source lists them, against the outbox options.

const checkOutboxGood = `outbox:
  fields: [{column: type, placement: header, alias: eventType}]
`

// Three problems at once: a fields column the table lacks, a partition column that is not int32,
// and a timestamp column that is a ZonedTimestamp (PostgreSQL timestamptz, MySQL TIMESTAMP).
const checkOutboxBad = `outbox:
  fields: [{column: eventtype, placement: header}, {column: aggregateid, placement: partition}]
  timestamp: column:created_at
`

func expectCheckOutbox(t *testing.T, cfgPath, table string, wantCode int, want ...string) {
	t.Helper()
	out, code := runOut(t, "check", "-c", cfgPath)
	if code != wantCode {
		t.Fatalf("check exit %d, want %d:\n%s", code, wantCode, out)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("check output lacks %q:\n%s", w, out)
		}
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "outbox table ") {
			t.Log(l)
		}
	}
	if n := strings.Count(out, "outbox table "+table); n != 1 {
		t.Errorf("%d lines for outbox table %s, want 1:\n%s", n, table, out)
	}
}

// TestCheckOutboxTablePostgres: a table that fits the options is one OK line naming the columns
// read and the options; one that does not is a FAIL line naming each problem, and check exits 1.
func TestCheckOutboxTablePostgres(t *testing.T) {
	good := newEnv(t, checkOutboxGood)
	expectCheckOutbox(t, good.cfgPath, "public.outbox", 0,
		"OK   outbox table public.outbox (columns id, aggregateid, payload, aggregatetype, type; encoding raw, timestamp commit, header values debezium, fields type:header:eventType")
	bad := newEnv(t, checkOutboxBad)
	expectCheckOutbox(t, bad.cfgPath, "public.outbox", 1,
		`FAIL outbox table public.outbox: no column "eventtype" (outbox.fields)`,
		`partition column "aggregateid" is string, not int32`,
		`outbox.timestamp: column:created_at: column "created_at" of public.outbox is io.debezium.time.ZonedTimestamp`)
}

// TestCheckOutboxTableMariaDB: the same on MariaDB (information_schema's types).
func TestCheckOutboxTableMariaDB(t *testing.T) {
	e := newMySQLEnv(t)
	base, err := os.ReadFile(e.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	goodCfg, badCfg := filepath.Join(dir, "good.yaml"), filepath.Join(dir, "bad.yaml")
	writeFile(t, goodCfg, string(base)+checkOutboxGood)
	writeFile(t, badCfg, string(base)+checkOutboxBad)
	expectCheckOutbox(t, goodCfg, "app.outbox", 0,
		"OK   outbox table app.outbox (columns id, aggregateid, payload, aggregatetype, type; encoding raw, timestamp commit")
	expectCheckOutbox(t, badCfg, "app.outbox", 1,
		`FAIL outbox table app.outbox: no column "eventtype" (outbox.fields)`,
		`partition column "aggregateid" is string, not int32`,
		`outbox.timestamp: column:created_at: column "created_at" of app.outbox is io.debezium.time.ZonedTimestamp`)
}
