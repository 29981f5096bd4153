package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
)

// TestRepublishStops: the outboxd binary stopped mid-republish by SIGINT, and by its scan's
// connection being terminated, exits 1 each time; what it reports as delivered is exactly what
// Kafka holds from it (the records in flight are drained first, nothing is lost in between).
func TestRepublishStops(t *testing.T) {
	e := newEnv(t, "")
	const rows = 300000
	if err := e.pg.Exec(context.Background(), "app", fmt.Sprintf(`INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
		SELECT gen_random_uuid(), 'order', 'k' || (i %% 100), 'created', jsonb_build_object('i', i, 'pad', repeat('x', 200))
		FROM generate_series(1, %d) AS i`, rows)); err != nil {
		t.Fatal(err)
	}
	delivered := func() int64 { return testenv.Delivered(t, e.broker.Addr(), `outbox\.event\.order`) }
	summary := regexp.MustCompile(`republish stopped: (\d+) rows of public\.outbox read \(300000 selected\): (\d+) delivered, 0 dead-lettered`)
	// start runs a republish and waits until Kafka holds `more` records beyond base from it.
	start := func(base, more int64) *harness.Proc {
		p := harness.Start(t, binPath, []string{"republish", "-c", e.cfgPath}, harness.Options{Name: "republish"})
		harness.WaitFor(t, 60*time.Second, "republished records in Kafka", func() bool {
			if p.Exited() {
				t.Fatalf("republish ended before the test stopped it (exit %d):\n%s", p.Code, p.Out.String())
			}
			return delivered() >= base+more
		})
		return p
	}
	check := func(p *harness.Proc, base int64, want string) int64 {
		t.Helper()
		if code := p.WaitExit(t, 60*time.Second, want); code != 1 || !strings.Contains(p.Out.String(), want) {
			t.Fatalf("exit %d, want 1 with %q:\n%s", code, want, p.Out.String())
		}
		m := summary.FindStringSubmatch(p.Out.String())
		if m == nil {
			t.Fatalf("no summary:\n%s", p.Out.String())
		}
		t.Logf("%s", m[0])
		n, _ := strconv.ParseInt(m[2], 10, 64)
		if got := delivered() - base; got != n || n == 0 || n >= rows {
			t.Fatalf("the summary says %d delivered, Kafka holds %d new records:\n%s", n, got, p.Out.String())
		}
		return n
	}

	p := start(0, 20000)
	p.Signal(syscall.SIGINT)
	n := check(p, 0, "interrupted: ")

	p = start(n, 20000)
	c := e.conn()
	var killed int
	if err := c.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = 'app' AND pid <> pg_backend_pid() AND query LIKE 'FETCH FORWARD%'`).Scan(&killed); err != nil || killed != 1 {
		t.Fatalf("terminated %d scan backends (%v), want 1", killed, err)
	}
	check(p, n, "scan of public.outbox failed after")
}

// TestRepublishMariaDBScanKilled: the MariaDB scan's connection killed mid-republish (KILL of the
// streamed SELECT's connection): exit 1 naming the failed scan, and everything read before it
// delivered, as on PostgreSQL.
func TestRepublishMariaDBScanKilled(t *testing.T) {
	e := newMySQLEnv(t)
	const rows = 300000
	if err := e.db.Exec(context.Background(), "app", fmt.Sprintf(`INSERT INTO app.outbox (id, aggregatetype, aggregateid, type, payload)
		SELECT UNHEX(LPAD(HEX(seq), 32, '0')), 'order', CONCAT('k', seq %% 100), 'created', JSON_OBJECT('i', seq, 'pad', REPEAT('x', 200))
		FROM seq_1_to_%d`, rows)); err != nil {
		t.Fatal(err)
	}
	p := harness.Start(t, binPath, []string{"republish", "-c", e.cfgPath}, harness.Options{Name: "republish"})
	harness.WaitFor(t, 60*time.Second, "republished records in Kafka", func() bool {
		if p.Exited() {
			t.Fatalf("republish ended before the test stopped it (exit %d):\n%s", p.Code, p.Out.String())
		}
		return testenv.Delivered(t, e.broker.Addr(), `outbox\.event\.order`) >= 20000
	})
	// The scan's connection: the republish's only one now (the count's is closed); a prepared
	// statement's execution (COMMAND Execute) streaming the rows.
	ids, err := e.db.Query("", "SELECT ID, COMMAND, COALESCE(INFO, '') FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND COMMAND NOT IN ('Daemon', 'Sleep', 'Binlog Dump')")
	if err != nil || len(ids) != 1 {
		t.Fatalf("the scan's connection: %v (%v)", ids, err)
	}
	if err := e.db.Exec(context.Background(), "", "KILL "+ids[0][0]); err != nil {
		t.Fatal(err)
	}
	if code := p.WaitExit(t, 60*time.Second, "the scan's connection was killed"); code != 1 || !strings.Contains(p.Out.String(), "scan of app.outbox failed after") {
		t.Fatalf("exit %d, want 1 naming the failed scan:\n%s", code, p.Out.String())
	}
	m := regexp.MustCompile(`republish stopped: (\d+) rows of app\.outbox read \(300000 selected\): (\d+) delivered, 0 dead-lettered`).FindStringSubmatch(p.Out.String())
	if m == nil || m[1] != m[2] {
		t.Fatalf("want every row read delivered:\n%s", p.Out.String())
	}
	t.Logf("%s", m[0])
	if n, _ := strconv.ParseInt(m[2], 10, 64); testenv.Delivered(t, e.broker.Addr(), `outbox\.event\.order`) != n || n >= rows {
		t.Fatalf("Kafka holds %d records, the summary says %d delivered", testenv.Delivered(t, e.broker.Addr(), `outbox\.event\.order`), n)
	}
}
