package pipeline

// Exactly-once delivery (kafka.delivery: exactly_once).
//
//	source.Next ──txCh──▶ loop: collect a batch of whole source transactions
//	                        (≤ MaxRecords records, ≤ MaxBytes, ≤ Linger after its first record)
//	                      BeginTxn
//	                        produce every record in source order (poison rows: their dead letters)
//	                        produce the batch's end position to offsets.topic
//	                        wait for every ack
//	                      CommitTxn ──▶ Source.Confirm(end)
//
// The position travels inside the Kafka transaction that carries the records before it, so
// "records visible to read_committed consumers" and "position stored" are one atomic event. On
// start the runner first initialises its transactional id (fencing any older instance and
// aborting what it left open), then reads the committed position (read_committed) and opens the
// source there. A crash anywhere therefore loses nothing and duplicates nothing for
// read_committed consumers: before the commit, the transaction is aborted and redone from the
// source; after it, the source is re-read from the committed position, and the slot, confirmed
// only after the commit, still has everything after it.
//
// Failures inside a transaction never commit it. The runner aborts and produces the same batch
// again (the source's transactions are kept in memory until committed):
//   - a record Kafka refuses for good (too large, invalid record, ...) is dead-lettered in the
//     redone transaction. A broker refuses a whole request for one record, so records that failed
//     together are first re-sent alone (after everything before them is acked, with nothing
//     after them in flight) to find the culprit;
//   - transient errors: abort, back off (capped exponential), produce the batch again;
//   - CommitTxn failing leaves the outcome unknown: the runner initialises its transactional id
//     again (which settles the transaction either way) and reads the committed position back:
//     the batch's end means committed, the previous position means not, and it is redone;
//   - PRODUCER_FENCED: another producer initialised the same transactional id: stop, exit 1.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/outboxd/outboxd/offsets"
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
// stores a position (offsets.KafkaStore).
type PositionStore interface {
	Load(ctx context.Context) (offsets.Position, error)
	Record(p offsets.Position) sink.Record
}

// EOSOptions configure RunExactlyOnce. Zero values get the defaults noted.
type EOSOptions struct {
	NewSource func() source.Source
	// NewProducer creates a producer and initialises the transactional id, which fences every
	// older producer with the same id. It is called at start and again after a producer broke.
	NewProducer func() (TxnProducer, error)
	Route       func(*source.Row) (sink.Record, error)
	Classify    func(error) (permanent bool, reason string)
	// Fatal reports errors no new producer can get past (fenced, not authorized) and why.
	Fatal func(error) (fatal bool, why string)
	// Fenced reports PRODUCER_FENCED (another producer initialised the transactional id).
	Fenced          func(error) bool
	Store           PositionStore
	TransactionalID string // for messages
	DLQTopic        string
	DLQBreaker      Breaker

	MaxRecords      int           // records per Kafka transaction (default 1000; a bigger source transaction goes whole)
	MaxBytes        int           // record bytes per Kafka transaction (default 4 MiB)
	MaxRecordBytes  int           // the producer's record size limit; bigger dead letters lose their value (default 1 MiB)
	Linger          time.Duration // how long a batch waits for more after its first record (default 50ms)
	IdleInterval    time.Duration // how often a batch with only idle progress is committed (default 1s)
	TxBuffer        int           // transactions read ahead (default 1024)
	ReadAheadRows   int           // rows read ahead of the batch, across those transactions (default 2048)
	ReadAheadBytes  int           // bytes (source.ChunkBytes) read ahead, across those transactions (default 4 MiB; see newReadBudget)
	ShutdownTimeout time.Duration // how long a stop may take to commit the current batch (default 30s)
	RetryMin        time.Duration // backoff between attempts of a failing batch (default 100ms)
	RetryMax        time.Duration // (default 10s)
	Log             *slog.Logger
	Metrics         Metrics
	OnCommit        func(offsets.Position) // after each commit
	OnOpen          func()                 // each time the source has been opened
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
var ErrFenced = errors.New("producer fenced")

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

// item is one captured row of a batch.
type item struct {
	row        *source.Row
	pos        offsets.Position // end of its source transaction
	commitTime time.Time
	rec        sink.Record // the routed record, as far as it could be built
	dead       bool        // dead-lettered (stage, reason, cause)
	stage      string
	reason     string
	cause      error
	suspect    bool // failed together with others: send alone next time
	dlqSuspect bool // its dead letter failed together with others
	logged     bool // its dead-lettering was logged
}

type eosBatch struct {
	txs       int
	items     []*item
	bytes     int
	end       offsets.Position
	firstRec  time.Time // when its first record arrived (zero: none yet)
	posSusp   bool      // the position record failed together with others
	firstDone bool      // at least one transaction
}

func (b *eosBatch) add(tx source.Tx, route func(*source.Row) (sink.Record, error)) {
	b.txs++
	b.firstDone = true
	b.end = tx.Position
	if len(tx.Rows) > 0 && b.firstRec.IsZero() {
		b.firstRec = time.Now()
	}
	for i := range tx.Rows {
		it := &item{row: &tx.Rows[i], pos: tx.Position, commitTime: tx.CommitTime}
		rec, err := route(it.row)
		it.rec = rec
		if err != nil {
			it.dead, it.stage, it.reason, it.cause = true, "transform", reasonOf(err), err
		}
		b.items = append(b.items, it)
		b.bytes += rec.Size()
	}
}

// txBytes approximates the record bytes of tx before routing.
func txBytes(tx source.Tx) int {
	n := 0
	for _, r := range tx.Rows {
		for _, v := range r.Values {
			n += len(v.Bytes)
		}
		n += 64
	}
	return n
}

type eosRunner struct {
	o          EOSOptions
	log        *slog.Logger
	prod       TxnProducer
	src        source.Source
	committed  offsets.Position
	work       context.Context // ends ShutdownTimeout after the run context
	budget     *stopBudget     // the stop's one deadline (work ends at it)
	backoff    *backoff
	lastCommit time.Time
}

// RunExactlyOnce runs the exactly-once pipeline until ctx is cancelled (a graceful stop: stop
// reading, commit the batch being built, return nil) or a fatal error. See the comment at the
// top of eos.go.
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
	r := &eosRunner{o: o, log: o.Log, work: work, budget: budget, backoff: newBackoff(o.RetryMin, o.RetryMax)}
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
			return r.fatalErr(err, why)
		}
		return fmt.Errorf("transactional producer (transactional id %s): %w", o.TransactionalID, err)
	}
	r.prod = prod
	if r.committed, err = o.Store.Load(ctx); err != nil {
		return fmt.Errorf("load the committed position: %w", err)
	}
	if r.committed == "" {
		r.log.Info("no committed position: the source picks the start (its own log line says where)", "transactional_id", o.TransactionalID)
	} else {
		r.log.Info("resuming from the committed position", "position", string(r.committed), "transactional_id", o.TransactionalID)
	}
	r.lastCommit = time.Now()

	return runSessions(ctx, r.o.NewSource, r.o.OnOpen, r.log, func(src source.Source) { r.src = src },
		func() offsets.Position { return r.committed }, r.stream, "what was read is committed")
}

