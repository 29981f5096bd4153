package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/source"
	"github.com/outboxd/outboxd/source/postgres"
)

// Names of the bench's own objects: a schema of its own, so that -pg-dsn on a shared database
// never touches public.outbox.
const (
	pgSchema      = "outboxd_bench"
	pgTable       = pgSchema + ".outbox"
	pgPublication = "outboxd_bench_pub"
)

// pgPayloadSQL is the payload of a loaded row i: a ~300-byte JSON order document (jsonb text
// form). "ts" is the insert time in µs since the Unix epoch (clock_timestamp(), taken inside the
// row's transaction just before its commit): the latency scenario's commit-side timestamp.
const pgPayloadSQL = `jsonb_build_object(
	'orderId', i, 'customerId', 'customer-' || (i % 1000), 'status', 'CREATED', 'currency', 'EUR',
	'amount', round((i % 10000) * 1.37, 2), 'createdAt', clock_timestamp()::text,
	'ts', (extract(epoch from clock_timestamp()) * 1000000)::bigint,
	'lines', jsonb_build_array(
		jsonb_build_object('sku', 'SKU-' || (i % 500), 'qty', 1 + i % 5, 'price', 9.99),
		jsonb_build_object('sku', 'SKU-' || (i % 77), 'qty', 2, 'price', 19.5)),
	'note', md5(i::text) || md5((i + 1)::text))`

// aggregate types: rows go round-robin to four topics; aggregate ids (keys) cycle over 1000.
const pgAggTypeSQL = `(ARRAY['order','customer','payment','shipment'])[1 + i % 4]`

// pgSetupSQL creates the bench's schema: the outbox table (testenv.OutboxDDL's columns), the
// publication, the loader procedure (COMMIT every per_tx rows, so each transaction is real) and
// the polling baseline's table.
func pgSetupSQL() []string {
	return []string{
		`DROP PUBLICATION IF EXISTS ` + pgPublication,
		`DROP SCHEMA IF EXISTS ` + pgSchema + ` CASCADE`,
		`CREATE SCHEMA ` + pgSchema,
		strings.Replace(testenv.OutboxDDL, "public.outbox", pgTable, 1),
		`CREATE PUBLICATION ` + pgPublication + ` FOR TABLE ` + pgTable + ` WITH (publish = 'insert')`,
		`CREATE PROCEDURE ` + pgSchema + `.load(first int, n int, per_tx int, big int) LANGUAGE plpgsql AS $$
DECLARE i int;
BEGIN
	FOR i IN first .. first + n - 1 LOOP
		IF big > 0 THEN
			INSERT INTO ` + pgTable + ` (id, aggregatetype, aggregateid, type, payload)
			VALUES (gen_random_uuid(), 'big', 'big-' || i, 'Blob',
				jsonb_build_object('ts', (extract(epoch from clock_timestamp()) * 1000000)::bigint,
					'blob', repeat(md5(i::text), big / 32)));
		ELSE
			INSERT INTO ` + pgTable + ` (id, aggregatetype, aggregateid, type, payload)
			VALUES (gen_random_uuid(), ` + pgAggTypeSQL + `, 'customer-' || (i % 1000), 'OrderCreated', ` + pgPayloadSQL + `);
		END IF;
		IF (i - first + 1) % per_tx = 0 THEN COMMIT; END IF;
	END LOOP;
	COMMIT;
END $$`,
		`CREATE TABLE ` + pgSchema + `.outbox_poll (
	seq bigserial PRIMARY KEY,
	id uuid NOT NULL,
	aggregatetype text,
	aggregateid text,
	type text,
	payload jsonb,
	created_at timestamptz NOT NULL DEFAULT now(),
	sent_at timestamptz
)`,
		`CREATE INDEX outbox_poll_unsent ON ` + pgSchema + `.outbox_poll (seq) WHERE sent_at IS NULL`,
	}
}

type pgBackend struct {
	e     *env
	setup sync.Once
	err   error
}

func (p *pgBackend) Name() string { return "PostgreSQL" }
func (p *pgBackend) References() []string {
	return []string{"pg_recvlogical", "bare pglogrepl reader"}
}

// RatioTarget: issue 7 sets ≥ 0.9 of pg_recvlogical for single-row transactions only.
func (p *pgBackend) RatioTarget(rowsPerTx int) float64 {
	if rowsPerTx == 1 {
		return 0.9
	}
	return 0
}

// StartPosition: none, the slot keeps it.
func (p *pgBackend) StartPosition(*Backlog, int) source.Position { return "" }

func (p *pgBackend) ensureSchema(ctx context.Context) error {
	p.setup.Do(func() { p.err = pgExec(ctx, p.e.pgDSN, pgSetupSQL()...) })
	return p.err
}

func pgExec(ctx context.Context, dsn string, sql ...string) error {
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	for _, s := range sql {
		if _, err := c.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", strings.SplitN(s, "\n", 2)[0], err)
		}
	}
	return nil
}

func pgQueryString(ctx context.Context, dsn, q string, args ...any) (string, error) {
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", err
	}
	defer c.Close(context.Background())
	var s string
	err = c.QueryRow(ctx, q, args...).Scan(&s)
	return s, err
}

