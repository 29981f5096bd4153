package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
	"github.com/outboxd/outboxd/sink/kafka"
)

// End-to-end tests of kafka.delivery exactly_once (and of offsets.store kafka with
// at_least_once): the real binary, a private PostgreSQL, the kfake broker over TCP, and a
// read_committed consumer as the judge.

// TestEOSDeliversOnceAndResumes: every row once for a read_committed consumer, per-key order,
// the position in offsets.topic, the slot confirmed no further than it, and a SIGTERM restart
// that resumes from the committed position; kcat (librdkafka, read_committed) sees every row
// exactly once too.
func TestEOSDeliversOnceAndResumes(t *testing.T) {
	e := newEOSEnv(t)
	want := testEOSDeliversOnceAndResumes(t, e)
	sameSet(t, "kcat read_committed of outbox.event.order", kcatIDs(t, e.broker.Addr(), "outbox.event.order"), want)
}

// testEOSDeliversOnceAndResumes runs TestEOSDeliversOnceAndResumes on e and returns the ids written.
func testEOSDeliversOnceAndResumes(t *testing.T, e *env) []string {
	c := e.conn()
	p := e.startWith(true)
	var want []string
	for i := 0; i < 60; i++ {
		want = append(want, e.insert(c, fmt.Sprintf("K%d", i%4), 1+i%3)...)
	}
	e.expectExactlyOnce(want, 30*time.Second)
	// Per-key order follows commit order.
	got := testenv.ConsumeAll(t, e.broker.Addr(), eventsPattern)
	pos := map[string]int{}
	for i, id := range want {
		pos[id] = i
	}
	last := map[string]int{}
	for _, r := range got {
		k := string(r.Key)
		if prev, ok := last[k]; ok && pos[r.Header("id")] < prev {
			t.Fatalf("key %s out of order", k)
		}
		last[k] = pos[r.Header("id")]
	}
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
	committed := e.committedPosition()
	if committed == "" {
		t.Fatal("no position in offsets.topic after a clean stop")
	}
	if conf := e.slotConfirmedLSN(c); lsn(t, conf) > lsn(t, committed) {
		t.Fatalf("slot confirmed %s past the committed position %s", conf, committed)
	}
	if !strings.Contains(p.Out.String(), `transactional_id=outboxd-postgres:outboxd`) {
		t.Errorf("the default transactional id is not logged:\n%s", p.Out.String())
	}
	for i := 0; i < 20; i++ { // written while outboxd is down
		want = append(want, e.insert(c, fmt.Sprintf("K%d", i%4), 1)...)
	}
	p = e.startWith(true)
	if !strings.Contains(p.Out.String(), "resuming from the committed position") || !strings.Contains(p.Out.String(), committed) {
		t.Errorf("restart did not resume from %s:\n%s", committed, p.Out.String())
	}
	e.expectExactlyOnce(want, 30*time.Second)
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
	return want
}

// TestEOSSIGKILLLoop kills outboxd with SIGKILL about every second, five times, under a
// background writer: 0 lost, 0 duplicates.
func TestEOSSIGKILLLoop(t *testing.T) { testEOSSIGKILLLoop(t, newEOSEnv(t)) }

func testEOSSIGKILLLoop(t *testing.T, e *env) {
	p := e.startWith(true)
	w := e.startWriter()
	kills := 0
	for round := 0; round < 5; round++ {
		// Each instance is killed while it delivers the writer's rows (it committed some).
		e.waitFlowing(20+10*round, 60*time.Second)
		p.Stop(t, syscall.SIGKILL)
		kills++
		p = e.startWith(false)
	}
	e.waitFlowing(20, 60*time.Second) // the last instance delivers
	want := w.finish()
	e.expectExactlyOnce(want, 60*time.Second)
	// The kills did hit open transactions: read_uncommitted sees their aborted records.
	raw, aborted := e.uncommittedIDs(), 0
	for _, n := range raw {
		aborted += n - 1
	}
	t.Logf("%d kills, %d events; read_uncommitted sees %d extra copies from aborted transactions", kills, len(want), aborted)
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
}

