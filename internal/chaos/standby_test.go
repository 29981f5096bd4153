package chaos

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
)

// writeRows commits n single-row transactions.
func writeRows(t *testing.T, db outboxDB, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if err := db.insert(context.Background(), []row{{id: uuid4(), agg: "order", key: fmt.Sprintf("k%d", i%7), payload: `{"n": 1}`}}); err != nil {
			t.Fatal(err)
		}
	}
	db.reset()
}

func mustVerify(t *testing.T, f *fixture) {
	t.Helper()
	tl := verify(t, f, time.Minute)
	if tl.lost > 0 || tl.phantoms > 0 {
		t.Fatalf("%d of %d events lost (e.g. %v), %d unknown", tl.lost, tl.events, tl.lostIDs, tl.phantoms)
	}
	t.Logf("%d events delivered, %d duplicates", tl.events, tl.dups)
}

// hotStandby: a second instance with the same config (and offsets file) waits as standby with
// /readyz 503, takes over within seconds when the active one is SIGKILLed, and resumes from
// the stored position with nothing lost; a restarted first instance is the standby then.
func hotStandby(t *testing.T, f *fixture, standbyLog string) {
	addrA, addrB := freeAddr(t), freeAddr(t)
	cfgA, cfgB := f.config("a", addrA, ""), f.config("b", addrB, "")
	a := startProc(t, "a", cfgA, f.dir)
	harness.WaitFor(t, 30*time.Second, "a ready", func() bool { a.MustBeRunning(t); return harness.Readyz(addrA) == 200 })
	b := startProc(t, "b", cfgB, f.dir)
	harness.WaitFor(t, 30*time.Second, "b standby", func() bool { b.MustBeRunning(t); return strings.Contains(b.Out.String(), "standby:") })
	if !strings.Contains(b.Out.String(), standbyLog) {
		t.Errorf("standby log line does not name %q:\n%s", standbyLog, b.Out.String())
	}
	if code := harness.Readyz(addrB); code != 503 {
		t.Fatalf("standby /readyz: %d, want 503", code)
	}
	if m := harness.Metrics(addrB); !strings.Contains(m, "outboxd_standby 1") || !strings.Contains(m, "outboxd_up 0") {
		t.Fatalf("standby metrics lack outboxd_standby 1 / outboxd_up 0")
	}
	if m := harness.Metrics(addrA); !strings.Contains(m, "outboxd_standby 0") {
		t.Fatalf("active metrics lack outboxd_standby 0")
	}
	written := time.Now()
	writeRows(t, f.db, 50)
	mustVerify(t, f)
	f.waitStoredAfter(written, 30*time.Second) // a stored its position since the rows came
	if strings.Contains(b.Out.String(), "starting outboxd") {
		t.Fatalf("the standby started a pipeline while a was active:\n%s", b.Out.String())
	}

	a.Kill()
	took := harness.WaitFor(t, 15*time.Second, "b takes over", func() bool { b.MustBeRunning(t); return harness.Readyz(addrB) == 200 })
	t.Logf("takeover in %v", took)
	if !strings.Contains(b.Out.String(), "takeover:") || !strings.Contains(b.Out.String(), "resuming from stored position") {
		t.Fatalf("b's log lacks the takeover / resume lines:\n%s", b.Out.String())
	}
	writeRows(t, f.db, 50)
	mustVerify(t, f)

	a = startProc(t, "a", cfgA, f.dir)
	harness.WaitFor(t, 30*time.Second, "a standby", func() bool { a.MustBeRunning(t); return strings.Contains(a.Out.String(), "standby:") })
	if code := a.Term(); code != 0 {
		t.Fatalf("SIGTERM to a standby: exit %d", code)
	}
	if code := b.Term(); code != 0 {
		t.Fatalf("SIGTERM to the active instance: exit %d\n%s", code, harness.Tail(b.Out.String(), 30))
	}
}

