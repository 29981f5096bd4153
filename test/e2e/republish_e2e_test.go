package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
)

// Tests of `outboxd republish` against the real binary, a private PostgreSQL / MariaDB and the
// test's broker: the republished records are the ones `outboxd run` delivered for the same rows
// (ids, keys, values, headers, partitions, per-partition order); --since/--until/--where
// select; --dry-run produces nothing; a poison row is dead-lettered again; it runs beside
// `outboxd run` without touching its stored position or slot; bad flags exit 2 naming them.

// pgRepublishRow is one outbox row with its created_at (the selection's time column).
type pgRepublishRow struct {
	agg     *string
	key     string
	created string
}

func insertCreated(t *testing.T, c *pgx.Conn, rows []pgRepublishRow) []string {
	t.Helper()
	ctx := context.Background()
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i, r := range rows {
		var id string
		if err := tx.QueryRow(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, created_at)
			VALUES (gen_random_uuid(), $1::text, $2, 'created', jsonb_build_object('i', $3::int, 'k', $2::text), $4::timestamptz) RETURNING id::text`,
			r.agg, r.key, i, r.created).Scan(&id); err != nil {
			t.Fatal(err)
		}
		out = append(out, id)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRepublishPostgres(t *testing.T) {
	e := newEnv(t, "outbox:\n  headers:\n    type: eventType\n")
	p := e.start()
	c := e.conn()
	rows := func(n int, agg *string, key, created string) []pgRepublishRow {
		var rs []pgRepublishRow
		for range n {
			rs = append(rs, pgRepublishRow{agg, key, created})
		}
		return rs
	}
	jan1 := insertCreated(t, c, rows(4, sp("order"), "kA", "2026-01-01T10:00:00Z"))
	jan2 := insertCreated(t, c, rows(3, sp("customer"), "kB", "2026-01-02T10:00:00Z"))
	poison := insertCreated(t, c, rows(1, nil, "kP", "2026-01-02T12:00:00Z"))[0] // NULL aggregatetype: missing_column
	jan3 := insertCreated(t, c, rows(2, sp("order"), "kC", "2026-01-03T10:00:00Z"))
	good := slices.Concat(jan1, jan2, jan3)
	e.waitStored(e.walLSN(c), 30*time.Second)
	streamed := testenv.ConsumeAll(t, e.broker.Addr(), `outbox\.event\..*`)
	if len(streamed) != len(good) {
		t.Fatalf("the stream delivered %d records, want %d", len(streamed), len(good))
	}
	dlqBefore := testenv.Consume(t, e.broker.Addr(), `outboxd\.dlq`, 1, 20*time.Second)

	// Beside the running outboxd run: everything republished, the poison row dead-lettered.
	var slotPID int
	slotPIDNow := func() int {
		var pid int
		c.QueryRow(context.Background(), "SELECT coalesce(active_pid, 0) FROM pg_replication_slots WHERE slot_name = 'outboxd'").Scan(&pid)
		return pid
	}
	slotPID = slotPIDNow()
	storedBefore := e.storedPosition()
	stdout, stderr, code := republishRun(t, e.cfgPath)
	if code != 0 || !strings.Contains(stdout, "republished 10 rows of public.outbox (10 selected): 9 delivered, 1 dead-lettered to outboxd.dlq (missing_column 1; see outboxd dlq tail)") {
		t.Fatalf("republish: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "outbox.event.order") || !strings.Contains(stdout, "outbox.event.customer") ||
		!strings.Contains(stderr, "republish: 10/10 rows (100.0%)") || !strings.Contains(stderr, "dead-lettering record") {
		t.Errorf("republish output:\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
	}
	all := testenv.ConsumeAll(t, e.broker.Addr(), `outbox\.event\..*`)
	checkRepublished(t, all, good)
	dlq := testenv.Consume(t, e.broker.Addr(), `outboxd\.dlq`, 2, 20*time.Second)
	slices.SortFunc(dlq, func(a, b testenv.Consumed) int { // the stream's dead letter first
		return strings.Compare(a.Header("outboxd.source.position"), b.Header("outboxd.source.position"))
	})
	if len(dlq) != 2 || dlq[1].Header("id") != poison || dlq[1].Header("outboxd.error.reason") != "missing_column" ||
		dlq[1].Header("outboxd.source.position") != "republish:10" || dlq[0].Header("outboxd.source.position") != dlqBefore[0].Header("outboxd.source.position") ||
		!bytes.Equal(dlq[0].Value, dlq[1].Value) {
		t.Fatalf("dead letters %v (before the republish: %v), want the poison row %s again", dlq, dlqBefore, poison)
	}
	// outboxd run was not disturbed: same walsender on the slot, its stored position still its
	// own (an LSN, not moved back), and a new row goes out once.
	p.MustBeRunning(t)
	if pid := slotPIDNow(); pid != slotPID || pid == 0 {
		t.Fatalf("slot active pid %d, was %d", pid, slotPID)
	}
	if s := e.storedPosition(); lsn(t, s) < lsn(t, storedBefore) || strings.HasPrefix(s, "republish") {
		t.Fatalf("stored position %q after the republish, was %q", s, storedBefore)
	}
	late := e.insertTx(c, goodRow(99))[0]
	e.waitStored(e.walLSN(c), 30*time.Second)
	var n int
	for _, r := range testenv.ConsumeAll(t, e.broker.Addr(), `outbox\.event\..*`) {
		if r.Header("id") == late {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("a row written after the republish was delivered %d times by outboxd run, want once", n)
	}
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("outboxd run exited %d:\n%s", code, p.Out.String())
	}

	// With outboxd run stopped, nothing else writes the offsets file: republish never does.
	offsetsBefore, err := os.ReadFile(e.offsets)
	if err != nil {
		t.Fatal(err)
	}
	before := testenv.ConsumeAll(t, e.broker.Addr(), `outbox\.event\..*`)

	// --dry-run: counts and routes, produces nothing.
	stdout, stderr, code = republishRun(t, e.cfgPath, "--dry-run", "--since", "2026-01-02", "--until", "2026-01-03", "--time-column", "created_at")
	if code != 0 || !strings.Contains(stdout, "dry run: 4 rows of public.outbox (4 selected), nothing produced: 3 would be delivered, 1 dead-lettered (missing_column 1)") ||
		!regexpMatch(`outbox\.event\.customer +3 rows +1 keys`, stdout) {
		t.Fatalf("dry run: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if got := testenv.ConsumeAll(t, e.broker.Addr(), `outbox\.event\..*|outboxd\.dlq`); len(got) != len(before)+2 { // + the 2 dead letters
		t.Fatalf("the dry run produced: %d records, want %d", len(got), len(before)+2)
	}

	// Selection: --since/--until on an explicit time column (RFC 3339), --where, --table.
	for _, sel := range []struct {
		args []string
		want []string
	}{
		{[]string{"--since", "2026-01-03T00:00:00Z", "--until", "2026-01-04T00:00:00+00:00", "--time-column", "created_at"}, jan3},
		{[]string{"--where", "aggregatetype = 'customer'", "--table", "public.outbox"}, jan2},
		{[]string{"--until", "2026-01-02", "--time-column", "created_at", "--batch", "3"}, jan1},
	} {
		stdout, stderr, code := republishRun(t, e.cfgPath, sel.args...)
		if code != 0 {
			t.Fatalf("republish %v: exit %d\n%s\n%s", sel.args, code, stdout, stderr)
		}
		after := testenv.ConsumeAll(t, e.broker.Addr(), `outbox\.event\..*`)
		if got := sortedIDs(newRecords(before, after)); !slices.Equal(got, slices.Sorted(slices.Values(sel.want))) {
			t.Fatalf("republish %v produced %v, want %v\n%s", sel.args, got, sel.want, stdout)
		}
		before = after
	}
	if b, _ := os.ReadFile(e.offsets); !bytes.Equal(b, offsetsBefore) {
		t.Fatalf("the offsets file changed under republish:\n%s\nwas\n%s", b, offsetsBefore)
	}

	// Bad flags: exit 2, naming the flag; bad --where SQL: exit 1 with the server's error.
	for _, bad := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--since", "yesterday"}, `invalid value "yesterday" for flag -since`},
		{[]string{"--since", "2026-01-01"}, "--since: needs --time-column"},
		{[]string{"--until", "2026-01-01", "--since", "2026-01-02", "--time-column", "created_at"}, "--until: "},
		{[]string{"--table", "public.nope"}, `--table: "public.nope" is not one of source.tables`},
		{[]string{"--batch", "0"}, "--batch: 0"},
		{[]string{"--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"extra"}, "need -c FILE and no other arguments"},
	} {
		stdout, stderr, code := republishRun(t, e.cfgPath, bad.args...)
		if code != 2 || !strings.Contains(stderr, bad.msg) {
			t.Errorf("republish %v: exit %d, want 2 with %q\nstdout:\n%s\nstderr:\n%s", bad.args, code, bad.msg, stdout, stderr)
		}
	}
	if stdout, stderr, code := republishRun(t, e.cfgPath, "--where", "no_such_column = 1"); code != 1 ||
		!strings.Contains(stderr, "no_such_column") || !strings.Contains(stderr, "check --where") {
		t.Errorf("bad --where: exit %d, want 1 naming the column and --where\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if got := testenv.ConsumeAll(t, e.broker.Addr(), `outbox\.event\..*`); len(got) != len(before) {
		t.Fatalf("a refused republish produced %d records", len(got)-len(before))
	}

	// kafka.on_permanent_error: stop: the poison row ends the republish (exit 1) naming it, and it
	// is not dead-lettered.
	e.editConfig("kafka:\n", "kafka:\n  on_permanent_error: stop\n")
	stdout, stderr, code = republishRun(t, e.cfgPath)
	if code != 1 || !strings.Contains(stderr, "kafka.on_permanent_error: stop: a row of public.outbox event id "+poison+" cannot be delivered (transform stage, reason missing_column)") ||
		!strings.HasPrefix(stdout, "republish stopped: ") {
		t.Fatalf("republish with on_permanent_error stop: exit %d, want 1 naming %s\nstdout:\n%s\nstderr:\n%s", code, poison, stdout, stderr)
	}
	if got := testenv.ConsumeAll(t, e.broker.Addr(), `outboxd\.dlq`); len(got) != 2 {
		t.Fatalf("%d dead letters after the stop, want the 2 from before", len(got))
	}
	e.editConfig("kafka:\n  on_permanent_error: stop\n", "kafka:\n")

	// On a terminal (script(1) gives the command a pty) the progress is a bar redrawn in place.
	scriptBin, err := exec.LookPath("script")
	if err != nil {
		t.Skipf("script(1) (util-linux) is not installed: the terminal progress bar is not checked: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tty, err := exec.CommandContext(ctx, scriptBin, "-q", "-e", "-c", binPath+" republish --dry-run -c "+e.cfgPath, "/dev/null").CombinedOutput()
	if err != nil || !strings.Contains(string(tty), "\r[##############################] 11/11 rows (100.0%)") || !strings.Contains(string(tty), "\x1b[K") ||
		strings.Contains(string(tty), "republish: 11/11 rows") {
		t.Fatalf("republish on a terminal (%v): want the bar, not progress lines:\n%q", err, tty)
	}
}

// TestRepublishMariaDB: the MySQL adapter's scan through the same pipeline: the records are the
// binlog stream's (BINARY(16) ids, JSON payloads), in primary-key order; --where and a dry run.
func TestRepublishMariaDB(t *testing.T) {
	e := newMySQLEnv(t)
	p := e.start()
	txs := makeEvents(6) // 12 rows
	e.write(txs)
	var want []string
	for _, tx := range txs {
		for _, ev := range tx {
			want = append(want, ev.id)
		}
	}
	streamed := testenv.Consume(t, e.broker.Addr(), `outbox\.event\..*`, len(want), 30*time.Second)
	if len(streamed) != len(want) {
		t.Fatalf("the stream delivered %d records, want %d", len(streamed), len(want))
	}
	harness.WaitFor(t, 10*time.Second, "a stored position", func() bool { b, _ := os.ReadFile(e.offsets); return len(b) > 0 })
	stdout, stderr, code := republishRun(t, e.cfgPath)
	if code != 0 || !strings.Contains(stdout, "republished 12 rows of app.outbox (12 selected): 12 delivered, 0 dead-lettered") {
		t.Fatalf("republish: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	all := testenv.ConsumeAll(t, e.broker.Addr(), `outbox\.event\..*`)
	streamIDs := ids(streamed) // the id header as the stream renders a BINARY(16) id
	checkRepublished(t, all, streamIDs)
	p.MustBeRunning(t)

	stdout, stderr, code = republishRun(t, e.cfgPath, "--dry-run", "--where", "aggregatetype = 'customer'",
		"--since", "2000-01-01", "--time-column", "created_at")
	if code != 0 || !strings.Contains(stdout, "dry run: 3 rows of app.outbox (3 selected), nothing produced: 3 would be delivered, 0 dead-lettered") ||
		!regexpMatch(`outbox\.event\.customer +3 rows +3 keys`, stdout) {
		t.Fatalf("dry run: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if got := testenv.ConsumeAll(t, e.broker.Addr(), `outbox\.event\..*`); len(got) != len(all) {
		t.Fatalf("the dry run produced %d records", len(got)-len(all))
	}
}
