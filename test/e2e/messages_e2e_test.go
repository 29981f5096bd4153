package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
)

// The tableless outbox (source.postgres.messages) through the real binary: events emitted with
// pg_logical_emit_message in business transactions reach Kafka like outbox rows, malformed ones
// are dead-lettered with their raw content, and a SIGKILL while they flow loses none.

const messagesYAML = "outbox:\n  headers:\n    type: eventType\n"

// enableMessages turns source.postgres.messages on in e's config.
func (e *env) enableMessages() {
	e.editConfig("    status_interval: 1s\n", "    status_interval: 1s\n    messages:\n      prefix: outboxd.event\n")
}

// emitEvent commits a business INSERT and one outbox event message, as a writer would, and
// returns the event id.
func emitEvent(t *testing.T, c *pgx.Conn, key string, i int) string {
	t.Helper()
	id := uuid.NewString()
	ctx := context.Background()
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO public.orders (note) VALUES ($1)`, fmt.Sprintf("order %d", i)); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_logical_emit_message(true, 'outboxd.event', json_build_object(
			'id', $1::text, 'aggregatetype', 'order', 'aggregateid', $2::text, 'type', 'created',
			'payload', json_build_object('i', $3::int))::text)`, id, key, i); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestTablelessOutbox: messages in order with the business transaction's commit, rolled-back
// ones absent, malformed ones in the DLQ (invalid_message, the raw content as the value, read
// back with kcat too), the outbox table untouched, `outboxd check` reporting the privilege.
func TestTablelessOutbox(t *testing.T) {
	e := newEnv(t, messagesYAML)
	e.enableMessages()
	out, err := exec.Command(binPath, "check", "-c", e.cfgPath).CombinedOutput()
	if !strings.Contains(string(out), "OK   messages outboxd.event") ||
		!strings.Contains(string(out), "OK   outbox messages outboxd.event (JSON object members id, aggregateid, payload, aggregatetype, type;") {
		t.Errorf("outboxd check (%v) has no OK messages line:\n%s", err, out)
	}
	p := e.start()
	c := e.conn()
	ctx := context.Background()

	var want []string
	for i := 0; i < 10; i++ {
		want = append(want, emitEvent(t, c, "K", i))
	}
	// Rolled back: never published.
	tx, _ := c.Begin(ctx)
	tx.Exec(ctx, `SELECT pg_logical_emit_message(true, 'outboxd.event', '{"id":"rolled-back","aggregatetype":"order","aggregateid":"K","payload":{}}')`)
	tx.Rollback(ctx)
	// Malformed: not JSON, and an object without an id.
	bad := []string{`{"id": "x", "aggregatetype": "order"`, `{"aggregatetype":"order","aggregateid":"K","payload":{"n":1}}`}
	for _, b := range bad {
		if _, err := c.Exec(ctx, `SELECT pg_logical_emit_message(true, 'outboxd.event', $1)`, b); err != nil {
			t.Fatal(err)
		}
	}
	// Non-transactional: ignored.
	c.Exec(ctx, `SELECT pg_logical_emit_message(false, 'outboxd.event', '{"id":"nontx","aggregatetype":"order","aggregateid":"K","payload":{}}')`)
	for i := 10; i < 15; i++ {
		want = append(want, emitEvent(t, c, "K", i))
	}
	e.waitStored(e.walLSN(c), 30*time.Second)

	got := testenv.ConsumeAll(t, e.broker.Addr(), `outbox\.event\..*`)
	if strings.Join(ids(got), ",") != strings.Join(want, ",") {
		t.Fatalf("delivered %v\nwant      %v\noutput:\n%s", ids(got), want, p.Out.String())
	}
	for i, r := range got {
		if r.Topic != "outbox.event.order" || string(r.Key) != "K" || string(r.Value) != fmt.Sprintf(`{"i" : %d}`, i) || r.Header("eventType") != "created" {
			t.Errorf("record %d: topic %s key %s value %s headers %v", i, r.Topic, r.Key, r.Value, r.Headers)
		}
	}
	dlq := testenv.Consume(t, e.broker.Addr(), `outboxd\.dlq`, len(bad), 20*time.Second)
	if len(dlq) != len(bad) {
		t.Fatalf("%d dead letters, want %d", len(dlq), len(bad))
	}
	seen := map[string]bool{}
	for i, d := range dlq { // the DLQ's partitions follow the keys: compare as a set
		seen[string(d.Value)] = true
		if d.Header("outboxd.error.reason") != "invalid_message" || d.Header("outboxd.error.reason") != "invalid_message" || d.Header("outboxd.error.stage") != "transform" ||
			d.Header("outboxd.source.table") != "pg_logical_emit_message:outboxd.event" || d.Header("outboxd.source.position") == "" {
			t.Errorf("dead letter %d: value %q headers %v", i, d.Value, d.Headers)
		}
	}
	if !seen[bad[0]] || !seen[bad[1]] {
		t.Errorf("dead-letter values %v, want the raw contents %q", seen, bad)
	}
	for _, d := range dlq {
		if string(d.Value) == bad[1] && !strings.Contains(d.Header("outboxd.error.message"), `has no member "id"`) {
			t.Errorf("missing id: message %q", d.Header("outboxd.error.message"))
		}
	}
	var rows int
	c.QueryRow(ctx, `SELECT count(*) FROM public.outbox`).Scan(&rows)
	if rows != 0 {
		t.Errorf("%d rows in the outbox table, want none", rows)
	}
	if kc, err := exec.LookPath("kcat"); err == nil {
		out, err := exec.Command(kc, "-C", "-b", e.broker.Addr(), "-t", "outboxd.dlq", "-o", "beginning", "-e", "-q", "-f", "%s\n").CombinedOutput()
		if err != nil {
			t.Fatalf("kcat: %v\n%s", err, out)
		}
		if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); len(lines) != 2 || !seen[lines[0]] || !seen[lines[1]] || lines[0] == lines[1] {
			t.Errorf("kcat reads the DLQ as %q", out)
		}
	} else if testenv.InCI() {
		t.Fatalf("kcat not installed (the README's test command installs it)")
	}
	// dlq replay parses a message's dead letter again: still malformed, refused with the fix.
	stdout, _, _ := e.dlqRun("replay", "--all")
	if !strings.Contains(stdout, "emit the event again") || !strings.Contains(stdout, "0 replayed") {
		t.Errorf("dlq replay --all:\n%s", stdout)
	}
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
}

