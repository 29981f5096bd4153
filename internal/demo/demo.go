// Package demo runs outboxd for real on this machine: a private PostgreSQL started from the
// installed server binaries, the embedded Kafka-protocol broker (kfake) over TCP, the outboxd
// pipeline, a sample writer committing outbox rows, and a Kafka consumer printing each event as
// it arrives.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/internal/app"
	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/testenv"
)

// Options of a demo run.
type Options struct {
	Interval time.Duration // between sample writes
	Events   int           // stop after this many events were printed (0 = until ctx ends)
	Verbose  bool          // outboxd's own logs at info level (else warnings only)
}

// Run runs the demo until ctx ends or Events were shown.
func Run(ctx context.Context, out io.Writer, o Options) error {
	fmt.Fprintln(out, "starting a private PostgreSQL (initdb, wal_level=logical) ...")
	pg, err := testenv.StartPostgres()
	if err != nil {
		return err
	}
	defer pg.Destroy()
	if err := pg.Exec(ctx, "postgres", "CREATE DATABASE app"); err != nil {
		return err
	}
	if err := pg.Exec(ctx, "app", testenv.OutboxDDL); err != nil {
		return err
	}
	broker, err := testenv.StartBroker()
	if err != nil {
		return err
	}
	defer broker.Stop()
	fmt.Fprintf(out, "PostgreSQL on 127.0.0.1:%d, Kafka-protocol broker on %s\n", pg.Port, broker.Addr())

	dir, err := os.MkdirTemp("", "outboxd-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfgText := fmt.Sprintf(`source:
  type: postgres
  dsn: %s
  tables: [public.outbox]
kafka:
  brokers: [%s]
offsets:
  path: %s
http:
  listen: ""
`, pg.DSN("app"), broker.Addr(), filepath.Join(dir, "offsets.json"))
	cfgPath := filepath.Join(dir, "outboxd.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfgText), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(out, "outboxd config (%s):\n%s\n", cfgPath, cfgText)
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return err
	}
	level := slog.LevelWarn
	if o.Verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: level}))

	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// outboxd's return ends the consumer loop too (cancel), so the verdict below never depends on
	// which of the two noticed a stop first.
	var runErr error
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		defer cancel()
		runErr = app.Run(ctx, cfg, log)
	}()

	wrote := make(chan struct{}) // the writer is done with out and with the database
	go func() {
		defer close(wrote)
		writer(ctx, pg.DSN("app"), o.Interval, out)
	}()

	cl, err := kgo.NewClient(kgo.SeedBrokers(broker.Addr()), kgo.ConsumeRegex(), kgo.ConsumeTopics(`outbox\.event\..*`),
		kgo.MetadataMinAge(250*time.Millisecond), kgo.MetadataMaxAge(time.Second), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		cancel()
		<-stopped
		<-wrote
		return err
	}
	defer cl.Close()
	fmt.Fprintln(out, "events as they arrive in Kafka (Ctrl-C to stop):")
	shown := 0
	enough := false
	for ctx.Err() == nil && !enough {
		fetches := cl.PollFetches(ctx)
		fetches.EachRecord(func(r *kgo.Record) {
			id := ""
			for _, h := range r.Headers {
				if h.Key == "id" {
					id = string(h.Value)
				}
			}
			fmt.Fprintf(out, "  %s [p%d@%d] key=%s id=%s %s\n", r.Topic, r.Partition, r.Offset, r.Key, id, r.Value)
			shown++
			if o.Events > 0 && shown >= o.Events {
				enough = true
			}
		})
	}
	cancel()
	<-stopped
	<-wrote
	if err := stopOutcome(runErr, enough || parent.Err() != nil); err != nil {
		return err
	}
	fmt.Fprintf(out, "shown %d events; outboxd stopped cleanly\n", shown)
	return nil
}

// stopOutcome is the demo's verdict once outboxd's app.Run returned runErr; asked: the demo had
// asked it to stop (its context ended, or enough events were shown). A nil return from a run
// that was asked to stop is a clean stop; a nil return from one that was not is an error too.
func stopOutcome(runErr error, asked bool) error {
	switch {
	case runErr != nil:
		return fmt.Errorf("outboxd stopped: %w", runErr)
	case !asked:
		return errors.New("outboxd stopped: it returned while the demo was still running, without an error")
	}
	return nil
}

// writer commits a sample order event every interval, and every third time a second event of
// another aggregate in the same transaction.
func writer(ctx context.Context, dsn string, interval time.Duration, out io.Writer) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		fmt.Fprintf(out, "writer: %v\n", err)
		return
	}
	defer conn.Close(context.Background())
	t := time.NewTicker(interval)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			if ctx.Err() == nil {
				fmt.Fprintf(out, "writer stopped: %v\n", err)
			}
			return
		}
		_, err = tx.Exec(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
			VALUES (gen_random_uuid(), 'order', $1, 'OrderCreated', jsonb_build_object('order', $2::int, 'total', $3::numeric))`,
			fmt.Sprintf("order-%d", n%5), n, float64(n)*9.5)
		if err != nil && ctx.Err() == nil {
			fmt.Fprintf(out, "writer: %v\n", err)
		}
		if n%3 == 0 {
			tx.Exec(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
				VALUES (gen_random_uuid(), 'customer', $1, 'CustomerUpdated', jsonb_build_object('customer', $2::int))`,
				fmt.Sprintf("customer-%d", n%2), n)
		}
		if err := tx.Commit(ctx); err != nil && ctx.Err() == nil {
			fmt.Fprintf(out, "writer: %v\n", err)
		}
	}
}
