// Package postgres is the PostgreSQL source: it reads the write-ahead log through a logical
// replication slot with the pgoutput plugin (protocol version 1) and hands the pipeline the
// committed transactions containing the INSERTs into the configured outbox tables, each in
// chunks of bounded size (Config.ChunkRows, Config.ChunkBytes) as its rows arrive.
//
// It is an I/O shell (Source: connections, publication and slot management, the replication
// stream, status updates) around a pure Decoder (pgoutput bytes → source.Tx).
//
// Positions are LSNs in PostgreSQL's text form ("0/16B3748"): the end of a committed transaction,
// or, for idle progress, a WAL location the server reported in a keepalive.
//
// Requires PostgreSQL 13 or later with wal_level = logical and a role with the REPLICATION
// attribute (or superuser) that may create the publication and the slot.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/source"
)

// Config configures a Source.
type Config struct {
	// DSN is the libpq connection string or URL (source.dsn). It never appears in logs or errors.
	DSN string
	// Tables are the outbox tables, "schema.table" (source.tables).
	Tables []string
	// Slot is the logical replication slot (source.postgres.slot), default "outboxd". It is
	// created with the pgoutput plugin when absent and no stored position exists.
	Slot string
	// Publication is the publication (source.postgres.publication), default "outboxd". It is
	// created as FOR TABLE <Tables> WITH (publish = 'insert') when absent.
	Publication string
	// StandbyTimeout is the interval between standby status updates (default 10s). Keep it well
	// below the server's wal_sender_timeout (default 60s).
	StandbyTimeout time.Duration
	// HeartbeatInterval (source.postgres.heartbeat_interval): when no outbox change was handed
	// out for this long, emit a heartbeat message (see heartbeat.go). 0 disables. Needs
	// PostgreSQL 14+ (pgoutput messages); ignored with a notice on older servers.
	HeartbeatInterval time.Duration
	// SlotCheckInterval is how often the slot's wal_status and retained WAL are checked while
	// streaming (see slotwatch.go); default 10s, negative disables.
	SlotCheckInterval time.Duration
	// Columns are the outbox columns outboxd reads (id, aggregate id, payload, aggregate type
	// when routed by it, header columns): a publication column list must not drop them and they
	// must not be STORED generated columns (coverage.go).
	Columns []string
	// CoverageCheckInterval is how often the publication's coverage of the tables is checked
	// while streaming (coveragewatch.go), besides the checks idle progress asks for; default 1s.
	CoverageCheckInterval time.Duration
	// ChunkRows and ChunkBytes cap one chunk of a transaction (source.Tx): at most ChunkRows rows
	// and ChunkBytes bytes (source.RowBytes per row; a single bigger row is a chunk alone), so a
	// transaction of any size is held in bounded memory. 0: the default (DefaultChunkRows, DefaultChunkBytes);
	// negative: no cap. Without any cap every transaction is one chunk.
	ChunkRows  int
	ChunkBytes int
	// MessagePrefix (source.postgres.messages.prefix): a transactional logical decoding message
	// (pg_logical_emit_message(true, prefix, content)) with exactly this prefix is an outbox
	// event, handed out as a Row of the transaction in commit order (see MessageTable); "": off.
	// Needs PostgreSQL 14+ (pgoutput messages).
	MessagePrefix string
	// Snapshot (source.postgres.snapshot): "initial" publishes the rows already in the tables at
	// the first start of a new slot (no stored position), then streams from the slot's start;
	// "" or "never": no snapshot.
	Snapshot string
	// OrderColumn orders the snapshot's rows (outbox.order_column); "": the table's order.
	OrderColumn string
	// FailoverSlot (source.postgres.failover_slot): whether a slot outboxd creates is a failover
	// slot (PostgreSQL 17+, synchronized to standbys): "" or "auto" (on when the server is 17+),
	// "on" (refused below 17), "off" (failover.go).
	FailoverSlot string
	// MinSafeWALSize (source.postgres.min_safe_wal_size) in bytes: `outboxd check` WARNs when
	// the slot's safe_wal_size is below it; 0: DefaultMinSafeWALSize (preflight_retention.go).
	MinSafeWALSize int64
}

// DefaultMessagePrefix is source.postgres.messages.prefix when the block is set without one.
const DefaultMessagePrefix = "outboxd.event"

// DefaultChunkRows and DefaultChunkBytes are the chunk caps a zero Config.ChunkRows and
// Config.ChunkBytes stand for.
const (
	DefaultChunkRows  = 1024
	DefaultChunkBytes = 1 << 20
)

