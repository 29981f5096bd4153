package e2e

// MySQL/MariaDB positions that cannot lie (issue 11, cases 10 and 11): a run without a stored
// position needs source.mysql.start, and a stored position that does not belong to the
// server's binlog (RESET MASTER, a restored or another server) is refused.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
)

// setStart replaces the source.mysql.start line of e's config ("" removes it).
func (e *mysqlEnv) setStart(v string) {
	e.t.Helper()
	b, err := os.ReadFile(e.cfgPath)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "    start: ") {
			continue
		}
		out = append(out, l)
		if strings.HasPrefix(l, "    server_id: ") && v != "" {
			out = append(out, "    start: "+v)
		}
	}
	writeFile(e.t, e.cfgPath, strings.Join(out, "\n"))
}

// stored returns the position in e's offsets file ("" if none).
func (e *mysqlEnv) stored() string {
	var d struct{ Position string }
	json.Unmarshal([]byte(readFile(e.offsets)), &d)
	return d.Position
}

// refused runs outboxd, which must exit 1 before it starts reading; it returns the output.
// A run that starts reading instead (the source's "opening" line) fails the test at once.
func (e *mysqlEnv) refused(what string) string {
	e.t.Helper()
	p := startProc(e.t, e.cfgPath)
	harness.WaitFor(e.t, 30*time.Second, what+": outboxd exits", func() bool {
		select {
		case <-p.Done:
			return true
		default:
		}
		if strings.Contains(p.Out.String(), "mysql source opening") {
			p.Kill()
			e.t.Fatalf("%s: outboxd started reading instead of refusing:\n%s", what, p.Out.String())
		}
		return false
	})
	if p.Code != 1 {
		e.t.Fatalf("%s: exit %d, want 1:\n%s", what, p.Code, p.Out.String())
	}
	return p.Out.String()
}

// events makes n single-row transactions with ids of their own (tag keeps them apart from
// makeEvents' ids and from other calls).
func events(tag, n int) [][]event {
	var txs [][]event
	for i := 1; i <= n; i++ {
		txs = append(txs, []event{{id: fmt.Sprintf("%08x-0000-4000-9000-%012x", tag, i), agg: "order", key: fmt.Sprintf("K%d", i),
			typ: "created", payload: fmt.Sprintf(`{"tag": %d, "n": %d}`, tag, i)}})
	}
	return txs
}

func idsOf(txs ...[][]event) []string {
	var out []string
	for _, t := range txs {
		for _, tx := range t {
			for _, ev := range tx {
				out = append(out, ev.id)
			}
		}
	}
	return out
}

// waitDelivered waits until every id in want is in Kafka.
func (e *mysqlEnv) waitDelivered(want []string, what string) {
	e.t.Helper()
	var missing []string
	harness.WaitFor(e.t, 30*time.Second, what, func() bool {
		missing = hasAll(testenv.Consume(e.t, e.broker.Addr(), `outbox\.event\..*`, len(want), 2*time.Second), want)
		return len(missing) == 0
	})
}

