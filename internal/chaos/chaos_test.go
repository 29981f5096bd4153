package chaos

import (
	"github.com/outboxd/outboxd/internal/testenv/harness"

	"context"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// plan sizes the chaos. Short mode (default) is bounded for CI: about 2 minutes on 2 cores
// (3 at most). OUTBOXD_CHAOS=long runs the long mode (about 5–6 minutes), used for the README
// table.
type plan struct {
	mode          string
	kills         int           // SIGKILLs of outboxd on PostgreSQL, one every 1–3 s
	mariaKills    int           // SIGKILLs of outboxd on MariaDB
	outage        time.Duration // broker down, under load
	outages       int
	pgRestarts    int // PostgreSQL SIGKILL + restart, under load
	mariaRestarts int // MariaDB SIGKILL + restart, under load
	failovers     int // SIGKILL of the active instance of an HA pair
	pause         time.Duration
	settle        time.Duration // deadline for delivering everything at the end
}

func chaosPlan() plan {
	if os.Getenv("OUTBOXD_CHAOS") == "long" {
		return plan{mode: "long", kills: 30, mariaKills: 15, outage: 60 * time.Second, outages: 2, pgRestarts: 5, mariaRestarts: 5,
			failovers: 8, pause: 2 * time.Millisecond, settle: 5 * time.Minute}
	}
	return plan{mode: "short", kills: 5, mariaKills: 3, outage: 30 * time.Second, outages: 1, pgRestarts: 2, mariaRestarts: 2,
		failovers: 2, pause: 3 * time.Millisecond, settle: 2 * time.Minute}
}

// result is one row of the report.
type result struct {
	scenario string
	faults   string
	tally    tally
	took     time.Duration
	note     string
}

var (
	resultsMu sync.Mutex
	results   []result
)

func record(r result) {
	resultsMu.Lock()
	results = append(results, r)
	resultsMu.Unlock()
}

// TestChaos runs every scenario under a background writer and checks that no committed outbox
// row is lost (at_least_once: duplicates are counted, not failed). It prints a Markdown table.
func TestChaos(t *testing.T) {
	p := chaosPlan()
	start := time.Now()
	t.Cleanup(func() { report(t, p, time.Since(start)) })
	t.Run("postgres-sigkill", func(t *testing.T) { pgKill(t, p, false) })
	t.Run("postgres-sigkill-exactly-once", func(t *testing.T) { pgKill(t, p, true) })
	t.Run("postgres-broker-outage", func(t *testing.T) { brokerOutage(t, p) })
	t.Run("postgres-restart", func(t *testing.T) { pgRestart(t, p) })
	t.Run("postgres-ha-failover", func(t *testing.T) { haFailover(t, p) })
	t.Run("mariadb-sigkill", func(t *testing.T) { mariaKill(t, p) })
	t.Run("mariadb-restart", func(t *testing.T) { mariaRestart(t, p) })
}

func report(t *testing.T, p plan, took time.Duration) {
	resultsMu.Lock()
	defer resultsMu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "| scenario | events | kills/outages | lost | duplicates | time |\n|---|---:|---|---:|---:|---:|\n")
	for _, r := range results {
		faults := r.faults
		if r.note != "" {
			faults += " (" + r.note + ")"
		}
		lost := fmt.Sprint(r.tally.lost)
		if r.tally.phantoms > 0 {
			lost += fmt.Sprintf(" (+%d unknown ids!)", r.tally.phantoms)
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %d | %s |\n", r.scenario, r.tally.events, faults, lost, r.tally.dups, r.took.Round(time.Second))
	}
	fmt.Fprintf(&b, "\nmode %s, at_least_once unless the scenario says exactly_once, %d scenarios in %s\n", p.mode, len(results), took.Round(time.Second))
	t.Logf("chaos results:\n%s", b.String())
	if path := os.Getenv("OUTBOXD_CHAOS_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Errorf("write %s: %v", path, err)
		}
	}
}

// finish stops the writer, waits for delivery, records the row and fails on any loss.
func finish(t *testing.T, f *fixture, w *writer, p plan, r result, started time.Time) {
	t.Helper()
	w.stop()
	r.tally = verify(t, f, p.settle)
	r.took = time.Since(started)
	record(r)
	t.Logf("%s: %d events, %d records, %d lost, %d duplicates (writer: %d transactions, %d failed attempts)",
		r.scenario, r.tally.events, r.tally.records, r.tally.lost, r.tally.dups, w.txs.Load(), w.failures.Load())
	if r.tally.lost > 0 || r.tally.phantoms > 0 {
		t.Errorf("%s: %d committed events lost (e.g. %s), %d unknown ids in Kafka", r.scenario, r.tally.lost, strings.Join(r.tally.lostIDs, " "), r.tally.phantoms)
		if f.pg != nil {
			if c, err := pgx.Connect(context.Background(), f.pg.DSN("app")); err == nil {
				rows, _ := c.Query(context.Background(), `SELECT id::text, xmin::text, created_at FROM outbox WHERE id::text = ANY($1) ORDER BY created_at`, r.tally.lostIDs)
				for rows.Next() {
					var id, xmin string
					var at time.Time
					rows.Scan(&id, &xmin, &at)
					t.Logf("lost %s xmin %s created %s", id, xmin, at.Format(time.RFC3339Nano))
				}
				rows.Close()
				c.Close(context.Background())
			}
		}
	}
	if r.tally.events < 100 {
		t.Errorf("%s: only %d events written: the scenario did not run under load", r.scenario, r.tally.events)
	}
}

