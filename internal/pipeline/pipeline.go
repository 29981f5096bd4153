// Package pipeline is the one loop that wires a source, the outbox transform, a Kafka producer
// and the offsets tracker and store:
//
//	source.Next ──txCh (cap TxBuffer)──▶ loop: route rows, Track, Produce ──▶ producer
//	                                      ▲                                     │ done(err)
//	                                      └──────── outcomes (never blocks) ◀────┘
//	loop, every CommitInterval: tracker.Commit ──▶ Store.Save (its own goroutine, one at a time)
//	                            ◀── saved ── then Source.Confirm on the loop
//
// Backpressure: the tracker caps unresolved records (MaxInflight) and uncommitted transactions
// (MaxTxs). While it is full the loop stops taking transactions, the reader goroutine blocks on
// txCh, and the source stops reading, so TCP flow control pushes back to the database.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/outboxd/outboxd/offsets"
	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
)

// Producer delivers records.
//
// Produce queues one record and may block while the producer's own in-flight cap is reached; it
// returns an error if ctx ends or the producer is closed. done is called exactly once per queued
// record from the producer's goroutine, with nil once Kafka acked it, or the final error; done
// never blocks and never calls Produce. Close waits for every outstanding done.
type Producer interface {
	Produce(ctx context.Context, rec *sink.Record, done func(error)) error
	Close() error
}

// Options configure Run. Zero values get the defaults noted.
type Options struct {
	NewSource func() source.Source // a new, unopened source (called again after a source error)
	Producer  Producer
	Route     func(*source.Row) (sink.Record, error)      // the outbox transform
	Classify  func(error) (permanent bool, reason string) // Kafka error → permanent (DLQ) or transient
	Store     offsets.Store
	DLQTopic  string
	// DLQBreaker stops the pipeline when too many recent records were dead-lettered
	// (kafka.dlq_max_rate); the zero value never trips.
	DLQBreaker Breaker

	MaxInflight     int           // unresolved records (default 4096)
	MaxRecordBytes  int           // the producer's record size limit; bigger dead letters lose their value (default 1 MiB)
	MaxTxs          int           // uncommitted transactions (default 4*MaxInflight)
	TxBuffer        int           // transactions read ahead of the loop (default 64)
	ReadAheadRows   int           // rows read ahead of the loop, across those transactions (default 2048)
	CommitInterval  time.Duration // how often the acked prefix is stored (default 100ms)
	ShutdownTimeout time.Duration // how long a stop waits for in-flight acks (default 30s)
	Log             *slog.Logger
	Metrics         Metrics
	// OnCommit, when set, is called after each successful Save+Confirm (tests, metrics).
	OnCommit func(offsets.Position)
	// OnOpen, when set, is called each time the source has been opened.
	OnOpen func()
}

// Metrics receives pipeline events; every method must be cheap and non-blocking.
type Metrics interface {
	EventsRead(n int)
	Produced(topic string, commitTime time.Time)
	DeadLettered(reason string)
	Inflight(n int)
	Committed(p offsets.Position)
}

type noMetrics struct{}

func (noMetrics) EventsRead(int)             {}
func (noMetrics) Produced(string, time.Time) {}
func (noMetrics) DeadLettered(string)        {}
func (noMetrics) Inflight(int)               {}
func (noMetrics) Committed(offsets.Position) {}

// commitLogEvery is how often a stored position is logged at info level.
const commitLogEvery = 30 * time.Second

// ErrShutdownTimeout is returned when a stop could not drain in-flight records in time.
var ErrShutdownTimeout = errors.New("shutdown_timeout passed with records still unacked")

// inflight is one record on its way to Kafka (or to the DLQ).
type inflight struct {
	seq        offsets.Seq
	rec        sink.Record
	row        *source.Row
	pos        offsets.Position
	commitTime time.Time
	dlq        bool  // this is the dead-letter write for rec
	err        error // outcome
}

type runner struct {
	o       Options
	log     *slog.Logger
	tracker *offsets.Tracker
	src     source.Source
	stored  offsets.Position // durably stored (Store.Save returned) and then confirmed

	// One Store.Save at a time runs off the loop goroutine (an fsync can take tens of ms under
	// load; the loop keeps admitting and settling records meanwhile). saving is the position
	// being saved ("" = none), queued the newest committed prefix waiting for its turn (only
	// the newest matters). Results arrive on saved; all three belong to the loop goroutine.
	saving, queued offsets.Position
	saved          chan saveResult
	saveCtx        context.Context  // the session's; cancelled when it ends
	committed      offsets.Position // newest acked prefix taken from the tracker (may be unsaved)

	lastLog time.Time  // last "committed position" info line
	stall   stallWatch // WARN while records wait for Kafka (stall.go)

	mu       sync.Mutex
	outcomes []*inflight
	wake     chan struct{}

	budget *stopBudget // shutdown_timeout: one deadline for the whole stop
}

