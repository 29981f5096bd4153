package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
)

// Issue 11, MySQL/MariaDB cases 6-9 and 12-14: every row the binlog source reads is delivered,
// or outboxd refuses (check FAILs, run exits before streaming) or stops (exit 1) before any
// position past it is stored.

// newNoLossEnv is a private MariaDB (opts), a broker and a config capturing tables. extraMySQL
// is added under source.mysql.
func newNoLossEnv(t *testing.T, opts testenv.MariaDBOptions, tables, extraMySQL string, ddl ...string) *mysqlEnv {
	t.Helper()
	e := &mysqlEnv{t: t, db: testenv.NewMariaDB(t, opts), broker: newTestBroker(t)}
	if err := e.db.Exec(context.Background(), "app", ddl...); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	e.offsets = filepath.Join(dir, "offsets.json")
	e.cfgPath = filepath.Join(dir, "outboxd.yaml")
	writeFile(t, e.cfgPath, fmt.Sprintf(`shutdown_timeout: 10s
source:
  type: mysql
  dsn: %s
  tables: [%s]
  mysql:
    server_id: 4343
    start: current
%s
kafka:
  brokers: [%s]
offsets:
  path: %s
  commit_interval: 20ms
http:
  listen: ""
`, e.db.DSN("app"), tables, extraMySQL, e.broker.Addr(), e.offsets))
	return e
}

func (e *mysqlEnv) storedPosition() string { return (&env{offsets: e.offsets}).storedPosition() }

var mariaSeqRE = regexp.MustCompile(`\b0-1-(\d+)\b`)

