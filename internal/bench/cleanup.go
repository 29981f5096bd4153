package bench

// cleanup-pg: the outbox table's size after CleanupDuration (default 10 minutes, 10 s with
// -short) of steady
// single-row inserts at CleanupRate rows/s, with outbox.cleanup on and off, side by side: one
// private PostgreSQL (autovacuum on, its defaults: the bench's shared server has it off), two
// databases, two outboxd processes (`outboxd run`), both loaded at the same time. After the load
// it waits until each outboxd stored a position past the last row and, for the one with
// cleanup, 25 s more (two cleanup cycles of the default 10 s interval), then stops them and
// reads pg_total_relation_size, count(*) and n_dead_tup of each table. During the load it
// samples count(*) every 10 s, or every half of a shorter load (the table "stays bounded": the
// highest sample is reported).

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/source"
)

const cleanupScenario = "cleanup-pg"

// cleanupSide is one of the two runs.
type cleanupSide struct {
	name    string // "on", "off"
	dsn     string
	slot    string
	inserts atomic.Int64
	maxRows int64
	last    string // LSN before the final row
	run     procRun
	err     error
}

func cleanupPG(ctx context.Context, e *env) ([]Result, error) {
	o := e.o
	dur, rate := o.CleanupDuration, o.CleanupRate
	if dur <= 0 {
		dur = 10 * time.Minute
		if o.Short {
			dur = 10 * time.Second
		}
	}
	if rate <= 0 {
		rate = 500
	}
	bin, err := e.outboxdBin(ctx)
	if err != nil {
		return nil, err
	}
	o.Log.Info("cleanup-pg: starting a private PostgreSQL (autovacuum on)")
	pg, err := testenv.StartPostgres()
	if err != nil {
		return nil, err
	}
	defer pg.Destroy()
	sides := []*cleanupSide{{name: "on"}, {name: "off"}}
	for _, s := range sides {
		db := "cleanup_" + s.name
		if err := pg.Exec(ctx, "postgres", "CREATE DATABASE "+db); err != nil {
			return nil, err
		}
		s.dsn, s.slot = pg.DSN(db), slotName(e.runID+"_cl"+s.name, 0)
		if err := pgExec(ctx, s.dsn, pgSetupSQL()...); err != nil {
			return nil, err
		}
		if err := pgExec(ctx, s.dsn, fmt.Sprintf(`SELECT pg_create_logical_replication_slot('%s', 'pgoutput')`, s.slot)); err != nil {
			return nil, err
		}
	}
	var loaded atomic.Bool
	var wg sync.WaitGroup
	for _, s := range sides {
		topicPrefix := "outboxd-bench." + e.runID + "_cl" + s.name + "."
		cfg := outboxdYAML(e, pgSourceYAML(s.dsn, s.slot), topicPrefix, "")
		if s.name == "on" {
			cfg = strings.Replace(cfg, "\noutbox:\n", "\noutbox:\n  cleanup:\n    enabled: true\n", 1)
		}
		var reached time.Time
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer e.dropTopics(topicPrefix)
			s.run, s.err = runOutboxdProc(ctx, bin, cfg, func(p source.Position) (bool, error) {
				if !loaded.Load() {
					return false, nil
				}
				ok, err := lsnAfter(p, s.last)
				if !ok || err != nil {
					return false, err
				}
				if reached.IsZero() {
					reached = time.Now()
				}
				return s.name == "off" || time.Since(reached) > 25*time.Second, nil
			}, procOpts{poll: 100 * time.Millisecond, timeout: dur + 10*time.Minute})
		}()
	}
	o.Log.Info("cleanup-pg: steady load", "rows_per_s", rate, "duration", dur)
	loadErr := cleanupLoad(ctx, sides, rate, dur, o)
	for _, s := range sides { // the final row's transaction marks "everything delivered"
		if loadErr == nil {
			s.last, loadErr = pgQueryString(ctx, s.dsn, "SELECT pg_current_wal_lsn()::text")
		}
		if loadErr == nil {
			loadErr = pgExec(ctx, s.dsn, "CALL "+pgSchema+".load(0, 1, 1, 0)")
		}
	}
	if loadErr != nil {
		return nil, loadErr
	}
	loaded.Store(true)
	wg.Wait()
	var res []Result
	for _, s := range sides {
		if s.err != nil {
			return res, fmt.Errorf("cleanup %s: %w", s.name, s.err)
		}
		if !s.run.drained {
			return res, fmt.Errorf("cleanup %s: outboxd did not deliver the load: %s; log: %s", s.name, s.run.exit, s.run.logTail)
		}
		size, rows, dead, err := cleanupTableFigures(ctx, s.dsn)
		if err != nil {
			return res, err
		}
		res = append(res, Result{Scenario: cleanupScenario, Name: "outbox table after " + dur.String() + ", cleanup " + s.name,
			Value: float64(size) / (1 << 20), Unit: "MiB",
			Detail: fmt.Sprintf("pg_total_relation_size; %d rows (count(*)), %d dead tuples; %d rows inserted at up to %d/s (single-row transactions); highest count(*) sampled every %s during the load: %d; the scenario's own private PostgreSQL (autovacuum on, fsync off), not the one in the Machine line",
				rows, dead, s.inserts.Load()+1, rate, cleanupSampleEvery(dur), s.maxRows),
			Extra: map[string]float64{"bytes": float64(size), "rows": float64(rows), "dead_tuples": float64(dead),
				"inserted": float64(s.inserts.Load() + 1), "max_rows_sampled": float64(s.maxRows)}})
	}
	return res, nil
}

