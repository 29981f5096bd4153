package postgres

// The PostgreSQL side of `outboxd check` and `outboxd offsets show/set`: what the slot has
// confirmed and retains, and whether a position can be replayed from it.

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/source"
)

// Preflight runs the PostgreSQL checks of `outboxd check` (Preflight) and reports each line in
// order. The stored position does not matter to them (Open settles it against the slot).
func (a *Adapter) Preflight(ctx context.Context, _ func(context.Context) (source.Position, error), report func(name string, ok bool, reason, fix string)) {
	for _, r := range Preflight(ctx, Config{DSN: a.cfg.DSN, Tables: a.cfg.Tables, Slot: a.cfg.Slot,
		Publication: a.cfg.Publication, Columns: a.cfg.Columns, MessagePrefix: a.cfg.MessagePrefix}) {
		report(r.Name, r.OK, r.Reason, r.Fix)
	}
}

// NoStoredPosition says what the next run does without a stored position.
func (a *Adapter) NoStoredPosition() string {
	return "the next run starts at the slot's confirmed position, or at the WAL end when it creates the slot"
}

// slotState is the slot as pg_replication_slots shows it, and the server's WAL end.
type slotState struct {
	exists                 bool
	confirmed, restart     *string
	walStatus              *string
	walEnd                 string
	lagBytes, retainedByte *int64
}

func (a *Adapter) querySlot(ctx context.Context) (slotState, error) {
	var s slotState
	conn, err := pgx.Connect(ctx, a.cfg.DSN)
	if err != nil {
		return s, fmt.Errorf("connect to PostgreSQL (source.dsn %s): %w", a.RedactedDSN(), err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&s.walEnd); err != nil {
		return s, err
	}
	err = conn.QueryRow(ctx, `SELECT confirmed_flush_lsn::text, restart_lsn::text, wal_status,
			(pg_current_wal_lsn() - confirmed_flush_lsn)::bigint, (pg_current_wal_lsn() - restart_lsn)::bigint
		FROM pg_replication_slots WHERE slot_name = $1`, a.cfg.Slot).
		Scan(&s.confirmed, &s.restart, &s.walStatus, &s.lagBytes, &s.retainedByte)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, nil
	}
	s.exists = err == nil
	return s, err
}

func orNone[T any](p *T, none string) string {
	if p == nil {
		return none
	}
	return fmt.Sprint(*p)
}

// ShowOffsets writes the server's WAL end and the slot's confirmed and restart positions, its
// wal_status, retained WAL and lag. stored is the stored position ("" for none).
func (a *Adapter) ShowOffsets(ctx context.Context, stored source.Position, w io.Writer) error {
	s, err := a.querySlot(ctx)
	if err != nil {
		return err
	}
	slot := a.cfg.Slot
	fmt.Fprintf(w, "server WAL end:       %s\n", s.walEnd)
	if !s.exists {
		fmt.Fprintf(w, "slot %s:        absent (created by the next run", slot)
		if stored != "" {
			fmt.Fprint(w, "; with a stored position the run refuses to start: the events after it are lost")
		}
		fmt.Fprintln(w, ")")
		return nil
	}
	fmt.Fprintf(w, "slot %s confirmed_flush_lsn: %s\n", slot, orNone(s.confirmed, "-"))
	fmt.Fprintf(w, "slot restart_lsn:     %s (wal_status %s, retains %s bytes)\n", orNone(s.restart, "-"), orNone(s.walStatus, "-"), orNone(s.retainedByte, "?"))
	fmt.Fprintf(w, "lag:                  %s bytes (server WAL end - confirmed_flush_lsn)\n", orNone(s.lagBytes, "?"))
	return nil
}

// CheckPosition tells whether the slot can replay from pos: refused says why not (not an LSN,
// beyond the WAL end, no slot, a lost slot, before what the slot has confirmed); err is a
// failure to find out. A position after the slot's confirmed one is accepted with a warning on
// w: the transactions between them are skipped.
func (a *Adapter) CheckPosition(ctx context.Context, pos source.Position, w io.Writer) (refused, err error) {
	l, err := ParseLSN(pos)
	if err != nil {
		return fmt.Errorf("%q is not a PostgreSQL LSN like 0/16B3748: %v", pos, err), nil
	}
	s, err := a.querySlot(ctx)
	if err != nil {
		return nil, err
	}
	slot := a.cfg.Slot
	end, _ := ParseLSN(source.Position(s.walEnd))
	if l > end {
		return fmt.Errorf("%s is beyond the server's WAL end %s", pos, s.walEnd), nil
	}
	if !s.exists {
		return fmt.Errorf("slot %q does not exist, so no position can be replayed (a new slot starts at the WAL end); remove the offsets file to start fresh", slot), nil
	}
	if s.walStatus != nil && *s.walStatus == "lost" {
		return fmt.Errorf("slot %q is lost (wal_status lost): drop and recreate it", slot), nil
	}
	conf, _ := ParseLSN(source.Position(orNone(s.confirmed, "0/0")))
	if l < conf {
		return fmt.Errorf("slot %q has already confirmed %s; PostgreSQL cannot decode from the earlier %s. "+
			"Replaying older events needs a new slot created before them (not possible after the fact) or a backfill from the outbox table",
			slot, conf, pos), nil
	}
	if l > conf {
		fmt.Fprintf(w, "warning: transactions between the slot's confirmed %s and %s will be skipped (not delivered)\n", conf, pos)
	}
	return nil, nil
}