// TestMySQLLostOffsetsRefused (case 10): rows are committed while outboxd is stopped, then the
// offsets file is deleted, or holds `{}` or `null`. Without source.mysql.start the run is
// refused with the fix (it used to start at the binlog end, losing those rows); with
// start: earliest every row, those committed while stopped included, is delivered.
func TestMySQLLostOffsetsRefused(t *testing.T) {
	e := newMySQLEnv(t)
	// A bad start value is a config error naming the key.
	e.setStart("latest")
	if out, code := runOut(t, "check", "-c", e.cfgPath); code != 2 || !strings.Contains(out, "source.mysql.start") {
		t.Errorf("start: latest: exit %d, want 2 naming source.mysql.start:\n%s", code, out)
	}
	e.setStart("current")

	before, during := events(1, 3), events(2, 4)
	p := e.start()
	e.write(before)
	e.waitDelivered(idsOf(before), "rows of the first run delivered")
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
	e.write(during) // committed while outboxd is stopped

	e.setStart("") // no source.mysql.start from here on
	for _, tc := range []struct{ name, doc string }{{"offsets file deleted", ""}, {"offsets file {}", "{}"}, {"offsets file null", "null"}} {
		if tc.doc == "" {
			os.Remove(e.offsets)
		} else {
			writeFile(t, e.offsets, tc.doc)
		}
		out := e.refused(tc.name)
		for _, want := range []string{"no stored position in offsets file " + e.offsets, "source.mysql.start is not set",
			"source.mysql.start: current", "earliest", "restore them"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: the refusal lacks %q:\n%s", tc.name, want, out)
			}
		}
		if strings.Contains(out, "starting from the source's beginning") {
			t.Errorf("%s: the misleading log line is still there:\n%s", tc.name, out)
		}
		// check catches what run refuses.
		if out, code := runOut(t, "check", "-c", e.cfgPath); code != 1 || !strings.Contains(out, "FAIL start position: no stored position in offsets file") {
			t.Errorf("%s: check exit %d, want 1 with FAIL start position:\n%s", tc.name, code, out)
		}
	}
	if out, code := runOut(t, "offsets", "show", "-c", e.cfgPath); code != 0 || !strings.Contains(out, "refuses to start until source.mysql.start is set") {
		t.Errorf("offsets show without a position: exit %d:\n%s", code, out)
	}

	// start: earliest reads the oldest binlog on: every row, those committed while stopped too.
	e.setStart("earliest")
	p = e.start()
	after := events(3, 2)
	e.write(after)
	want := idsOf(before, during, after)
	e.waitDelivered(want, "every row delivered with start: earliest")
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
	if !strings.Contains(p.Out.String(), "source.mysql.start: earliest") {
		t.Errorf("the start is not logged:\n%s", p.Out.String())
	}
	if distinct, _ := countDistinct(testenv.Consume(t, e.broker.Addr(), `outbox\.event\..*`, len(want), 2*time.Second)); distinct != len(want) {
		t.Errorf("%d distinct records, want %d", distinct, len(want))
	}
	// The stored position carries the server's identity; a later run ignores start (logged).
	if s := e.stored(); !strings.Contains(s, ";binlog=mysql-bin.") || !strings.HasSuffix(s, ";server_id=1") {
		t.Errorf("stored position %q lacks the binlog file and server identity", s)
	}
	p = e.start()
	harness.WaitFor(t, 10*time.Second, "start ignored (logged)", func() bool {
		return strings.Contains(p.Out.String(), "source.mysql.start applies only to a run without one and is ignored")
	})
	p.Stop(t, syscall.SIGTERM)
}

// TestMySQLResetMasterRefused (case 11): outboxd delivers and stops; RESET MASTER restarts the
// GTID numbering and 8 rows are written. The stored GTID looks servable by its numbers (the
// server is past it again), but it names another transaction now: resuming skipped 6 of the 8
// rows. Now `offsets show` says it is not servable and why, `run` refuses it naming the fix,
// and after the fix (offsets set to a position of the reset binlog) rows flow again.
func TestMySQLResetMasterRefused(t *testing.T) {
	e := newMySQLEnv(t)
	p := e.start()
	first := events(11, 3)
	e.write(first)
	e.waitDelivered(idsOf(first), "rows before RESET MASTER delivered")
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
	stored := e.stored()
	if err := e.db.Exec(context.Background(), "", "RESET MASTER"); err != nil {
		t.Fatal(err)
	}
	lost := events(12, 8)
	e.write(lost)
	rows, _ := e.db.Query("", "SELECT @@gtid_binlog_pos")
	t.Logf("stored %s; after RESET MASTER and 8 rows the server is at %v", stored, rows)

	out, code := runOut(t, "offsets", "show", "-c", e.cfgPath)
	if code != 0 || !strings.Contains(out, "stored position servable: NO") || !strings.Contains(out, "RESET MASTER") {
		t.Errorf("offsets show after RESET MASTER: exit %d, want servable: NO with the reason:\n%s", code, out)
	}
	if out, code := runOut(t, "check", "-c", e.cfgPath); code != 1 || !strings.Contains(out, "FAIL start position: stored position") || !strings.Contains(out, "RESET MASTER") {
		t.Errorf("check after RESET MASTER: exit %d, want 1 with FAIL start position:\n%s", code, out)
	}
	out = e.refused("restart after RESET MASTER")
	for _, want := range []string{"does not belong to this server's binlog", "RESET MASTER", "offsets set", stored} {
		if !strings.Contains(out, want) {
			t.Errorf("the refusal lacks %q:\n%s", want, out)
		}
	}
	if e.stored() != stored {
		t.Errorf("the refused run changed the stored position: %q, was %q", e.stored(), stored)
	}

	// The fix the message names: re-publish what was missed (here: nothing is re-published, the
	// test only checks the way back), then store a position of this server.
	show, _ := runOut(t, "offsets", "show", "-c", e.cfgPath)
	var now string
	for _, l := range strings.Split(show, "\n") {
		if v, ok := strings.CutPrefix(l, "server position now:"); ok {
			now = strings.TrimSpace(v)
		}
	}
	if out, code := runOut(t, "offsets", "set", "-c", e.cfgPath, "--position", now); code != 0 {
		t.Fatalf("offsets set %q: exit %d:\n%s", now, code, out)
	}
	p = e.start()
	later := events(13, 2)
	e.write(later)
	e.waitDelivered(idsOf(later), "rows after the fix delivered")
	p.Stop(t, syscall.SIGTERM)
}