func (o *Options) defaults() {
	if o.MaxInflight <= 0 {
		o.MaxInflight = 4096
	}
	if o.MaxTxs <= 0 {
		o.MaxTxs = 4 * o.MaxInflight
	}
	if o.MaxRecordBytes <= 0 {
		o.MaxRecordBytes = 1 << 20
	}
	if o.TxBuffer <= 0 {
		o.TxBuffer = 64
	}
	if o.ReadAheadRows <= 0 {
		o.ReadAheadRows = 2048
	}
	if o.CommitInterval <= 0 {
		o.CommitInterval = 100 * time.Millisecond
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = 30 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Metrics == nil {
		o.Metrics = noMetrics{}
	}
}

// Run runs the pipeline until ctx is cancelled (a graceful stop: stop reading, wait for in-flight
// acks up to ShutdownTimeout, store the acked prefix, return nil) or a fatal error (returned; the
// stored position never passes an unresolved record). Source errors after a successful start are
// retried: the loop drains what is in flight, stores it, and reopens the source from there.
// Errors wrapping source.ErrPositionLost are never retried.
func Run(ctx context.Context, o Options) error {
	o.defaults()
	r := &runner{o: o, log: o.Log, tracker: offsets.NewTracker(o.MaxInflight, o.MaxTxs), wake: make(chan struct{}, 1),
		saved: make(chan saveResult, 1), budget: newStopBudget(ctx, o.ShutdownTimeout)}
	defer r.budget.release()
	defer func() {
		// After a fatal error records may still be in flight: bound the wait. After a stop, the
		// wait ends at the stop's deadline (what the drain left of shutdown_timeout).
		if sd, ok := o.Producer.(interface{ Shutdown(context.Context) error }); ok {
			sctx, cancel := r.budget.context()
			defer cancel()
			if err := sd.Shutdown(sctx); err != nil {
				r.log.Warn("producer shutdown", "err", err)
			}
			return
		}
		o.Producer.Close()
	}()
	var err error
	if r.stored, err = o.Store.Load(ctx); err != nil {
		return fmt.Errorf("load stored position: %w", err)
	}
	if r.stored == "" {
		r.log.Info("no stored position: the source picks the start (its own log line says where)")
	} else {
		r.log.Info("resuming from stored position", "position", string(r.stored))
	}
	return runSessions(ctx, o.NewSource, o.OnOpen, r.log, func(src source.Source) { r.src = src },
		func() offsets.Position { return r.stored }, r.stream, "in-flight records drained and stored")
}

// stream runs one source session. It returns (nil, nil) on a graceful stop, (srcErr, nil) when
// the source failed and everything in flight was drained and stored, or (nil, err) on a fatal
// error.
func (r *runner) stream(ctx context.Context) (srcErr error, fatal error) {
	readCtx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	budget := newRowBudget(r.o.ReadAheadRows)
	txCh, errCh, wait := readTransactions(readCtx, r.src, r.o.TxBuffer, budget)
	defer wait()

	ticker := time.NewTicker(r.o.CommitInterval)
	defer ticker.Stop()
	var pending *source.Tx // a transaction read but not yet admitted (tracker full)
	reading := true
	var drainDeadline <-chan time.Time
	saveCtx, cancelSaves := context.WithCancel(ctx)
	r.saveCtx = saveCtx
	defer func() {
		// A fatal return leaves no Save running (or blocked on a stalled store) behind it.
		cancelSaves()
		r.waitSave()
	}()
	for {
		var in <-chan source.Tx
		if reading && pending == nil {
			in = txCh
		}
		select {
		case tx := <-in:
			budget.release(len(tx.Rows))
			pending = &tx
		case <-r.wake:
			if err := r.handleOutcomes(ctx); err != nil {
				stopReading()
				return nil, err
			}
		case res := <-r.saved:
			if err := r.onSaved(r.saveCtx, res); err != nil {
				stopReading()
				return nil, err
			}
		case <-ticker.C:
			r.commit()
			r.stallTick()
		case err := <-errCh:
			reading = false
			if ctx.Err() == nil {
				srcErr = err
			}
			drainDeadline = time.After(r.o.ShutdownTimeout)
		case <-ctx.Done():
			if reading {
				stopReading()
				reading = false
				pending = nil
				drainDeadline = r.budget.stopTimer()
				r.log.Info("stopping: no more reads, waiting for in-flight records", "inflight", r.tracker.Records())
			}
		case <-drainDeadline:
			r.flush(context.Background())
			return nil, fmt.Errorf("%w: %d records of %d transactions unresolved; stored position %s (they will be re-delivered on restart)",
				ErrShutdownTimeout, r.tracker.Records(), r.tracker.Transactions(), r.stored)
		}
		if pending != nil && reading {
			if !r.tracker.CanTrack(len(pending.Rows)) {
				// Full: make room by committing what is done; else wait for outcomes.
				r.commit()
			}
			if r.tracker.CanTrack(len(pending.Rows)) {
				if err := r.admit(ctx, pending); err != nil {
					stopReading()
					if ctx.Err() != nil {
						continue
					}
					return nil, err
				}
				pending = nil
			}
		}
		if !reading && r.tracker.Records() == 0 {
			if err := r.flush(context.Background()); err != nil {
				return nil, err
			}
			return srcErr, nil
		}
	}
}

// admit tracks one transaction and queues its records (or their dead letters).
func (r *runner) admit(ctx context.Context, tx *source.Tx) error {
	seq, err := r.tracker.Track(tx.Position, len(tx.Rows))
	if err != nil {
		return fmt.Errorf("track transaction %s: %w", tx.Position, err)
	}
	r.o.Metrics.EventsRead(len(tx.Rows))
	fs := make([]inflight, len(tx.Rows)) // one allocation per transaction, not per row
	for i := range tx.Rows {
		f := &fs[i]
		*f = inflight{seq: seq, row: &tx.Rows[i], pos: tx.Position, commitTime: tx.CommitTime}
		rec, err := r.o.Route(f.row)
		if err != nil {
			f.rec = rec
			if err := r.deadLetter(ctx, f, "transform", reasonOf(err), err); err != nil {
				return err
			}
			continue
		}
		f.rec = rec
		if err := r.o.Producer.Produce(ctx, &f.rec, r.doneFunc(f)); err != nil {
			return fmt.Errorf("queue record for %s: %w", rec.Topic, err)
		}
	}
	r.o.Metrics.Inflight(r.tracker.Records())
	return nil
}

func (r *runner) doneFunc(f *inflight) func(error) {
	return func(err error) {
		f.err = err
		r.mu.Lock()
		r.outcomes = append(r.outcomes, f)
		r.mu.Unlock()
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

func (r *runner) handleOutcomes(ctx context.Context) error {
	r.mu.Lock()
	batch := r.outcomes
	r.outcomes = nil
	r.mu.Unlock()
	r.stallProgress()
	for _, f := range batch {
		switch {
		case f.err == nil:
			if !f.dlq {
				r.o.Metrics.Produced(f.rec.Topic, f.commitTime)
				r.o.DLQBreaker.Record(false)
			}
			if err := r.tracker.Done(f.seq); err != nil {
				return err
			}
		case f.dlq:
			return fmt.Errorf("dead-letter topic %s cannot be written (%v): stopping without storing past position %s — fix the DLQ topic (kafka.dlq_topic) and restart",
				r.o.DLQTopic, f.err, f.pos)
		default:
			permanent, reason := r.o.Classify(f.err)
			if !permanent {
				return fmt.Errorf("record for topic %s failed with a transient error after the producer's retries (%w); stopping without storing past position %s", f.rec.Topic, f.err, f.pos)
			}
			if err := r.deadLetter(ctx, f, "produce", reason, f.err); err != nil {
				return err
			}
		}
	}
	r.o.Metrics.Inflight(r.tracker.Records())
	return nil
}

// deadLetter produces f's dead letter; f stays unresolved until that write is acked.
func (r *runner) deadLetter(ctx context.Context, f *inflight, stage, reason string, cause error) error {
	dl := DeadLetter(f.rec, f.row, stage, reason, cause.Error(), f.pos, time.Now())
	dl.Topic = r.o.DLQTopic
	if size := dl.Size(); size > r.o.MaxRecordBytes {
		// The dead letter would be refused too (a payload over the size limit): keep the headers,
		// drop the value; the row is still in the outbox table under its id.
		dl.Value = nil
		dl.Headers = append(dl.Headers, sink.Header{Key: HeaderValueDropped, Value: []byte(strconv.Itoa(size))})
	}
	id := ""
	if f.row != nil {
		if v, ok := f.row.Get("id"); ok {
			id = string(v.Bytes)
		}
	}
	r.log.Warn("dead-lettering record", "reason", reason, "stage", stage, "error", cause.Error(),
		"topic", f.rec.Topic, "table", f.row.Table, "position", string(f.pos), "id", id)
	r.o.Metrics.DeadLettered(reason)
	if r.o.DLQBreaker.Record(true) {
		return fmt.Errorf("kafka.dlq_max_rate exceeded: %d of the last %d records were dead-lettered (latest: %s: %v); stopping before storing past position %s — "+
			"this looks like a misconfiguration (outbox.columns, outbox.topic, topic ACLs); fix it and restart, or raise kafka.dlq_max_rate",
			r.o.DLQBreaker.Count(), r.o.DLQBreaker.Window, reason, cause, f.pos)
	}
	d := &inflight{seq: f.seq, rec: dl, row: f.row, pos: f.pos, dlq: true}
	if err := r.o.Producer.Produce(ctx, &d.rec, r.doneFunc(d)); err != nil {
		return fmt.Errorf("queue dead letter: %w", err)
	}
	return nil
}

// commit takes the acked prefix from the tracker (freeing its room at once) and hands it to
// the asynchronous Save; onSaved confirms it to the source once stored.
func (r *runner) commit() {
	pos, ok := r.tracker.Commit()
	if !ok {
		return
	}
	r.committed = pos
	if r.saving != "" {
		r.queued = pos // saved after the running Save (positions are stored in order)
		return
	}
	r.startSave(r.saveCtx, pos)
}

// saveResult is the outcome of one asynchronous Store.Save.
type saveResult struct {
	pos       offsets.Position
	err       error
	cancelled bool // the context ended: not a storage failure
}

// startSave saves pos on its own goroutine; the loop gets the result on r.saved (capacity 1,
// one Save at a time, so the send never blocks).
func (r *runner) startSave(ctx context.Context, pos offsets.Position) {
	r.saving = pos
	go func() {
		err := r.o.Store.Save(ctx, pos)
		r.saved <- saveResult{pos: pos, err: err, cancelled: err != nil && ctx.Err() != nil}
	}()
}

// onSaved handles a finished Save on the loop goroutine: the position is stored, so it is
// confirmed to the source (never before); then the queued position, if any, is saved.
func (r *runner) onSaved(ctx context.Context, res saveResult) error {
	r.saving = ""
	switch {
	case res.err == nil:
		r.stored = res.pos
		r.confirm(ctx, res.pos)
	case res.cancelled:
		// Stopping: the final flush stores the acked prefix with a fresh context.
		r.log.Debug("store position interrupted by the stop", "position", string(res.pos), "err", res.err)
	default:
		return fmt.Errorf("store position %s: %w", res.pos, res.err)
	}
	if q := r.queued; q != "" {
		r.queued = ""
		if q != r.stored {
			r.startSave(ctx, q)
		}
	}
	return nil
}

// waitSave waits for the running Save, if any, and records its position when it succeeded.
func (r *runner) waitSave() {
	if r.saving == "" {
		return
	}
	res := <-r.saved
	r.saving = ""
	if res.err == nil {
		r.stored = res.pos
	}
}

// flush stores and confirms the acked prefix synchronously: at the end of a session and on
// stop, where what is stored must be known before returning.
func (r *runner) flush(ctx context.Context) error {
	for r.saving != "" { // the running Save, then the queued one onSaved may start
		if err := r.onSaved(ctx, <-r.saved); err != nil {
			return err
		}
	}
	if pos, ok := r.tracker.Commit(); ok {
		r.committed = pos
	}
	// Also a prefix taken earlier whose Save the stop interrupted.
	pos := r.committed
	if pos == "" || pos == r.stored {
		return nil
	}
	if err := r.o.Store.Save(ctx, pos); err != nil {
		return fmt.Errorf("store position %s: %w", pos, err)
	}
	r.stored = pos
	r.confirm(ctx, pos)
	return nil
}

// confirm tells the source that pos is stored, and reports the commit.
func (r *runner) confirm(ctx context.Context, pos offsets.Position) {
	if err := r.src.Confirm(ctx, pos); err != nil {
		r.log.Warn("confirm position to the source failed (stored; will confirm again)", "position", string(pos), "err", err)
	}
	r.o.Metrics.Committed(pos)
	if now := time.Now(); now.Sub(r.lastLog) >= commitLogEvery {
		r.log.Info("committed position", "position", string(pos), "inflight", r.tracker.Records())
		r.lastLog = now
	}
	if r.o.OnCommit != nil {
		r.o.OnCommit(pos)
	}
}

func reasonOf(err error) string {
	var re interface{ ReasonCode() string }
	if errors.As(err, &re) {
		return re.ReasonCode()
	}
	return "invalid_value"
}