// mariaSeq returns the sequence number of GTID domain 0, server 1 in a position (-1: none).
func mariaSeq(pos string) int {
	m := mariaSeqRE.FindStringSubmatch(pos)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// gtidNow returns the server's current GTID sequence number (domain 0).
func (e *mysqlEnv) gtidNow() int {
	e.t.Helper()
	rows, err := e.db.Query("", "SELECT @@GLOBAL.gtid_binlog_pos")
	if err != nil {
		e.t.Fatal(err)
	}
	return mariaSeq(rows[0][0])
}

// insertSQL is an outbox INSERT with a fresh id.
func insertSQL(table, id, agg string) string {
	return fmt.Sprintf(`INSERT INTO %s (id, aggregatetype, aggregateid, type, payload) VALUES ('%s', 'order', '%s', 'created', '{"a": 1}')`,
		table, id, agg)
}

func noLossID(i int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", i) }

// deliverSome writes n rows through the running outboxd and waits until they are in Kafka and
// the stored position has reached them; it returns that GTID sequence number.
func (e *mysqlEnv) deliverSome(table string, from, n int) int {
	e.t.Helper()
	for i := from; i < from+n; i++ {
		if err := e.db.Exec(context.Background(), "app", insertSQL(table, noLossID(i), "K")); err != nil {
			e.t.Fatal(err)
		}
	}
	seq := e.gtidNow()
	harness.WaitFor(e.t, 30*time.Second, "rows delivered and stored", func() bool {
		d, _ := countDistinct(testenv.Consume(e.t, e.broker.Addr(), `outbox\.event\..*`, n, time.Second))
		return d >= n && mariaSeq(e.storedPosition()) >= seq
	})
	return seq
}

// expectStop checks that p exited 1 with a message containing parts, and that the stored
// position did not pass sequence number before (the last transaction before the offending one).
func (e *mysqlEnv) expectStop(p *harness.Proc, before int, parts ...string) {
	e.t.Helper()
	if code := p.WaitExit(e.t, 30*time.Second, "the offending transaction"); code != 1 {
		e.t.Fatalf("exit %d, want 1; output:\n%s", code, p.Out.String())
	}
	for _, part := range parts {
		if !strings.Contains(p.Out.String(), part) {
			e.t.Fatalf("output lacks %q:\n%s", part, p.Out.String())
		}
	}
	if got := mariaSeq(e.storedPosition()); got > before || got < 0 {
		e.t.Fatalf("stored position %q, want at most 0-1-%d (before the offending transaction)", e.storedPosition(), before)
	}
}

// TestMySQLLowerCaseTableNames (case 6): lower_case_table_names=1, the table created and
// configured as App.Outbox (the binlog says app.outbox): check passes and reports the setting,
// and every row is delivered. With lower_case_table_names=0 a configured spelling that differs
// from the table's in case is refused by check and run.
func TestMySQLLowerCaseTableNames(t *testing.T) {
	e := newNoLossEnv(t, testenv.MariaDBOptions{RowMetadata: true, Extra: []string{"--lower-case-table-names=1"}}, "App.Outbox", "",
		testenv.MariaDBOutboxDDL("App.Outbox", "CHAR(36)"))
	p := e.start()
	for i := 0; i < 5; i++ {
		if err := e.db.Exec(context.Background(), "app", insertSQL("App.Outbox", noLossID(i), "K")); err != nil {
			t.Fatal(err)
		}
	}
	harness.WaitFor(t, 30*time.Second, "5 rows of App.Outbox delivered", func() bool {
		d, _ := countDistinct(testenv.Consume(t, e.broker.Addr(), `outbox\.event\..*`, 5, time.Second))
		return d == 5
	})
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
	out, code := runOut(t, "check", "-c", e.cfgPath)
	if code != 0 || !strings.Contains(out, "OK   lower_case_table_names (1") {
		t.Fatalf("check exit %d:\n%s", code, out)
	}

	cs := newNoLossEnv(t, testenv.MariaDBOptions{RowMetadata: true}, "App.Outbox", "", testenv.MariaDBOutboxDDL("app.outbox", "CHAR(36)"))
	out, code = runOut(t, "check", "-c", cs.cfgPath)
	if code != 1 || !strings.Contains(out, "FAIL table App.Outbox: the server compares table names case-sensitively") ||
		!strings.Contains(out, "write source.tables as app.outbox") || strings.Contains(out, "OK   table App.Outbox") {
		t.Fatalf("check with lower_case_table_names=0: exit %d:\n%s", code, out)
	}
	out, code = runOut(t, "run", "-c", cs.cfgPath)
	if code == 0 || !strings.Contains(out, "write source.tables as app.outbox") {
		t.Fatalf("run with lower_case_table_names=0: exit %d:\n%s", code, out)
	}
}

// TestMySQLBinlogIgnoreDB (case 7): binlog-ignore-db=app (or a binlog-do-db without app) keeps
// the outbox out of the binlog: check FAILs naming the option, and run refuses before streaming.
func TestMySQLBinlogIgnoreDB(t *testing.T) {
	e := newNoLossEnv(t, testenv.MariaDBOptions{RowMetadata: true, Extra: []string{"--binlog-ignore-db=app"}}, "app.outbox", "",
		testenv.MariaDBOutboxDDL("app.outbox", "CHAR(36)"))
	out, code := runOut(t, "check", "-c", e.cfgPath)
	if code != 1 || !strings.Contains(out, "FAIL binlog filters: the server does not log changes to database app (binlog-ignore-db=app)") ||
		!strings.Contains(out, "remove that binlog-do-db / binlog-ignore-db option") {
		t.Fatalf("check exit %d:\n%s", code, out)
	}
	out, code = runOut(t, "run", "-c", e.cfgPath)
	if code == 0 || !strings.Contains(out, "binlog-ignore-db=app") {
		t.Fatalf("run exit %d:\n%s", code, out)
	}
	if e.storedPosition() != "" {
		t.Fatalf("run stored a position: %s", e.storedPosition())
	}

	// binlog-do-db that does not list the outbox database: the same.
	do := newNoLossEnv(t, testenv.MariaDBOptions{RowMetadata: true, Extra: []string{"--binlog-do-db=other"}}, "app.outbox", "",
		testenv.MariaDBOutboxDDL("app.outbox", "CHAR(36)"))
	out, code = runOut(t, "check", "-c", do.cfgPath)
	if code != 1 || !strings.Contains(out, "FAIL binlog filters: the server does not log changes to database app (binlog-do-db=other does not list it)") {
		t.Fatalf("check with binlog-do-db=other: exit %d:\n%s", code, out)
	}
	if out, code = runOut(t, "run", "-c", do.cfgPath); code == 0 || !strings.Contains(out, "binlog-do-db=other") {
		t.Fatalf("run with binlog-do-db=other: exit %d:\n%s", code, out)
	}
}

// TestMySQLStatementFormatStops (case 8): SET GLOBAL binlog_format=STATEMENT while outboxd runs,
// then an INSERT from a new session (which takes the new format): outboxd exits 1 naming the
// cause and the fix, with the stored position before that transaction; check then FAILs, run
// refuses, and once the format is ROW again a restart stops at the same transaction (it is
// never skipped). The same for one application session that sets STATEMENT while the global
// format stays ROW (check passes there).
func TestMySQLStatementFormatStops(t *testing.T) {
	e := newNoLossEnv(t, testenv.MariaDBOptions{RowMetadata: true}, "app.outbox", "", testenv.MariaDBOutboxDDL("app.outbox", "CHAR(36)"))
	p := e.start()
	before := e.deliverSome("app.outbox", 0, 2)
	if err := e.db.Exec(context.Background(), "", "SET GLOBAL binlog_format = STATEMENT"); err != nil {
		t.Fatal(err)
	}
	if err := e.db.Exec(context.Background(), "app", "BEGIN", insertSQL("outbox", noLossID(100), "S"), "COMMIT"); err != nil {
		t.Fatal(err)
	}
	e.expectStop(p, before, "logged as a statement", "binlog_format=ROW", "offsets set")

	out, code := runOut(t, "check", "-c", e.cfgPath)
	if code != 1 || !strings.Contains(out, `FAIL binlog_format: is "STATEMENT", needs ROW`) {
		t.Fatalf("check exit %d:\n%s", code, out)
	}
	out, code = runOut(t, "run", "-c", e.cfgPath)
	if code == 0 || !strings.Contains(out, "binlog_format=STATEMENT") {
		t.Fatalf("run exit %d:\n%s", code, out)
	}
	if err := e.db.Exec(context.Background(), "", "SET GLOBAL binlog_format = ROW"); err != nil {
		t.Fatal(err)
	}
	e.expectStop(startProc(t, e.cfgPath), before, "logged as a statement")

	// One session in STATEMENT, the global format ROW.
	s := newNoLossEnv(t, testenv.MariaDBOptions{RowMetadata: true}, "app.outbox", "", testenv.MariaDBOutboxDDL("app.outbox", "CHAR(36)"))
	p = s.start()
	before = s.deliverSome("app.outbox", 0, 2)
	if err := s.db.Exec(context.Background(), "app", "SET SESSION binlog_format = STATEMENT", "BEGIN",
		insertSQL("outbox", noLossID(100), "S"), "COMMIT"); err != nil {
		t.Fatal(err)
	}
	s.expectStop(p, before, "logged as a statement", "binlog_format=ROW", "offsets set")
}

// TestMySQLXAStops (case 9): outbox rows written in an XA transaction (XA PREPARE, then XA
// COMMIT) stop outboxd with the reason and the fix, the stored position before the prepare.
func TestMySQLXAStops(t *testing.T) {
	e := newNoLossEnv(t, testenv.MariaDBOptions{RowMetadata: true}, "app.outbox", "", testenv.MariaDBOutboxDDL("app.outbox", "CHAR(36)"))
	p := e.start()
	before := e.deliverSome("app.outbox", 0, 2)
	if err := e.db.Exec(context.Background(), "app", "XA START 'x1'", insertSQL("outbox", noLossID(100), "X"),
		insertSQL("outbox", noLossID(101), "X"), "XA END 'x1'", "XA PREPARE 'x1'", "XA COMMIT 'x1'"); err != nil {
		t.Fatal(err)
	}
	e.expectStop(p, before, "XA transaction was prepared with 2 outbox row(s)", "do not write outbox rows inside XA transactions")
}

// TestMySQLSessionMinimalRowImage (case 12): a session with binlog_row_image=MINIMAL inserts a
// row leaving type to its DEFAULT; the row event lacks that column: outboxd stops instead of
// publishing it as NULL.
func TestMySQLSessionMinimalRowImage(t *testing.T) {
	e := newNoLossEnv(t, testenv.MariaDBOptions{RowMetadata: true}, "app.outbox", "", testenv.MariaDBOutboxDDL("app.outbox", "CHAR(36)"),
		"ALTER TABLE app.outbox ALTER COLUMN type SET DEFAULT 'created'")
	p := e.start()
	before := e.deliverSome("app.outbox", 0, 2)
	if err := e.db.Exec(context.Background(), "app", "SET SESSION binlog_row_image = MINIMAL",
		fmt.Sprintf(`INSERT INTO outbox (id, aggregatetype, aggregateid, payload) VALUES ('%s', 'order', 'M', '{"a": 1}')`, noLossID(100))); err != nil {
		t.Fatal(err)
	}
	e.expectStop(p, before, "partial row image", "column(s) type missing", "binlog_row_image=FULL")

	// Globally: check FAILs and run refuses.
	if err := e.db.Exec(context.Background(), "", "SET GLOBAL binlog_row_image = MINIMAL"); err != nil {
		t.Fatal(err)
	}
	out, code := runOut(t, "check", "-c", e.cfgPath)
	if code != 1 || !strings.Contains(out, `FAIL binlog_row_image: is "MINIMAL", needs FULL`) {
		t.Fatalf("check exit %d:\n%s", code, out)
	}
	if out, code = runOut(t, "run", "-c", e.cfgPath); code == 0 || !strings.Contains(out, "binlog_row_image=MINIMAL") {
		t.Fatalf("run exit %d:\n%s", code, out)
	}
}

// TestMySQLMinimalRowMetadata (case 13): binlog_row_metadata=MINIMAL is refused by check and
// run unless source.mysql.allow_minimal_row_metadata is true.
func TestMySQLMinimalRowMetadata(t *testing.T) {
	e := newNoLossEnv(t, testenv.MariaDBOptions{RowMetadata: false}, "app.outbox", "", testenv.MariaDBOutboxDDL("app.outbox", "CHAR(36)"))
	out, code := runOut(t, "check", "-c", e.cfgPath)
	if code != 1 || !strings.Contains(out, "FAIL binlog_row_metadata: is MINIMAL") || !strings.Contains(out, "allow_minimal_row_metadata: true") {
		t.Fatalf("check exit %d:\n%s", code, out)
	}
	out, code = runOut(t, "run", "-c", e.cfgPath)
	if code == 0 || !strings.Contains(out, "binlog_row_metadata") {
		t.Fatalf("run exit %d:\n%s", code, out)
	}
	allowed := newNoLossEnv(t, testenv.MariaDBOptions{RowMetadata: false}, "app.outbox", "    allow_minimal_row_metadata: true",
		testenv.MariaDBOutboxDDL("app.outbox", "CHAR(36)"))
	out, code = runOut(t, "check", "-c", allowed.cfgPath)
	if code != 0 || !strings.Contains(out, "OK   column names (from information_schema") {
		t.Fatalf("check with the option: exit %d:\n%s", code, out)
	}
	p := allowed.start()
	allowed.deliverSome("app.outbox", 0, 1)
	p.Stop(t, syscall.SIGTERM)
}

// TestMySQLUTF16Key (case 14): aggregateid in utf16 (and type in utf32): the Kafka key is the
// UTF-8 text, not the raw UTF-16 bytes.
func TestMySQLUTF16Key(t *testing.T) {
	ddl := `CREATE TABLE app.outbox (
	id CHAR(36) NOT NULL PRIMARY KEY,
	aggregatetype VARCHAR(255) CHARACTER SET latin1 NOT NULL,
	aggregateid VARCHAR(255) CHARACTER SET utf16 NOT NULL,
	type VARCHAR(255) CHARACTER SET utf32 NOT NULL,
	payload JSON
) ENGINE=InnoDB`
	e := newNoLossEnv(t, testenv.MariaDBOptions{RowMetadata: true}, "app.outbox", "", ddl)
	if out, code := runOut(t, "check", "-c", e.cfgPath); code != 0 {
		t.Fatalf("check exit %d:\n%s", code, out)
	}
	p := e.start()
	const key = "ключ-é☃😀"
	if err := e.db.Exec(context.Background(), "app", "SET NAMES utf8mb4",
		fmt.Sprintf(`INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ('%s', 'order', '%s', 'créé', '{"a": 1}')`, noLossID(1), key)); err != nil {
		t.Fatal(err)
	}
	recs := testenv.Consume(t, e.broker.Addr(), `outbox\.event\..*`, 1, 30*time.Second)
	if len(recs) != 1 {
		t.Fatalf("%d records", len(recs))
	}
	r := recs[0]
	if string(r.Key) != key {
		t.Fatalf("key %q (% x), want %q", r.Key, r.Key, key)
	}
	if r.Topic != "outbox.event.order" {
		t.Fatalf("topic %q, want outbox.event.order", r.Topic)
	}
	p.Stop(t, syscall.SIGTERM)
}