// cleanupLoad inserts rate rows/s (single-row transactions, in ticks of 100 ms) into every
// side's table for dur, sampling each table's count(*) every cleanupSampleEvery(dur).
//
// The load's end (stop, after dur) only stops the loops; each statement runs under ctx, so one
// in flight at the end completes. Running statements under the deadline's context raced it: a
// dial cut by the deadline can return "i/o timeout" before the context reports itself done, and
// the end of the load then read as a failed insert (CI, 16d4f64).
func cleanupLoad(ctx context.Context, sides []*cleanupSide, rate int, dur time.Duration, o *Options) error {
	stop, cancel := context.WithTimeout(ctx, dur)
	defer cancel()
	errs := make(chan error, 2*len(sides))
	var wg sync.WaitGroup
	for _, s := range sides {
		wg.Add(2)
		go func() { // the load
			defer wg.Done()
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			per := max(rate/10, 1)
			for i := 1; ; i += per {
				select {
				case <-stop.Done():
					return
				case <-t.C:
				}
				if err := pgExec(ctx, s.dsn, fmt.Sprintf("CALL %s.load(%d, %d, 1, 0)", pgSchema, i, per)); err != nil {
					if ctx.Err() == nil {
						errs <- fmt.Errorf("cleanup %s: load: %w", s.name, err)
					}
					return
				}
				s.inserts.Add(int64(per))
			}
		}()
		go func() { // the samples
			defer wg.Done()
			t := time.NewTicker(cleanupSampleEvery(dur))
			defer t.Stop()
			for {
				select {
				case <-stop.Done():
					return
				case <-t.C:
				}
				v, err := pgQueryString(ctx, s.dsn, "SELECT count(*)::text FROM "+pgTable)
				if err != nil {
					o.Log.Warn("cleanup-pg sample failed", "cleanup", s.name, "err", err)
					continue
				}
				var n int64
				fmt.Sscan(v, &n)
				s.maxRows = max(s.maxRows, n)
				o.Log.Info("cleanup-pg sample", "cleanup", s.name, "rows", n, "inserted", s.inserts.Load())
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// cleanupTableFigures reads the outbox table's total size (heap, TOAST, indexes), row count and
// dead tuples (after a pg_stat_force_next_flush where the server has it).
func cleanupTableFigures(ctx context.Context, dsn string) (size, rows, dead int64, err error) {
	v, err := pgQueryString(ctx, dsn, fmt.Sprintf(`SELECT pg_total_relation_size('%s')::text || ' ' || (SELECT count(*) FROM %s)::text || ' ' ||
	coalesce((SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = '%s'::regclass), -1)::text`, pgTable, pgTable, pgTable))
	if err != nil {
		return 0, 0, 0, err
	}
	_, err = fmt.Sscan(v, &size, &rows, &dead)
	return size, rows, dead, err
}

// cleanupSampleEvery is the count(*) sampling interval: 10 s, or half a shorter load (a 10 s
// load's only 10 s tick would land on its end).
func cleanupSampleEvery(dur time.Duration) time.Duration {
	return min(10*time.Second, dur/2)
}
