// Package delivery is the one delivery core of both delivery modes: a pure state machine (no
// goroutines, no I/O, no context, no clock: times come in as arguments) that owns
//
//	track → resolve (ack / permanent error → dead letter / its ack or failure / transient)
//	      → the contiguous resolved prefix → the save queue → stored → confirmed
//
// In the style of etcd raft's RawNode, a thin loop drives it: inputs are method calls
// (Accept, Outcome, SaveResult, Tick, ...), and what the loop must do comes out in a Ready:
//
//	for {
//		rd := c.Ready()
//		if rd.Err != nil { produce(rd.Sends); log(rd.Events); return rd.Err } // fatal: no Save/Confirm
//		for _, s := range rd.Sends { produce(s) }    // in order; each gets exactly one Outcome
//		if rd.Save != "" { start Store.Save(rd.Save) } // ALO: asynchronous; later SaveResult
//		if rd.Confirm != "" { Source.Confirm(rd.Confirm) }
//		for _, e := range rd.Events { metrics / log }
//		c.Advance()                                 // rd's slices are invalid from here on
//		if rd.Done { return }                       // the session (or the stop) is complete
//		select { ...; call exactly one input method per event }
//	}
//
// The loop calls no input method between Ready and Advance (EOS exception: Refused, see there).
// Ready with nothing to do is cheap; calling Ready/Advance after every input is the intended use.
//
// Mode AtLeastOnce is implemented in core.go, ledger.go, admit.go, outcome.go (and alo*.go);
// Mode ExactlyOnce dispatches to the eos type of eos*.go. kafka.on_permanent_error: stop
// (Config.StopOnPermanent): permanent.go and eos_stop.go.
package delivery

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
)

// Mode is the delivery mode (kafka.delivery).
type Mode int

const (
	AtLeastOnce Mode = iota // records are acked one by one; the position goes to an offsets.Store
	ExactlyOnce             // records and the position go in one Kafka transaction
)

// ErrShutdownTimeout is returned (wrapped, in Ready.Err) when a stop or a source error's drain
// could not resolve the records in flight before its deadline. pipeline.ErrShutdownTimeout is
// this same value.
var ErrShutdownTimeout = errors.New("shutdown_timeout passed with records still unacked")

// Where locates a dead-lettered row in the source, for its dead letter's headers.
type Where struct {
	// Position is the end of the row's source transaction, as today's outboxd.source.position
	// header. It is "" for a row of a chunk with More set: the transaction's end is not known
	// yet (and is not waited for: that would hold the whole transaction in memory).
	Position source.Position
	// After is the end of the transaction before the row's one (or the position the session
	// opened at): set when Position is "", so the dead letter still says where the row lies
	// (header outboxd.source.after).
	After source.Position
}