const (
	defaultStandbyTimeout = 10 * time.Second
	// confirmGap bounds how often a Confirm that advanced the position triggers a status update.
	confirmGap = 100 * time.Millisecond
	// clockReuse bounds how many loop turns in a row reuse one clock reading (stream.go).
	clockReuse = 32
	// idleGap bounds how often idle progress is handed out (capped at StandbyTimeout).
	idleGap = time.Second
)

// ErrClosed is returned by Next once Close has been called.
var ErrClosed = errors.New("postgres source closed")

// Source reads an outbox from PostgreSQL logical replication. It implements source.Source.
//
// Concurrency design: after Open, one goroutine (the stream loop) owns the replication
// connection exclusively: it reads messages, feeds the Decoder, answers keepalives, and writes
// every standby status update. Next only receives finished chunks from that loop over an
// unbuffered channel, in batches (stream_queue.go): the loop decodes ahead into a bounded
// queue while pgconn's read buffer holds messages and hands the queue over when a read would
// wait for the server or the queue is full; while a full queue waits, nothing more is read
// (TCP flow control pushes back to the server). Because the loop
// keeps sending status updates while it waits, a stalled pipeline does not trip the server's
// wal_sender_timeout.
//
// Confirm stores the confirmed LSN in an atomic (non-decreasing) and wakes the loop, which sends
// a status update carrying it within confirmGap (100ms). Status updates report
// write = flush = apply = the last confirmed LSN (initially the position passed to Open), never
// a merely received one.
//
// Idle progress: when the loop has nothing buffered (no partially received transaction, no
// transaction waiting for Next), every transaction handed out has been confirmed, and a server
// keepalive reported a WAL end beyond the last position handed out, Next returns
// Tx{Position: <that WAL end>} with no rows — at most once per min(1s, StandbyTimeout). The
// pipeline stores and confirms it like any transaction, so an idle outbox on a busy database
// does not make the slot retain WAL. This is safe because the walsender reports in keepalives
// only a location up to which it has already decoded and sent every committed transaction.
// Transactions that touch no outbox row come as Tx values with no rows (PostgreSQL 15+ does not
// even send them; idle progress covers that case).
type Source struct {
	cfg Config
	log *slog.Logger

	confirmed atomic.Uint64 // last confirmed LSN, non-decreasing
	walEnd    atomic.Uint64 // latest server WAL end seen (metrics)

	txCh   chan *txBatch // the stream loop's queue of chunks to Next (stream_queue.go)
	spares chan *txBatch // batches Next emptied, for the loop to fill again (capacity 2)
	nb     batchState    // Next's batch (Next's goroutine only)
	nc     nextChans     // Next's copy of the channels start made (Next's goroutine only)
	done   chan struct{} // closed when the stream loop ends; err is set before
	err    error

	// Waking the stream loop (stream.go): the loop publishes in confirmWake whether its current
	// wait ends later than a Confirm needs; the first Confirm that then advances the position
	// clears it and interrupts the wait through waker.
	confirmWake atomic.Bool
	waker       atomic.Pointer[waker] // set by Open before the loop starts

	mu     sync.Mutex
	cancel context.CancelFunc // stops the loop
	repl   *pgconn.PgConn
	opened bool
	closed bool

	ext extras // heartbeats, slot watch, fatal errors (heartbeat.go, slotwatch.go)

	rel relState // relation attribution (relations.go)

	snap      snapState       // source.postgres.snapshot: initial (snapshot.go)
	keeper    *snapshotKeeper // shared by the Adapter's Sources (snapshot_keep.go)
	ownKeeper bool            // keeper is this Source's alone (New's): Close lets go of it
}

var _ source.Source = (*Source)(nil)

// New returns an unopened Source. A nil log uses slog.Default().
func New(cfg Config, log *slog.Logger) *Source {
	if cfg.Slot == "" {
		cfg.Slot = "outboxd"
	}
	if cfg.Publication == "" {
		cfg.Publication = "outboxd"
	}
	if cfg.StandbyTimeout <= 0 {
		cfg.StandbyTimeout = defaultStandbyTimeout
	}
	if cfg.SlotCheckInterval == 0 {
		cfg.SlotCheckInterval = defaultSlotCheckInterval
	}
	if cfg.CoverageCheckInterval <= 0 {
		cfg.CoverageCheckInterval = defaultCoverageCheckInterval
	}
	if cfg.ChunkRows == 0 {
		cfg.ChunkRows = DefaultChunkRows
	}
	if cfg.ChunkBytes == 0 {
		cfg.ChunkBytes = DefaultChunkBytes
	}
	if log == nil {
		log = slog.Default()
	}
	s := &Source{cfg: cfg, log: log.With("source", "postgres", "slot", cfg.Slot), keeper: &snapshotKeeper{}, ownKeeper: true}
	s.ext.fatal = make(chan struct{})
	s.ext.cov.init()
	return s
}