// TestEOSCrashBetweenProduceCommitAndConfirm stops the process (the test-only crash hook,
// exit 137) with records produced but not committed, then with the Kafka transaction committed
// but the slot not confirmed: 0 lost, 0 duplicates after each restart.
func TestEOSCrashBetweenProduceCommitAndConfirm(t *testing.T) {
	e := newEOSEnv(t)
	c := e.conn()
	var want []string
	for _, point := range []string{"before_commit", "after_commit"} {
		committed := e.visiblePosition()
		confirmed := e.slotConfirmed(c)
		p := e.startWith(true, pipelineCrashEnv(point))
		batch := e.insert(c, "crash", 3)
		want = append(want, batch...)
		if code := p.WaitExit(t, 30*time.Second, "the crash hook"); code != 137 {
			t.Fatalf("%s: exit %d, want 137 from the crash hook", point, code)
		}
		if !strings.Contains(p.Out.String(), "TEST CRASH HOOK: exiting now") {
			t.Fatalf("%s: no crash hook log:\n%s", point, p.Out.String())
		}
		after := e.visiblePosition() // the crashed process may have left a transaction open
		switch point {
		case "before_commit":
			if after != committed {
				t.Fatalf("before_commit: the position moved from %q to %q", committed, after)
			}
			if got := testenv.ConsumeAll(t, e.broker.Addr(), eventsPattern); len(hasAll(got, batch)) != len(batch) {
				t.Fatalf("before_commit: uncommitted records visible to read_committed: %v", ids(got))
			}
			raw := e.uncommittedIDs()
			for _, id := range batch {
				if raw[id] == 0 {
					t.Fatalf("before_commit: record %s was not produced before the crash", id)
				}
			}
		case "after_commit":
			if after == committed || after == "" {
				t.Fatalf("after_commit: the position did not move (%q)", after)
			}
			if conf := e.slotConfirmed(c); lsn(t, conf) >= lsn(t, after) {
				t.Fatalf("after_commit: slot confirmed %s (was %s) although the crash came before the confirm of %s", conf, confirmed, after)
			}
		}
		// More rows while it is down, then a normal restart.
		want = append(want, e.insert(c, "crash", 2)...)
		p = e.startWith(true)
		e.expectExactlyOnce(want, 30*time.Second)
		if code := p.Stop(t, syscall.SIGTERM); code != 0 {
			t.Fatalf("SIGTERM exit %d", code)
		}
	}
}

func pipelineCrashEnv(point string) string { return "OUTBOXD_TEST_CRASH_AT=" + point }

// TestEOSFencing: two outboxd with the same kafka.transactional_id (a second pipeline, on its
// own slot, configured with the first one's transactional id): the one that initialises the id
// last fences the other, which exits 1 saying so and commits nothing more. Restarting the first
// fences the second in turn and delivers everything of its own slot exactly once. (Two
// instances with the same whole configuration do not fence each other: the second waits as a
// hot standby until the first is gone, internal/app/standby.go.)
func TestEOSFencing(t *testing.T) { testEOSFencing(t, newEOSEnv(t)) }

