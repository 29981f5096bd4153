package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
)

// binPath is the outboxd binary under test (harness.Build: built once per test process, or
// OUTBOXD_TEST_BIN).
var binPath string

func TestMain(m *testing.M) {
	var cleanup func()
	binPath, cleanup = harness.MustBuild()
	both, err := setKafkaKind()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	code := m.Run()
	testenv.StopSharedApacheKafka()
	if both {
		if c := runOnApacheToo(); c != 0 && code == 0 {
			code = c
		}
	}
	cleanup()
	os.Exit(code)
}

// env is one end-to-end environment: a private PostgreSQL with the outbox table, a broker, and a
// config file for outboxd.
type env struct {
	t       *testing.T
	pg      *testenv.Postgres
	broker  *testenv.Broker
	dir     string
	cfgPath string
	offsets string
}

// The broker is the test's (newTestBroker): kfake, or Apache Kafka with OUTBOXD_TEST_KAFKA=apache.
func newEnv(t *testing.T, extraYAML string) *env {
	t.Helper()
	return newEnvOn(t, newTestBroker(t), extraYAML)
}

// newEnvOn is newEnv on a given broker. For an Apache Kafka node pass &testenv.Broker{Port: k.Port}:
// a handle whose Addr is that broker's; it has no kfake Cluster (no fault hooks) and is never started.
func newEnvOn(t *testing.T, broker *testenv.Broker, extraYAML string) *env {
	t.Helper()
	e := &env{t: t, pg: testenv.NewPostgres(t), broker: broker, dir: t.TempDir()}
	ctx := context.Background()
	if err := e.pg.Exec(ctx, "app", testenv.OutboxDDL, "CREATE TABLE public.orders (id serial PRIMARY KEY, note text)"); err != nil {
		t.Fatal(err)
	}
	e.offsets = filepath.Join(e.dir, "offsets.json")
	e.cfgPath = filepath.Join(e.dir, "outboxd.yaml")
	cfg := fmt.Sprintf(`shutdown_timeout: 20s
source:
  type: postgres
  dsn: %s
  tables: [public.outbox]
  postgres:
    status_interval: 1s
kafka:
  brokers: [%s]
offsets:
  path: %s
  commit_interval: 20ms
http:
  listen: ""
%s`, e.pg.DSN("app"), e.broker.Addr(), e.offsets, extraYAML)
	if err := os.WriteFile(e.cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) start() *harness.Proc {
	e.t.Helper()
	p := startProc(e.t, e.cfgPath)
	// Rows committed before the slot exists are not in its stream: wait for the walsender.
	c := e.conn()
	harness.WaitFor(e.t, 30*time.Second, "replication slot active", func() bool {
		var active bool
		c.QueryRow(context.Background(), "SELECT active FROM pg_replication_slots WHERE slot_name = 'outboxd'").Scan(&active)
		select {
		case <-p.Done:
			e.t.Fatalf("outboxd exited with %d:\n%s", p.Code, p.Out.String())
		default:
		}
		// The log line proves this process (not a dead one's walsender) holds the slot.
		return active && strings.Contains(p.Out.String(), "replication started")
	})
	return p
}

// startProc starts `outboxd run -c cfgPath`; it is killed at the end of the test.
func startProc(t *testing.T, cfgPath string) *harness.Proc {
	t.Helper()
	return startProcEnv(t, cfgPath, nil)
}

// startProcEnv is startProc with extra environment variables.
func startProcEnv(t *testing.T, cfgPath string, extraEnv []string) *harness.Proc {
	t.Helper()
	return harness.Start(t, binPath, []string{"run", "-c", cfgPath}, harness.Options{Env: extraEnv})
}

func (e *env) conn() *pgx.Conn {
	e.t.Helper()
	c, err := pgx.Connect(context.Background(), e.pg.DSN("app"))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// insert commits one transaction with n outbox rows for aggregate agg and returns their ids.
func (e *env) insert(c *pgx.Conn, agg string, n int) []string {
	e.t.Helper()
	return e.insertRows(c, n, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
			VALUES (gen_random_uuid(), 'order', $1, 'created', jsonb_build_object('agg', $1::text, 'i', $2::int)) RETURNING id::text`,
		func(i int) []any { return []any{agg, i} }, nil)
}

// insertRows commits one transaction running the INSERT … RETURNING id::text statement q n
// times (args(i) gives the i-th row's arguments), calls before(tx) just before the commit when
// it is not nil, and returns the ids in order.
func (e *env) insertRows(c *pgx.Conn, n int, q string, args func(i int) []any, before func(pgx.Tx)) []string {
	e.t.Helper()
	ctx := context.Background()
	tx, err := c.Begin(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	var ids []string
	for i := 0; i < n; i++ {
		var id string
		if err := tx.QueryRow(ctx, q, args(i)...).Scan(&id); err != nil {
			e.t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if before != nil {
		before(tx)
	}
	if err := tx.Commit(ctx); err != nil {
		e.t.Fatal(err)
	}
	return ids
}

func (e *env) storedPosition() string {
	b, err := os.ReadFile(e.offsets)
	if err != nil {
		return ""
	}
	var d struct{ Position string }
	json.Unmarshal(b, &d)
	return d.Position
}

// waitStored waits until the stored position is at or past walEnd (pg_current_wal_lsn() after
// the last commit of interest): outboxd stores a position only once Kafka acked every record
// before it, so a read of the topics after this is the whole output up to walEnd, late extras and
// duplicates included.
func (e *env) waitStored(walEnd string, within time.Duration) {
	e.t.Helper()
	harness.WaitFor(e.t, within, "the stored position at "+walEnd, func() bool {
		s := e.storedPosition()
		return s != "" && lsn(e.t, s) >= lsn(e.t, walEnd)
	})
}

// waitFlowing waits until the outbox topics hold n more records (and transaction markers) than
// now for a read_committed reader: rows written under load are flowing into Kafka, so a fault
// injected next hits a running stream.
func (e *env) waitFlowing(n int, within time.Duration) {
	e.t.Helper()
	count := func() int64 { return testenv.Delivered(e.t, e.broker.Addr(), `outbox\.event\..*`) }
	base := count()
	harness.WaitFor(e.t, within, fmt.Sprintf("%d more records in Kafka", n), func() bool { return count() >= base+int64(n) })
}

// lastStatusReply is when outboxd sent its last standby status update (pg_stat_replication's
// reply_time; zero when none).
func (e *env) lastStatusReply(c *pgx.Conn) time.Time {
	e.t.Helper()
	var at *time.Time
	c.QueryRow(context.Background(), "SELECT max(reply_time) FROM pg_stat_replication").Scan(&at)
	if at == nil {
		return time.Time{}
	}
	return *at
}

// waitStatusRepliesAfter waits until outboxd has sent two standby status updates to PostgreSQL
// after since (as reply_time shows): it has had a whole status interval with everything written
// before since in hand to confirm, or not, what Kafka acked. The event a negative assertion about
// the slot waits on instead of a fixed time.
func (e *env) waitStatusRepliesAfter(c *pgx.Conn, since time.Time, within time.Duration, check func()) {
	e.t.Helper()
	var first time.Time
	harness.WaitFor(e.t, within, "two standby status updates after "+since.Format(time.RFC3339Nano), func() bool {
		if check != nil {
			check()
		}
		r := e.lastStatusReply(c)
		if first.IsZero() {
			if r.After(since) {
				first = r
			}
			return false
		}
		return r.After(first)
	})
}

func (e *env) slotConfirmed(c *pgx.Conn) string {
	var lsn *string
	c.QueryRow(context.Background(), "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'outboxd'").Scan(&lsn)
	if lsn == nil {
		return ""
	}
	return *lsn
}

func ids(recs []testenv.Consumed) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.Header("id"))
	}
	return out
}

func countDistinct(recs []testenv.Consumed) (distinct, dups int) {
	seen := map[string]bool{}
	for _, r := range recs {
		if seen[r.Header("id")] {
			dups++
		}
		seen[r.Header("id")] = true
	}
	return len(seen), dups
}

func hasAll(got []testenv.Consumed, want []string) []string {
	have := map[string]bool{}
	for _, r := range got {
		have[r.Header("id")] = true
	}
	var missing []string
	for _, id := range want {
		if !have[id] {
			missing = append(missing, id)
		}
	}
	return missing
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// dbRow is one outbox row as PostgreSQL prints it: what its Kafka record must carry.
type dbRow struct{ agg, key, typ, payload string }

// outboxRows reads every row of public.outbox by id (payload in PostgreSQL's text form).
func outboxRows(t *testing.T, c *pgx.Conn) map[string]dbRow {
	t.Helper()
	rows, err := c.Query(context.Background(), `SELECT id::text, aggregatetype, aggregateid, coalesce(type, ''), payload::text FROM outbox`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	db := map[string]dbRow{}
	for rows.Next() {
		var id string
		var r dbRow
		if err := rows.Scan(&id, &r.agg, &r.key, &r.typ, &r.payload); err != nil {
			t.Fatal(err)
		}
		db[id] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return db
}
