package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/source"
)

// cmpSide is the database-specific part of a vs-debezium scenario: the backlog, the read
// positions of outboxd and Debezium, the writer of the latency run.
type cmpSide interface {
	// connectorDesc names Debezium's connector in the report.
	connectorDesc() string
	// prepare loads a backlog of rows single-row transactions that each of runs tool runs
	// drains from its start (run i: outboxd or Debezium).
	prepare(ctx context.Context, tag string, rows, runs int) (*Backlog, error)
	// outboxdSource is the source section of outboxd's run i, and the position its offsets file
	// is seeded with ("" = none).
	outboxdSource(b *Backlog, i int) (string, source.Position)
	// debezium is the Debezium setup of run i (routing to topicPrefix<aggregatetype>).
	debezium(ctx context.Context, b *Backlog, i int, topicPrefix string) (dbzSetup, error)
	// latencyOutboxd / latencyDebezium make a fresh read position at the current end of the log.
	latencyOutboxd(ctx context.Context, tag string) (src string, seed source.Position, cleanup func(), err error)
	latencyDebezium(ctx context.Context, tag, topicPrefix string) (dbzSetup, func(), error)
	newWriter(ctx context.Context) (rowWriter, error)
	cleanup(ctx context.Context, b *Backlog)
	// backend is the drain Backend: its first reference reader drains reader i once as the
	// server's ceiling (pg_recvlogical, a bare BinlogSyncer), without Kafka.
	backend() Backend
	// serverProbe is the database process serving reader i (nil: not measured).
	serverProbe(ctx context.Context, b *Backlog, i int) *cpuProbe
}

// ---- PostgreSQL

// pgDbzPublication is Debezium's own publication (outboxd's is pgPublication): created before
// the backlog, as pgoutput decodes each change with the catalog of its time.
const pgDbzPublication = "outboxd_bench_dbz_pub"

type pgCmpSide struct {
	e    *env
	pg   *pgBackend
	conn testenv.DBConn
}

func newPGCmpSide(e *env) (*pgCmpSide, error) {
	cfg, err := pgconn.ParseConfig(e.pgDSN)
	if err != nil {
		return nil, fmt.Errorf("parse the PostgreSQL DSN for Debezium: %w", err)
	}
	return &pgCmpSide{e: e, pg: e.pg, conn: testenv.DBConn{Host: cfg.Host, Port: int(cfg.Port), User: cfg.User,
		Password: cfg.Password, Database: cfg.Database}}, nil
}

func (s *pgCmpSide) connectorDesc() string {
	return "Debezium " + testenv.DebeziumVersion + " PostgreSQL connector (pgoutput, its own slot and publication, snapshot.mode=no_data)"
}

func (s *pgCmpSide) prepare(ctx context.Context, tag string, rows, runs int) (*Backlog, error) {
	if err := s.pg.ensureSchema(ctx); err != nil {
		return nil, err
	}
	if err := pgExec(ctx, s.e.pgDSN, `DROP PUBLICATION IF EXISTS `+pgDbzPublication,
		`CREATE PUBLICATION `+pgDbzPublication+` FOR TABLE `+pgTable+` WITH (publish = 'insert')`); err != nil {
		return nil, fmt.Errorf("create Debezium's publication: %w", err)
	}
	// One slot per run, all copies of the first: every run starts at the same LSN.
	return s.pg.PrepareDrain(ctx, tag, rows, 1, runs)
}

func (s *pgCmpSide) outboxdSource(b *Backlog, i int) (string, source.Position) {
	return pgSourceYAML(s.e.pgDSN, b.Readers[i]), ""
}

func (s *pgCmpSide) connector(slot, topicPrefix string) map[string]string {
	return testenv.DebeziumPostgresOutbox(s.conn, slot, pgDbzPublication, pgTable, dbzConnectorTuning(topicPrefix))
}

func (s *pgCmpSide) debezium(_ context.Context, b *Backlog, i int, topicPrefix string) (dbzSetup, error) {
	return newDbzSetup(s.connector(b.Readers[i], topicPrefix)), nil
}

func (s *pgCmpSide) freshSlot(ctx context.Context, name string) (func(), error) {
	if err := pgExec(ctx, s.e.pgDSN, fmt.Sprintf(`SELECT pg_create_logical_replication_slot('%s', 'pgoutput')`, name)); err != nil {
		return nil, err
	}
	return func() { pgDropSlots(ctx, s.e.pgDSN, name) }, nil
}

func (s *pgCmpSide) latencyOutboxd(ctx context.Context, tag string) (string, source.Position, func(), error) {
	slot := slotName(tag+"_lat", 0)
	drop, err := s.freshSlot(ctx, slot)
	if err != nil {
		return "", "", nil, err
	}
	return pgSourceYAML(s.e.pgDSN, slot), "", drop, nil
}

