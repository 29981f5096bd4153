// Package pipeline wires a source, the outbox transform, a Kafka producer and the offsets store
// around the delivery core (internal/pipeline/delivery), which decides everything. Run is the
// at_least_once runner, a thin loop that does the I/O the core's Ready asks for:
//
//	source.Next ──txQueue (chunk batches; ReadAhead rows/bytes)──▶ loop: core.Accept ──Ready.Sends──▶ producer
//	                                                      ▲                                 │ done(err)
//	                                                      └── core.Outcome ◀── outcomes ◀───┘
//	loop, every CommitInterval: core.Tick ──Ready.Save──▶ Store.Save (own goroutine, one at a time)
//	                            core.SaveResult ◀── saved ──  then Ready.Confirm → Source.Confirm
//
// Backpressure: the core caps unresolved records (MaxInflight), their bytes (MaxInflightBytes)
// and uncommitted transactions (MaxTxs). While a chunk does not fit the loop stops taking chunks,
// the reader blocks (its read-ahead budget full), and the source stops reading, so TCP flow
// control pushes back to the database. A transaction of any size flows through in chunks: only
// its last chunk carries its position, and the core stores it only when every record of the
// whole transaction is resolved.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/outboxd/outboxd/internal/pipeline/delivery"
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
	Route     func(*source.Row, time.Time) (sink.Record, error) // the outbox transform
	Classify  func(error) (permanent bool, reason string)       // Kafka error → permanent (DLQ) or transient
	Store     offsets.Store
	DLQTopic  string
	// DLQBreaker stops the pipeline when too many recent records were dead-lettered
	// (kafka.dlq_max_rate); the zero value never trips.
	DLQBreaker Breaker

	MaxInflight int // unresolved records (default 4096)
	// MaxInflightBytes caps the bytes (source.RowBytes) of unresolved records (default 4 MiB);
	// a chunk bigger than that is taken alone when nothing is in flight.
	MaxInflightBytes int
	MaxRecordBytes   int           // the producer's record size limit; bigger dead letters lose their value (default 1 MiB)
	MaxTxs           int           // uncommitted transactions (default 4*MaxInflight)
	TxBuffer         int           // transactions read ahead of the loop (default 64)
	ReadAheadRows    int           // rows read ahead of the loop, across those transactions (default 2048)
	ReadAheadBytes   int           // bytes read ahead of the loop (default 4 MiB)
	CommitInterval   time.Duration // how often the acked prefix is stored (default 100ms)
	ShutdownTimeout  time.Duration // how long a stop waits for in-flight acks (default 30s)
	Log              *slog.Logger
	Metrics          Metrics
	// OnCommit, when set, is called after each successful Save+Confirm (tests, metrics).
	OnCommit func(source.Position)
	// OnOpen, when set, is called each time the source has been opened.
	OnOpen func()
	// OnAccept, when set, is called on the loop goroutine with each chunk the core accepted, in
	// source order (the last chunk of a transaction carries its Position; OnCommit later
	// reports that same Position once it is stored), before any of its records is produced. It
	// must not block, and must copy what it keeps of tx (outbox.cleanup, internal/app).
	OnAccept func(tx *source.Tx)
	// StopOnPermanent (kafka.on_permanent_error: stop): a record that can never be delivered
	// (the transform refuses its row, or Kafka refuses it for good) ends Run with an error naming
	// it and the fix instead of being dead-lettered; no position at or past its transaction is
	// stored.
	StopOnPermanent bool
	// IDColumn is the event id column (outbox.columns.id) the logs and errors about a record
	// that cannot be delivered name it by, when the record has no "id" header; default "id".
	IDColumn string
}

// Metrics receives pipeline events; every method must be cheap and non-blocking.
type Metrics interface {
	EventsRead(n int)
	// Produced: a record of topic was acked at ackedAt (one reading for the records of one
	// batch of acks); commitTime is its source commit time (zero: unknown).
	Produced(topic string, commitTime, ackedAt time.Time)
	DeadLettered(reason string)
	Inflight(n int)
	Committed(p source.Position)
}

type noMetrics struct{}

func (noMetrics) EventsRead(int)                        {}
func (noMetrics) Produced(string, time.Time, time.Time) {}
func (noMetrics) DeadLettered(string)                   {}
func (noMetrics) Inflight(int)                          {}
func (noMetrics) Committed(source.Position)             {}

