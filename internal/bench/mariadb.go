package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/source"
	obmysql "github.com/outboxd/outboxd/source/mysql"
)

// Names of the bench's own MariaDB objects: a database of its own, so that -mysql-dsn on a
// shared server never touches an application's outbox.
const (
	myDB    = "outboxd_bench"
	myTable = "outbox"
	myFull  = myDB + "." + myTable
)

// myPayloadSQL is the payload of loaded row i: a ~300-byte JSON order document (MariaDB JSON is
// LONGTEXT: the bytes are published as written). "ts" is the insert time in µs since the Unix
// epoch (SYSDATE(6): the clock at the statement, not at the procedure call).
const myPayloadSQL = `JSON_OBJECT(
	'orderId', i, 'customerId', CONCAT('customer-', i % 1000), 'status', 'CREATED', 'currency', 'EUR',
	'amount', ROUND((i % 10000) * 1.37, 2), 'createdAt', CAST(SYSDATE(6) AS CHAR),
	'ts', CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS UNSIGNED),
	'lines', JSON_ARRAY(
		JSON_OBJECT('sku', CONCAT('SKU-', i % 500), 'qty', 1 + i % 5, 'price', 9.99),
		JSON_OBJECT('sku', CONCAT('SKU-', i % 77), 'qty', 2, 'price', 19.5)),
	'note', CONCAT(MD5(i), MD5(i + 1)))`

// mySetupSQL creates the bench's database: the outbox table (testenv.MariaDBOutboxDDL, CHAR(36)
// ids) and the loader procedure. The procedure commits every per_tx rows, so that every
// transaction is a real one in the binlog (one GTID each).
func mySetupSQL() []string {
	return []string{
		`CREATE DATABASE IF NOT EXISTS ` + myDB,
		`DROP TABLE IF EXISTS ` + myFull,
		testenv.MariaDBOutboxDDL(myFull, "CHAR(36)"),
		`DROP PROCEDURE IF EXISTS ` + myDB + `.load`,
		`CREATE PROCEDURE ` + myDB + `.load(IN first INT, IN n INT, IN per_tx INT)
BEGIN
	DECLARE i INT DEFAULT first;
	START TRANSACTION;
	WHILE i < first + n DO
		INSERT INTO ` + myFull + ` (id, aggregatetype, aggregateid, type, payload)
		VALUES (UUID(), ELT(1 + i % 4, 'order', 'customer', 'payment', 'shipment'), CONCAT('customer-', i % 1000),
			'OrderCreated', ` + myPayloadSQL + `);
		IF (i - first + 1) % per_tx = 0 THEN
			COMMIT;
			START TRANSACTION;
		END IF;
		SET i = i + 1;
	END WHILE;
	COMMIT;
END`,
	}
}

// myServer is a MariaDB server to run against: a private one or -mysql-dsn.
type myServer struct {
	addr, user, pass string
	dsn              string // outboxd's source.dsn
	version          string
	stop             func()
}

// errNoMariaDB: no MariaDB binaries and no -mysql-dsn (the scenario is skipped, not failed).
var errNoMariaDB = errors.New("no MariaDB server")

// startMariaDB connects to o.MySQLDSN, or starts a private MariaDB (binlog ROW, FULL image, FULL
// row metadata, GTID strict mode; fast durability settings like the private PostgreSQL).
func startMariaDB(ctx context.Context, o *Options) (*myServer, error) {
	if o.MySQLDSN != "" {
		s, err := parseMySQLDSN(o.MySQLDSN)
		if err != nil {
			return nil, err
		}
		s.stop = func() {}
		if s.version, err = s.queryString(ctx, "SELECT VERSION()"); err != nil {
			return nil, fmt.Errorf("-mysql-dsn: %w", err)
		}
		if !strings.Contains(strings.ToLower(s.version), "mariadb") {
			return nil, fmt.Errorf("-mysql-dsn: the server is %s, drain-mariadb needs MariaDB (GTID domain-server-seq positions)", s.version)
		}
		s.version = "MariaDB " + s.version + " (given)"
		return s, nil
	}
	if _, _, err := testenv.MariaDBBinaries(); err != nil {
		return nil, fmt.Errorf("%w: %v (or pass -mysql-dsn)", errNoMariaDB, err)
	}
	o.Log.Info("starting a private MariaDB")
	m, err := testenv.StartMariaDB(testenv.MariaDBOptions{RowMetadata: true, Extra: []string{
		"--innodb-buffer-pool-size=256M", "--innodb-log-file-size=256M", "--max-binlog-size=1G",
	}})
	if err != nil {
		return nil, err
	}
	s := &myServer{addr: fmt.Sprintf("127.0.0.1:%d", m.Port), user: "root", dsn: m.DSN("app"), stop: m.Destroy}
	if s.version, err = s.queryString(ctx, "SELECT VERSION()"); err != nil {
		m.Destroy()
		return nil, err
	}
	s.version = "MariaDB " + s.version + " (private: binlog ROW/FULL/FULL metadata, sync_binlog=0, innodb_flush_log_at_trx_commit=2)"
	return s, nil
}

