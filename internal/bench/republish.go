package bench

// republish-pg: the rate of `outboxd republish` (app.Republish, in process, as the command runs
// it) over a PostgreSQL outbox table of republishRows rows with the bench's ~300 B jsonb
// payloads, to the bench's broker; and the same scan as a --dry-run (scan and transform, no
// Kafka).

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/outboxd/outboxd/internal/app"
	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/testenv"
)

// republishRows is the table's size (-short: Options.N).
const republishRows = 1000000

// republishTable is the scenario's own table (the drain scenarios' table is emptied and
// refilled by them).
const republishTable = pgSchema + ".outbox_republish"

func republishPG(ctx context.Context, e *env) ([]Result, error) {
	const scenario = "republish-pg"
	rows := republishRows
	if e.o.Short {
		rows = e.o.N
	}
	if err := e.pg.ensureSchema(ctx); err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := pgExec(ctx, e.pgDSN,
		`DROP TABLE IF EXISTS `+republishTable,
		strings.Replace(testenv.OutboxDDL, "public.outbox", republishTable, 1),
		fmt.Sprintf(`INSERT INTO %s (id, aggregatetype, aggregateid, type, payload)
			SELECT gen_random_uuid(), %s, 'customer-' || (i %% 1000), 'OrderCreated', %s FROM generate_series(1, %d) AS i`,
			republishTable, pgAggTypeSQL, pgPayloadSQL, rows),
		`VACUUM ANALYZE `+republishTable); err != nil {
		return nil, fmt.Errorf("load %s: %w", republishTable, err)
	}
	avg, err := pgQueryString(ctx, e.pgDSN, `SELECT round(avg(octet_length(payload::text)))::text FROM `+republishTable)
	if err != nil {
		return nil, err
	}
	e.o.Log.Info("republish table loaded", "rows", rows, "avg_payload_bytes", avg, "took", time.Since(t0).Round(time.Millisecond))

	prefix := fmt.Sprintf("outboxd-bench.%s.republish.", e.runID)
	defer e.dropTopics(prefix)
	cfgText := outboxdYAML(e, fmt.Sprintf("  type: postgres\n  dsn: %s\n  tables: [%s]\n", yamlString(e.pgDSN), republishTable), prefix, "")
	cfg, err := config.Parse([]byte(cfgText), os.LookupEnv)
	if err != nil {
		return nil, fmt.Errorf("bench config: %w\n%s", err, cfgText)
	}
	defer os.RemoveAll(filepath.Dir(cfg.Offsets.Path))

	run := func(dry bool) (time.Duration, string, error) {
		var out strings.Builder
		start := time.Now()
		err := app.Republish(ctx, cfg, app.RepublishOptions{DryRun: dry}, &out, io.Discard)
		return time.Since(start), out.String(), err
	}
	dryTook, dryOut, err := run(true)
	if err != nil {
		return nil, fmt.Errorf("republish --dry-run: %w\n%s", err, dryOut)
	}
	stopProfile := func() {}
	if e.o.CPUProfile != "" { // -cpuprofile: the real run's CPU profile
		f, err := os.Create(e.o.CPUProfile + "." + scenario + ".pprof")
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
		stopProfile = pprof.StopCPUProfile
	}
	took, out, err := run(false)
	stopProfile()
	if err != nil {
		return nil, fmt.Errorf("republish: %w\n%s", err, out)
	}
	n, err := countRecords(e.brokers, topicsOf(prefix))
	if err != nil {
		return nil, err
	}
	if n != int64(rows) {
		return nil, fmt.Errorf("republish delivered %d records, want %d:\n%s", n, rows, out)
	}
	want := fmt.Sprintf("republished %d rows of %s (%d selected): %d delivered, 0 dead-lettered", rows, republishTable, rows, rows)
	if !strings.Contains(out, want) {
		return nil, fmt.Errorf("republish summary %q, want %q", out, want)
	}
	rate, dryRate := float64(rows)/took.Seconds(), float64(rows)/dryTook.Seconds()
	return []Result{
		{Scenario: scenario, Name: "outboxd republish rate", Value: rate, Unit: "events/s",
			Detail: fmt.Sprintf("%d rows (jsonb payload avg %s B) in %s, count, scan and Kafka acks included; kafka defaults (snappy, adaptive linger, max_inflight 4096)",
				rows, avg, took.Round(time.Millisecond)),
			Extra: map[string]float64{"rows": float64(rows), "seconds": took.Seconds()}},
		{Scenario: scenario, Name: "outboxd republish --dry-run rate", Value: dryRate, Unit: "events/s",
			Detail: fmt.Sprintf("%d rows in %s: count, scan and transform, nothing produced", rows, dryTook.Round(time.Millisecond)),
			Extra:  map[string]float64{"rows": float64(rows), "seconds": dryTook.Seconds()}},
	}, nil
}