// commitLogEvery is how often a stored position is logged at info level.
const commitLogEvery = 30 * time.Second

// ErrShutdownTimeout is returned when a stop could not drain in-flight records in time.
var ErrShutdownTimeout = delivery.ErrShutdownTimeout

type runner struct {
	o      Options
	log    *slog.Logger
	core   *delivery.Core
	src    source.Source
	budget *stopBudget     // shutdown_timeout: one deadline for the whole stop
	work   context.Context // Produce's context: ends at the stop's deadline
	stall  stallWatch      // WARN while records wait for Kafka (stall.go)
	clog   confirmLog

	saved   chan saveResult // one Store.Save at a time runs off the loop goroutine
	saving  bool
	stopped bool // Stop was given to the core: saves from now on are the final ones

	outcomes *outcomeQueue // filled by the producer's done callbacks
}

func (o *Options) defaults() {
	if o.MaxInflight <= 0 {
		o.MaxInflight = delivery.DefaultMaxInflight
	}
	if o.MaxInflightBytes <= 0 {
		o.MaxInflightBytes = delivery.DefaultMaxInflightBytes
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
	if o.ReadAheadBytes <= 0 {
		o.ReadAheadBytes = DefaultReadAheadBytes
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
// retried: the loop drains what is in flight, stores it, and reopens the source from there (a
// transaction cut by the error is read again whole). Errors wrapping source.ErrPositionLost are
// never retried. A finite source's end (an error wrapping source.ErrEnd) ends Run with nil once
// every chunk it handed out is delivered (or dead-lettered) and stored.
func Run(ctx context.Context, o Options) error {
	o.defaults()
	r := &runner{o: o, log: o.Log, outcomes: newOutcomeQueue(), saved: make(chan saveResult, 1), budget: newStopBudget(ctx, o.ShutdownTimeout)}
	defer r.budget.release()
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	stopAfter := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(time.Until(r.budget.start()), cancelWork)
		context.AfterFunc(work, func() { t.Stop() })
	})
	defer stopAfter()
	r.work = work
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
	stored, err := o.Store.Load(ctx)
	if err != nil {
		return fmt.Errorf("load stored position: %w", err)
	}
	if stored == "" {
		r.log.Info("no stored position: the source picks the start (its own log line says where)")
	} else {
		r.log.Info("resuming from stored position", "position", string(stored))
	}
	r.core = delivery.New(delivery.Config{Mode: delivery.AtLeastOnce, MaxInflight: o.MaxInflight, MaxInflightBytes: o.MaxInflightBytes,
		MaxTxs: o.MaxTxs, Route: o.Route, Classify: o.Classify, DeadLetter: deadLetterFunc(o.DLQTopic, o.MaxRecordBytes),
		DLQTopic: o.DLQTopic, Breaker: o.DLQBreaker, StopOnPermanent: o.StopOnPermanent, StopTimeout: o.ShutdownTimeout,
		IDColumn: o.IDColumn}, stored)
	return runSessions(ctx, o.NewSource, o.OnOpen, r.log, func(src source.Source) { r.src = src },
		r.core.Stored, r.stream, "in-flight records drained and stored")
}

// stream runs one source session. It returns (nil, nil) on a graceful stop, (srcErr, nil) when
// the source failed and everything in flight was drained and stored, or (nil, err) on a fatal
// error.
func (r *runner) stream(ctx context.Context) (srcErr error, fatal error) {
	readCtx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	budget := newReadBudget(r.o.ReadAheadRows, r.o.ReadAheadBytes)
	budget.maxChunks = r.o.TxBuffer
	txq, errCh, wait := readTransactions(readCtx, r.src, budget)
	defer wait()
	saveCtx, cancelSaves := context.WithCancel(ctx)
	defer func() {
		// A fatal return leaves no Save running (or blocked on a stalled store) behind it.
		cancelSaves()
		r.waitSave()
	}()
	ticker := time.NewTicker(r.o.CommitInterval)
	defer ticker.Stop()
	wakeT := time.NewTimer(time.Hour)
	defer wakeT.Stop()
	var wakeAt time.Time

	r.core.Open()
	var batch txBatch // chunks taken from the reader; those from batch.next on wait for room in the core
	var ended error   // a finite source's end (source.ErrEnd): the chunks it read are accepted first
	reading, stopCh := true, ctx.Done()
	fast := 0        // waiting's run of hits
	stop := func() { // a graceful stop: no more reads; the chunks not accepted are read again
		stopCh = nil
		r.beginStop(reading, stopReading)
		batch.drop()
		reading, srcErr = false, nil
	}
	for {
		rd := r.core.Ready()
		if rd.Err != nil {
			stopReading()
			return nil, r.fatal(&rd)
		}
		if err := r.execute(saveCtx, &rd); err != nil {
			stopReading()
			return nil, err
		}
		r.core.Advance()
		if rd.Done {
			if r.stopped {
				return nil, nil
			}
			return srcErr, nil
		}
		if !rd.WakeAt.Equal(wakeAt) {
			wakeAt = rd.WakeAt
			wakeT.Stop()
			if !wakeAt.IsZero() {
				wakeT.Reset(time.Until(wakeAt))
			}
		}
		if stopCh != nil && ctx.Err() != nil {
			// Served before more work is taken: the fast path and the select's random choice
			// among ready cases could otherwise let a backlog of chunks in ahead of the stop.
			stop()
		}
		var in <-chan struct{}
		if reading && batch.head() == nil {
			in = txq.C
		}
		if !r.waiting(&fast, in, &batch, txq) { // else work already waiting was taken
			select {
			case <-in:
				batch.refill(txq)
			case <-r.outcomes.C:
				r.handleOutcomes()
			case res := <-r.saved:
				r.saving = false
				r.core.SaveResult(res.pos, res.err, res.cancelled)
			case <-ticker.C:
				now := time.Now()
				r.core.Tick(now)
				ev, d := r.stall.tick(now, r.core.Inflight())
				logStall(r.log, ev, d, r.core.Inflight())
			case <-wakeT.C:
				wakeAt = time.Time{}
				r.core.Tick(time.Now())
			case err := <-errCh:
				errCh = nil
				switch {
				case ctx.Err() != nil: // the stop ended the reader
					stop()
				case reading && errors.Is(err, source.ErrEnd):
					ended = err
				case reading:
					batch.drop()
					reading, srcErr = false, err
					now := time.Now()
					r.core.SourceEnded(now, now.Add(r.o.ShutdownTimeout))
				}
			case <-stopCh:
				stop()
			}
		}
		if err := r.acceptBatch(&batch, budget); err != nil {
			stopReading()
			return nil, err
		}
		if ended != nil && reading && batch.head() == nil && txq.empty() { // the reader has exited
			reading, srcErr = false, ended
			now := time.Now()
			r.core.SourceEnded(now, now.Add(r.o.ShutdownTimeout))
		}
	}
}

// fastMax bounds waiting's hits in a row: then the full select runs, so ticks, saves, timers
// and a stop are served while acks and chunks keep coming.
const fastMax = 8

// waiting takes acks or chunks (in: nil when the loop does not want chunks) that are already
// waiting with a non-blocking receive each, instead of the full select, which locks every one of
// its seven channels — during a backlog drain there is nearly always something waiting.
func (r *runner) waiting(fast *int, in <-chan struct{}, b *txBatch, txq *txQueue) bool {
	if *fast >= fastMax {
		*fast = 0
		return false
	}
	select {
	case <-r.outcomes.C:
		r.handleOutcomes()
		*fast++
		return true
	default:
	}
	if in != nil {
		select {
		case <-in:
			b.refill(txq)
			*fast++
			return true
		default:
		}
	}
	*fast = 0
	return false
}

// acceptBatch accepts the batch's chunks, in order, as far as the core has room, and frees
// their read budget (once for all of them: the reader wakes once).
func (r *runner) acceptBatch(b *txBatch, budget *readBudget) error {
	chunks, rows, bytes := 0, 0, 0
	defer func() {
		budget.freeChunks(chunks, rows, bytes)
		if rows > 0 {
			r.o.Metrics.EventsRead(rows)
		}
	}()
	now := time.Time{}
	for tx := b.head(); tx != nil && r.core.CanAccept(len(tx.Rows), tx.Bytes); tx = b.head() {
		if now.IsZero() {
			now = time.Now()
		}
		if err := r.core.Accept(now, tx); err != nil {
			return err
		}
		b.next++
		chunks, rows, bytes = chunks+1, rows+len(tx.Rows), bytes+tx.Bytes
		if r.o.OnAccept != nil {
			r.o.OnAccept(tx)
		}
	}
	return nil
}

// beginStop hands a graceful stop to the core (once): no more reads; the drain ends at the
// stop's one deadline (shutdown_timeout from the stop signal).
func (r *runner) beginStop(reading bool, stopReading func()) {
	if r.stopped {
		return
	}
	if reading {
		r.log.Info("stopping: no more reads, waiting for in-flight records", "inflight", r.core.Inflight())
	}
	stopReading()
	r.stopped = true
	r.core.Stop(time.Now(), r.budget.start())
}

// execute does the I/O of one Ready (its Err was handled): produce the sends, start the save,
// confirm, report the events.
func (r *runner) execute(saveCtx context.Context, rd *delivery.Ready) error {
	for i := range rd.Sends {
		s := &rd.Sends[i]
		if err := r.o.Producer.Produce(r.work, s.Rec, r.outcomes.doneFor(s.ID)); err != nil {
			if r.work.Err() != nil {
				return fmt.Errorf("%w: could not queue a record for %s before the stop's deadline; stored position %s (the rest is delivered on restart)",
					ErrShutdownTimeout, s.Rec.Topic, r.core.Stored())
			}
			return fmt.Errorf("queue record for %s: %w", s.Rec.Topic, err)
		}
	}
	if rd.Save != "" {
		ctx := saveCtx
		if r.stopped {
			ctx = context.Background() // the final save; a running one the stop cancelled is redone
		}
		r.startSave(ctx, rd.Save)
	}
	if rd.Confirm != "" {
		r.confirm(rd.Confirm)
	}
	handleEvents(r.log, r.o.Metrics, rd.Events)
	if len(rd.Sends) > 0 || len(rd.Events) > 0 {
		r.o.Metrics.Inflight(r.core.Inflight())
	}
	return nil
}

// fatal executes a failed Ready: the sends and events decided before its error (the dead
// letters before a tripped breaker), then returns the error. Run's deferred Shutdown waits for
// those sends within the stop budget.
func (r *runner) fatal(rd *delivery.Ready) error {
	for i := range rd.Sends {
		s := &rd.Sends[i]
		if err := r.o.Producer.Produce(r.work, s.Rec, r.outcomes.doneFor(s.ID)); err != nil {
			r.log.Warn("could not queue a record decided before the fatal error (it is sent again on restart)", "topic", s.Rec.Topic, "err", err)
			break
		}
	}
	handleEvents(r.log, r.o.Metrics, rd.Events)
	return rd.Err
}

func (r *runner) handleOutcomes() {
	batch := r.outcomes.take()
	now := time.Now()
	ev, d := r.stall.progress(now)
	logStall(r.log, ev, d, r.core.Inflight())
	for i := range batch {
		r.core.Outcome(now, r.outcomes.id(&batch[i]), batch[i].err)
		batch[i] = outcome{}
	}
}

// saveResult is the outcome of one asynchronous Store.Save.
type saveResult struct {
	pos       source.Position
	err       error
	cancelled bool // the context ended: not a storage failure
}

// startSave saves pos on its own goroutine; the loop gets the result on r.saved (capacity 1,
// one Save at a time, so the send never blocks).
func (r *runner) startSave(ctx context.Context, pos source.Position) {
	r.saving = true
	go func() {
		err := r.o.Store.Save(ctx, pos)
		r.saved <- saveResult{pos: pos, err: err, cancelled: err != nil && ctx.Err() != nil}
	}()
}

// waitSave waits for the running Save, if any (a fatal return).
func (r *runner) waitSave() {
	if r.saving {
		<-r.saved
		r.saving = false
	}
}

// confirm tells the source that pos is stored, and reports the commit.
func (r *runner) confirm(pos source.Position) {
	if err := r.src.Confirm(r.work, pos); err != nil {
		r.log.Warn("confirm position to the source failed (stored; will confirm again)", "position", string(pos), "err", err)
	}
	r.o.Metrics.Committed(pos)
	r.clog.committed(r.log, pos, r.core.Inflight())
	if r.o.OnCommit != nil {
		r.o.OnCommit(pos)
	}
}
