package postgres

// Coverage watch (Config.CoverageCheckInterval, every second by default, and on demand).
//
// At Open, setup reads the publication's shape (coverage.go) and refuses a publication that
// loses rows; the shape read then is the baseline. While streaming, this watcher reads it again
// on its own connection, periodically and whenever the stream loop asks, and stops outboxd
// (Next returns an error wrapping source.ErrPositionLost: exit 1) as soon as a reading has a
// problem or differs from the baseline (coverage.go, Changes).
//
// Each reading first reads the server's WAL flush position (ReadAt), then the catalog in a new
// snapshot: every transaction whose commit record is at or before ReadAt is visible to that
// snapshot — unless it is still in the commit window (commit record flushed, not yet visible,
// e.g. waiting for a synchronous standby), which the reading reports (InFlight). A passed
// reading with ReadAt R and no InFlight therefore proves that no catalog change committed up to
// R broke the coverage: positions up to R are safe (passed = R). A reading with InFlight proves
// that for the previous reading's R, once none of the previous reading's in-flight transactions
// is in flight any more. (The one window not covered: a commit record flushed but its clog
// entry not yet written, microseconds without any wait in between.)
//
// The stream loop (stream.go) hands out a position only when no row before it can have been
// missed:
//   - a Tx without rows (keepalive or heartbeat idle progress, an empty transaction) only once
//     passed >= its position; it asks for a reading and waits for it;
//   - a Tx with rows likewise, except in the single-relation case (one configured table without
//     inheritance children) when passed covers the last transaction that came with a Relation
//     message: pgoutput re-sends a relation's Relation message before its next row after any
//     invalidation of it — ALTER PUBLICATION ADD/DROP/SET TABLE and SET (...) invalidate every
//     member, a new inheritance child invalidates its parent (checked with pg_recvlogical on
//     PostgreSQL 15) — so a row of the only relation arriving without one proves the relation
//     stayed published, with the same options, since a passed reading. Data transactions then
//     get no added latency. With several relations a row of one proves nothing about the others
//     (one may have left the publication while the other's rows flow), so every transaction
//     waits until a reading covers it; one reading covers every transaction committed before it
//     started, so a backlog drains at full speed and live traffic waits about one reading.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/source"
)

const (
	defaultCoverageCheckInterval = time.Second
	coverageRetry                = 200 * time.Millisecond
	coverageWarnEvery            = time.Minute
	inFlightRetry                = 5 * time.Millisecond
)

// covState is the coverage watch's state; it lives in extras.
type covState struct {
	base    atomic.Pointer[PubShape] // the shape read at Open
	version int                      // server_version_num
	single  bool                     // base.singleRelation(): the fast path for data transactions applies
	// none: no configured table (the tableless outbox). No row can go missing through the
	// publication — pgoutput sends logical decoding messages whatever it lists — so the stream
	// hands out without waiting for a reading (stream.go, cleared); the watch still stops on a
	// dropped or re-created publication (the walsender needs it).
	none bool

	passed atomic.Uint64 // positions up to this LSN are vouched for by a passed reading
	want   atomic.Bool   // the stream loop waits for a check to pass: wake it
	req    chan struct{} // capacity 1: the stream loop asks for a check now

	handed   atomic.Uint64 // last position handed out by Next (LSN)
	handedAt atomic.Int64  // when (unix nanos)

	// readShape replaces the catalog read (tests with a fake walsender; nil otherwise).
	readShape func(context.Context) (*PubShape, error)
}

func (c *covState) init() {
	if c.req == nil {
		c.req = make(chan struct{}, 1)
	}
}

// request asks the watcher for a check now (non-blocking).
func (c *covState) request() {
	select {
	case c.req <- struct{}{}:
	default:
	}
}

