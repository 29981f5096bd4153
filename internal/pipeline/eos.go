package pipeline

// Exactly-once delivery (kafka.delivery: exactly_once): a thin loop around the delivery core
// (internal/pipeline/delivery, Mode ExactlyOnce), which decides; this loop does the I/O it asks
// for (the producer steps NewProducer, ReadBack, Abort, Begin, Produce, Flush, Commit; then
// Source.Confirm) and feeds the results back.
//
//	source.Next ──txQueue──▶ loop: Accept(chunk) ─▶ core ─▶ Ready: Begin, Sends (records flow into
//	                      the open Kafka transaction as chunks arrive), at a batch's end the
//	                      position record, Flush, Commit ──▶ Source.Confirm(end)
//
// One Kafka transaction per batch: small source transactions are grouped (≤ MaxRecords, ≤
// MaxBytes, ≤ Linger), a chunked (huge) source transaction gets one of its own, and a batch is due
// only after a transaction's last chunk. The position travels inside the Kafka transaction that
// carries the records before it, so "records visible to read_committed consumers" and "position
// stored" are one atomic event.
//
// Crash argument (in full at the top of delivery/eos_front.go): read_committed never sees a partial
// source transaction, because all of it and the position of its end are in one Kafka transaction,
// committed only when every record of it was acked, and aborted otherwise (by this runner, by the
// next InitProducerID of the transactional id, or by the broker's transaction timeout); and never
// sees one twice, because the committed position is that transaction's end, the source re-reads only
// after it, and the source is confirmed only after the commit. On start the runner first
// initialises its transactional id (fencing any older instance and aborting what it left open),
// then reads the committed position (read_committed) and opens the source there.
//
// Failures inside a transaction never commit it: the core aborts and produces the batch again —
// from memory while it is ≤ RetainBytes, else by re-reading it from the committed position
// (findings re-applied by ordinal); poison records are isolated by re-sending the records that
// failed together one at a time; a commit with an unknown outcome is settled by reading the
// committed position back (before and after initialising the id again); PRODUCER_FENCED stops.
// A source transaction whose Kafka transaction would outlive kafka.transaction_timeout is aborted
// and the run fails loudly with the fix.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/outboxd/outboxd/internal/pipeline/delivery"
	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
)

// TxnProducer is the transactional producer the exactly-once runner drives
// (sink/kafka.TxnProducer). Produce may refuse a record synchronously with a permanent error
// (it was not queued, done is not called); otherwise done is called exactly once.
type TxnProducer interface {
	Begin() error
	Produce(ctx context.Context, rec *sink.Record, done func(error)) error
	Flush(ctx context.Context) error
	Commit() error
	Abort() error
	// Usable reports whether a new transaction can begin; false after an error that needs a
	// new producer.
	Usable() bool
	Close() error
}

// PositionStore reads the committed position (read_committed) and builds the record that
// stores a position (kafka.OffsetStore).
type PositionStore interface {
	Load(ctx context.Context) (source.Position, error)
	Record(p source.Position) sink.Record
}

// EOSOptions configure RunExactlyOnce. Zero values get the defaults noted.
type EOSOptions struct {
	NewSource func() source.Source
	// NewProducer creates a producer and initialises the transactional id, which fences every
	// older producer with the same id. It is called at start and again after a producer broke.
	NewProducer func() (TxnProducer, error)
	Route       func(*source.Row, time.Time) (sink.Record, error)
	Classify    func(error) (permanent bool, reason string)
	// Fatal reports errors no new producer can get past (fenced, not authorized) and why.
	Fatal func(error) (fatal bool, why string)
	// Fenced reports PRODUCER_FENCED (another producer initialised the transactional id).
	Fenced          func(error) bool
	Store           PositionStore
	TransactionalID string // for messages
	DLQTopic        string
	DLQBreaker      Breaker

	MaxRecords       int           // records per Kafka transaction (default 1000; a bigger source transaction goes whole)
	MaxBytes         int           // record bytes per Kafka transaction (default 4 MiB)
	RetainBytes      int           // a batch keeps its records for an in-memory redo up to this (default MaxBytes); past it a redo re-reads
	MaxInflight      int           // unacked records in the open Kafka transaction (default 4096)
	MaxInflightBytes int           // their bytes (default 4 MiB)
	MaxRecordBytes   int           // the producer's record size limit; bigger dead letters lose their value (default 1 MiB)
	Linger           time.Duration // how long a batch waits for more after its first record (default 50ms)
	IdleInterval     time.Duration // how often a batch with only idle progress is committed (default 1s)
	TxBuffer         int           // transactions read ahead (default 1024)
	ReadAheadRows    int           // rows read ahead of the batch, across those transactions (default 2048)
	ReadAheadBytes   int           // bytes (source.ChunkBytes) read ahead, across those transactions (default 2 MiB; see newReadBudget)
	ShutdownTimeout  time.Duration // how long a stop may take to commit the current batch (default 30s)
	RetryMin         time.Duration // backoff between attempts of a failing batch (default 100ms)
	RetryMax         time.Duration // (default 10s)
	Log              *slog.Logger
	Metrics          Metrics
	OnCommit         func(source.Position) // after each commit
	OnOpen           func()                // each time the source has been opened
	// OnAccept is Options.OnAccept: each chunk accepted, in source order, on the loop goroutine.
	// After a batch is redone from the source its chunks are accepted (and reported) again.
	OnAccept func(tx *source.Tx)
	// StopOnPermanent is Options.StopOnPermanent (kafka.on_permanent_error: stop).
	StopOnPermanent bool
	// IDColumn is Options.IDColumn.
	IDColumn string
	// TxnTimeout is the producer's transaction timeout (kafka.transaction_timeout): the broker
	// aborts a Kafka transaction open longer (default 60s, as sink/kafka.DefaultTxnTimeout).
	TxnTimeout time.Duration
	// Crash, when set, is called at the test crash points "mid_batch" (some records of the
	// batch acked in the open transaction, more still to come), "before_commit" (every record
	// and the position acked in the open transaction) and "after_commit" (committed, source
	// not yet confirmed) of each batch with records. See CrashHook.
	Crash func(point string)
}

