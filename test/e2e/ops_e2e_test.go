package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
)

func runOut(t *testing.T, args ...string) (string, int) {
	t.Helper()
	out, err := exec.Command(binPath, args...).CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

// TestCheck: every preflight passes on a good setup; a cluster with wal_level=replica fails with
// the fix spelled out; run refuses to start there.
func TestCheck(t *testing.T) {
	e := newEnv(t, "")
	out, code := runOut(t, "check", "-c", e.cfgPath)
	if code != 0 {
		t.Fatalf("check exit %d:\n%s", code, out)
	}
	for _, want := range []string{"OK   postgres reachable", "OK   wal_level", "OK   replication privilege", "OK   table public.outbox",
		"OK   publication outboxd", "OK   slot outboxd", "OK   kafka producer durability", "OK   kafka reachable", "OK   dlq topic outboxd.dlq"} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}

	bad := testenv.NewPostgres(t, "wal_level=replica")
	bad.Exec(context.Background(), "app", "CREATE TABLE public.outbox (id uuid, aggregatetype text, payload jsonb)")
	cfg := filepath.Join(t.TempDir(), "bad.yaml")
	writeFile(t, cfg, fmt.Sprintf("source: {type: postgres, dsn: '%s', tables: [public.outbox, public.missing]}\nkafka: {brokers: ['%s']}\noffsets: {path: %s}\nhttp: {listen: ''}\n",
		bad.DSN("app"), e.broker.Addr(), filepath.Join(t.TempDir(), "o.json")))
	out, code = runOut(t, "check", "-c", cfg)
	if code != 1 {
		t.Fatalf("check on wal_level=replica: exit %d, want 1:\n%s", code, out)
	}
	for _, want := range []string{
		"FAIL wal_level: is replica, needs logical — set wal_level = logical in postgresql.conf and restart PostgreSQL",
		"FAIL table public.outbox: lacks column(s) aggregateid",
		"FAIL table public.missing: does not exist",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
	out, code = runOut(t, "run", "-c", cfg)
	if code != 1 || !strings.Contains(out, "logical") {
		t.Errorf("run on wal_level=replica: exit %d, output:\n%s\nconfig:\n%s", code, out, readFile(cfg))
	}
}

// TestSecretsNeverPrinted: a DSN password appears in no log line or error, from run, check or
// offsets, even when connecting fails.
func TestSecretsNeverPrinted(t *testing.T) {
	e := newEnv(t, "")
	const secret = "Sup3r-s3cret-pw"
	e.pg.Exec(context.Background(), "postgres", "CREATE ROLE app LOGIN REPLICATION PASSWORD '"+secret+"'")
	dir := t.TempDir()
	for i, dsn := range []string{
		fmt.Sprintf("postgres://app:${APP_PW}@127.0.0.1:%d/nodb?sslmode=disable", e.pg.Port),      // database does not exist
		fmt.Sprintf("postgres://app:${APP_PW}@127.0.0.1:1/app?sslmode=disable&connect_timeout=2"), // nothing listens
	} {
		cfg := filepath.Join(dir, fmt.Sprintf("c%d.yaml", i))
		writeFile(t, cfg, fmt.Sprintf("source: {type: postgres, dsn: '%s', tables: [public.outbox]}\nkafka: {brokers: ['%s'], sasl: {mechanism: PLAIN, username: u, password: '${APP_PW}'}}\noffsets: {path: %s}\nhttp: {listen: ''}\n",
			dsn, e.broker.Addr(), filepath.Join(dir, "o.json")))
		for _, args := range [][]string{{"run", "-c", cfg}, {"check", "-c", cfg}, {"offsets", "show", "-c", cfg}, {"offsets", "set", "-c", cfg, "--position", "0/1"}} {
			cmd := exec.Command(binPath, args...)
			cmd.Env = append(os.Environ(), "APP_PW="+secret)
			out, _ := cmd.CombinedOutput()
			if strings.Contains(string(out), secret) {
				t.Errorf("%v printed the password:\n%s", args, out)
			}
			if len(out) == 0 {
				t.Errorf("%v printed nothing", args)
			}
		}
	}
}

// TestOffsetsShowAndSet: show prints the stored position, the slot's confirmed LSN and the lag;
// set refuses positions the slot cannot serve and stores one it can.
func TestOffsetsShowAndSet(t *testing.T) {
	e := newEnv(t, "")
	c := e.conn()
	p := e.start()
	e.insert(c, "a", 2)
	harness.WaitFor(t, 20*time.Second, "stored", func() bool { return e.storedPosition() != "" })
	p.Stop(t, syscall.SIGTERM)
	stored := e.storedPosition()
	out, code := runOut(t, "offsets", "show", "-c", e.cfgPath)
	if code != 0 || !strings.Contains(out, "stored position:      "+stored) || !regexp.MustCompile(`confirmed_flush_lsn: \d+/[0-9A-F]+`).MatchString(out) ||
		!regexp.MustCompile(`lag:\s+\d+ bytes`).MatchString(out) {
		t.Fatalf("offsets show exit %d:\n%s", code, out)
	}
	out, code = runOut(t, "offsets", "set", "-c", e.cfgPath, "--position", "0/10")
	if code != 1 || !strings.Contains(out, "already confirmed") {
		t.Fatalf("set behind the slot: exit %d:\n%s", code, out)
	}
	out, code = runOut(t, "offsets", "set", "-c", e.cfgPath, "--position", "FF/0")
	if code != 1 || !strings.Contains(out, "beyond the server's WAL end") {
		t.Fatalf("set beyond WAL end: exit %d:\n%s", code, out)
	}
	out, code = runOut(t, "offsets", "set", "-c", e.cfgPath, "--position", "not-an-lsn")
	if code != 1 || !strings.Contains(out, "not a PostgreSQL LSN") {
		t.Fatalf("set garbage: exit %d:\n%s", code, out)
	}
	var walEnd string
	c.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&walEnd)
	out, code = runOut(t, "offsets", "set", "-c", e.cfgPath, "--position", walEnd)
	if code != 0 || e.storedPosition() != walEnd {
		t.Fatalf("set to WAL end %s: exit %d, stored %s:\n%s", walEnd, code, e.storedPosition(), out)
	}
	// Dropping the slot with a stored position: run fails loudly, never recreates past the gap.
	c.Exec(context.Background(), "SELECT pg_drop_replication_slot('outboxd')")
	out, code = runOut(t, "run", "-c", e.cfgPath)
	if code != 1 || !strings.Contains(out, "outboxd") || !strings.Contains(strings.ToLower(out), "slot") {
		t.Fatalf("run with a dropped slot: exit %d:\n%s", code, out)
	}
	var n int
	c.QueryRow(context.Background(), "SELECT count(*) FROM pg_replication_slots").Scan(&n)
	if n != 0 {
		t.Fatal("the slot was silently re-created past the stored position")
	}
}