// parseMySQLDSN reads -mysql-dsn: mysql://user:pass@host:port/db (mariadb:// too). The URL is
// also outboxd's source.dsn; the bench's own connections use host, port, user and password.
func parseMySQLDSN(s string) (*myServer, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "mysql" && u.Scheme != "mariadb") || u.Host == "" {
		return nil, errors.New("-mysql-dsn: give a URL mysql://user:pass@host:3306/db")
	}
	if q := u.Query(); q.Has("tls") || q.Has("socket") {
		return nil, errors.New("-mysql-dsn: tls and socket are not supported by the bench's own connections")
	}
	d := &myServer{addr: u.Host, dsn: s}
	if _, _, err := net.SplitHostPort(d.addr); err != nil {
		d.addr = net.JoinHostPort(strings.Trim(d.addr, "[]"), "3306")
	}
	if u.User != nil {
		d.user = u.User.Username()
		d.pass, _ = u.User.Password()
	}
	return d, nil
}

func (s *myServer) connect(ctx context.Context) (*client.Conn, error) {
	return client.ConnectWithContext(ctx, s.addr, s.user, s.pass, "", 10*time.Second)
}

func (s *myServer) exec(ctx context.Context, sql ...string) error {
	c, err := s.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	for _, q := range sql {
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, err := c.Execute(q); err != nil {
			return fmt.Errorf("%s: %w", strings.SplitN(q, "\n", 2)[0], err)
		}
	}
	return nil
}

func (s *myServer) queryString(ctx context.Context, q string) (string, error) {
	c, err := s.connect(ctx)
	if err != nil {
		return "", err
	}
	defer c.Close()
	return queryString(c, q)
}

func queryString(c *client.Conn, q string) (string, error) {
	r, err := c.Execute(q)
	if err != nil {
		return "", fmt.Errorf("%s: %w", q, err)
	}
	defer r.Close()
	if r.RowNumber() == 0 {
		return "", fmt.Errorf("%s: no rows", q)
	}
	v, err := r.GetString(0, 0)
	return strings.Clone(v), err
}

// myBackend is the MariaDB Backend: readers are replica server_ids (unique per reader) that all
// start at the GTID position captured before the backlog; the reference reader is a bare go-mysql
// BinlogSyncer.
type myBackend struct {
	e     *env
	srv   *myServer
	setup sync.Once
	err   error
	ids   uint32 // next server_id to hand out
	// held: the last bare reader's syncer, closed by releaseReference once the dump thread's
	// watch has stopped (Close KILLs the dump thread: closed earlier, a drain shorter than the
	// watch's lookups would leave the thread unseen).
	held *replication.BinlogSyncer
}

// releaseReference closes the bare reader RunReference left open (drain.go calls it after
// stopping the server reader's watch).
func (p *myBackend) releaseReference() {
	if p.held != nil {
		p.held.Close()
		p.held = nil
	}
}

func newMyBackend(e *env, srv *myServer) *myBackend {
	// Random base: on a shared server (-mysql-dsn) the bench's replica ids must not collide with
	// the server's replicas nor with an earlier run's.
	return &myBackend{e: e, srv: srv, ids: 1_000_000 + rand.Uint32N(1_000_000_000)}
}

func (p *myBackend) Name() string            { return "MariaDB" }
func (p *myBackend) References() []string    { return []string{"go-mysql BinlogSyncer"} }
func (p *myBackend) RatioTarget(int) float64 { return 0.85 }
func (p *myBackend) ensureSchema(ctx context.Context) error {
	p.setup.Do(func() { p.err = p.srv.exec(ctx, mySetupSQL()...) })
	return p.err
}