func pgVersion(ctx context.Context, dsn string) (string, error) {
	v, err := pgQueryString(ctx, dsn, `SELECT current_setting('server_version')`)
	if err != nil {
		return "", err
	}
	return "PostgreSQL " + v, nil
}

// slotName is reader i's slot of backlog tag.
func slotName(tag string, i int) string {
	return strings.NewReplacer("-", "_", ".", "_").Replace(fmt.Sprintf("obb_%s_%d", tag, i))
}

// newBacklog creates the readers' slots of a backlog: one slot, then exact copies, so every
// reader starts at the same LSN.
func (p *pgBackend) newBacklog(ctx context.Context, tag string, rows, rowsPerTx, readers int) (*Backlog, error) {
	b := &Backlog{Tag: tag, Rows: rows, RowsPerTx: rowsPerTx}
	for i := range readers {
		b.Readers = append(b.Readers, slotName(tag, i))
	}
	// One slot, then exact copies: every reader starts at the same LSN.
	sql := []string{fmt.Sprintf(`SELECT pg_create_logical_replication_slot('%s', 'pgoutput')`, b.Readers[0])}
	for _, s := range b.Readers[1:] {
		sql = append(sql, fmt.Sprintf(`SELECT pg_copy_logical_replication_slot('%s', '%s')`, b.Readers[0], s))
	}
	if err := pgExec(ctx, p.e.pgDSN, sql...); err != nil {
		p.Cleanup(context.Background(), b)
		return nil, fmt.Errorf("create slots: %w", err)
	}
	return b, nil
}

func (p *pgBackend) PrepareDrain(ctx context.Context, tag string, rows, rowsPerTx, readers int) (*Backlog, error) {
	if err := p.ensureSchema(ctx); err != nil {
		return nil, err
	}
	b, err := p.newBacklog(ctx, tag, rows, rowsPerTx, readers)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	if b.beforeLast, b.endLSN, err = pgLoad(ctx, p.e.pgDSN, 1, rows, rowsPerTx, 0); err != nil {
		p.Cleanup(context.Background(), b)
		return nil, err
	}
	b.LoadTime = time.Since(t0)
	return b, nil
}

// pgLoad inserts rows rows numbered from first into the outbox table in transactions of perTx
// rows, over several connections at once, then commits the last row alone. It returns the WAL
// LSN after all but the last row were committed and the one after the last. big > 0 makes
// payloads of about big bytes.
func pgLoad(ctx context.Context, dsn string, first, rows, perTx, big int) (beforeLast, end string, err error) {
	conns := max(2, runtime.NumCPU())
	bulk := rows - 1
	per := (bulk + conns - 1) / conns
	var jobs []func(context.Context) error
	for c := 0; c < conns && c*per < bulk; c++ {
		from, n := first+c*per, min(per, bulk-c*per)
		jobs = append(jobs, func(ctx context.Context) error {
			return pgExec(ctx, dsn, fmt.Sprintf(`CALL %s.load(%d, %d, %d, %d)`, pgSchema, from, n, perTx, big))
		})
	}
	if err := parallel(ctx, jobs...); err != nil {
		return "", "", fmt.Errorf("load backlog: %w", err)
	}
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", "", err
	}
	defer c.Close(context.Background())
	if err := c.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&beforeLast); err != nil {
		return "", "", err
	}
	if _, err := c.Exec(ctx, fmt.Sprintf(`CALL %s.load(%d, 1, 1, %d)`, pgSchema, first+bulk, big)); err != nil {
		return "", "", fmt.Errorf("load last row: %w", err)
	}
	if err := c.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&end); err != nil {
		return "", "", err
	}
	return beforeLast, end, nil
}

func (p *pgBackend) RunReference(ctx context.Context, b *Backlog, ref, i int) (time.Duration, error) {
	if ref == 1 {
		return runBareReader(ctx, p.e.pgDSN, b.Readers[i], b.endLSN)
	}
	return runRecvlogical(ctx, p.e.pgDSN, b.Readers[i], b.endLSN)
}