// TestMetricsAndHealth: /metrics has the contract's metrics with the right values, /healthz and
// /readyz answer 200 once running.
func TestMetricsAndHealth(t *testing.T) {
	port, _ := testenv.FreePort()
	e := newEnv(t, "")
	// newEnv's config ends with http.listen ""; append a later override via a second file.
	b, _ := os.ReadFile(e.cfgPath)
	cfg := strings.Replace(string(b), `listen: ""`, fmt.Sprintf("listen: 127.0.0.1:%d", port), 1)
	writeFile(t, e.cfgPath, cfg)
	c := e.conn()
	p := e.start()
	e.insert(c, "m", 3)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	harness.WaitFor(t, 20*time.Second, "3 events produced in metrics", func() bool {
		_, body := get("/metrics")
		return strings.Contains(body, `outboxd_events_produced_total{topic="outbox.event.order"} 3`)
	})
	_, body := get("/metrics")
	for _, want := range []string{"outboxd_events_read_total 3", "outboxd_commit_to_ack_seconds_count 3", "outboxd_inflight_events 0",
		"outboxd_up 1", "outboxd_source_lag_bytes", "go_goroutines", "process_resident_memory_bytes"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("/healthz %d", code)
	}
	if code, body := get("/readyz"); code != 200 {
		t.Errorf("/readyz %d %s", code, body)
	}
	p.Stop(t, syscall.SIGTERM)
}

func readFile(p string) string { b, _ := os.ReadFile(p); return string(b) }