func TestPostgresHotStandby(t *testing.T) {
	f := newPostgresFixture(t)
	hotStandby(t, f, "active_pid=")
}

func TestMariaDBHotStandby(t *testing.T) {
	f := newMariaDBFixture(t)
	hotStandby(t, f, "lock=outboxd:4343:app.outbox")
}

// TestApachePostgresHotStandby and TestApacheMariaDBHotStandby are the hot-standby tests on a
// single Apache Kafka node.
func TestApachePostgresHotStandby(t *testing.T) {
	k := testenv.NewApacheKafka(t, testenv.ApacheOpts{})
	hotStandby(t, newPostgresFixtureOn(t, []string{k.Addr()}), "active_pid=")
}

func TestApacheMariaDBHotStandby(t *testing.T) {
	k := testenv.NewApacheKafka(t, testenv.ApacheOpts{})
	hotStandby(t, newMariaDBFixtureOn(t, []string{k.Addr()}), "lock=outboxd:4343:app.outbox")
}

// TestSlotMetrics: the active instance exposes the slot's wal_status and retained WAL.
func TestSlotMetrics(t *testing.T) {
	f := newPostgresFixture(t)
	addr := freeAddr(t)
	p := startProc(t, "a", f.config("a", addr, ""), f.dir)
	harness.WaitFor(t, 30*time.Second, "slot metrics", func() bool {
		p.MustBeRunning(t)
		m := harness.Metrics(addr)
		return strings.Contains(m, `outboxd_slot_wal_status{status="reserved"} 1`) && strings.Contains(m, "outboxd_slot_retained_bytes ")
	})
	if code := p.Term(); code != 0 {
		t.Fatalf("SIGTERM: exit %d", code)
	}
}

// TestLostSlotWhileRunningExits1: Kafka stalls, the slot cannot advance, the server removes the
// WAL it needs (max_slot_wal_keep_size): outboxd must stop with exit 1 and say what to do, not
// carry on past the gap.
func TestLostSlotWhileRunningExits1(t *testing.T) {
	f := newPostgresFixture(t, "max_wal_size=32MB", "min_wal_size=32MB", "checkpoint_timeout=1h", "max_slot_wal_keep_size=32MB")
	p := startProc(t, "a", f.config("a", "", ""), f.dir)
	f.waitStreaming(p)
	h := f.broker.Cluster().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.NotEnoughReplicas, Count: -1})
	writeRows(t, f.db, 1) // stalled: the slot cannot be confirmed past it
	c, err := pgx.Connect(context.Background(), f.pg.DSN("app"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	walStatus := func() string {
		var s *string
		c.QueryRow(context.Background(), "SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'outboxd'").Scan(&s)
		if s == nil {
			return ""
		}
		return *s
	}
	for i := 0; i < 200 && walStatus() != "lost"; i++ { // up to ~130 MB of WAL
		if _, err := c.Exec(context.Background(), `INSERT INTO busy (note) SELECT repeat('x', 500) FROM generate_series(1, 1000)`); err != nil {
			t.Fatal(err)
		}
		if i%20 == 19 {
			c.Exec(context.Background(), "CHECKPOINT")
		}
	}
	harness.WaitFor(t, 30*time.Second, "slot lost", func() bool { c.Exec(context.Background(), "CHECKPOINT"); return walStatus() == "lost" })
	h.Remove()
	select {
	case <-p.Done:
	case <-time.After(90 * time.Second):
		t.Fatalf("outboxd still runs 90s after its slot was lost:\n%s", harness.Tail(p.Out.String(), 40))
	}
	out := p.Out.String()
	t.Logf("exit %d; last lines:\n%s", p.Code, harness.Tail(out, 6))
	if p.Code != 1 || !strings.Contains(out, "lost") || !strings.Contains(out, "pg_drop_replication_slot") || !strings.Contains(out, "outboxd offsets set") {
		t.Fatalf("exit %d, want 1 with a message saying the slot is lost and what to do:\n%s", p.Code, harness.Tail(out, 40))
	}
}
