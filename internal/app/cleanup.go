package app

// outbox.cleanup: the housekeeping that deletes delivered outbox rows (README "Housekeeping").
//
// The decision is internal/cleanup.Tracker's (see its package comment for the guarantee and
// its argument): the pipeline's hooks feed it, on the loop goroutine — OnAccept with each
// accepted chunk, OnCommit with each stored position, OnOpen (Reset) each time the source is
// (re)opened — each under a mutex held only for the Tracker call, so they never wait on I/O.
// A goroutine of its own wakes every outbox.cleanup.interval, takes the released ids in
// batches of outbox.cleanup.batch and deletes them through the adapter's cleaner, one DELETE
// per batch on the adapter's normal connection, then refreshes outboxd_outbox_table_rows. A
// failed DELETE puts its ids back and the cycle ends (counted, logged): the next cycle retries;
// delivery never waits for it.
//
// outbox.cleanup.retain is applied by the Tracker (a transaction's ids are released once its
// commit time from the log is retain old), so the adapters get retain 0: that measure is the
// same for PostgreSQL and MySQL and needs no server setting.
//
// After a crash (or any stop) the ids that were delivered but not yet deleted are only in
// memory, and lost: those rows stay in the table. Nothing sweeps them at start, because no
// statement can tell from the table alone which rows the stored position covers (a row's
// commit order relative to a stored LSN or binlog position is not in the table). That is at
// most about one interval's worth of rows per stop; README says how to remove them by hand.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/outboxd/outboxd/internal/cleanup"
	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/metrics"
	"github.com/outboxd/outboxd/source"
	"github.com/outboxd/outboxd/source/mysql"
	"github.com/outboxd/outboxd/source/postgres"
)

// cleanupDeleteTimeout bounds one DELETE (and one row estimate).
const cleanupDeleteTimeout = 30 * time.Second

// cleanupRun is the running housekeeping of one active term; the zero value (cleanup off)
// does nothing. Its methods are the pipeline's OnAccept, OnCommit and OnOpen hooks.
type cleanupRun struct {
	mu     sync.Mutex
	tr     *cleanup.Tracker // nil: off
	stop   context.CancelFunc
	done   chan struct{}
	closed bool
}

// startCleanup starts outbox.cleanup when enabled.
func startCleanup(ctx context.Context, c *config.Config, ad adapter, log *slog.Logger, m *metrics.Metrics) (*cleanupRun, error) {
	cc := c.Outbox.Cleanup
	if !cc.Enabled {
		return &cleanupRun{}, nil
	}
	if len(c.Source.Tables) == 0 {
		log.Info("outbox.cleanup: source.tables is empty (the tableless outbox): there is no table to clean; cleanup does not run")
		return &cleanupRun{}, nil
	}
	cl, ok := ad.(cleaner)
	if !ok {
		return nil, &config.Error{Key: "outbox.cleanup.enabled", Msg: fmt.Sprintf("source.type %s cannot delete outbox rows", c.Source.Type)}
	}
	r := &cleanupRun{tr: cleanup.New(cleanup.Config{IDColumn: c.Outbox.Columns.ID, Retain: cc.Retain}), done: make(chan struct{})}
	ctx, r.stop = context.WithCancel(ctx)
	log = log.With("component", "outbox.cleanup")
	log.Info("deleting delivered outbox rows", "interval", cc.Interval, "batch", cc.Batch, "retain", cc.Retain, "tables", c.Source.Tables)
	go r.loop(ctx, cl, c.Source.Tables, cc, log, m)
	return r, nil
}

func (r *cleanupRun) accepted(tx *source.Tx) {
	if r.tr == nil {
		return
	}
	now := time.Now()
	r.mu.Lock()
	r.tr.Accept(tx, now)
	r.mu.Unlock()
}

func (r *cleanupRun) committed(p source.Position) {
	if r.tr == nil {
		return
	}
	r.mu.Lock()
	r.tr.Committed(p)
	r.mu.Unlock()
}

// opened is called each time the pipeline opened the source: it re-reads from the stored
// position, so what was accepted and not committed is forgotten (it comes again).
func (r *cleanupRun) opened() {
	if r.tr == nil {
		return
	}
	r.mu.Lock()
	r.tr.Reset()
	r.mu.Unlock()
}

// close stops the loop (a DELETE under way is cancelled and rolled back) and closes the
// cleaner's connection.
func (r *cleanupRun) close() {
	if r.tr == nil || r.closed {
		return
	}
	r.closed = true
	r.stop()
	<-r.done
}

func (r *cleanupRun) loop(ctx context.Context, cl cleaner, tables []string, cc config.Cleanup, log *slog.Logger, m *metrics.Metrics) {
	defer close(r.done)
	defer cl.CloseCleaner()
	t := time.NewTicker(cc.Interval)
	defer t.Stop()
	var last cleanup.Stats
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := r.cycle(ctx, cl, tables, cc.Batch, m)
		if ctx.Err() != nil {
			return
		}
		m.CleanupCycle()
		if err != nil {
			m.CleanupFailed()
			log.Warn("cleanup cycle failed; retried next cycle (delivery is not affected)", "err", err, "next_in", cc.Interval)
		}
		r.mu.Lock()
		s := r.tr.Stats()
		r.mu.Unlock()
		last = reportCleanupStats(log, m, last, s)
	}
}

// cycle deletes every released, due id, batch by batch, then refreshes the row estimates.
func (r *cleanupRun) cycle(ctx context.Context, cl cleaner, tables []string, batch int, m *metrics.Metrics) error {
	var errs []error
	for ctx.Err() == nil {
		r.mu.Lock()
		b, ok := r.tr.Take(batch, time.Now())
		r.mu.Unlock()
		if !ok {
			break
		}
		dctx, cancel := context.WithTimeout(ctx, cleanupDeleteTimeout)
		n, err := cl.DeleteOutboxRows(dctx, b.Table, b.IDs, 0) // retain: the Tracker's (file comment)
		cancel()
		if err != nil {
			r.mu.Lock()
			r.tr.Putback(b)
			r.mu.Unlock()
			errs = append(errs, err)
			break
		}
		m.CleanupDeleted(b.Table, n)
	}
	for _, table := range tables {
		if ctx.Err() != nil {
			break
		}
		ectx, cancel := context.WithTimeout(ctx, cleanupDeleteTimeout)
		n, err := cl.OutboxRowEstimate(ectx, table)
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if n >= 0 {
			m.SetOutboxRows(table, n)
		}
	}
	return errors.Join(errs...)
}

// reportCleanupStats logs and counts what changed in the Tracker's counters since last.
func reportCleanupStats(log *slog.Logger, m *metrics.Metrics, last, s cleanup.Stats) cleanup.Stats {
	if d := s.Dropped - last.Dropped; d > 0 {
		m.CleanupDropped(d)
		log.Warn("delivered rows' ids dropped from memory (more than the tracker's cap are waiting): those rows stay in the table",
			"dropped", d, "cap", cleanup.DefaultMaxIDs, "held", s.Held)
	}
	if d := s.NoID - last.NoID; d > 0 {
		log.Warn("delivered rows without an id (column absent or NULL) cannot be deleted by id: they stay in the table", "rows", d)
	}
	if d := s.Unmatched - last.Unmatched; d > 0 {
		log.Info("stored positions not among the transactions accepted since the source opened: nothing deleted for them",
			"positions", d, "last", s.LastUnmatched)
	}
	return s
}

// Both source adapters clean.
var (
	_ cleaner = (*postgres.Adapter)(nil)
	_ cleaner = (*mysql.Adapter)(nil)
)