// Open prepares the publication and the slot and starts streaming after from (see the source
// package contract). It returns an error, and streams nothing, when from can no longer be
// served: the slot is missing, lost, or has confirmed_flush_lsn beyond from. It never creates a
// slot when from is non-empty. An empty from starts where the slot stands (a new slot: now).
func (s *Source) Open(ctx context.Context, from source.Position) error {
	s.mu.Lock()
	if s.opened || s.closed {
		s.mu.Unlock()
		return errors.New("postgres source: Open called twice or after Close")
	}
	s.opened = true
	s.mu.Unlock()

	if err := s.validate(); err != nil {
		return err
	}
	var fromLSN pglogrepl.LSN
	if from != "" {
		var err error
		if fromLSN, err = ParseLSN(from); err != nil {
			return fmt.Errorf("stored position: %w: fix or reset it with `outboxd offsets set`", err)
		}
	}
	repl, snap, err := s.setup(ctx, fromLSN)
	if err != nil {
		return err
	}
	if snap != nil { // the stream continues where the snapshot ends (snapshot.go)
		fromLSN = snap.at
	}
	return s.start(ctx, repl, fromLSN, snap)
}

// start starts the stream loop (and the background helpers) on repl, a connection in copy-both
// mode streaming from fromLSN, and, when snap is not nil, the snapshot Next hands out first.
func (s *Source) start(ctx context.Context, repl *pgconn.PgConn, fromLSN pglogrepl.LSN, snap *snapshotRun) error {
	s.storeConfirmed(fromLSN)
	s.waker.Store(newWaker(repl))

	runCtx, cancel := context.WithCancel(context.Background())
	s.mu.Lock()
	s.repl, s.cancel = repl, cancel
	s.txCh, s.spares, s.done = make(chan *txBatch), make(chan *txBatch, 2), make(chan struct{})
	if snap != nil {
		s.snap.ch, s.snap.failed, s.snap.done = make(chan source.Tx), make(chan struct{}), make(chan struct{})
		s.snap.at, s.snap.confirmedCh = snap.at, make(chan struct{}, 1)
	}
	closed := s.closed
	s.mu.Unlock()
	if closed { // Close raced with Open
		cancel()
		_ = repl.Close(ctx)
		if snap != nil {
			snap.conn.Close(context.Background())
		}
		return ErrClosed
	}
	if snap != nil {
		go s.runSnapshot(runCtx, snap)
	}
	st := newStream(s, repl, fromLSN)
	go s.run(runCtx, st)
	s.startBackground(runCtx)
	return nil
}

// Next returns the next transaction (see the source package contract). After the stream failed
// it returns that error on every call; after Close, ErrClosed. It returns the chunks of the
// batch it took from the stream loop one by one (stream_queue.go), and takes the next batch
// only when they are all returned. A failure, a fatal error or Close ends it even with
// chunks of its batch left: they are not delivered, so nothing past them is stored.
func (s *Source) Next(ctx context.Context) (source.Tx, error) {
	if s.nc.done == nil { // start sets these once, under mu: read them once (Next's goroutine only)
		s.mu.Lock()
		s.nc = nextChans{txCh: s.txCh, done: s.done, snapCh: s.snap.ch, snapFailed: s.snap.failed}
		s.mu.Unlock()
		if s.nc.done == nil {
			return source.Tx{}, errors.New("postgres source: Next called before a successful Open")
		}
	}
	txCh, done, snapCh, snapFailed := s.nc.txCh, s.nc.done, s.nc.snapCh, s.nc.snapFailed
	if snapCh != nil && !s.snap.over { // the snapshot first (snapshot.go)
		select {
		case tx, ok := <-snapCh:
			if ok {
				return tx, nil
			}
			s.snap.over = true // every chunk was received: the stream follows
		case <-snapFailed:
			return source.Tx{}, s.snap.err
		case <-done:
			return source.Tx{}, s.err
		case <-s.ext.fatal:
			return source.Tx{}, s.ext.fatalErr
		case <-ctx.Done():
			return source.Tx{}, ctx.Err()
		}
	}
	for {
		if isClosed(done) {
			return source.Tx{}, s.err
		}
		if isClosed(s.ext.fatal) {
			return source.Tx{}, s.ext.fatalErr
		}
		if tx, ok := s.fromBatch(); ok {
			return tx, nil
		}
		select {
		case b := <-txCh:
			s.takeBatch(b)
		case <-done:
			return source.Tx{}, s.err
		case <-s.ext.fatal:
			return source.Tx{}, s.ext.fatalErr
		case <-ctx.Done():
			return source.Tx{}, ctx.Err()
		}
	}
}

