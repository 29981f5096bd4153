package bench

// drain-pg-messages: the tableless outbox (source.postgres.messages) under drain-pg-1's
// workload. The same N single-event transactions, the same ~300-byte payload, aggregate types
// (topics), keys and eventType header, but each transaction emits its event with
// pg_logical_emit_message(true, 'outboxd.event', <the event as a JSON object>) instead of
// inserting an outbox row; outboxd reads them with messages: {prefix: outboxd.event}. The
// reference reader is pg_recvlogical with pgoutput's messages option (it receives the same
// Message records outboxd does; the bare pglogrepl reader of drain-pg-1 requests no messages, so
// it is left out rather than measured on another stream).

import (
	"context"
	"fmt"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/source/postgres"
)

// pgMessagePrefix is the bench's outbox message prefix.
const pgMessagePrefix = postgres.DefaultMessagePrefix

// pgEmitSQL creates the message loader: drain-pg's load procedure with the INSERT replaced by
// pg_logical_emit_message of the same event (COMMIT every per_tx events).
func pgEmitSQL() string {
	return `CREATE OR REPLACE PROCEDURE ` + pgSchema + `.emit(first int, n int, per_tx int) LANGUAGE plpgsql AS $$
DECLARE i int;
BEGIN
	FOR i IN first .. first + n - 1 LOOP
		PERFORM pg_logical_emit_message(true, '` + pgMessagePrefix + `', json_build_object(
			'id', gen_random_uuid(), 'aggregatetype', ` + pgAggTypeSQL + `, 'aggregateid', 'customer-' || (i % 1000),
			'type', 'OrderCreated', 'payload', ` + pgPayloadSQL + `)::text);
		IF (i - first + 1) % per_tx = 0 THEN COMMIT; END IF;
	END LOOP;
	COMMIT;
END $$`
}

// pgMessagesBackend is pgBackend with the backlog emitted as messages.
type pgMessagesBackend struct {
	*pgBackend
	emitOnce sync.Once
	emitErr  error
}

func (p *pgMessagesBackend) Name() string {
	return "PostgreSQL (tableless outbox: pg_logical_emit_message)"
}
func (p *pgMessagesBackend) References() []string { return []string{"pg_recvlogical (messages=true)"} }

// RatioTarget: no target for the message workload.
func (p *pgMessagesBackend) RatioTarget(int) float64 { return 0 }

// cpuRatioTarget: none for the message workload either.
func (p *pgMessagesBackend) cpuRatioTarget(int) string { return "" }

func (p *pgMessagesBackend) PrepareDrain(ctx context.Context, tag string, events, perTx, readers int) (*Backlog, error) {
	if err := p.ensureSchema(ctx); err != nil {
		return nil, err
	}
	// The tableless outbox as deployed: no outbox table, an empty publication (created before
	// the slots: pgoutput reads publications as of the WAL it decodes).
	p.emitOnce.Do(func() {
		p.emitErr = pgExec(ctx, p.e.pgDSN, pgEmitSQL(), `DROP PUBLICATION IF EXISTS `+pgMessagesPublication,
			`CREATE PUBLICATION `+pgMessagesPublication+` WITH (publish = 'insert')`)
	})
	if p.emitErr != nil {
		return nil, p.emitErr
	}
	b, err := p.newBacklog(ctx, tag, events, perTx, readers)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	if b.beforeLast, b.endLSN, err = pgEmit(ctx, p.e.pgDSN, events, perTx); err != nil {
		p.Cleanup(context.Background(), b)
		return nil, err
	}
	b.LoadTime = time.Since(t0)
	return b, nil
}

// pgEmit is pgLoad for messages: events 1..n over several connections, the last one alone.
func pgEmit(ctx context.Context, dsn string, n, perTx int) (beforeLast, end string, err error) {
	conns := max(2, runtime.NumCPU())
	bulk := n - 1
	per := (bulk + conns - 1) / conns
	var jobs []func(context.Context) error
	for c := 0; c < conns && c*per < bulk; c++ {
		from, k := 1+c*per, min(per, bulk-c*per)
		jobs = append(jobs, func(ctx context.Context) error {
			return pgExec(ctx, dsn, fmt.Sprintf(`CALL %s.emit(%d, %d, %d)`, pgSchema, from, k, perTx))
		})
	}
	if err := parallel(ctx, jobs...); err != nil {
		return "", "", fmt.Errorf("emit backlog: %w", err)
	}
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", "", err
	}
	defer c.Close(context.Background())
	if err := c.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&beforeLast); err != nil {
		return "", "", err
	}
	if _, err := c.Exec(ctx, fmt.Sprintf(`CALL %s.emit(%d, 1, 1)`, pgSchema, 1+bulk)); err != nil {
		return "", "", fmt.Errorf("emit the last event: %w", err)
	}
	if err := c.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&end); err != nil {
		return "", "", err
	}
	return beforeLast, end, nil
}

func (p *pgMessagesBackend) RunReference(ctx context.Context, b *Backlog, _, i int) (time.Duration, error) {
	bin, err := recvlogicalPath()
	if err != nil {
		return 0, err
	}
	cmd := exec.CommandContext(ctx, bin, "--start", "-S", b.Readers[i], "-d", p.e.pgDSN,
		"-o", "proto_version=1", "-o", "publication_names="+pgMessagesPublication, "-o", "messages=true",
		"-f", "/dev/null", "--no-loop", "-E", b.endLSN)
	out, err := runTimed(cmd)
	if err != nil {
		return out.d, fmt.Errorf("pg_recvlogical: %w: %s", err, strings.TrimSpace(out.log))
	}
	return out.d, nil
}

type timedRun struct {
	d   time.Duration
	log string
}

func runTimed(cmd *exec.Cmd) (timedRun, error) {
	var b strings.Builder
	cmd.Stdout, cmd.Stderr = &b, &b
	t0 := time.Now()
	err := cmd.Run()
	return timedRun{d: time.Since(t0), log: b.String()}, err
}

// pgMessagesPublication is the tableless outbox's publication: it lists no table.
const pgMessagesPublication = "outboxd_bench_msgs"

// SourceYAML: no source.tables (the tableless outbox needs none) and the empty publication.
func (p *pgMessagesBackend) SourceYAML(b *Backlog, i int) string {
	return fmt.Sprintf("  type: postgres\n  dsn: %s\n  postgres:\n    slot: %s\n    publication: %s\n    messages:\n      prefix: %s\n",
		yamlString(p.e.pgDSN), b.Readers[i], pgMessagesPublication, pgMessagePrefix)
}

// drainPGMessages is the drain-pg-messages scenario.
func drainPGMessages(ctx context.Context, e *env) ([]Result, error) {
	return drain(ctx, e, &pgMessagesBackend{pgBackend: e.pg}, "drain-pg-messages", 1)
}