// watchCoverage runs coverage checks until ctx ends or one fails the source.
func (s *Source) watchCoverage(ctx context.Context) {
	cov := &s.ext.cov
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	var (
		lastWarn     time.Time
		prevInFlight []string      // in-flight commits of the previous reading (see below)
		prevReadAt   pglogrepl.LSN // its ReadAt; 0: the previous reading had none
	)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-cov.req:
		}
		now, err := s.readCoverage(ctx, &conn)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if conn != nil {
				conn.Close(context.Background())
				conn = nil
			}
			if time.Since(lastWarn) >= coverageWarnEvery {
				lastWarn = time.Now()
				s.log.Warn("publication coverage check failed; idle progress waits until one succeeds", "err", err)
			}
			t.Reset(coverageRetry)
			continue
		}
		if ferr := s.coverageVerdict(now); ferr != nil {
			s.log.Error("publication coverage changed", "err", ferr)
			s.fail(ferr)
			return
		}
		// A reading vouches for positions up to its ReadAt only if its snapshots missed no
		// commit (InFlight); otherwise for the previous reading's ReadAt, once none of that
		// reading's in-flight transactions is in flight any more (see the file comment).
		next := s.cfg.CoverageCheckInterval
		before := cov.passed.Load()
		switch {
		case len(now.InFlight) == 0:
			cov.advance(now.ReadAt)
		case prevReadAt != 0 && disjoint(prevInFlight, now.InFlight):
			cov.advance(prevReadAt)
		}
		if len(now.InFlight) > 0 {
			prevInFlight, prevReadAt = now.InFlight, now.ReadAt
			if cov.want.Load() {
				next = inFlightRetry // the stream waits: look again soon
			}
		} else {
			prevInFlight, prevReadAt = nil, 0
		}
		if cov.passed.Load() > before && cov.want.CompareAndSwap(true, false) {
			if w := s.waker.Load(); w != nil {
				w.wake() // the stream re-checks what it waits for, and asks again if need be
			}
		}
		t.Reset(next)
	}
}

// advance raises passed to l.
func (c *covState) advance(l pglogrepl.LSN) {
	for {
		old := c.passed.Load()
		if uint64(l) <= old || c.passed.CompareAndSwap(old, uint64(l)) {
			return
		}
	}
}

func disjoint(a, b []string) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return false
		}
	}
	return true
}