// sleepBetween is the chaos schedule: the next fault comes a random min–max later.
func sleepBetween(min, max time.Duration) {
	harness.Hold(min+time.Duration(mrand.Int64N(int64(max-min))), "the random time to the next fault")
}

// pgKill: SIGKILL outboxd every 1–3 s and restart it at once. With exactlyOnce the run must
// also deliver no duplicate (read_committed).
func pgKill(t *testing.T, p plan, exactlyOnce bool) {
	started := time.Now()
	f := newPostgresFixture(t)
	f.exactlyOnce = exactlyOnce
	cfg := f.config("a", "", "")
	proc := startProc(t, "a", cfg, f.dir)
	f.waitStreaming(proc)
	w := startWriter(f.db, p.pause)
	for i := 0; i < p.kills; i++ {
		sleepBetween(time.Second, 3*time.Second)
		proc.MustBeRunning(t)
		proc.Kill()
		t.Logf("killed at %s", time.Now().Format(time.RFC3339Nano))
		proc = startProc(t, "a", cfg, f.dir)
	}
	f.waitDelivering(proc, 50, time.Minute) // the last instance delivers under the writer
	name := "PostgreSQL: SIGKILL outboxd every 1–3 s"
	if exactlyOnce {
		name = "PostgreSQL, exactly_once: SIGKILL outboxd every 1–3 s"
	}
	finish(t, f, w, p, result{scenario: name, faults: fmt.Sprintf("%d SIGKILLs", p.kills)}, started)
	if exactlyOnce && (len(results) == 0 || results[len(results)-1].tally.dups != 0) {
		t.Errorf("exactly_once delivered duplicates: %+v", results[len(results)-1].tally)
	}
	if code := proc.Term(); code != 0 {
		t.Errorf("SIGTERM exit %d; output:\n%s", code, harness.Tail(proc.Out.String(), 40))
	}
}

// brokerOutage: stop the broker under load, start it again on the same port with its data.
func brokerOutage(t *testing.T, p plan) {
	started := time.Now()
	f := newPostgresFixture(t)
	proc := startProc(t, "a", f.config("a", "", ""), f.dir)
	f.waitStreaming(proc)
	w := startWriter(f.db, p.pause)
	for i := 0; i < p.outages; i++ {
		f.waitDelivering(proc, 50, time.Minute) // the broker goes while outboxd delivers
		f.broker.Stop()
		harness.Hold(p.outage, "the broker outage under test")
		if err := f.broker.Start(); err != nil {
			t.Fatal(err)
		}
	}
	f.waitDelivering(proc, 50, 2*time.Minute) // delivering again
	proc.MustBeRunning(t)
	finish(t, f, w, p, result{scenario: "PostgreSQL: broker down under load", faults: fmt.Sprintf("%d × %s broker outage", p.outages, p.outage)}, started)
	if code := proc.Term(); code != 0 {
		t.Errorf("SIGTERM exit %d; output:\n%s", code, harness.Tail(proc.Out.String(), 40))
	}
}

// pgRestart: SIGKILL PostgreSQL (crash) and start it again, under load.
func pgRestart(t *testing.T, p plan) {
	started := time.Now()
	f := newPostgresFixture(t)
	proc := startProc(t, "a", f.config("a", "", ""), f.dir)
	f.waitStreaming(proc)
	w := startWriter(f.db, p.pause)
	for i := 0; i < p.pgRestarts; i++ {
		f.waitDelivering(proc, 50, time.Minute) // the database crashes while outboxd delivers
		f.pg.Kill()
		harness.Hold(500*time.Millisecond, "PostgreSQL stays down")
		if err := f.pg.Start(); err != nil {
			t.Fatal(err)
		}
	}
	f.waitDelivering(proc, 50, 2*time.Minute) // reconnected and delivering again
	proc.MustBeRunning(t)
	finish(t, f, w, p, result{scenario: "PostgreSQL: crash-restart the database under load", faults: fmt.Sprintf("%d PostgreSQL SIGKILL+restarts", p.pgRestarts)}, started)
	if code := proc.Term(); code != 0 {
		t.Errorf("SIGTERM exit %d; output:\n%s", code, harness.Tail(proc.Out.String(), 40))
	}
}