func testEOSFencing(t *testing.T, e *env) {
	e.editConfig("kafka:\n", "kafka:\n  transactional_id: orders-outbox-eos\n")
	b0, err := os.ReadFile(e.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	cfgB := e.cfgPath + ".b.yaml"
	other := strings.Replace(string(b0), "  postgres:\n", "  postgres:\n    slot: outboxd_b\n    publication: outboxd_b\n", 1)
	other = strings.Replace(other, "offsets:\n", "offsets:\n  key: pipeline-b\n", 1)
	other += "outbox:\n  topic: other.${routedByValue}\n"
	writeFile(t, cfgB, other)

	c := e.conn()
	a := e.startWith(true)
	want := e.insert(c, "f", 3)
	e.expectExactlyOnce(want, 30*time.Second)

	b := e.startConfig(cfgB, "outboxd_b", true) // initialises orders-outbox-eos: fences a
	var mu sync.Mutex
	stop := make(chan struct{})
	writerDone := make(chan struct{})
	go func() { // rows keep coming: an instance finds out it is fenced on its next transaction
		defer close(writerDone)
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			ids := e.insert(c, "f", 1)
			mu.Lock()
			want = append(want, ids...)
			mu.Unlock()
		}
	}()
	fencedMsg := func(p *harness.Proc, who string) {
		t.Helper()
		if code := p.WaitExit(t, 20*time.Second, "being fenced"); code != 1 {
			t.Fatalf("%s: fenced instance exit %d, want 1", who, code)
		}
		out := p.Out.String()
		if !strings.Contains(out, `producer fenced: another producer initialised transactional id \"orders-outbox-eos\" (kafka.transactional_id)`) {
			t.Fatalf("%s: fenced instance's message:\n%s", who, out)
		}
		t.Logf("%s exited 1: %s", who, strings.TrimSpace(out[strings.LastIndex(out, "level=ERROR"):]))
	}
	fencedMsg(a, "first instance")
	a = e.startWith(true) // fences b in turn
	fencedMsg(b, "second instance")
	close(stop)
	<-writerDone
	mu.Lock()
	all := append([]string(nil), want...)
	mu.Unlock()
	all = append(all, e.insert(c, "f", 2)...)
	e.expectExactlyOnce(all, 40*time.Second)
	if code := a.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
}

// TestAtLeastOnceKafkaOffsets: offsets.store kafka with at_least_once: the position is stored in
// offsets.topic under offsets.key and a restart resumes from it.
func TestAtLeastOnceKafkaOffsets(t *testing.T) { testAtLeastOnceKafkaOffsets(t, newEnv(t, "")) }

func testAtLeastOnceKafkaOffsets(t *testing.T, e *env) {
	e.editConfig("offsets:\n", "offsets:\n  store: kafka\n  topic: my.offsets\n  key: orders-pipeline\n")
	c := e.conn()
	p := e.startWith(true)
	want := e.insert(c, "a", 5)
	e.expectExactlyOnce(want, 30*time.Second)
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
	s := &kafka.OffsetStore{Kafka: kafka.Config{Brokers: []string{e.broker.Addr()}}, Topic: "my.offsets", Key: "orders-pipeline", Source: "postgres:outboxd"}
	defer s.Close()
	stored, err := s.Load(context.Background())
	if err != nil || stored == "" {
		t.Fatalf("position in my.offsets: %q %v", stored, err)
	}
	if _, err := os.Stat(e.offsets); err == nil {
		t.Fatal("the file store was written too")
	}
	if out, code := runOut(t, "offsets", "show", "-c", e.cfgPath); code != 0 || !strings.Contains(out, "stored position:      "+string(stored)) {
		t.Fatalf("offsets show: exit %d\n%s", code, out)
	}
	want = append(want, e.insert(c, "a", 4)...)
	p = e.startWith(true)
	if !strings.Contains(p.Out.String(), "resuming from stored position") || !strings.Contains(p.Out.String(), string(stored)) {
		t.Fatalf("did not resume from %s:\n%s", stored, p.Out.String())
	}
	e.expectExactlyOnce(want, 30*time.Second) // a clean stop re-delivers nothing
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
}

// TestEOSBrokerOutage stops the broker (its state kept on disk; Apache Kafka: a controlled
// shutdown of the single node) for 20 s under load: outboxd keeps running (aborts, backs off,
// replaces its producer), then delivers everything exactly once.
func TestEOSBrokerOutage(t *testing.T) {
	b := newRestartableBroker(t)
	e := eosEnv(newEnvOn(t, b.b, ""))
	p := e.startWith(true)
	w := e.startWriter()
	e.waitFlowing(20, 30*time.Second) // the broker stops under load
	b.stop()
	harness.Hold(20*time.Second, "the 20 s broker outage under test")
	select {
	case <-p.Done:
		t.Fatalf("outboxd exited with %d during the outage:\n%s", p.Code, p.Out.String())
	default:
	}
	b.start(t)
	e.waitFlowing(20, 60*time.Second) // delivering again, with the writer still writing
	want := w.finish()
	e.expectExactlyOnce(want, 60*time.Second)
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
	out := p.Out.String()
	t.Logf("%d events; %d producer replacements, %d batch retries", len(want),
		strings.Count(out, "replacing the producer")+strings.Count(out, "cannot initialise the transactional producer"),
		strings.Count(out, "producing the batch again"))
}