// Config configures a Core. Fields marked ALO or EOS apply to that mode only. Zero values get
// the defaults noted (New applies them).
type Config struct {
	Mode Mode

	// In-flight caps (both modes): unresolved records and their bytes (source.RowBytes per row).
	// A chunk is accepted when it fits both, or when nothing is in flight (so an oversized chunk
	// goes alone instead of wedging the pipeline).
	MaxInflight      int // default 4096
	MaxInflightBytes int // default 4 MiB
	MaxTxs           int // ALO: transactions tracked but not yet committed (default 4*MaxInflight)

	// EOS: batching of source transactions into Kafka transactions.
	BatchRecords int           // records per Kafka transaction (default 1000; a bigger source transaction goes whole)
	BatchBytes   int           // record bytes per Kafka transaction (default 4 MiB)
	RetainBytes  int           // a batch keeps its records for an in-memory redo up to this (default BatchBytes)
	Linger       time.Duration // a batch waits this long for more after its first record (default 50ms)
	IdleInterval time.Duration // a batch with only idle progress is committed this often (default 1s)
	TxnTimeout   time.Duration // the producer's transaction.timeout.ms (default 60s)
	RetryMin     time.Duration // EOS: backoff between attempts of a failing batch (default 100ms)
	RetryMax     time.Duration // (default 10s)

	// IDColumn (outbox.columns.id; default "id") names a failed record in logs (eventID).
	IDColumn string
	// Route is the outbox transform (both modes).
	Route func(*source.Row, time.Time) (sink.Record, error)
	// Classify maps a Kafka error to permanent (dead-letter the record) or transient.
	Classify func(error) (permanent bool, reason string)
	// Fatal (EOS) reports errors no new producer can get past (fenced, not authorized) and why;
	// Fenced (EOS) reports PRODUCER_FENCED. nil: never.
	Fatal  func(error) (fatal bool, why string)
	Fenced func(error) bool
	// PositionRecord (EOS) builds the record that stores a position (kafka.OffsetStore.Record).
	PositionRecord func(source.Position) sink.Record
	// DeadLetter builds the complete dead letter of a record that can never be delivered: topic
	// set (kafka.dlq_topic), value dropped if it would be too large itself. rec is the record as
	// far as it could be built; stage is "transform" or "produce".
	DeadLetter func(rec sink.Record, row *source.Row, stage, reason, msg string, at Where, now time.Time) sink.Record

	DLQTopic        string  // for messages
	TransactionalID string  // EOS, for messages
	Breaker         Breaker // kafka.dlq_max_rate; the zero value never trips

	// StopOnPermanent (kafka.on_permanent_error: stop): a record that can never be delivered is
	// not dead-lettered; the core halts (permanent.go): Ready.Err becomes a *PermanentError
	// once what was in flight is resolved (or StopTimeout passed) and the resolved prefix, which
	// ends before the record's transaction, is stored. DeadLetter and Breaker are then unused.
	StopOnPermanent bool
	StopTimeout     time.Duration // the halt's drain (default 30s; the runners pass shutdown_timeout)
}

// DefaultMaxInflight and DefaultMaxInflightBytes are the in-flight caps a zero Config field
// stands for: records, and their bytes (source.ChunkBytes).
const (
	DefaultMaxInflight      = 4096
	DefaultMaxInflightBytes = 4 << 20
)

func (c *Config) defaults() {
	if c.MaxInflight <= 0 {
		c.MaxInflight = DefaultMaxInflight
	}
	if c.MaxInflightBytes <= 0 {
		c.MaxInflightBytes = DefaultMaxInflightBytes
	}
	if c.MaxTxs <= 0 {
		c.MaxTxs = 4 * c.MaxInflight
	}
	if c.BatchRecords <= 0 {
		c.BatchRecords = 1000
	}
	if c.BatchBytes <= 0 {
		c.BatchBytes = 4 << 20
	}
	if c.RetainBytes <= 0 {
		c.RetainBytes = c.BatchBytes
	}
	if c.Linger <= 0 {
		c.Linger = 50 * time.Millisecond
	}
	if c.IdleInterval <= 0 {
		c.IdleInterval = time.Second
	}
	if c.TxnTimeout <= 0 {
		c.TxnTimeout = 60 * time.Second
	}
	if c.StopTimeout <= 0 {
		c.StopTimeout = 30 * time.Second
	}
	if c.RetryMin <= 0 {
		c.RetryMin = 100 * time.Millisecond
	}
	if c.RetryMax < c.RetryMin {
		c.RetryMax = max(10*time.Second, c.RetryMin)
	}
	if c.Classify == nil {
		c.Classify = func(error) (bool, string) { return false, "" }
	}
	if c.Fatal == nil {
		c.Fatal = func(error) (bool, string) { return false, "" }
	}
	if c.Fenced == nil {
		c.Fenced = func(error) bool { return false }
	}
}

// ID names one send (one Produce call) of the core. The loop hands it back, unchanged, with
// that send's outcome. The zero ID is never issued.
type ID struct {
	f *flight // ALO: the record's flight
	n uint64  // EOS: the eos type's own numbering
}