func (s *pgCmpSide) latencyDebezium(ctx context.Context, tag, topicPrefix string) (dbzSetup, func(), error) {
	slot := slotName(tag+"_lat", 1)
	drop, err := s.freshSlot(ctx, slot)
	if err != nil {
		return dbzSetup{}, nil, err
	}
	return newDbzSetup(s.connector(slot, topicPrefix)), drop, nil
}

type pgWriter struct{ c *pgx.Conn }

func (w pgWriter) insert(ctx context.Context, k int) error {
	_, err := w.c.Exec(ctx, pgInsertOne, k)
	return err
}
func (w pgWriter) close() { w.c.Close(context.Background()) }

func (s *pgCmpSide) newWriter(ctx context.Context) (rowWriter, error) {
	c, err := pgx.Connect(ctx, s.e.pgDSN)
	if err != nil {
		return nil, err
	}
	return pgWriter{c}, nil
}

func (s *pgCmpSide) backend() Backend { return s.pg }

// serverProbe: the walsender streaming reader i's slot (pg_replication_slots.active_pid; a
// process on this machine only when the server is).
func (s *pgCmpSide) serverProbe(ctx context.Context, b *Backlog, i int) *cpuProbe {
	slot := b.Readers[i]
	return &cpuProbe{name: "PostgreSQL walsender", pid: func() int {
		v, err := pgQueryString(ctx, s.e.pgDSN, `SELECT coalesce(active_pid, 0)::text FROM pg_replication_slots WHERE slot_name = $1`, slot)
		if err != nil {
			return 0
		}
		n, _ := strconv.Atoi(v)
		return n
	}}
}

func (s *pgCmpSide) cleanup(ctx context.Context, b *Backlog) {
	s.pg.Cleanup(ctx, b)
	_ = pgExec(context.WithoutCancel(ctx), s.e.pgDSN, `DROP PUBLICATION IF EXISTS `+pgDbzPublication)
}

// ---- MariaDB

// myCmpSide runs Debezium's MariaDB connector (testenv.DebeziumMariaDBVersion: Maven Central
// serves no debezium-connector-mariadb 3.6.x, and the 3.6.1 MySQL connector fails against MariaDB
// 10.11 at validation). A binlog connector with snapshot.mode=no_data starts
// at the binlog's end, so for the drain Debezium is first run once before the backlog (it
// streams one priming row, and its graceful stop stores the offset after it); every Debezium
// drain run then starts from a copy of that offsets file and schema history.
type myCmpSide struct {
	e        *env
	be       *myBackend
	serverID uint32 // Debezium's binlog client id (outboxd's readers have their own)
	prime    string // dir with connect.offsets and schema-history.dat from before the backlog
}

func newMyCmpSide(e *env, srv *myServer) *myCmpSide {
	be := newMyBackend(e, srv)
	s := &myCmpSide{e: e, be: be, serverID: be.ids}
	be.ids++
	return s
}

func (s *myCmpSide) connectorDesc() string {
	return "Debezium MariaDB connector " + testenv.DebeziumMariaDBVersion + " (no 3.6.x on Maven Central; the " + testenv.DebeziumVersion +
		" MySQL connector fails against MariaDB 10.11), snapshot.mode=no_data, offsets primed before the backlog"
}

func (s *myCmpSide) dbConn() (testenv.DBConn, error) {
	host, portText, err := net.SplitHostPort(s.be.srv.addr)
	if err != nil {
		return testenv.DBConn{}, err
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return testenv.DBConn{}, err
	}
	return testenv.DBConn{Host: host, Port: port, User: s.be.srv.user, Password: s.be.srv.pass, Database: myDB}, nil
}

func (s *myCmpSide) connector(topicPrefix string) (map[string]string, error) {
	c, err := s.dbConn()
	if err != nil {
		return nil, err
	}
	return testenv.DebeziumMariaDBOutbox(c, s.serverID, myFull, dbzConnectorTuning(topicPrefix)), nil
}

func (s *myCmpSide) prepare(ctx context.Context, tag string, rows, runs int) (*Backlog, error) {
	if err := s.be.ensureSchema(ctx); err != nil {
		return nil, err
	}
	if err := s.primeDebezium(ctx, tag); err != nil {
		return nil, fmt.Errorf("prime Debezium's offsets before the backlog: %w", err)
	}
	return s.be.PrepareDrain(ctx, tag, rows, 1, runs)
}