// TestMySQLOldFormPositionResumes: a position stored by an older outboxd (the GTID alone, no
// server identity or binlog file) still resumes without loss, without source.mysql.start; the
// run says it cannot check the origin and stores the new form from then on.
func TestMySQLOldFormPositionResumes(t *testing.T) {
	e := newMySQLEnv(t)
	p := e.start()
	first := events(21, 2)
	e.write(first)
	e.waitDelivered(idsOf(first), "first rows delivered")
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
	old, _, _ := strings.Cut(e.stored(), ";")
	if old == "" || strings.Contains(old, "=") {
		t.Fatalf("stored position %q", e.stored())
	}
	writeFile(t, e.offsets, fmt.Sprintf(`{"position": %q, "source": "mysql:4343"}`, old))
	e.setStart("")
	second := events(22, 3)
	e.write(second) // while stopped
	p = e.start()
	e.waitDelivered(idsOf(first, second), "rows after the old-form position delivered")
	third := events(23, 1)
	e.write(third)
	e.waitDelivered(idsOf(first, second, third), "rows written while running delivered")
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
	if !strings.Contains(p.Out.String(), "older form without the server's identity") {
		t.Errorf("no notice about the old-form position:\n%s", p.Out.String())
	}
	if s := e.stored(); !strings.HasPrefix(s, "0-1-") || !strings.Contains(s, ";binlog=mysql-bin.") || !strings.HasSuffix(s, ";server_id=1") {
		t.Errorf("the position stored after resuming is %q, want the form with binlog file and server identity", s)
	}
	want := idsOf(first, second, third)
	if distinct, _ := countDistinct(testenv.Consume(t, e.broker.Addr(), `outbox\.event\..*`, len(want), 2*time.Second)); distinct != len(want) {
		t.Errorf("%d distinct records, want %d", distinct, len(want))
	}
}

// TestMySQLOtherServerRefused: source.dsn is pointed at another server (server_id 7) with the
// stored position of the first: run refuses it naming both servers and the fix, and offsets
// show says it is not servable.
func TestMySQLOtherServerRefused(t *testing.T) {
	e := newMySQLEnv(t)
	p := e.start()
	first := events(31, 2)
	e.write(first)
	e.waitDelivered(idsOf(first), "first rows delivered")
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
	other := testenv.NewMariaDB(t, testenv.MariaDBOptions{RowMetadata: true, ServerID: 7})
	if err := other.Exec(context.Background(), "app", testenv.MariaDBOutboxDDL("app.outbox", "BINARY(16)")); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ { // the other server's GTIDs are past the stored ones
		if err := other.Exec(context.Background(), "app", "CREATE TABLE IF NOT EXISTS t"+fmt.Sprint(i)+" (a INT)"); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := os.ReadFile(e.cfgPath)
	writeFile(t, e.cfgPath, strings.Replace(string(b), e.db.DSN("app"), other.DSN("app"), 1))
	out, code := runOut(t, "offsets", "show", "-c", e.cfgPath)
	if code != 0 || !strings.Contains(out, "stored position servable: NO") || !strings.Contains(out, "server_id 1, but source.dsn reaches server_id 7") {
		t.Errorf("offsets show against another server: exit %d:\n%s", code, out)
	}
	out = e.refused("restart against another server")
	for _, want := range []string{"server_id 1, but source.dsn reaches server_id 7", "point it at the server the position was read from", "offsets set"} {
		if !strings.Contains(out, want) {
			t.Errorf("the refusal lacks %q:\n%s", want, out)
		}
	}
}

// TestMySQLNoPositionInKafkaStore (case 10, offsets.store kafka): the offsets topic holds no
// position under the pipeline's key; without source.mysql.start the run is refused naming the
// topic and key, with start: earliest it delivers the rows committed before it ever ran.
func TestMySQLNoPositionInKafkaStore(t *testing.T) {
	e := newMySQLEnv(t)
	b, _ := os.ReadFile(e.cfgPath)
	cfg := strings.Replace(string(b), "kafka:\n  brokers:", "kafka:\n  delivery: exactly_once\n  brokers:", 1)
	cfg = strings.Replace(cfg, "offsets:\n", "offsets:\n  store: kafka\n  topic: test.offsets\n", 1)
	writeFile(t, e.cfgPath, cfg)
	e.setStart("")
	before := events(41, 3)
	e.write(before) // committed before outboxd ever ran
	out := e.refused("no position under the key")
	if !strings.Contains(out, "no stored position in offsets topic test.offsets, key mysql:4343 (offsets.topic)") ||
		!strings.Contains(out, "source.mysql.start is not set") {
		t.Errorf("the refusal lacks the store or the fix:\n%s", out)
	}
	e.setStart("earliest")
	p := e.start()
	e.waitDelivered(idsOf(before), "rows committed before the first run delivered")
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
}
