package e2e

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
)

// TestTablelessOutboxNoTable: the tableless outbox with source.tables absent — `outboxd check`
// is all OK with no outbox table line (the publication line says only messages are streamed),
// events are delivered in commit order, the slot keeps advancing while nothing is written
// (heartbeats), a SIGKILL and restart resumes from the stored position (nothing missing),
// `outboxd republish` exits 2 (no table to republish from), and without
// source.postgres.messages the same config is refused naming source.tables (exit 2).
func TestTablelessOutboxNoTable(t *testing.T) {
	e := newEnv(t, messagesYAML)
	e.editConfig("  tables: [public.outbox]\n", "")
	run := func(args ...string) (string, int) {
		cmd := exec.Command(binPath, append(args, "-c", e.cfgPath)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		code := 0
		if x, ok := err.(*exec.ExitError); ok {
			code = x.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), code
	}
	// Without source.postgres.messages, no table is a config error naming source.tables.
	if out, code := run("check"); code != 2 || !strings.Contains(out, "source.tables") || !strings.Contains(out, "source.postgres.messages") {
		t.Fatalf("check without tables and messages: exit %d (want 2)\n%s", code, out)
	}
	e.enableMessages()
	e.editConfig("    status_interval: 1s\n", "    status_interval: 1s\n    heartbeat_interval: 300ms\n")
	out, code := run("check")
	if code != 0 || strings.Contains(out, "FAIL") || strings.Contains(out, "table public.") ||
		!strings.Contains(out, "OK   outbox messages outboxd.event") || !strings.Contains(out, "source.tables is empty") {
		t.Fatalf("outboxd check with no table: exit %d\n%s", code, out)
	}
	if out, code := run("republish"); code != 2 || !strings.Contains(out, "source.tables") || !strings.Contains(out, "no table to republish from") {
		t.Errorf("republish with no table: exit %d (want 2)\n%s", code, out)
	}

	p := e.start()
	c := e.conn()
	ctx := context.Background()
	var n int
	if err := c.QueryRow(ctx, `SELECT count(*) FROM pg_publication_tables WHERE pubname = 'outboxd'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the publication lists %d tables (%v), want none", n, err)
	}
	var want []string
	for i := 0; i < 20; i++ {
		want = append(want, emitEvent(t, c, "K", i))
	}
	tx, _ := c.Begin(ctx) // rolled back: never published
	tx.Exec(ctx, `SELECT pg_logical_emit_message(true, 'outboxd.event', '{"id":"rolled-back","aggregatetype":"order","aggregateid":"K","payload":{}}')`)
	tx.Rollback(ctx)
	end := e.walLSN(c)
	e.waitStored(end, 30*time.Second)
	got := testenv.ConsumeAll(t, e.broker.Addr(), `outbox\.event\..*`)
	if strings.Join(ids(got), ",") != strings.Join(want, ",") {
		t.Fatalf("delivered %v\nwant      %v\noutput:\n%s", ids(got), want, p.Out.String())
	}

	// Idle: nothing is written; the heartbeats' idle progress moves the slot past the last event.
	harness.WaitFor(t, 20*time.Second, "confirmed_flush_lsn past "+end+" while idle", func() bool {
		var past bool
		c.QueryRow(ctx, `SELECT confirmed_flush_lsn > $1::pg_lsn FROM pg_replication_slots WHERE slot_name = 'outboxd'`, end).Scan(&past)
		return past
	})
	// SIGKILL (the stored position is past every event: the slot moved past them while idle),
	// events emitted while it is down, restart from the stored position: none twice, none
	// missing, in order.
	p.Stop(t, syscall.SIGKILL)
	for i := 20; i < 30; i++ {
		want = append(want, emitEvent(t, c, "K", i))
	}
	p = e.start()
	e.waitStored(e.walLSN(c), 30*time.Second)
	got = testenv.ConsumeAll(t, e.broker.Addr(), `outbox\.event\..*`)
	if strings.Join(ids(got), ",") != strings.Join(want, ",") {
		t.Fatalf("after SIGKILL and restart delivered %v\nwant %v\noutput:\n%s", ids(got), want, p.Out.String())
	}
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d:\n%s", code, p.Out.String())
	}
}
