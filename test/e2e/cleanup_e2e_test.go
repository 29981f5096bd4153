package e2e

// outbox.cleanup with the outboxd binary: delivered rows are deleted, rows whose records are not
// yet delivered never are (broker stalled: PostgreSQL and MariaDB), the table stays bounded
// under a steady load, the deletes themselves are not published (no extra record, no dead
// letter), and a kill -9 in the middle loses nothing and deletes nothing early.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
)

const cleanupYAML = `outbox:
  cleanup:
    enabled: true
    interval: 200ms
`

// cleanupMetrics makes the config at cfgPath serve /metrics on a free port; it returns a
// reader of outboxd_cleanup_cycles_total (-1 while /metrics does not answer).
func cleanupMetrics(t *testing.T, cfgPath string) func() int {
	t.Helper()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(string(b), `listen: ""`, fmt.Sprintf("listen: 127.0.0.1:%d", port), 1)
	writeFile(t, cfgPath, cfg)
	url := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	re := regexp.MustCompile(`(?m)^outboxd_cleanup_cycles_total ([0-9.e+]+)$`)
	return func() int {
		resp, err := http.Get(url)
		if err != nil {
			return -1
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		m := re.FindSubmatch(body)
		if m == nil {
			return -1
		}
		f, _ := strconv.ParseFloat(string(m[1]), 64)
		return int(f)
	}
}

// waitCycles waits until n more cleanup cycles than now have run, calling check at each poll.
func waitCycles(t *testing.T, cycles func() int, n int, check func()) {
	t.Helper()
	base := -1
	harness.WaitFor(t, 30*time.Second, fmt.Sprintf("%d cleanup cycles", n), func() bool {
		check()
		c := cycles()
		if base < 0 {
			base = c
			return false
		}
		return c >= base+n
	})
	check()
}

// pgCountIDs counts the rows of public.outbox among ids.
func pgCountIDs(t *testing.T, c *pgx.Conn, ids []string) int {
	t.Helper()
	var n int
	if err := c.QueryRow(context.Background(), "SELECT count(*) FROM outbox WHERE id = ANY($1::uuid[])", ids).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func pgCount(t *testing.T, c *pgx.Conn) int {
	t.Helper()
	var n int
	if err := c.QueryRow(context.Background(), "SELECT count(*) FROM outbox").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// exactlyThese fails unless the outbox topics hold records for exactly the ids want (each at
// least once; duplicates of a retried produce allowed) and the DLQ holds none: a DELETE that
// were published would add records.
func exactlyThese(t *testing.T, addr string, want []string) {
	t.Helper()
	recs := testenv.ConsumeAll(t, addr, `outbox\.event\..*`)
	if missing := hasAll(recs, want); len(missing) > 0 {
		t.Fatalf("%d of %d records missing, e.g. %s", len(missing), len(want), missing[0])
	}
	wanted := map[string]bool{}
	for _, id := range want {
		wanted[id] = true
	}
	for _, r := range recs {
		if !wanted[r.Header("id")] {
			t.Fatalf("an extra record in %s: id %q, value %s", r.Topic, r.Header("id"), r.Value)
		}
	}
	if dl := testenv.ConsumeAll(t, addr, `outboxd\.dlq`); len(dl) > 0 {
		t.Fatalf("%d dead letters, e.g. %s", len(dl), dl[0].Value)
	}
}

// TestCleanupPGStalledBrokerDeletesNothingUnacked: delivered rows go; while produce to one topic
// is refused, its rows stay, and so do the rows after them even though their records (another
// topic) are acked: the stored position does not cover them. After the broker accepts again,
// everything is delivered once more and then deleted; nothing else reaches Kafka.
func TestCleanupPGStalledBrokerDeletesNothingUnacked(t *testing.T) {
	e := newEnv(t, cleanupYAML)
	cycles := cleanupMetrics(t, e.cfgPath)
	c := e.conn()
	p := e.start()
	first := e.insert(c, "a", 5)
	harness.WaitFor(t, 30*time.Second, "the first rows delivered and deleted", func() bool { return pgCount(t, c) == 0 })

	h := e.stallProduce("outbox.event.order")
	customer := func() []string {
		return e.insertRows(c, 4, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
		VALUES (gen_random_uuid(), 'customer', 'k', 'created', '{}') RETURNING id::text`, func(int) []any { return nil }, nil)
	}
	// Rows of another topic just before the stalled ones: delivered, their position stored while
	// the stalled transactions are already accepted, so they are deleted during the stall.
	before := customer()
	stalled := e.insert(c, "b", 3)
	for range 5 {
		stalled = append(stalled, e.insert(c, "c", 1)...)
	}
	// Rows of another topic after them: acked by Kafka, not covered by the stored position.
	after := customer()
	kept := append(append([]string(nil), stalled...), after...)
	allKept := func() {
		if n := pgCountIDs(t, c, kept); n != len(kept) {
			t.Fatalf("%d of %d rows not yet covered by the stored position were deleted", len(kept)-n, len(kept))
		}
	}
	harness.WaitFor(t, 30*time.Second, "the stall reached", func() bool { allKept(); return h.reached() })
	if !onApache() { // a frozen Apache node cannot be read
		harness.WaitFor(t, 30*time.Second, "the later topic's records acked", func() bool {
			allKept()
			return len(hasAll(testenv.Consume(t, e.broker.Addr(), `outbox\.event\.customer`, len(after), time.Second), after)) == 0
		})
	}
	if !onApache() { // a frozen Apache node acks nothing
		harness.WaitFor(t, 30*time.Second, "the rows before the stalled ones deleted", func() bool {
			allKept()
			return pgCountIDs(t, c, before) == 0
		})
	}
	waitCycles(t, cycles, 5, allKept)
	h.release()
	all := append(append(append([]string(nil), first...), before...), kept...)
	harness.WaitFor(t, 60*time.Second, "everything delivered and deleted after the stall", func() bool { return pgCount(t, c) == 0 })
	exactlyThese(t, e.broker.Addr(), all)
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
}

// TestCleanupMariaDBStalledBrokerDeletesNothingUnacked is the same on MariaDB (BINARY(16) ids,
// deleted by id IN (…)).
func TestCleanupMariaDBStalledBrokerDeletesNothingUnacked(t *testing.T) {
	kfakeOnly(t, "a kfake fault hook refuses produce to one topic")
	e := newMySQLEnv(t)
	b, err := os.ReadFile(e.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, e.cfgPath, string(b)+cleanupYAML)
	cycles := cleanupMetrics(t, e.cfgPath)
	p := e.start()
	count := func(where string) int {
		rows, err := e.db.Query("", "SELECT COUNT(*) FROM app.outbox"+where)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(rows[0][0])
		return n
	}
	k := 0
	write := func(agg string, n int) []string {
		stmts := []string{"BEGIN"}
		var ids []string
		for range n {
			k++
			id := fmt.Sprintf("%08x-0000-4000-8000-%012x", k, k)
			ids = append(ids, id)
			stmts = append(stmts, fmt.Sprintf(`INSERT INTO app.outbox (id, aggregatetype, aggregateid, type, payload)
				VALUES (UNHEX(REPLACE('%s', '-', '')), '%s', 'K', 'created', '{}')`, id, agg))
		}
		if err := e.db.Exec(context.Background(), "app", append(stmts, "COMMIT")...); err != nil {
			t.Fatal(err)
		}
		return ids
	}
	in := func(ids []string) string {
		var q []string
		for _, id := range ids {
			q = append(q, fmt.Sprintf("UNHEX(REPLACE('%s', '-', ''))", id))
		}
		return " WHERE id IN (" + strings.Join(q, ", ") + ")"
	}
	first := write("order", 5)
	harness.WaitFor(t, 30*time.Second, "the first rows delivered and deleted", func() bool { return count("") == 0 })

	h := e.broker.Cluster().Fault(kfakeNER("outbox.event.order"))
	before := write("customer", 4) // delivered just before: deleted during the stall
	stalled := write("order", 3)
	for range 5 {
		stalled = append(stalled, write("order", 1)...)
	}
	after := write("customer", 4)
	kept := append(append([]string(nil), stalled...), after...)
	allKept := func() {
		if n := count(in(kept)); n != len(kept) {
			t.Fatalf("%d of %d rows not yet covered by the stored position were deleted", len(kept)-n, len(kept))
		}
	}
	harness.WaitFor(t, 30*time.Second, "the stall reached", func() bool { allKept(); return h.Hits() > 0 })
	harness.WaitFor(t, 30*time.Second, "the later topic's records acked", func() bool {
		allKept()
		return len(hasAll(testenv.Consume(t, e.broker.Addr(), `outbox\.event\.customer`, len(after), time.Second), after)) == 0
	})
	harness.WaitFor(t, 30*time.Second, "the rows before the stalled ones deleted", func() bool {
		allKept()
		return count(in(before)) == 0
	})
	waitCycles(t, cycles, 5, allKept)
	h.Remove()
	harness.WaitFor(t, 60*time.Second, "everything delivered and deleted after the stall", func() bool { return count("") == 0 })
	exactlyThese(t, e.broker.Addr(), append(append(append([]string(nil), first...), before...), kept...))
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
}

// pgLoader inserts single-row transactions on its own connection until stopped, keeping the
// committed ids.
type pgLoader struct {
	mu   sync.Mutex
	ids  []string
	stop chan struct{}
	done chan struct{}
	err  error
}

func startPGLoader(t *testing.T, e *env, pause time.Duration) *pgLoader {
	t.Helper()
	c, err := pgx.Connect(context.Background(), e.pg.DSN("app"))
	if err != nil {
		t.Fatal(err)
	}
	l := &pgLoader{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		defer c.Close(context.Background())
		for i := 0; ; i++ {
			select {
			case <-l.stop:
				return
			case <-time.After(pause):
			}
			var id string
			if err := c.QueryRow(context.Background(), `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
				VALUES (gen_random_uuid(), 'order', 'k' || ($1::int % 7), 'created', jsonb_build_object('i', $1::int)) RETURNING id::text`, i).Scan(&id); err != nil {
				l.err = err
				return
			}
			l.mu.Lock()
			l.ids = append(l.ids, id)
			l.mu.Unlock()
		}
	}()
	return l
}

// committed is a copy of the ids committed so far.
func (l *pgLoader) committed() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.ids...)
}

func (l *pgLoader) finish(t *testing.T) []string {
	t.Helper()
	close(l.stop)
	<-l.done
	if l.err != nil {
		t.Fatalf("loader: %v", l.err)
	}
	return l.committed()
}

// deletedOnlyIfDelivered checks the invariant: every committed row missing from the table has
// its record in Kafka. The committed ids are read before the table, and Kafka after it: a row
// deleted by then was deleted after its record was acked. It returns how many were deleted.
func deletedOnlyIfDelivered(t *testing.T, e *env, c *pgx.Conn, l *pgLoader) int {
	t.Helper()
	ids := l.committed()
	if len(ids) == 0 {
		return 0
	}
	present := map[string]bool{}
	rows, err := c.Query(context.Background(), "SELECT id::text FROM outbox")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		rows.Scan(&id)
		present[id] = true
	}
	rows.Close()
	var deleted []string
	for _, id := range ids {
		if !present[id] {
			deleted = append(deleted, id)
		}
	}
	if len(deleted) > 0 {
		if missing := hasAll(testenv.ConsumeAll(t, e.broker.Addr(), `outbox\.event\..*`), deleted); len(missing) > 0 {
			t.Fatalf("%d deleted rows have no record in Kafka, e.g. %s", len(missing), missing[0])
		}
	}
	return len(deleted)
}

// TestCleanupPGTableStaysBoundedUnderLoad: while rows flow steadily, the table never holds
// more than a bound far below the rows written, and at the end it is empty.
func TestCleanupPGTableStaysBoundedUnderLoad(t *testing.T) {
	const n, bound = 2000, 1000
	e := newEnv(t, cleanupYAML)
	c := e.conn()
	e.start()
	l := startPGLoader(t, e, 2*time.Millisecond)
	high := 0
	harness.WaitFor(t, 50*time.Second, fmt.Sprintf("%d rows written", n), func() bool {
		rows := pgCount(t, c)
		high = max(high, rows)
		if rows > bound {
			t.Fatalf("the outbox table holds %d rows (bound %d) after %d written", rows, bound, len(l.committed()))
		}
		return len(l.committed()) >= n
	})
	ids := l.finish(t)
	harness.WaitFor(t, 30*time.Second, "the table empty", func() bool { return pgCount(t, c) == 0 })
	exactlyThese(t, e.broker.Addr(), ids)
	t.Logf("%d rows written; at most %d in the table at a time", len(ids), high)
}

// TestCleanupPGKillMidLoad: kill -9 while rows flow and are being deleted, restart: every row is
// delivered, no row was deleted before its record was in Kafka, and the rows left behind by the
// crash (delivered, their ids lost with the process) are all delivered ones.
func TestCleanupPGKillMidLoad(t *testing.T) {
	e := newEnv(t, cleanupYAML)
	c := e.conn()
	p := e.start()
	l := startPGLoader(t, e, 5*time.Millisecond)
	harness.WaitFor(t, 30*time.Second, "rows deleted under load", func() bool { return deletedOnlyIfDelivered(t, e, c, l) >= 200 })
	p.Stop(t, syscall.SIGKILL)
	beforeKill := len(l.committed())
	deletedOnlyIfDelivered(t, e, c, l)
	p = e.start()
	harness.WaitFor(t, 30*time.Second, "rows deleted after the restart", func() bool {
		return deletedOnlyIfDelivered(t, e, c, l) >= beforeKill+200
	})
	ids := l.finish(t)
	harness.WaitFor(t, 30*time.Second, "every row delivered", func() bool {
		return len(hasAll(testenv.Consume(t, e.broker.Addr(), `outbox\.event\..*`, len(ids), time.Second), ids)) == 0
	})
	deletedOnlyIfDelivered(t, e, c, l)
	exactlyThese(t, e.broker.Addr(), ids)
	// What the kill left: rows delivered before it whose ids were only in its memory. Once the
	// restarted process has deleted what it tracked, only those remain, all delivered.
	harness.WaitFor(t, 30*time.Second, "only the crash's leftovers remain", func() bool {
		var newer int
		c.QueryRow(context.Background(), "SELECT count(*) FROM outbox WHERE id <> ALL($1::uuid[])", l.committed()[:beforeKill]).Scan(&newer)
		return newer == 0
	})
	t.Logf("%d rows written, %d before the kill; %d delivered rows left in the table by the kill", len(ids), beforeKill, pgCount(t, c))
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
}

// TestCleanupPGExactlyOnceCrashMidBatch: with exactly_once, outboxd dies inside an open Kafka
// transaction under load (the crash hook), restarts and redoes it: every row delivered exactly
// once, no row deleted before its record was committed in Kafka (read_committed), and what the
// restarted process read is deleted.
func TestCleanupPGExactlyOnceCrashMidBatch(t *testing.T) {
	e := eosEnv(newEnv(t, cleanupYAML))
	c := e.conn()
	p := e.startWith(true, pipelineCrashEnv("mid_batch:20"))
	l := startPGLoader(t, e, 5*time.Millisecond)
	harness.WaitFor(t, 60*time.Second, "the crash hook", func() bool {
		deletedOnlyIfDelivered(t, e, c, l)
		return p.Exited()
	})
	if !strings.Contains(p.Out.String(), "TEST CRASH HOOK: exiting now") {
		t.Fatalf("no crash hook log:\n%s", p.Out.String())
	}
	beforeCrash := len(l.committed())
	if deletedOnlyIfDelivered(t, e, c, l) == 0 {
		t.Fatal("nothing deleted before the crash")
	}
	p = e.startWith(true)
	harness.WaitFor(t, 60*time.Second, "rows deleted after the restart", func() bool {
		return deletedOnlyIfDelivered(t, e, c, l) >= beforeCrash+100
	})
	ids := l.finish(t)
	e.expectExactlyOnce(ids, 60*time.Second)
	harness.WaitFor(t, 30*time.Second, "only the crash's leftovers remain", func() bool {
		deletedOnlyIfDelivered(t, e, c, l)
		var newer int
		c.QueryRow(context.Background(), "SELECT count(*) FROM outbox WHERE id <> ALL($1::uuid[])", ids[:beforeCrash]).Scan(&newer)
		return newer == 0
	})
	t.Logf("%d rows written, %d before the crash; %d delivered rows left in the table by it", len(ids), beforeCrash, pgCount(t, c))
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
}
