package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
	"github.com/outboxd/outboxd/sink/kafka"
)

// binPath is the outboxd binary under test (harness.Build: built once per test process, or
// OUTBOXD_TEST_BIN).
var binPath string

func TestMain(m *testing.M) {
	var cleanup func()
	binPath, cleanup = harness.MustBuild()
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// ---- outboxd processes ----

// startProc starts `outboxd run -c cfg` as instance name; its output is captured and appended
// to <dir>/<name>.log. It is killed at the end of the test.
func startProc(t *testing.T, name, cfg, dir string) *harness.Proc {
	t.Helper()
	return harness.Start(t, binPath, []string{"run", "-c", cfg}, harness.Options{Name: name, LogDir: dir})
}

func freeAddr(t *testing.T) string {
	t.Helper()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// ---- fixtures: servers and config ----

// fixture is one scenario's world: a database, a persistent broker and outboxd config files.
type fixture struct {
	t      *testing.T
	dir    string
	broker *testenv.Broker
	pg     *testenv.Postgres
	maria  *testenv.MariaDB
	db     outboxDB
	source string // the config's source section
	offs   string // offsets file, shared by every instance
	// exactlyOnce selects kafka.delivery exactly_once (offsets in the Kafka transaction).
	exactlyOnce bool
	// kafkaOffsets selects offsets.store kafka with at_least_once.
	kafkaOffsets bool
	// kafkaAddrs, when set, are the brokers (an Apache Kafka node or cluster) instead of broker.
	kafkaAddrs []string
	// topics is the regular expression of the outbox topics the check reads (default
	// outbox\.event\..*); kafkaExtra and offsetsExtra are extra lines of the kafka and offsets
	// sections, outboxExtra an outbox section (a scenario on a shared cluster names its own topics,
	// transactional id and offsets key).
	topics, kafkaExtra, offsetsExtra, outboxExtra string
}

// brokerAddrs is the bootstrap list of the fixture's Kafka.
func (f *fixture) brokerAddrs() []string {
	if f.kafkaAddrs != nil {
		return f.kafkaAddrs
	}
	return []string{f.broker.Addr()}
}

// topicPattern is the regular expression of the outbox topics.
func (f *fixture) topicPattern() string {
	if f.topics != "" {
		return f.topics
	}
	return `outbox\.event\..*`
}

// newBroker starts a broker whose data survives Stop/Start (Dir).
func newBroker(t *testing.T) *testenv.Broker {
	t.Helper()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	b := &testenv.Broker{Port: port, Dir: t.TempDir()}
	if err := b.Start(); err != nil {
		testenv.Unavailable(t, "kfake broker", err)
	}
	t.Cleanup(b.Stop)
	return b
}

// fixtureDir is the scenario's directory for configs, offsets and outboxd logs; with
// OUTBOXD_CHAOS_KEEP=DIR it is kept under DIR for inspection.
func fixtureDir(t *testing.T) string {
	if keep := os.Getenv("OUTBOXD_CHAOS_KEEP"); keep != "" {
		os.MkdirAll(keep, 0o755)
		d, err := os.MkdirTemp(keep, strings.ReplaceAll(t.Name(), "/", "_")+"-")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("keeping logs in %s", d)
		return d
	}
	return t.TempDir()
}

func newPostgresFixture(t *testing.T, extra ...string) *fixture {
	t.Helper()
	return newPostgresFixtureOn(t, nil, extra...)
}

// newPostgresFixtureOn is newPostgresFixture on the given brokers (nil: a new kfake broker).
func newPostgresFixtureOn(t *testing.T, brokers []string, extra ...string) *fixture {
	t.Helper()
	f := &fixture{t: t, dir: fixtureDir(t), kafkaAddrs: brokers}
	if brokers == nil {
		f.broker = newBroker(t)
	}
	f.pg = testenv.NewPostgres(t, extra...)
	if err := f.pg.Exec(context.Background(), "app", testenv.OutboxDDL, "CREATE TABLE public.busy (id bigserial PRIMARY KEY, note text)"); err != nil {
		t.Fatal(err)
	}
	f.db = &pgDB{dsn: f.pg.DSN("app")}
	f.source = fmt.Sprintf(`source:
  type: postgres
  dsn: %s
  tables: [public.outbox]
  postgres:
    status_interval: 1s
    heartbeat_interval: 2s
`, f.pg.DSN("app"))
	f.offs = filepath.Join(f.dir, "offsets.json")
	return f
}

func newMariaDBFixture(t *testing.T) *fixture {
	t.Helper()
	return newMariaDBFixtureOn(t, nil)
}

// newMariaDBFixtureOn is newMariaDBFixture on the given brokers (nil: a new kfake broker).
func newMariaDBFixtureOn(t *testing.T, brokers []string) *fixture {
	t.Helper()
	f := &fixture{t: t, dir: fixtureDir(t), kafkaAddrs: brokers}
	if brokers == nil {
		f.broker = newBroker(t)
	}
	f.maria = testenv.NewMariaDB(t, testenv.MariaDBOptions{RowMetadata: true})
	if err := f.maria.Exec(context.Background(), "app", testenv.MariaDBOutboxDDL("app.outbox", "CHAR(36)")); err != nil {
		t.Fatal(err)
	}
	f.db = &mariaDB{m: f.maria}
	f.source = fmt.Sprintf(`source:
  type: mysql
  dsn: %s
  tables: [app.outbox]
  mysql:
    server_id: 4343
    start: current
`, f.maria.DSN("app"))
	f.offs = filepath.Join(f.dir, "offsets.json")
	return f
}

// config writes an instance's config file: the shared source, broker and offsets file, and its
// own http.listen.
func (f *fixture) config(name, httpListen, extra string) string {
	path := filepath.Join(f.dir, name+".yaml")
	delivery, store := "at_least_once", "file"
	if f.exactlyOnce {
		delivery, store = "exactly_once", "kafka"
	}
	if f.kafkaOffsets {
		store = "kafka"
	}
	cfg := fmt.Sprintf(`shutdown_timeout: 20s
%skafka:
  brokers: [%s]
  delivery: %s
%soffsets:
  store: %s
  path: %s
  commit_interval: 20ms
%shttp:
  listen: "%s"
%s%s`, f.source, strings.Join(f.brokerAddrs(), ", "), delivery, f.kafkaExtra, store, f.offs, f.offsetsExtra, httpListen, f.outboxExtra, extra)
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		f.t.Fatal(err)
	}
	return path
}

// waitStreaming waits until p streams from the database: rows committed before a new slot
// exists (PostgreSQL) or before the first binlog dump (MariaDB, no stored position) are not
// outboxd's to deliver.
func (f *fixture) waitStreaming(p *harness.Proc) {
	f.t.Helper()
	harness.WaitFor(f.t, 60*time.Second, "outboxd streaming from the database", func() bool {
		p.MustBeRunning(f.t)
		if f.pg != nil {
			var active bool
			c, err := pgx.Connect(context.Background(), f.pg.DSN("app"))
			if err != nil {
				return false
			}
			defer c.Close(context.Background())
			c.QueryRow(context.Background(), "SELECT active FROM pg_replication_slots WHERE slot_name = 'outboxd'").Scan(&active)
			return active
		}
		rows, _ := f.maria.Query("", "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'")
		return len(rows) == 1 && rows[0][0] != "0"
	})
}

// ---- the writer: small outbox transactions, ground truth read back from the database ----

// delivered is what the outbox topics hold for a read_committed reader now: the sum of their
// partitions' last stable offsets (records and transaction markers), -1 while Kafka does not
// answer. It only grows while outboxd delivers.
func (f *fixture) delivered() int64 {
	a, err := kafka.Dial(kafka.Config{Brokers: f.brokerAddrs()}, 1, 100*time.Millisecond)
	if err != nil {
		return -1
	}
	defer a.Close()
	_, topics, err := a.Cluster()
	if err != nil {
		return -1
	}
	re := regexp.MustCompile(f.topicPattern())
	var sel []string
	for _, tp := range topics {
		if re.MatchString(tp) {
			sel = append(sel, tp)
		}
	}
	offs, err := a.ListOffsets(sel, kafka.Latest, kafka.ReadCommitted)
	if err != nil {
		return -1
	}
	var n int64
	for _, ps := range offs {
		for _, o := range ps {
			n += o
		}
	}
	return n
}

// waitDelivering waits until the outbox topics hold n more records than now: outboxd delivers
// the writer's rows (before a fault: it hits a running stream; after one: delivery resumed). p,
// when not nil, must keep running meanwhile.
func (f *fixture) waitDelivering(p *harness.Proc, n int64, within time.Duration) {
	f.t.Helper()
	base := int64(-1)
	harness.WaitFor(f.t, within, fmt.Sprintf("%d more records delivered", n), func() bool {
		if p != nil {
			p.MustBeRunning(f.t)
		}
		d := f.delivered()
		if base < 0 {
			base = d
			return false
		}
		return d >= base+n
	})
}

// waitStoredAfter waits until the offsets file was written after t0 (a position stored after
// everything acked before t0).
func (f *fixture) waitStoredAfter(t0 time.Time, within time.Duration) {
	f.t.Helper()
	harness.WaitFor(f.t, within, "a position stored after "+t0.Format(time.RFC3339Nano), func() bool {
		b, err := os.ReadFile(f.offs)
		if err != nil {
			return false
		}
		var d struct {
			Position string
			Updated  time.Time
		}
		return json.Unmarshal(b, &d) == nil && d.Position != "" && d.Updated.After(t0)
	})
}