// TestEOSPostgresRestart crashes PostgreSQL (SIGKILL) and starts it again twice under load:
// outboxd reconnects and resumes from its committed position; every committed row (the
// table is the ground truth: a commit cut off by the crash may or may not have happened)
// arrives exactly once.
func TestEOSPostgresRestart(t *testing.T) {
	e := newEOSEnv(t)
	p := e.startWith(true)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { // a writer that survives the crashes
		defer close(done)
		ctx := context.Background()
		var c *pgx.Conn
		for i := 0; ; i++ {
			select {
			case <-stop:
				if c != nil {
					c.Close(ctx)
				}
				return
			default:
			}
			if c == nil {
				var err error
				if c, err = pgx.Connect(ctx, e.pg.DSN("app")); err != nil {
					c = nil
					harness.Hold(100*time.Millisecond, "the writer's reconnect pace while PostgreSQL is down")
					continue
				}
			}
			_, err := c.Exec(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
				SELECT gen_random_uuid(), 'order', $1, 'created', '{}' FROM generate_series(1, 1 + $2::int % 3)`, fmt.Sprintf("k%d", i%7), i)
			if err != nil {
				c.Close(ctx)
				c = nil
			}
			harness.Hold(3*time.Millisecond, "paces the writer")
		}
	}()
	for i := 0; i < 2; i++ {
		e.waitFlowing(20, 60*time.Second) // the crash hits a running stream
		e.pg.Kill()
		harness.Hold(500*time.Millisecond, "PostgreSQL stays down")
		if err := e.pg.Start(); err != nil {
			t.Fatal(err)
		}
	}
	e.waitFlowing(20, 60*time.Second) // reconnected and delivering the writer's new rows
	close(stop)
	<-done
	select {
	case <-p.Done:
		t.Fatalf("outboxd exited with %d:\n%s", p.Code, p.Out.String())
	default:
	}
	c := e.conn()
	rows, err := c.Query(context.Background(), "SELECT id::text FROM outbox")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for rows.Next() {
		var id string
		rows.Scan(&id)
		want = append(want, id)
	}
	rows.Close()
	e.expectExactlyOnce(want, 60*time.Second)
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
}

// TestEOSStandbyTakeover: two instances with the same configuration; the second waits as a hot
// standby (it must not fence the active one) and takes over when the active one is SIGKILLed
// mid-stream; twice, under load: 0 lost, 0 duplicates.
func TestEOSStandbyTakeover(t *testing.T) {
	e := newEOSEnv(t)
	active := e.startWith(true)
	standby := e.startWith(false)
	harness.WaitFor(t, 20*time.Second, "second instance standing by", func() bool { return strings.Contains(standby.Out.String(), "standby") })
	w := e.startWriter()
	for i := 0; i < 2; i++ {
		e.waitFlowing(20, 60*time.Second) // the active instance delivers under load
		select {
		case <-active.Done:
			t.Fatalf("the active instance exited %d while a standby waited (fenced?):\n%s", active.Code, active.Out.String())
		default:
		}
		active.Stop(t, syscall.SIGKILL)
		harness.WaitFor(t, 30*time.Second, "standby took over", func() bool {
			return strings.Contains(standby.Out.String(), "replication started")
		})
		active, standby = standby, e.startWith(false)
	}
	e.waitFlowing(20, 60*time.Second) // the last takeover delivers
	want := w.finish()
	e.expectExactlyOnce(want, 60*time.Second)
	if code := active.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
}