// TestTablelessOutboxSIGKILL: messages emitted by a steady writer; outboxd is killed with
// SIGKILL while they flow and restarted; every event is delivered at least once, none missing.
func TestTablelessOutboxSIGKILL(t *testing.T) {
	e := newEnv(t, messagesYAML)
	e.enableMessages()
	c := e.conn()
	p := e.start()
	stop := make(chan struct{})
	writerDone := make(chan []string)
	var written atomic.Int64
	go func() {
		wc := e.conn()
		var w []string
		for i := 0; ; i++ {
			select {
			case <-stop:
				writerDone <- w
				return
			default:
			}
			w = append(w, emitEvent(t, wc, fmt.Sprintf("k%d", i%5), i))
			written.Add(1)
			harness.Hold(2*time.Millisecond, "paces the writer")
		}
	}()
	e.waitFlowing(30, 30*time.Second)
	p.Stop(t, syscall.SIGKILL)
	down := written.Load()
	harness.WaitFor(t, 30*time.Second, "20 events emitted while outboxd is dead", func() bool { return written.Load() >= down+20 })
	p = e.start()
	e.waitFlowing(30, 30*time.Second)
	close(stop)
	want := <-writerDone
	e.waitStored(e.walLSN(c), 60*time.Second)
	got := testenv.ConsumeAll(t, e.broker.Addr(), `outbox\.event\..*`)
	if missing := hasAll(got, want); len(missing) > 0 {
		t.Fatalf("%d of %d events missing after SIGKILL, e.g. %v", len(missing), len(want), missing[:min(3, len(missing))])
	}
	n, dups := countDistinct(got)
	t.Logf("after SIGKILL: %d events emitted, %d records, %d distinct, %d duplicates (at_least_once)", len(want), len(got), n, dups)
	if n != len(want) {
		t.Fatalf("%d distinct ids delivered, want %d", n, len(want))
	}
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
}