func (p *myBackend) PrepareDrain(ctx context.Context, tag string, rows, rowsPerTx, readers int) (*Backlog, error) {
	if err := p.ensureSchema(ctx); err != nil {
		return nil, err
	}
	// TRUNCATE is DDL (a binlog transaction without rows), logged before the start position.
	if err := p.srv.exec(ctx, `TRUNCATE TABLE `+myFull); err != nil {
		return nil, err
	}
	b := &Backlog{Tag: tag, Rows: rows, RowsPerTx: rowsPerTx}
	for range readers {
		b.serverIDs = append(b.serverIDs, p.ids)
		b.Readers = append(b.Readers, fmt.Sprintf("server_id %d", p.ids))
		p.ids++
	}
	start, err := p.srv.queryString(ctx, `SELECT @@gtid_binlog_pos`)
	if err != nil {
		return nil, err
	}
	if start == "" {
		return nil, errors.New("@@gtid_binlog_pos is empty after the setup DDL: the server logs no GTIDs")
	}
	b.start = source.Position(start)

	t0 := time.Now()
	txns, err := p.load(ctx, rows, rowsPerTx)
	if err != nil {
		return nil, err
	}
	b.LoadTime = time.Since(t0)
	end, err := p.srv.queryString(ctx, `SELECT @@gtid_binlog_pos`)
	if err != nil {
		return nil, err
	}
	b.end = source.Position(end)
	if s, e, ok := oneDomainSpan(start, end); ok && e-s != uint64(txns) {
		// Other writers on a shared server (-mysql-dsn): readers then read more than the backlog.
		p.e.o.Log.Warn("the backlog's GTID range holds other transactions too", "from", start, "to", end,
			"gtids", e-s, "backlog_transactions", txns)
	}
	avg, _ := p.srv.queryString(ctx, `SELECT ROUND(AVG(LENGTH(payload))) FROM `+myFull)
	p.e.o.Log.Info("binlog backlog", "from", start, "to", end, "transactions", txns, "payload_bytes_avg", avg)
	return b, nil
}

// oneDomainSpan returns the sequence numbers of two single-domain MariaDB GTID positions of the
// same domain.
func oneDomainSpan(a, b string) (uint64, uint64, bool) {
	pa, err1 := gomysql.ParseMariadbGTID(a)
	pb, err2 := gomysql.ParseMariadbGTID(b)
	if err1 != nil || err2 != nil || strings.Contains(a, ",") || strings.Contains(b, ",") || pa.DomainID != pb.DomainID {
		return 0, 0, false
	}
	return pa.SequenceNumber, pb.SequenceNumber, true
}

// load inserts rows outbox rows in transactions of perTx rows over several connections at once
// (each a CALL of the loader procedure on its share of the row numbers) and returns the number
// of transactions.
func (p *myBackend) load(ctx context.Context, rows, perTx int) (int, error) {
	conns := max(4, 2*runtime.NumCPU())
	per := (rows + conns - 1) / conns
	per = (per + perTx - 1) / perTx * perTx // whole transactions per connection
	var jobs []func(context.Context) error
	txns := 0
	for from := 1; from <= rows; from += per {
		n := min(per, rows-from+1)
		txns += (n + perTx - 1) / perTx
		jobs = append(jobs, func(ctx context.Context) error {
			return p.srv.exec(ctx, fmt.Sprintf(`CALL %s.load(%d, %d, %d)`, myDB, from, n, perTx))
		})
	}
	if err := parallel(ctx, jobs...); err != nil {
		return 0, fmt.Errorf("load backlog: %w", err)
	}
	return txns, nil
}

func (p *myBackend) RunReference(ctx context.Context, b *Backlog, _, i int) (time.Duration, error) {
	p.releaseReference()
	d, syncer, err := runBareBinlogReader(ctx, p.srv, b.serverIDs[i], string(b.start), b.Rows, p.e.o.Log)
	p.held = syncer
	return d, err
}

