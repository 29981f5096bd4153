package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
)

// TestMariaDBCheckAndOffsets: check passes on a capture-ready MariaDB and names the fix on one
// logging STATEMENT; offsets show/set work and refuse a purged binlog file.
func TestMariaDBCheckAndOffsets(t *testing.T) {
	e := newMySQLEnv(t)
	out, code := runOut(t, "check", "-c", e.cfgPath)
	if code != 0 {
		t.Fatalf("check exit %d:\n%s", code, out)
	}
	for _, want := range []string{"OK   mysql reachable (mariadb", "OK   binlog_format (ROW)", "OK   binlog_row_image (FULL)",
		"OK   column names (from the binlog", "OK   replication privileges", "OK   table app.outbox", "OK   kafka reachable"} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}

	p := e.start()
	e.write(makeEvents(3))
	harness.WaitFor(t, 20*time.Second, "stored", func() bool { return len(readFile(e.offsets)) > 0 })
	p.Stop(t, syscall.SIGTERM)
	out, code = runOut(t, "offsets", "show", "-c", e.cfgPath)
	if code != 0 || !regexp.MustCompile(`stored position:\s+0-1-\d+`).MatchString(out) || !strings.Contains(out, "server position now:") ||
		!strings.Contains(out, "stored position servable: yes") {
		t.Fatalf("offsets show exit %d:\n%s", code, out)
	}

	// A file:pos in a purged binlog is refused with the reason; the current one is accepted.
	ctx := context.Background()
	rows, err := e.db.Query("", "SHOW BINARY LOGS")
	if err != nil || len(rows) == 0 {
		t.Fatalf("SHOW BINARY LOGS: %v %v", rows, err)
	}
	first := rows[0][0]
	if err := e.db.Exec(ctx, "", "FLUSH BINARY LOGS", "FLUSH BINARY LOGS"); err != nil {
		t.Fatal(err)
	}
	rows, _ = e.db.Query("", "SHOW BINARY LOGS")
	last := rows[len(rows)-1][0]
	// The server keeps binlogs crash recovery may still need (binlog checkpoint) for a moment.
	harness.WaitFor(t, 20*time.Second, "binlogs purged", func() bool {
		if err := e.db.Exec(ctx, "", "PURGE BINARY LOGS TO '"+last+"'"); err != nil {
			t.Fatal(err)
		}
		rows, _ = e.db.Query("", "SHOW BINARY LOGS")
		return rows[0][0] == last
	})
	out, code = runOut(t, "offsets", "set", "-c", e.cfgPath, "--position", first+":4")
	if code != 1 || !strings.Contains(out, first) {
		t.Fatalf("set to a purged file: exit %d:\n%s", code, out)
	}
	out, code = runOut(t, "offsets", "set", "-c", e.cfgPath, "--position", last+":4")
	if code != 0 || !strings.Contains(readFile(e.offsets), last+":4") {
		t.Fatalf("set to the current file: exit %d:\n%s", code, out)
	}

	// A server logging STATEMENT: check FAILs naming the fix.
	bad := testenv.NewMariaDB(t, testenv.MariaDBOptions{RowMetadata: true, Extra: []string{"--binlog-format=STATEMENT"}})
	bad.Exec(ctx, "app", testenv.MariaDBOutboxDDL("app.outbox", "CHAR(36)"))
	cfg := filepath.Join(t.TempDir(), "bad.yaml")
	writeFile(t, cfg, fmt.Sprintf("source: {type: mysql, dsn: '%s', tables: [app.outbox]}\nkafka: {brokers: ['%s']}\noffsets: {path: %s}\nhttp: {listen: ''}\n",
		bad.DSN("app"), e.broker.Addr(), filepath.Join(t.TempDir(), "o.json")))
	out, code = runOut(t, "check", "-c", cfg)
	if code != 1 || !strings.Contains(out, `FAIL binlog_format: is "STATEMENT", needs ROW — SET GLOBAL binlog_format = ROW`) {
		t.Fatalf("check on binlog_format=STATEMENT: exit %d:\n%s", code, out)
	}
}