// Send asks the loop to produce one record.
type Send struct {
	ID  ID
	Rec *sink.Record // valid (and not to be modified) until the Outcome for ID
	// Alone (EOS): produce it with nothing else in flight: Flush before and after it.
	Alone bool
}

// Ready is what the loop must do now. Execute it in this order: Err (see there), NewProducer,
// ReadBack, Abort, Begin, Sends, Flush, Commit, Save, Confirm, Events; then Advance; then
// Reopen / Done.
type Ready struct {
	// EOS producer steps. A Ready carries at most one step whose result gates the next
	// (NewProducer, ReadBack, Abort, Begin, Flush, Commit); its result is reported after
	// Advance with the matching method (ProducerReady, Loaded, Aborted, Began, Flushed,
	// CommitResult). Sends in the same Ready as Begin are produced only if Begin succeeded.
	NewProducer bool // close the broken producer (if any), create and initialise a new one
	ReadBack    bool // read the committed position (read_committed): ambiguous commit; Loaded
	Abort       bool
	Begin       bool
	Flush       bool // wait for every outstanding send's outcome (delivered before Flushed)
	Commit      bool

	Sends []Send // produce, in order

	// Save (ALO): start THE one Store.Save of this position (asynchronously; at most one is in
	// flight); report it with SaveResult. Confirm (both): Source.Confirm this position; it is
	// stored (ALO: saved; EOS: committed with the records), and never more than that.
	Save, Confirm source.Position

	Events []Event // metrics and log lines, in order

	// WakeAt: call Tick at (or soon after) this time even if nothing else happens (a drain
	// deadline, a batch's linger, a backoff). Zero: no timer needed beyond the regular ticks.
	WakeAt time.Time
	// Reopen (EOS): end this session like a source error (the loop returns srcErr ==
	// ErrReopen) and open the source again at Stored().
	Reopen bool
	// Done: the session is complete (after Stop: the stop; after SourceEnded: the drain), and
	// everything resolved is stored and confirmed. The loop returns.
	Done bool
	// Err is fatal: the loop returns it at once. ALO: first it produces the Sends and reports
	// the Events (only those decided before the error); EOS: nothing else of this Ready is
	// executed. It stays set: every later Ready returns it again.
	Err error
	// CrashPoint (EOS, tests): the test crash point this Ready passes ("mid_batch",
	// "before_commit", "after_commit"; "" none). The loop calls its crash hook with it first.
	CrashPoint string
}

// ErrReopen is the source error a loop reports when Ready.Reopen ended the session.
var ErrReopen = errors.New("delivery: the session is reopened to redo a spilled batch")

// EventKind says what an Event reports.
type EventKind uint8

const (
	// EventProduced: a record was acked (ALO) or committed (EOS): Metrics.Produced(Topic, Time).
	EventProduced EventKind = iota + 1
	// EventDeadLetter: a record is being dead-lettered: Metrics.DeadLettered(Reason) and the WARN
	// line "dead-lettering record" with Reason, Stage, Msg, Topic, Table, Position, RowID.
	EventDeadLetter
	// EventLog: a log line at Level with Msg and Args (slog key/value pairs).
	EventLog
)

// Event is one metric or log line for the loop.
type Event struct {
	Kind     EventKind
	Topic    string    // the record's topic
	Time     time.Time // EventProduced: the source commit time
	Reason   string    // EventDeadLetter
	Stage    string
	Msg      string // EventDeadLetter: the error; EventLog: the message
	Table    string
	Position source.Position // the row's transaction end ("" in a chunk with More: see After)
	After    source.Position
	RowID    string     // the row's id column, if any
	Level    slog.Level // EventLog
	Args     []any      // EventLog
	Count    int        // EventProduced: this many records of Topic and Time (0 means 1)
}

// Core is the delivery state machine. It is not safe for concurrent use: one loop goroutine
// owns it.
type Core struct {
	cfg Config
	rd  Ready // being built; handed out by Ready, reset by Advance
	err error // sticky fatal error
	// errSends, errEvents: how many of rd's Sends and Events were decided before err (ALO: the
	// loop still produces and reports those; what came after err is not).
	errSends, errEvents int

	alo *alo
	eos *eosCore
}