func (o *EOSOptions) defaults() {
	if o.MaxRecords <= 0 {
		o.MaxRecords = 1000
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = 4 << 20
	}
	if o.MaxRecordBytes <= 0 {
		o.MaxRecordBytes = 1 << 20
	}
	if o.Linger <= 0 {
		o.Linger = 50 * time.Millisecond
	}
	if o.IdleInterval <= 0 {
		o.IdleInterval = time.Second
	}
	if o.TxBuffer <= 0 {
		o.TxBuffer = 1024
	}
	if o.ReadAheadRows <= 0 {
		o.ReadAheadRows = 2048
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = 30 * time.Second
	}
	if o.RetryMin <= 0 {
		o.RetryMin = 100 * time.Millisecond
	}
	if o.TxnTimeout <= 0 {
		o.TxnTimeout = 60 * time.Second
	}
	if o.RetryMax < o.RetryMin {
		o.RetryMax = max(10*time.Second, o.RetryMin)
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Metrics == nil {
		o.Metrics = noMetrics{}
	}
	if o.Fatal == nil {
		o.Fatal = func(error) (bool, string) { return false, "" }
	}
	if o.Fenced == nil {
		o.Fenced = func(error) bool { return false }
	}
}

// ErrFenced marks the error RunExactlyOnce returns when another producer took over its
// transactional id.
var ErrFenced = delivery.ErrFenced

// CrashEnv is the environment variable of the test-only crash hook (see CrashHook).
const CrashEnv = "OUTBOXD_TEST_CRASH_AT"

// CrashHook returns the EOSOptions.Crash of a spec "point" or "point:N" (point mid_batch,
// before_commit or after_commit; N, default 1, counts batches with records), or nil for "". At the N-th pass
// of point it calls exit (os.Exit(137) in outboxd: the status of a SIGKILL). TEST ONLY: it
// exists so that end-to-end tests can stop the process inside an open Kafka transaction, between
// produce and Kafka commit, and between Kafka commit and source confirm, which a signal cannot
// hit reliably.
func CrashHook(spec string, log *slog.Logger, exit func()) (func(string), error) {
	if spec == "" {
		return nil, nil
	}
	point, nth, _ := strings.Cut(spec, ":")
	n := 1
	if nth != "" {
		var err error
		if n, err = strconv.Atoi(nth); err != nil || n < 1 {
			return nil, fmt.Errorf("%s=%q: N must be a positive number", CrashEnv, spec)
		}
	}
	if point != "mid_batch" && point != "before_commit" && point != "after_commit" {
		return nil, fmt.Errorf("%s=%q: the point must be mid_batch, before_commit or after_commit", CrashEnv, spec)
	}
	log.Warn("TEST CRASH HOOK ARMED: this process will exit abruptly", "env", CrashEnv, "point", point, "batch", n)
	var seen atomic.Int64
	return func(p string) {
		if p == point && seen.Add(1) == int64(n) {
			log.Warn("TEST CRASH HOOK: exiting now", "point", p)
			exit()
		}
	}, nil
}

// RunExactlyOnce runs the exactly-once pipeline until ctx is cancelled (a graceful stop: stop
// reading, commit the batch being built, return nil) or a fatal error. See the top of eos.go.
func RunExactlyOnce(ctx context.Context, o EOSOptions) error {
	o.defaults()
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	budget := newStopBudget(ctx, o.ShutdownTimeout)
	defer budget.release()
	stopAfter := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(time.Until(budget.start()), cancelWork)
		context.AfterFunc(work, func() { t.Stop() })
	})
	defer stopAfter()
	r := &eosRunner{o: o, log: o.Log, work: work, budget: budget, outcomes: newOutcomeQueue()}
	defer func() {
		if r.prod != nil {
			r.closeProducer()
		}
	}()

	// Fence first, then read: once our InitProducerID has happened, no older instance can
	// commit a position, so the one read is final.
	prod, err := o.NewProducer()
	if err != nil {
		if fatal, why := o.Fatal(err); fatal {
			if o.Fenced(err) {
				return fmt.Errorf("%w: another producer initialised transactional id %q (kafka.transactional_id): %v", ErrFenced, o.TransactionalID, err)
			}
			return fmt.Errorf("%s (transactional id %q): %w", why, o.TransactionalID, err)
		}
		return fmt.Errorf("transactional producer (transactional id %s): %w", o.TransactionalID, err)
	}
	r.prod = prod
	committed, err := o.Store.Load(ctx)
	if err != nil {
		return fmt.Errorf("load the committed position: %w", err)
	}
	if committed == "" {
		r.log.Info("no committed position: the source picks the start (its own log line says where)", "transactional_id", o.TransactionalID)
	} else {
		r.log.Info("resuming from the committed position", "position", string(committed), "transactional_id", o.TransactionalID)
	}
	cfg := r.coreConfig()
	cfg.StopOnPermanent, cfg.StopTimeout, cfg.IDColumn = o.StopOnPermanent, o.ShutdownTimeout, o.IDColumn
	r.core = delivery.New(cfg, committed)
	return runSessions(ctx, r.o.NewSource, r.o.OnOpen, r.log, func(src source.Source) { r.src = src },
		r.core.Stored, r.stream, "what was read is committed")
}