func (r *eosRunner) fatalErr(err error, why string) error {
	if r.o.Fenced(err) {
		return fmt.Errorf("%w: another producer initialised transactional id %q (kafka.transactional_id) — another outboxd with the same "+
			"transactional id, or the broker aborted this instance's transaction after its timeout; stopping without committing the current batch. "+
			"Nothing is lost: the instance that took over, or this one restarted, resumes from the committed position %s",
			ErrFenced, r.o.TransactionalID, r.committed)
	}
	return fmt.Errorf("%s (transactional id %q): %w", why, r.o.TransactionalID, err)
}

// stream runs one source session: (nil, nil) on a graceful stop, (srcErr, nil) when the source
// failed and what it delivered was committed, (nil, err) on a fatal error.
func (r *eosRunner) stream(ctx context.Context) (srcErr error, fatal error) {
	readCtx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	budget := newRowBudget(r.o.ReadAheadRows)
	txCh, errCh, wait := readTransactions(readCtx, r.src, r.o.TxBuffer, budget)
	defer wait()

	b := &eosBatch{}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	reading := true
	for {
		// When is b due? Full: now. With records: Linger after the first. Idle progress
		// only: IdleInterval after the last commit.
		var due time.Time
		switch {
		case !b.firstDone:
		case len(b.items) >= r.o.MaxRecords || b.bytes >= r.o.MaxBytes:
			due = time.Now()
		case !b.firstRec.IsZero():
			due = b.firstRec.Add(r.o.Linger)
		default:
			due = r.lastCommit.Add(r.o.IdleInterval)
		}
		var timerC <-chan time.Time
		if !due.IsZero() {
			if d := time.Until(due); d <= 0 {
				if err := r.commitBatch(b); err != nil {
					stopReading()
					return nil, err
				}
				b = &eosBatch{}
				continue
			} else {
				timer.Reset(d)
				timerC = timer.C
			}
		}
		var in <-chan source.Tx
		if reading {
			in = txCh
		}
		// take adds tx to b, committing b first when tx would overfill it (a source
		// transaction is never split).
		take := func(tx source.Tx) error {
			budget.release(len(tx.Rows))
			if len(b.items) > 0 && (len(b.items)+len(tx.Rows) > r.o.MaxRecords || b.bytes+txBytes(tx) > r.o.MaxBytes) {
				if err := r.commitBatch(b); err != nil {
					return err
				}
				b = &eosBatch{}
			}
			b.add(tx, r.o.Route)
			r.o.Metrics.EventsRead(len(tx.Rows))
			return nil
		}
		select {
		case tx := <-in:
			if err := take(tx); err != nil {
				stopReading()
				return nil, err
			}
		case <-timerC:
		case err := <-errCh:
			reading = false
			// Transactions read before the error are whole: take them too.
			for more := true; more; {
				select {
				case tx := <-txCh:
					if err := take(tx); err != nil {
						return nil, err
					}
				default:
					more = false
				}
			}
			if ctx.Err() == nil {
				srcErr = err
			}
		case <-ctx.Done():
			if reading {
				stopReading()
				reading = false
				r.log.Info("stopping: no more reads, committing the current batch", "records", len(b.items))
			}
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		if !reading {
			if b.firstDone {
				if err := r.commitBatch(b); err != nil {
					return nil, err
				}
			}
			return srcErr, nil
		}
	}
}