// New returns a core for one Run. stored is the position loaded from the store (ALO) or read
// back from offsets.topic (EOS): where the first session opens.
func New(cfg Config, stored source.Position) *Core {
	cfg.defaults()
	c := &Core{cfg: cfg}
	switch cfg.Mode {
	case ExactlyOnce:
		c.eos = newEOS(c, stored)
	default:
		c.alo = newALO(c, stored)
	}
	return c
}

// fail records a fatal error (the first one wins).
func (c *Core) fail(err error) {
	if c.err == nil {
		c.err = err
		c.errSends, c.errEvents = len(c.rd.Sends), len(c.rd.Events)
	}
}

// Open tells the core a source session began: the source was opened at Stored(). Called once
// per session, before the first Accept of it (also the first session).
func (c *Core) Open() {
	if c.eos != nil {
		c.eos.open()
		return
	}
	c.alo.open()
}

// CanAccept reports whether a chunk of rows rows and bytes bytes (source.ChunkBytes) would be
// accepted now. The loop reads the next chunk from the reader only after it got true for the
// one it holds: that is the backpressure that reaches the database. False after Stop,
// SourceEnded or a fatal error. ALO: a refusal also hands the resolved prefix to the save queue
// (as a Tick would), so the next Ready may carry a Save.
func (c *Core) CanAccept(rows, bytes int) bool {
	if c.err != nil {
		return false
	}
	if c.eos != nil {
		return c.eos.canAccept(rows, bytes)
	}
	return c.alo.canAccept(rows, bytes)
}

// Accept takes one chunk read from the source, in source order, after CanAccept was true for
// it. now is when it arrived. The core keeps pointers into ch.Rows until their records are
// resolved. The returned error is a contract violation (not CanAccept, a chunk after Stop, a
// broken chunk sequence): a bug; operational failures come out in Ready.Err.
func (c *Core) Accept(now time.Time, ch *source.Tx) error {
	if c.err != nil {
		return nil // the loop returns Ready.Err next
	}
	if c.eos != nil {
		return c.eos.accept(now, ch)
	}
	return c.alo.accept(now, ch)
}

// Outcome reports the producer's done(err) of the send id: nil once Kafka acked it, else the
// final error. Exactly once per Send the loop executed; now is when the loop handles it.
func (c *Core) Outcome(now time.Time, id ID, err error) {
	if c.err != nil {
		return
	}
	if c.eos != nil {
		c.eos.outcome(now, id, err)
		return
	}
	c.alo.outcome(now, id, err)
}

// Refused (EOS) reports that Produce refused the send id synchronously with err (not queued:
// no Outcome follows). The loop stops executing the remaining sends of this Ready (they were
// not produced), calls Refused at once (the one input allowed before Advance), then Advance.
func (c *Core) Refused(now time.Time, id ID, err error) {
	if c.err != nil {
		return
	}
	if c.eos != nil {
		c.eos.refused(now, id, err)
		return
	}
	c.fail(fmt.Errorf("delivery: Refused(%v) in at_least_once mode: %w", id, err))
}

// SaveResult (ALO) reports the Save of Ready.Save: err nil means p is durably stored;
// cancelled means the save's context ended (a stop), which is not a storage failure.
func (c *Core) SaveResult(p source.Position, err error, cancelled bool) {
	if c.err != nil {
		return
	}
	if c.alo == nil {
		c.fail(fmt.Errorf("delivery: SaveResult(%s) in exactly_once mode", p))
		return
	}
	c.alo.saveResult(p, err, cancelled)
}

// ProducerReady (EOS) reports NewProducer's result.
func (c *Core) ProducerReady(now time.Time, err error) {
	c.eosStep(func(e *eosCore) { e.producerReady(now, err) })
}