func (s *Source) readCoverage(ctx context.Context, conn **pgx.Conn) (*PubShape, error) {
	if f := s.ext.cov.readShape; f != nil {
		return f(ctx)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if *conn == nil {
		c, err := pgx.Connect(cctx, s.cfg.DSN)
		if err != nil {
			return nil, fmt.Errorf("connect (source.dsn): %w", err)
		}
		*conn = c
	}
	return queryShape(cctx, *conn, s.ext.cov.version, s.cfg.Publication, "", s.cfg.Tables)
}

// coverageVerdict returns the stop error when now differs from the baseline or has a problem.
func (s *Source) coverageVerdict(now *PubShape) error {
	base := s.ext.cov.base.Load()
	if base == nil {
		return nil
	}
	changes := Changes(base, now)
	problems := now.Problems(s.cfg.Columns)
	if len(changes) == 0 && len(problems) == 0 {
		return nil
	}
	what := append([]string(nil), changes...)
	var fixes []string
	for _, p := range problems {
		what = append(what, p.What)
		fixes = append(fixes, p.Fix)
	}
	fix := "the publication covers the tables again as it is now; nothing to change there"
	if len(fixes) > 0 {
		fix = "fix the publication: " + strings.Join(fixes, "; ")
	}
	handed := pglogrepl.LSN(s.ext.cov.handed.Load())
	at := "when outboxd started"
	if handed == 0 { // nothing handed out yet: the position Open started from
		handed = pglogrepl.LSN(s.confirmed.Load())
	}
	if ns := s.ext.cov.handedAt.Load(); ns != 0 {
		at = "at " + time.Unix(0, ns).UTC().Format(time.RFC3339Nano)
	}
	since := fmt.Sprintf("%s — the last position outboxd handed out (%s); the stored and confirmed positions are not past it —", handed, at)
	// Transactions handed out on the single-relation fast path (stream.go, cleared) after the
	// last passed reading are not vouched for: a publication change made inside such a
	// transaction (BEGIN; INSERT; ALTER PUBLICATION … DROP TABLE; INSERT; COMMIT) drops the
	// rows after it from that very transaction, with no Relation message to gate on. Name the
	// last vouched position, so that the rows to re-publish include them.
	if passed := pglogrepl.LSN(s.ext.cov.passed.Load()); passed != 0 && passed < handed && !s.ext.cov.none {
		since = fmt.Sprintf("%s — the last position a passed coverage check vouched for; outboxd handed out transactions up to %s (%s) without a check "+
			"(one outbox table: the fast path), and a publication change made inside one of them drops that transaction's later rows, "+
			"so the stored and confirmed positions may be past such rows —", passed, handed, at)
		handed = passed
	}
	slot := s.cfg.Slot
	return fmt.Errorf("publication %q (source.postgres.publication) no longer streams the outbox tables as it did when outboxd started: %s. "+
		"pgoutput applies the publication as it was when each row was committed, so rows committed to %s after %s "+
		"may be missing from the replication stream for good, even once the publication is fixed. outboxd stops. "+
		"To recover: %s; drop and re-create the slot (SELECT pg_drop_replication_slot('%s'); SELECT pg_create_logical_replication_slot('%s', 'pgoutput')), "+
		"run `outboxd offsets set -c FILE --position <its confirmed_flush_lsn>` and restart; then re-publish the rows committed after %s and before the new slot was created from the outbox table (same ids: consumers deduplicate): %w",
		s.cfg.Publication, strings.Join(what, "; "), tablesText(s.cfg.Tables), since,
		fix, slot, slot, handed, source.ErrPositionLost)
}

// refuseShape is Open's error for a publication with problems.
func (s *Source) refuseShape(problems []Problem) error {
	var b strings.Builder
	for i, p := range problems {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s — fix: %s", p.What, p.Fix)
	}
	return fmt.Errorf("publication %q (source.postgres.publication) does not stream every outbox row whole, so outboxd refuses to start: %s: %w",
		s.cfg.Publication, b.String(), source.ErrPositionLost)
}

// refuseAge is Open's error for a slot that decodes from before a publication change.
func (s *Source) refuseAge(hits []AgeHit, from pglogrepl.LSN, note string) error {
	slot, pub := s.cfg.Slot, s.cfg.Publication
	var ws []string
	for _, h := range hits {
		ws = append(ws, h.What)
	}
	what := strings.Join(ws, "; ") + note
	if from == 0 {
		return fmt.Errorf("replication slot %q (source.postgres.slot) is older than publication %q's current membership (%s): the slot decodes with the catalog as it was at each change, "+
			"so for changes before the publication existed it fails (`publication %q does not exist`) or skips the rows. "+
			"Drop the slot (SELECT pg_drop_replication_slot('%s')) and start outboxd again: it creates a new slot after the publication "+
			"(with a stored position it does not: create it (SELECT pg_create_logical_replication_slot('%s', 'pgoutput')) and run `outboxd offsets set -c FILE --position <its confirmed_flush_lsn>`). "+
			"Rows committed before that are not streamed: re-publish them from the outbox table if they matter: %w",
			slot, pub, what, pub, slot, slot, source.ErrPositionLost)
	}
	return fmt.Errorf("publication %q (source.postgres.publication) changed after the point replication slot %q decodes from (%s; the row's xmin is not older than the slot's catalog_xmin): "+
		"rows committed to the outbox tables after the stored position %s and before that change were not in the publication when they were committed, so this slot never streams them, not even now. "+
		"outboxd refuses to start rather than skip them. To recover: re-publish the rows committed after %s up to the change from the outbox table (same ids: consumers deduplicate), "+
		"drop and re-create the slot (SELECT pg_drop_replication_slot('%s'); SELECT pg_create_logical_replication_slot('%s', 'pgoutput')), run `outboxd offsets set -c FILE --position <its confirmed_flush_lsn>` and restart: %w",
		pub, slot, what, from, from, slot, slot, source.ErrPositionLost)
}

// tablesText names the configured tables in an error; with none (the tableless outbox), any
// table the publication streams.
func tablesText(tables []string) string {
	if len(tables) == 0 {
		return "any table the publication streams (source.tables is empty)"
	}
	return strings.Join(tables, ", ")
}
