package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
	"github.com/outboxd/outboxd/sink"
)

// TestMariaDBStopOnPermanentError: kafka.on_permanent_error: stop on MariaDB with a row the
// transform refuses (an aggregatetype that makes an invalid topic name: invalid_topic; the
// table's columns are NOT NULL, so missing_column cannot be written). outboxd exits 1 naming it; nothing after
// it is produced (the refusal is known before anything later is sent), nothing is dead-lettered,
// the stored position is the one the error names and the rows before it are delivered. Switched
// to dlq, the restart resumes at the bad transaction: the row is dead-lettered then (so the stored
// position was before it) and the rest is delivered.
func TestMariaDBStopOnPermanentError(t *testing.T) {
	e := newMySQLEnv(t)
	b, err := os.ReadFile(e.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, e.cfgPath, strings.Replace(string(b), "kafka:\n", "kafka:\n  on_permanent_error: stop\n", 1))
	p := e.start()

	id := func(k int) string { return fmt.Sprintf("%08x-0000-4000-8000-%012x", k*7919, k) }
	insert := func(k int, aggType string) string {
		return fmt.Sprintf(`INSERT INTO app.outbox (id, aggregatetype, aggregateid, type, payload)
			VALUES (UNHEX(REPLACE('%s', '-', '')), '%s', 'K', 'created', '{"n": %d}')`, id(k), aggType, k)
	}
	exec := func(stmts ...string) {
		if err := e.db.Exec(context.Background(), "app", stmts...); err != nil {
			t.Fatal(err)
		}
	}
	exec("BEGIN", insert(1, "order"), insert(2, "order"), "COMMIT")
	exec("BEGIN", insert(3, "order"), insert(4, "bad topic!"), insert(5, "order"), "COMMIT")
	exec("BEGIN", insert(6, "order"), "COMMIT")
	before, bad, later := []string{id(1), id(2)}, id(4), []string{id(5), id(6)}

	if code := p.WaitExit(t, 60*time.Second, "the row routed to an invalid topic"); code != 1 {
		t.Fatalf("exit %d, want 1; output:\n%s", code, p.Out.String())
	}
	out := p.Out.String()
	var off struct{ Position string }
	if b, err := os.ReadFile(e.offsets); err == nil {
		json.Unmarshal(b, &off)
	}
	for _, want := range []string{"kafka.on_permanent_error: stop", "event id " + bad, "table app.outbox", "reason invalid_topic",
		"stored position " + off.Position + " ", "outboxd offsets set"} {
		if !strings.Contains(out, want) {
			t.Errorf("the error lacks %q; output:\n%s", want, out)
		}
	}
	if off.Position == "" {
		t.Fatalf("no stored position after the rows before the bad one")
	}
	if dlq := testenv.ConsumeAll(t, e.broker.Addr(), `outboxd\.dlq`); len(dlq) != 0 {
		t.Fatalf("%d records in the DLQ topic under stop", len(dlq))
	}
	got := testenv.ConsumeAll(t, e.broker.Addr(), eventsPattern)
	if missing := hasAll(got, before); len(missing) != 0 {
		t.Fatalf("rows before the bad one not delivered: %v", missing)
	}
	for _, r := range got {
		if x := r.Header("id"); x == bad || slices.Contains(later, x) {
			t.Fatalf("record %s (the refused row or one after it) was produced under stop", x)
		}
	}

	// The way past it: dead-letter it. The restart resumes at its transaction.
	b, _ = os.ReadFile(e.cfgPath)
	writeFile(t, e.cfgPath, strings.Replace(string(b), "on_permanent_error: stop", "on_permanent_error: dlq", 1))
	p2 := e.start()
	harness.WaitFor(t, 60*time.Second, "the rest delivered", func() bool {
		return len(hasAll(testenv.ConsumeAll(t, e.broker.Addr(), eventsPattern), append(append([]string{}, before...), later...))) == 0
	})
	dlq := testenv.Consume(t, e.broker.Addr(), `outboxd\.dlq`, 1, 30*time.Second)
	if len(dlq) != 1 || dlq[0].Header("id") != bad || dlq[0].Header(sink.HeaderReason) != "invalid_topic" {
		t.Fatalf("dead letters after the switch to dlq: %v", dlq)
	}
	if !strings.Contains(p2.Out.String(), off.Position) {
		t.Errorf("the restart did not resume from %s:\n%s", off.Position, p2.Out.String())
	}
	if code := p2.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("exit %d after SIGTERM; output:\n%s", code, p2.Out.String())
	}
}