// Loaded (EOS) reports ReadBack's result: the committed position read back.
func (c *Core) Loaded(now time.Time, p source.Position, err error) {
	c.eosStep(func(e *eosCore) { e.loaded(now, p, err) })
}

// Aborted (EOS) reports Abort's result.
func (c *Core) Aborted(now time.Time, err error) { c.eosStep(func(e *eosCore) { e.aborted(now, err) }) }

// Began (EOS) reports Begin's result.
func (c *Core) Began(now time.Time, err error) { c.eosStep(func(e *eosCore) { e.began(now, err) }) }

// Flushed (EOS) reports Flush's result; every outstanding Outcome was reported before it.
func (c *Core) Flushed(now time.Time, err error) { c.eosStep(func(e *eosCore) { e.flushed(now, err) }) }

// CommitResult (EOS) reports Commit's result.
func (c *Core) CommitResult(now time.Time, err error) {
	c.eosStep(func(e *eosCore) { e.commitResult(now, err) })
}

func (c *Core) eosStep(f func(*eosCore)) {
	if c.err != nil {
		return
	}
	if c.eos == nil {
		c.fail(errors.New("delivery: an exactly_once producer step reported in at_least_once mode"))
		return
	}
	f(c.eos)
}

// Tick advances time. ALO: the loop ticks every CommitInterval; each tick hands the resolved
// prefix to the save queue (Ready.Save). Both: deadlines (a drain's, Ready.WakeAt) are checked.
func (c *Core) Tick(now time.Time) {
	if c.err != nil {
		return
	}
	if c.eos != nil {
		c.eos.tick(now)
		return
	}
	c.alo.tick(now)
}

// Stop begins a graceful stop: no more chunks are accepted (the loop stops reading and drops
// the chunk it holds); what is in flight is resolved until deadline (Tick at Ready.WakeAt),
// the resolved prefix is stored and confirmed, then Ready.Done. Past the deadline the prefix
// is stored and Ready.Err wraps ErrShutdownTimeout. A Stop during a SourceEnded drain turns
// it into the stop (the earlier deadline holds). Final.
func (c *Core) Stop(now, deadline time.Time) {
	if c.err != nil {
		return
	}
	if c.eos != nil {
		c.eos.stop(now, deadline)
		return
	}
	c.alo.stop(now, deadline)
}

// SourceEnded tells the core the source failed (the reader's error, between chunks): as Stop,
// but a transaction whose last chunk never came is abandoned (ALO: its acked records are
// re-read with it on reopen: duplicates, never a gap; EOS: its Kafka transaction is aborted),
// and after Ready.Done the loop reopens the source at Stored() and calls Open.
func (c *Core) SourceEnded(now, deadline time.Time) {
	if c.err != nil {
		return
	}
	if c.eos != nil {
		c.eos.sourceEnded(now, deadline)
		return
	}
	c.alo.sourceEnded(now, deadline)
}

// Ready returns what the loop must do now (see Ready). Its slices are the core's and valid
// until Advance.
func (c *Core) Ready() Ready {
	if c.err != nil {
		if c.eos != nil {
			return Ready{Err: c.err}
		}
		// ALO: the sends decided before the error (say the dead letters before the row that
		// tripped the breaker) go out, as with a Ready per row. Nothing is saved or confirmed.
		return Ready{Err: c.err, Sends: c.rd.Sends[:c.errSends], Events: c.rd.Events[:c.errEvents]}
	}
	if c.eos != nil {
		c.rd.WakeAt = c.eos.wakeAt()
	} else {
		c.rd.WakeAt = c.alo.wakeAt()
	}
	return c.rd
}

// Advance tells the core the loop executed the last Ready (started the Save, produced the
// Sends, ...). The next Ready holds only what came after.
func (c *Core) Advance() {
	if c.eos != nil {
		c.eos.advance()
	}
	clear(c.rd.Sends) // the reused array must not keep the sent records (and their chunks) alive
	c.rd = Ready{Sends: c.rd.Sends[:0], Events: c.rd.Events[:0]}
}
