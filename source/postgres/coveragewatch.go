package postgres

// Coverage watch (Config.CoverageCheckInterval, every second by default, and on demand).
//
// At Open, setup reads the publication's shape (coverage.go) and refuses a publication that
// loses rows; the shape read then is the baseline. While streaming, this watcher reads it again
// on its own connection, periodically and whenever the stream loop asks, and stops outboxd
// (Next returns an error wrapping source.ErrPositionLost: exit 1) as soon as a reading has a
// problem or differs from the baseline (coverage.go, Changes).
//
// The stream loop (stream.go) hands out a position only when no row before it can have been
// missed:
//   - a Tx without rows (keepalive or heartbeat idle progress, an empty transaction) only once a
//     coverage check that STARTED after the position was received has passed: such a check sees
//     every catalog change committed before the position, so a change that made rows before it
//     vanish is caught before the position is stored or confirmed;
//   - a Tx with rows likewise, except in the single-relation case (one configured table without
//     inheritance children) when no Relation message arrived since the start of the last passed
//     check: pgoutput re-sends a relation's Relation message before its next row after any
//     invalidation of it — ALTER PUBLICATION ADD/DROP/SET TABLE and SET (...) invalidate every
//     member, a new inheritance child invalidates its parent — so a row of the only relation
//     arriving without one proves the relation stayed published, with the same options, since a
//     check that passed. In that case data transactions get no added latency. With several
//     relations a row of one proves nothing about the others (one may have been dropped from
//     the publication while the other's rows flow), so every hand-out waits for a check.
//
// Epochs order checks and receipts without clocks: a check takes epoch.Add(1) before sending
// its query; the loop stamps what it receives with epoch.Load(). A check with epoch e started
// after a receipt stamped r iff e > r.

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

	epoch  atomic.Uint64 // incremented at the start of every check
	passed atomic.Uint64 // epoch of the newest check that passed
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
		prevInFlight []string // in-flight commits of the previous reading (see below)
		prevEpoch    uint64   // its epoch; 0: the previous reading had none
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
		e := cov.epoch.Add(1)
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
		// A reading vouches for the positions received before it started (epoch e) only if its
		// snapshots missed no commit (InFlight). Otherwise it vouches for those received before
		// the previous reading started, once none of that reading's in-flight transactions is
		// still in flight: they are visible now, so this reading saw their catalog changes.
		next := s.cfg.CoverageCheckInterval
		before := cov.passed.Load()
		switch {
		case len(now.InFlight) == 0:
			cov.advance(e)
		case prevEpoch != 0 && disjoint(prevInFlight, now.InFlight):
			cov.advance(prevEpoch)
		}
		if len(now.InFlight) > 0 {
			prevInFlight, prevEpoch = now.InFlight, e
			if cov.want.Load() {
				next = inFlightRetry // the stream waits: look again soon
			}
		} else {
			prevInFlight, prevEpoch = nil, 0
		}
		if cov.passed.Load() > before && cov.want.CompareAndSwap(true, false) {
			if w := s.waker.Load(); w != nil {
				w.wake() // the stream re-checks what it waits for, and asks again if need be
			}
		}
		t.Reset(next)
	}
}

// advance raises passed to e.
func (c *covState) advance(e uint64) {
	for {
		old := c.passed.Load()
		if e <= old || c.passed.CompareAndSwap(old, e) {
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
	slot := s.cfg.Slot
	return fmt.Errorf("publication %q (source.postgres.publication) no longer streams the outbox tables as it did when outboxd started: %s. "+
		"pgoutput applies the publication as it was when each row was committed, so rows committed to %s after %s — the last position outboxd handed out (%s); "+
		"the stored and confirmed positions are not past it — may be missing from the replication stream for good, even once the publication is fixed. outboxd stops. "+
		"To recover: %s; drop and re-create the slot (SELECT pg_drop_replication_slot('%s'); SELECT pg_create_logical_replication_slot('%s', 'pgoutput')), "+
		"run `outboxd offsets set -c FILE --position <its confirmed_flush_lsn>` and restart; then re-publish the rows committed after %s and before the new slot was created from the outbox table (same ids: consumers deduplicate): %w",
		s.cfg.Publication, strings.Join(what, "; "), strings.Join(s.cfg.Tables, ", "), handed, at,
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
