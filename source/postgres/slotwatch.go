package postgres

// Slot safety while running (Config.SlotCheckInterval, every 10s by default).
//
// A logical slot keeps every WAL segment from its restart_lsn on. When outboxd cannot confirm
// (Kafka down, a stalled pipeline) the retained WAL grows; past max_wal_size the slot is
// "extended", past max_slot_wal_keep_size "unreserved" (the next checkpoint may remove WAL it
// needs) and then "lost". The watcher reads pg_replication_slots on its own connection, keeps
// the last result for metrics (SlotStatus), logs a warning while the slot is extended or
// unreserved, and fails the source loudly (Next returns an error wrapping source.ErrPositionLost,
// so outboxd exits 1) once the slot is lost or gone: the transactions after the stored position
// can no longer be read, and nothing must be silently skipped.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/source"
)

// SlotStatus is the slot's state as last read by the slot watch.
type SlotStatus struct {
	// WALStatus is pg_replication_slots.wal_status: reserved, extended, unreserved or lost.
	WALStatus string
	// RetainedBytes is the server's WAL position minus the slot's restart_lsn: the WAL the slot
	// keeps from removal (-1 when unknown, e.g. a lost slot without restart_lsn).
	RetainedBytes int64
	// SafeWALSize is pg_replication_slots.safe_wal_size: how much more WAL may be written before
	// the slot is in danger of being lost (nil when max_slot_wal_keep_size is -1, unlimited).
	SafeWALSize *int64
	// CheckedAt is when it was read.
	CheckedAt time.Time
}

// SlotStatus returns the slot's last known state; ok is false before the first check.
func (s *Source) SlotStatus() (st SlotStatus, ok bool) {
	if p := s.ext.slot.Load(); p != nil {
		return *p, true
	}
	return SlotStatus{}, false
}

const (
	defaultSlotCheckInterval = 10 * time.Second
	slotWarnEvery            = time.Minute
)

const slotStatusQuery = `SELECT wal_status, safe_wal_size,
	((CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END) - restart_lsn)::bigint
	FROM pg_replication_slots WHERE slot_name = $1`

// errSlotGone is returned by checkSlot when the slot's row is missing.
var errSlotGone = errors.New("slot does not exist")

// watchSlot checks the slot right away and then every SlotCheckInterval until ctx ends.
func (s *Source) watchSlot(ctx context.Context) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	var (
		prev     string    // wal_status of the previous successful check
		lastWarn time.Time // last warning about an extended/unreserved slot
	)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		t.Reset(s.cfg.SlotCheckInterval)
		st, err := s.checkSlot(ctx, &conn)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errSlotGone) {
			s.fail(fmt.Errorf("replication slot %q (source.postgres.slot) disappeared while outboxd was streaming from it (dropped?): the transactions after the stored position can no longer be read from it. Create it again (SELECT pg_create_logical_replication_slot('%s', 'pgoutput')), run `outboxd offsets set -c FILE --position <its confirmed_flush_lsn>` to accept the gap, re-publish the missing events from the outbox table, and restart: %w",
				s.cfg.Slot, s.cfg.Slot, source.ErrPositionLost))
			return
		}
		if err != nil {
			if conn != nil {
				conn.Close(context.Background())
				conn = nil
			}
			s.log.Debug("slot check failed; retrying", "err", err)
			continue
		}
		s.ext.slot.Store(&st)
		switch st.WALStatus {
		case "lost":
			s.log.Error("replication slot is lost", "wal_status", st.WALStatus)
			s.fail(fmt.Errorf("replication slot %q became lost while outboxd was running (wal_status = lost: the server removed WAL the slot still needed because it retained more than max_slot_wal_keep_size): the transactions after the stored position can no longer be read. Drop and recreate the slot (SELECT pg_drop_replication_slot('%s'); SELECT pg_create_logical_replication_slot('%s', 'pgoutput')), run `outboxd offsets set -c FILE --position <its confirmed_flush_lsn>` to accept the gap, re-publish the missing events from the outbox table, and restart; raise max_slot_wal_keep_size or fix what stalls outboxd so it does not happen again: %w",
				s.cfg.Slot, s.cfg.Slot, s.cfg.Slot, source.ErrPositionLost))
			return
		case "extended", "unreserved":
			if st.WALStatus != prev || time.Since(lastWarn) >= slotWarnEvery {
				lastWarn = time.Now()
				args := []any{"wal_status", st.WALStatus, "retained_bytes", st.RetainedBytes}
				if st.SafeWALSize != nil {
					args = append(args, "safe_wal_size", *st.SafeWALSize)
				}
				what := "the slot retains more WAL than max_wal_size (extended): outboxd is behind; check Kafka and outboxd_source_lag_bytes"
				if st.WALStatus == "unreserved" {
					what = "the slot retains more WAL than max_slot_wal_keep_size (unreserved): the next checkpoint may remove WAL it needs and the slot becomes lost; fix what stalls outboxd now or raise max_slot_wal_keep_size"
				}
				s.log.Warn("replication slot in danger: "+what, args...)
			}
		default:
			if prev == "extended" || prev == "unreserved" {
				s.log.Info("replication slot back to normal", "wal_status", st.WALStatus, "retained_bytes", st.RetainedBytes)
			}
		}
		prev = st.WALStatus
	}
}

func (s *Source) checkSlot(ctx context.Context, conn **pgx.Conn) (SlotStatus, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if *conn == nil {
		c, err := pgx.Connect(cctx, s.cfg.DSN)
		if err != nil {
			return SlotStatus{}, err
		}
		*conn = c
	}
	var (
		walStatus *string
		retained  *int64
		st        = SlotStatus{RetainedBytes: -1, CheckedAt: time.Now()}
	)
	err := (*conn).QueryRow(cctx, slotStatusQuery, s.cfg.Slot).Scan(&walStatus, &st.SafeWALSize, &retained)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, errSlotGone
	}
	if err != nil {
		return st, err
	}
	st.WALStatus = deref(walStatus)
	if st.WALStatus == "" {
		st.WALStatus = "unknown" // no restart_lsn reserved (not a state a streaming logical slot is in)
	}
	if retained != nil {
		st.RetainedBytes = *retained
	}
	return st, nil
}