// runBareBinlogReader reads the binlog from the GTID position start with a bare go-mysql
// BinlogSyncer registered as replica serverID, until the transactions of the bench's outbox
// table (counted at their XID events) hold rows rows, and returns the wall time from creating
// the syncer. The syncer has the stream settings of outboxd's source (the same events on the
// wire: annotate rows events, no per-packet read deadline, no GTID set tracking) and go-mysql's
// default row decoding: every WRITE_ROWS event is decoded into Go values, as outboxd needs
// them decoded (outboxd decodes only the outbox table's inserts; here there is nothing else).
// After a drain the syncer is returned open (the caller closes it); after an error it is closed.
func runBareBinlogReader(ctx context.Context, srv *myServer, serverID uint32, start string, rows int, log *slog.Logger) (_ time.Duration, open *replication.BinlogSyncer, err error) {
	set, err := gomysql.ParseMariadbGTIDSet(start)
	if err != nil {
		return 0, nil, err
	}
	host, portText, err := net.SplitHostPort(srv.addr)
	if err != nil {
		return 0, nil, err
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return 0, nil, err
	}
	t0 := time.Now()
	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID: serverID, Flavor: gomysql.MariaDBFlavor, Host: host, Port: uint16(port),
		User: srv.user, Password: srv.pass, Localhost: "outboxd-bench",
		TimestampStringLocation: time.UTC, RenderJSONAsMySQLText: true,
		HeartbeatPeriod: 10 * time.Second, DiscardGTIDSet: true, DisableRetrySync: true,
		EventCacheCount: 1024, FillZeroLogPos: true,
		Logger: slog.New(slog.DiscardHandler),
	})
	defer func() {
		if err != nil {
			syncer.Close()
			open = nil
		}
	}()
	stream, err := syncer.StartSyncGTID(set)
	if err != nil {
		return 0, nil, fmt.Errorf("bare reader: start at %s: %w", start, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	var (
		total, txRows, txns int
		payloadBytes        int
	)
	for total < rows {
		ev, err := stream.GetEvent(ctx)
		if err != nil {
			return 0, nil, fmt.Errorf("bare reader after %d rows: %w", total, err)
		}
		switch e := ev.Event.(type) {
		case *replication.RowsEvent:
			if e.Type() != replication.EnumRowsEventTypeInsert || string(e.Table.Schema) != myDB || string(e.Table.Table) != myTable {
				continue
			}
			for _, r := range e.Rows {
				if len(r) != 6 {
					return 0, nil, fmt.Errorf("bare reader: a row of %s has %d columns, want 6", myFull, len(r))
				}
				switch v := r[4].(type) { // payload: touch the decoded value
				case []byte:
					payloadBytes += len(v)
				case string:
					payloadBytes += len(v)
				}
			}
			txRows += len(e.Rows)
		case *replication.XIDEvent:
			if txRows > 0 {
				total += txRows
				txns++
				txRows = 0
			}
		}
	}
	d := time.Since(t0)
	log.Debug("bare reader done", "rows", total, "transactions", txns, "payload_bytes", payloadBytes)
	return d, syncer, nil
}

func (p *myBackend) SourceYAML(b *Backlog, i int) string {
	return fmt.Sprintf(`  type: mysql
  dsn: %s
  tables: [%s]
  mysql:
    server_id: %d
`, yamlString(p.srv.dsn), myFull, b.serverIDs[i])
}

// StartPosition is the GTID position before the backlog: outboxd's offsets file is seeded
// with it (there is no server-side cursor).
func (p *myBackend) StartPosition(b *Backlog, _ int) source.Position { return b.start }

// Covers: the stored GTID position is at or past the one after the backlog, in every domain.
func (p *myBackend) Covers(b *Backlog, pos source.Position) (bool, error) {
	return gtidCovers(pos, b.end), nil
}

func gtidCovers(pos, end source.Position) bool {
	return pos != "" && obmysql.ComparePosition(pos, end) >= 0
}

func (p *myBackend) Cleanup(ctx context.Context, _ *Backlog) {
	_ = p.srv.exec(context.WithoutCancel(ctx), `TRUNCATE TABLE `+myFull)
}

// drainMariaDB runs the MariaDB drain (outboxd vs a bare go-mysql BinlogSyncer) with
// single-row transactions (scenario drain-mariadb-1) and 1000-row transactions
// (drain-mariadb-1000), on a private MariaDB or -mysql-dsn.
func drainMariaDB(ctx context.Context, e *env) ([]Result, error) {
	srv, err := startMariaDB(ctx, e.o)
	if errors.Is(err, errNoMariaDB) {
		return []Result{{Scenario: "drain-mariadb", Name: "outboxd / BinlogSyncer",
			Error: fmt.Sprintf("%v: %v", errSkipped, err)}}, nil
	}
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	e.machine.MariaDB = srv.version
	be := newMyBackend(e, srv)
	res, err := drain(ctx, e, be, "drain-mariadb-1", 1)
	if err != nil {
		return res, fmt.Errorf("drain-mariadb-1: %w", err)
	}
	more, err := drain(ctx, e, be, "drain-mariadb-1000", 1000)
	res = append(res, more...)
	if err != nil {
		return res, fmt.Errorf("drain-mariadb-1000: %w", err)
	}
	return res, nil
}