// runBareReader drains slot with the least work a Go client can do: pglogrepl START_REPLICATION
// (pgoutput, proto_version 1, our publication), receive every CopyData, parse the XLogData
// header, discard the payload; stop like pg_recvlogical --endpos does (a keepalive or a message
// at or past endLSN). It answers keepalives that ask for a reply.
func runBareReader(ctx context.Context, dsn, slot, endLSN string) (time.Duration, error) {
	end, err := pglogrepl.ParseLSN(endLSN)
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return 0, err
	}
	cfg.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	if err := pglogrepl.StartReplication(ctx, conn, slot, 0, pglogrepl.StartReplicationOptions{
		Mode: pglogrepl.LogicalReplication, PluginArgs: []string{"proto_version '1'", "publication_names '" + pgPublication + "'"},
	}); err != nil {
		return 0, fmt.Errorf("bare reader: start replication: %w", err)
	}
	// No context per message (pgconn would watch it on every call): a read deadline guards.
	_ = conn.Conn().SetReadDeadline(time.Now().Add(5 * time.Minute))
	var last pglogrepl.LSN
	for {
		msg, err := conn.ReceiveMessage(context.Background())
		if err != nil {
			return 0, fmt.Errorf("bare reader: %w", err)
		}
		cd, ok := msg.(*pgproto3.CopyData)
		if !ok {
			if e, ok := msg.(*pgproto3.ErrorResponse); ok {
				return 0, fmt.Errorf("bare reader: %s", e.Message)
			}
			continue
		}
		switch cd.Data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			k, err := pglogrepl.ParsePrimaryKeepaliveMessage(cd.Data[1:])
			if err != nil {
				return 0, err
			}
			if k.ServerWALEnd >= end {
				return time.Since(t0), nil
			}
			if k.ReplyRequested {
				if err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: last}); err != nil {
					return 0, err
				}
			}
		case pglogrepl.XLogDataByteID:
			x, err := pglogrepl.ParseXLogData(cd.Data[1:])
			if err != nil {
				return 0, err
			}
			last = x.WALStart
			if x.WALStart >= end {
				return time.Since(t0), nil
			}
		}
	}
}

// runRecvlogical drains slot with pg_recvlogical (pgoutput, proto_version 1, our publication,
// to /dev/null) until endLSN and returns the wall time of the process.
func runRecvlogical(ctx context.Context, dsn, slot, endLSN string) (time.Duration, error) {
	bin, err := recvlogicalPath()
	if err != nil {
		return 0, err
	}
	cmd := exec.CommandContext(ctx, bin, "--start", "-S", slot, "-d", dsn,
		"-o", "proto_version=1", "-o", "publication_names="+pgPublication, "-f", "/dev/null", "--no-loop",
		"-E", endLSN)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	t0 := time.Now()
	err = cmd.Run()
	d := time.Since(t0)
	if err != nil {
		return d, fmt.Errorf("pg_recvlogical: %w: %s", err, strings.TrimSpace(out.String()))
	}
	return d, nil
}

func (p *pgBackend) SourceYAML(b *Backlog, i int) string {
	return pgSourceYAML(p.e.pgDSN, b.Readers[i])
}

func pgSourceYAML(dsn, slot string) string {
	return fmt.Sprintf(`  type: postgres
  dsn: %s
  tables: [%s]
  postgres:
    slot: %s
    publication: %s
`, yamlString(dsn), pgTable, slot, pgPublication)
}

// yamlString quotes s for the outboxd config (single-quoted YAML, $ escaped for ${ENV}).
func yamlString(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, "'", "''"), "$", "$$") + "'"
}

func (p *pgBackend) Covers(b *Backlog, pos source.Position) (bool, error) {
	return lsnAfter(pos, b.beforeLast)
}

// lsnAfter reports whether pos is past beforeLast: the stored position then covers the last
// row's transaction (every earlier transaction ends at or before beforeLast).
func lsnAfter(pos source.Position, beforeLast string) (bool, error) {
	if pos == "" {
		return false, nil
	}
	l, err := postgres.ParseLSN(pos)
	if err != nil {
		return false, err
	}
	bl, err := pglogrepl.ParseLSN(beforeLast)
	if err != nil {
		return false, err
	}
	return l > bl, nil
}

func (p *pgBackend) Cleanup(ctx context.Context, b *Backlog) {
	pgDropSlots(ctx, p.e.pgDSN, b.Readers...)
	pgTruncate(ctx, p.e.pgDSN)
}

// pgTruncate empties the outbox table between scenarios (TRUNCATE is not published: the
// publication publishes inserts only).
func pgTruncate(ctx context.Context, dsn string) {
	_ = pgExec(context.WithoutCancel(ctx), dsn, `TRUNCATE `+pgTable)
}

// pgDropSlots drops slots, waiting up to 10 s for a slot still held by an exiting walsender.
func pgDropSlots(ctx context.Context, dsn string, slots ...string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return
	}
	defer c.Close(context.Background())
	for _, s := range slots {
		for try := 0; try < 50; try++ {
			_, err := c.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, s)
			if err == nil || ctx.Err() != nil {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// recvlogicalPath finds pg_recvlogical next to the server binaries: in testenv.PostgresBinDir(),
// or next to the file initdb links to (PostgresBinDir returns the directory of the initdb found
// on PATH, which may be a symlink such as /usr/local/bin/initdb), or on PATH.
func recvlogicalPath() (string, error) {
	var tried []string
	if dir, err := testenv.PostgresBinDir(); err == nil {
		p := filepath.Join(dir, "pg_recvlogical")
		tried = append(tried, p)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		if real, err := filepath.EvalSymlinks(filepath.Join(dir, "initdb")); err == nil {
			p := filepath.Join(filepath.Dir(real), "pg_recvlogical")
			tried = append(tried, p)
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
		}
	}
	if p, err := exec.LookPath("pg_recvlogical"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("pg_recvlogical not found (tried %s and PATH): install the PostgreSQL client binaries", strings.Join(tried, ", "))
}