// stream runs one source session: (nil, nil) on a graceful stop, (srcErr, nil) when the source
// failed (or the core asked to reopen) and what it delivered was committed, (nil, err) on a
// fatal error.
func (r *eosRunner) stream(ctx context.Context) (srcErr error, fatal error) {
	readCtx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	budget := newReadBudget(r.o.ReadAheadRows, r.o.ReadAheadBytes)
	budget.maxChunks = r.o.TxBuffer
	txq, errCh, wait := readTransactions(readCtx, r.src, budget)
	defer func() { stopReading(); wait() }()
	c := r.core
	c.Open()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var armed time.Time // the WakeAt the timer is set for (zero: stopped)
	var batch txBatch   // taken from the reader; from batch.next on waiting for CanAccept
	reading, ending, stopped := true, false, false
	stopCh := ctx.Done() // nil once it fired: a closed channel in the select would spin the loop
	for {
		rd := c.Ready()
		if rd.Err != nil {
			if errors.Is(rd.Err, delivery.ErrShutdownTimeout) {
				return nil, shutdownTimeout{rd.Err}
			}
			return nil, rd.Err
		}
		step := r.execute(rd)
		c.Advance()
		r.o.Metrics.Inflight(c.Inflight())
		if step != nil {
			step(time.Now())
			continue // its result may ask for the next step at once
		}
		if rd.Reopen {
			stopReading()
			return delivery.ErrReopen, nil
		}
		if rd.Done {
			return srcErr, nil
		}
		if held := batch.head(); held != nil && c.CanAccept(len(held.Rows), held.Bytes) {
			// One chunk per Ready: the core may close a batch (Flush, Commit) after any chunk.
			batch.next++
			budget.free(len(held.Rows), held.Bytes)
			r.o.Metrics.EventsRead(len(held.Rows))
			if err := c.Accept(time.Now(), held); err != nil {
				return nil, err
			}
			if r.o.OnAccept != nil {
				r.o.OnAccept(held)
			}
			continue
		}
		if ending && batch.head() == nil && !stopped {
			if batch.refill(txq); batch.head() != nil { // read before the source failed
				continue
			}
			stopped = true
			c.SourceEnded(time.Now(), time.Now().Add(100*365*24*time.Hour))
			continue
		}
		var in <-chan struct{}
		if reading && batch.head() == nil {
			in = txq.C
		}
		if !rd.WakeAt.Equal(armed) { // re-armed only when it changes (a timer costs locks)
			timer.Stop()
			if armed = rd.WakeAt; !armed.IsZero() {
				timer.Reset(max(time.Until(armed), 0))
			}
		}
		var timerC <-chan time.Time
		if !armed.IsZero() {
			timerC = timer.C
		}
		select {
		case <-in:
			batch.refill(txq)
		case <-r.outcomes.C:
			r.deliverOutcomes()
		case now := <-timerC:
			armed = time.Time{}
			c.Tick(now)
		case err := <-errCh:
			reading = false
			if ctx.Err() == nil {
				srcErr, ending = err, true
			}
			errCh = nil
		case <-stopCh:
			stopCh = nil
			if !stopped {
				stopReading()
				reading, stopped = false, true
				batch.drop()
				r.log.Info("stopping: no more reads, committing the current batch", "records", c.Inflight())
				c.Stop(time.Now(), r.budget.start())
			}
		}
	}
}

// shutdownTimeout makes the core's ErrShutdownTimeout also match this package's.
type shutdownTimeout struct{ error }

func (e shutdownTimeout) Is(target error) bool { return target == ErrShutdownTimeout }
func (e shutdownTimeout) Unwrap() error        { return e.error }