// primeDebezium runs Debezium until it has streamed one row, and stops it gracefully: its
// offsets file then holds a binlog position before the backlog.
func (s *myCmpSide) primeDebezium(ctx context.Context, tag string) error {
	dir, err := os.MkdirTemp("", "outboxd-bench-dbz-prime-")
	if err != nil {
		return err
	}
	s.prime = dir
	prefix := "outboxd-bench." + tag + ".prime."
	topics := topicsOf(prefix)
	if err := createLogAppendTopics(s.e.brokers, topics); err != nil {
		return err
	}
	defer deleteTopics(s.e.brokers, prefix)
	setup := newDbzSetup(nil)
	if setup.connector, err = s.connector(prefix); err != nil {
		return err
	}
	c, err := testenv.StartConnect(testenv.ConnectOpts{Bootstrap: joinComma(s.e.brokers), Connector: setup.connector,
		Worker: setup.worker, JVM: setup.jvm, Dir: dir})
	if err != nil {
		return err
	}
	defer c.Stop()
	w, err := s.newWriter(ctx)
	if err != nil {
		return err
	}
	err = w.insert(ctx, 2_000_000_000)
	w.close()
	if err != nil {
		return err
	}
	aw, err := newAckWatch(s.e.brokers, topics, 1)
	if err != nil {
		return err
	}
	defer aw.Close()
	for deadline := time.Now().Add(2 * time.Minute); ; {
		ok, err := holds(aw)
		if err != nil {
			return err
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the priming row did not reach Kafka within 2 minutes; Connect log:\n%s", c.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.Stop() // commits the offset of the priming row
	for _, f := range []string{"connect.offsets", "schema-history.dat"} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Size() == 0 {
			return fmt.Errorf("Debezium left no %s after a graceful stop (%v); Connect log:\n%s", f, err, c.Log())
		}
	}
	return nil
}

func (s *myCmpSide) outboxdSource(b *Backlog, i int) (string, source.Position) {
	return s.be.SourceYAML(b, i), b.start
}

func (s *myCmpSide) debezium(_ context.Context, _ *Backlog, _ int, topicPrefix string) (dbzSetup, error) {
	dir, err := os.MkdirTemp("", "outboxd-bench-dbz-")
	if err != nil {
		return dbzSetup{}, err
	}
	for _, f := range []string{"connect.offsets", "schema-history.dat"} {
		b, err := os.ReadFile(filepath.Join(s.prime, f))
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, f), b, 0o644)
		}
		if err != nil {
			os.RemoveAll(dir)
			return dbzSetup{}, fmt.Errorf("copy Debezium's primed %s: %w", f, err)
		}
	}
	c, err := s.connector(topicPrefix)
	if err != nil {
		os.RemoveAll(dir)
		return dbzSetup{}, err
	}
	setup := newDbzSetup(c)
	setup.dir = dir
	return setup, nil
}

func (s *myCmpSide) latencyOutboxd(ctx context.Context, _ string) (string, source.Position, func(), error) {
	pos, err := s.be.srv.queryString(ctx, `SELECT @@gtid_binlog_pos`)
	if err != nil {
		return "", "", nil, err
	}
	id := s.be.ids
	s.be.ids++
	b := &Backlog{serverIDs: []uint32{id}}
	return s.be.SourceYAML(b, 0), source.Position(pos), func() {}, nil
}

func (s *myCmpSide) latencyDebezium(_ context.Context, _, topicPrefix string) (dbzSetup, func(), error) {
	c, err := s.connector(topicPrefix)
	if err != nil {
		return dbzSetup{}, nil, err
	}
	return newDbzSetup(c), func() {}, nil // a fresh Connect dir: no offsets, streams from the binlog's end
}

// myInsertOne commits one outbox row numbered {K} (autocommit), payload as the backlog's.
const myInsertOne = `INSERT INTO ` + myFull + ` (id, aggregatetype, aggregateid, type, payload)
SELECT UUID(), ELT(1 + i % 4, 'order', 'customer', 'payment', 'shipment'), CONCAT('customer-', i % 1000),
	'OrderCreated', ` + myPayloadSQL + ` FROM (SELECT {K} AS i) s`

type myRowWriter struct{ c *client.Conn }

func (w myRowWriter) insert(_ context.Context, k int) error {
	_, err := w.c.Execute(strings.Replace(myInsertOne, "{K}", strconv.Itoa(k), 1))
	return err
}
func (w myRowWriter) close() { w.c.Close() }

func (s *myCmpSide) newWriter(ctx context.Context) (rowWriter, error) {
	c, err := s.be.srv.connect(ctx)
	if err != nil {
		return nil, err
	}
	return myRowWriter{c: c}, nil
}

func (s *myCmpSide) backend() Backend { return s.be }

// serverProbe: none (the binlog dump is a thread of mysqld).
func (s *myCmpSide) serverProbe(context.Context, *Backlog, int) *cpuProbe { return nil }

func (s *myCmpSide) cleanup(ctx context.Context, b *Backlog) {
	s.be.Cleanup(ctx, b)
	if s.prime != "" {
		os.RemoveAll(s.prime)
	}
}