// haFailover: two instances with the same config (and offsets file); SIGKILL the active one,
// the standby takes over, the killed one comes back as the standby; repeat.
func haFailover(t *testing.T, p plan) {
	started := time.Now()
	f := newPostgresFixture(t)
	addrs := []string{freeAddr(t), freeAddr(t)}
	cfgs := []string{f.config("a", addrs[0], ""), f.config("b", addrs[1], "")}
	names := []string{"a", "b"}
	procs := make([]*harness.Proc, 2)
	procs[0] = startProc(t, "a", cfgs[0], f.dir)
	harness.WaitFor(t, 30*time.Second, "instance a ready", func() bool { procs[0].MustBeRunning(t); return harness.Readyz(addrs[0]) == 200 })
	procs[1] = startProc(t, "b", cfgs[1], f.dir)
	harness.WaitFor(t, 30*time.Second, "instance b standby", func() bool {
		procs[1].MustBeRunning(t)
		return strings.Contains(procs[1].Out.String(), "standby:")
	})
	if code := harness.Readyz(addrs[1]); code != 503 {
		t.Fatalf("standby /readyz answers %d, want 503", code)
	}
	w := startWriter(f.db, p.pause)
	active := 0
	var worst time.Duration
	for i := 0; i < p.failovers; i++ {
		sleepBetween(2*time.Second, 4*time.Second)
		standby := 1 - active
		procs[active].MustBeRunning(t)
		procs[standby].MustBeRunning(t)
		procs[active].Kill()
		took := harness.WaitFor(t, 30*time.Second, "takeover by "+names[standby], func() bool {
			procs[standby].MustBeRunning(t)
			return harness.Readyz(addrs[standby]) == 200
		})
		worst = max(worst, took)
		if !strings.Contains(procs[standby].Out.String(), "takeover:") {
			t.Errorf("instance %s became ready without a takeover log line", names[standby])
		}
		t.Logf("failover %d: %s took over in %v", i+1, names[standby], took.Round(10*time.Millisecond))
		procs[active] = startProc(t, names[active], cfgs[active], f.dir)
		old := active
		harness.WaitFor(t, 30*time.Second, names[old]+" back as standby", func() bool {
			procs[old].MustBeRunning(t)
			return strings.Contains(procs[old].Out.String(), "standby:")
		})
		active = standby
	}
	f.waitDelivering(procs[active], 50, time.Minute) // the last one to take over delivers
	finish(t, f, w, p, result{scenario: "PostgreSQL: HA pair, SIGKILL the active instance", faults: fmt.Sprintf("%d failovers", p.failovers),
		note: fmt.Sprintf("slowest takeover %s", worst.Round(100*time.Millisecond))}, started)
	for _, pr := range procs {
		pr.MustBeRunning(t)
		if code := pr.Term(); code != 0 {
			t.Errorf("%s: SIGTERM exit %d; output:\n%s", pr.Name, code, harness.Tail(pr.Out.String(), 40))
		}
	}
}

// mariaKill: SIGKILL outboxd on MariaDB every 1–3 s and restart it.
func mariaKill(t *testing.T, p plan) {
	started := time.Now()
	f := newMariaDBFixture(t)
	cfg := f.config("a", "", "")
	proc := startProc(t, "a", cfg, f.dir)
	f.waitStreaming(proc)
	w := startWriter(f.db, p.pause)
	for i := 0; i < p.mariaKills; i++ {
		sleepBetween(time.Second, 3*time.Second)
		proc.MustBeRunning(t)
		proc.Kill()
		proc = startProc(t, "a", cfg, f.dir)
	}
	f.waitDelivering(proc, 50, time.Minute) // the last instance delivers under the writer
	finish(t, f, w, p, result{scenario: "MariaDB: SIGKILL outboxd every 1–3 s", faults: fmt.Sprintf("%d SIGKILLs", p.mariaKills)}, started)
	if code := proc.Term(); code != 0 {
		t.Errorf("SIGTERM exit %d; output:\n%s", code, harness.Tail(proc.Out.String(), 40))
	}
}

// mariaRestart: SIGKILL MariaDB and start it again, under load.
func mariaRestart(t *testing.T, p plan) {
	started := time.Now()
	f := newMariaDBFixture(t)
	proc := startProc(t, "a", f.config("a", "", ""), f.dir)
	f.waitStreaming(proc)
	w := startWriter(f.db, p.pause)
	for i := 0; i < p.mariaRestarts; i++ {
		f.waitDelivering(proc, 50, time.Minute) // the database crashes while outboxd delivers
		f.maria.Kill()
		harness.Hold(500*time.Millisecond, "MariaDB stays down")
		if err := f.maria.Start(); err != nil {
			t.Fatal(err)
		}
	}
	f.waitDelivering(proc, 50, 2*time.Minute) // reconnected and delivering again
	proc.MustBeRunning(t)
	finish(t, f, w, p, result{scenario: "MariaDB: crash-restart the database under load", faults: fmt.Sprintf("%d MariaDB SIGKILL+restarts", p.mariaRestarts)}, started)
	if code := proc.Term(); code != 0 {
		t.Errorf("SIGTERM exit %d; output:\n%s", code, harness.Tail(proc.Out.String(), 40))
	}
}