// Confirm records that everything up to p is durably delivered and makes the stream loop send
// a status update carrying it within about 100ms. It never blocks on I/O and is safe to call
// concurrently with Next. Positions lower than an earlier Confirm are ignored. After Close it is
// a no-op: the next Open starts by confirming its stored position.
func (s *Source) Confirm(_ context.Context, p source.Position) error {
	lsn, err := ParseLSN(p)
	if err != nil {
		return fmt.Errorf("confirm: %w", err)
	}
	// storeConfirmed happens before the CompareAndSwap: a loop that armed confirmWake either sees
	// the new position when it re-checks it or gets woken (stream.go, loop).
	s.noteConfirmed(lsn) // snapshot_keep.go
	if s.storeConfirmed(lsn) && s.confirmWake.CompareAndSwap(true, false) {
		if w := s.waker.Load(); w != nil {
			w.wake()
		}
	}
	return nil
}

// storeConfirmed raises the confirmed LSN to lsn and reports whether it moved.
func (s *Source) storeConfirmed(lsn pglogrepl.LSN) bool {
	for {
		old := s.confirmed.Load()
		if uint64(lsn) <= old {
			return false
		}
		if s.confirmed.CompareAndSwap(old, uint64(lsn)) {
			return true
		}
	}
}

// Progress reports the latest server WAL end seen on the stream and the last confirmed LSN
// (their difference is the slot's lag as far as outboxd knows it).
func (s *Source) Progress() (serverWALEnd, confirmed pglogrepl.LSN) {
	return pglogrepl.LSN(s.walEnd.Load()), pglogrepl.LSN(s.confirmed.Load())
}

// Close stops the stream, sends a last status update with the confirmed LSN, and closes the
// replication connection. A Next blocked concurrently returns ErrClosed. Close is idempotent.
func (s *Source) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	cancel, done, repl, snapDone := s.cancel, s.done, s.repl, s.snap.done
	s.mu.Unlock()
	if s.ownKeeper { // no other Source reads its snapshot again (snapshot_keep.go)
		defer s.keeper.releaseAny()
	} else {
		defer s.keeper.closed(s.log)
	}
	if cancel == nil {
		return nil // never opened (or Open failed / still running: it sees closed)
	}
	cancel()
	if w := s.waker.Load(); w != nil {
		w.wake() // the loop may be blocked in a read: cancel alone does not interrupt it
	}
	<-done
	if snapDone != nil {
		<-snapDone // ends with the run context; it closes its own connection (the keeper's stays)
	}
	s.ext.wg.Wait()
	ctx, c := context.WithTimeout(context.Background(), 5*time.Second)
	defer c()
	if err := repl.Close(ctx); err != nil {
		return fmt.Errorf("close replication connection: %w", err)
	}
	return nil
}

func (s *Source) validate() error {
	if s.cfg.DSN == "" {
		return errors.New("source.dsn is empty: set the PostgreSQL connection string")
	}
	if len(s.cfg.Tables) == 0 && s.cfg.MessagePrefix == "" {
		// With source.postgres.messages (the tableless outbox) no table is needed.
		return errors.New("source.tables is empty: list the outbox tables as schema.table, or set source.postgres.messages to carry events without a table (PostgreSQL 14+)")
	}
	for _, t := range s.cfg.Tables {
		if schema, name := splitTable(t); schema == "" || name == "" {
			return fmt.Errorf("source.tables: %q is not schema.table", t)
		}
	}
	if !validSlotName(s.cfg.Slot) {
		return fmt.Errorf("source.postgres.slot %q is not a valid slot name: use lower-case letters, digits and underscores, at most 63 characters", s.cfg.Slot)
	}
	switch s.cfg.Snapshot {
	case "", SnapshotNever, SnapshotInitial:
	default:
		return fmt.Errorf("source.postgres.snapshot %q is not one of never | initial", s.cfg.Snapshot)
	}
	if len(s.cfg.Publication) > 63 {
		return fmt.Errorf("source.postgres.publication %q is longer than 63 characters", s.cfg.Publication)
	}
	return nil
}

// validSlotName mirrors PostgreSQL's ReplicationSlotValidateName.
func validSlotName(n string) bool {
	if n == "" || len(n) > 63 {
		return false
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}
