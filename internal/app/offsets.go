package app

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/source"
	"github.com/outboxd/outboxd/source/postgres"
)

// ErrRefused marks `offsets set` refusals: the position cannot be served by the source.
var ErrRefused = errors.New("position refused")

// OffsetsShow prints the stored position and where the source is now.
func OffsetsShow(ctx context.Context, c *config.Config, w io.Writer) error {
	store, err := Store(c)
	if err != nil {
		return err
	}
	stored, err := store.Load(ctx)
	if err != nil {
		return err
	}
	if stored == "" {
		fmt.Fprintf(w, "stored position:      (none in %s: %s)\n", storeDescription(c), noStoredPosition(c))
	} else {
		fmt.Fprintf(w, "stored position:      %s\n", stored)
	}
	switch c.Source.Type {
	case "postgres":
		return showPostgres(ctx, c, stored, w)
	default:
		return showMySQL(ctx, c, stored, w)
	}
}

// storeDescription names the offsets store of c for messages.
func storeDescription(c *config.Config) string {
	if c.Offsets.Store == "kafka" {
		return fmt.Sprintf("offsets topic %s, key %s (offsets.topic)", c.Offsets.Topic, PipelineID(c))
	}
	return fmt.Sprintf("offsets file %s (offsets.path)", c.Offsets.Path)
}

// noStoredPosition says what the next run does without a stored position.
func noStoredPosition(c *config.Config) string {
	switch {
	case c.Source.Type == "postgres":
		return "the next run starts at the slot's confirmed position, or at the WAL end when it creates the slot"
	case c.Source.MySQL.Start == "":
		return "the next run refuses to start until source.mysql.start is set (current | earliest | a position), or a position is stored with `outboxd offsets set`"
	}
	return "the next run starts at source.mysql.start: " + c.Source.MySQL.Start
}

type pgSlot struct {
	exists                 bool
	confirmed, restart     *string
	walStatus              *string
	walEnd                 string
	lagBytes, retainedByte *int64
}

func querySlot(ctx context.Context, c *config.Config) (pgSlot, error) {
	var s pgSlot
	conn, err := pgx.Connect(ctx, c.Source.DSN)
	if err != nil {
		return s, fmt.Errorf("connect to PostgreSQL (source.dsn %s): %s", RedactDSN(c.Source.Type, c.Source.DSN), Scrub(err.Error(), secretsOf(c)...))
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&s.walEnd); err != nil {
		return s, err
	}
	err = conn.QueryRow(ctx, `SELECT confirmed_flush_lsn::text, restart_lsn::text, wal_status,
			(pg_current_wal_lsn() - confirmed_flush_lsn)::bigint, (pg_current_wal_lsn() - restart_lsn)::bigint
		FROM pg_replication_slots WHERE slot_name = $1`, c.Source.Postgres.Slot).
		Scan(&s.confirmed, &s.restart, &s.walStatus, &s.lagBytes, &s.retainedByte)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, nil
	}
	s.exists = err == nil
	return s, err
}

func deref[T any](p *T, none string) string {
	if p == nil {
		return none
	}
	return fmt.Sprint(*p)
}

func showPostgres(ctx context.Context, c *config.Config, stored source.Position, w io.Writer) error {
	s, err := querySlot(ctx, c)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "server WAL end:       %s\n", s.walEnd)
	if !s.exists {
		fmt.Fprintf(w, "slot %s:        absent (created by the next run", c.Source.Postgres.Slot)
		if stored != "" {
			fmt.Fprint(w, "; with a stored position the run refuses to start: the events after it are lost")
		}
		fmt.Fprintln(w, ")")
		return nil
	}
	fmt.Fprintf(w, "slot %s confirmed_flush_lsn: %s\n", c.Source.Postgres.Slot, deref(s.confirmed, "-"))
	fmt.Fprintf(w, "slot restart_lsn:     %s (wal_status %s, retains %s bytes)\n", deref(s.restart, "-"), deref(s.walStatus, "-"), deref(s.retainedByte, "?"))
	fmt.Fprintf(w, "lag:                  %s bytes (server WAL end - confirmed_flush_lsn)\n", deref(s.lagBytes, "?"))
	return nil
}

// OffsetsSet validates pos against what the source can still serve and stores it.
func OffsetsSet(ctx context.Context, c *config.Config, pos source.Position, w io.Writer) error {
	store, err := Store(c)
	if err != nil {
		return err
	}
	old, err := store.Load(ctx)
	if err != nil {
		return err
	}
	switch c.Source.Type {
	case "postgres":
		err = validatePostgresPosition(ctx, c, pos, w)
	default:
		err = validateMySQLPosition(ctx, c, pos, w)
	}
	if err != nil {
		return err
	}
	if err := store.Save(ctx, pos); err != nil {
		return err
	}
	fmt.Fprintf(w, "stored position %s (was %s). Restart outboxd to replay from it; a running outboxd overwrites it.\n", pos, deref(&old, ""))
	return nil
}

func validatePostgresPosition(ctx context.Context, c *config.Config, pos source.Position, w io.Writer) error {
	l, err := postgres.ParseLSN(pos)
	if err != nil {
		return fmt.Errorf("%w: %q is not a PostgreSQL LSN like 0/16B3748: %v", ErrRefused, pos, err)
	}
	s, err := querySlot(ctx, c)
	if err != nil {
		return err
	}
	end, _ := postgres.ParseLSN(source.Position(s.walEnd))
	if l > end {
		return fmt.Errorf("%w: %s is beyond the server's WAL end %s", ErrRefused, pos, s.walEnd)
	}
	if !s.exists {
		return fmt.Errorf("%w: slot %q does not exist, so no position can be replayed (a new slot starts at the WAL end); remove the offsets file to start fresh",
			ErrRefused, c.Source.Postgres.Slot)
	}
	if s.walStatus != nil && *s.walStatus == "lost" {
		return fmt.Errorf("%w: slot %q is lost (wal_status lost): drop and recreate it", ErrRefused, c.Source.Postgres.Slot)
	}
	conf, _ := postgres.ParseLSN(source.Position(deref(s.confirmed, "0/0")))
	if l < conf {
		return fmt.Errorf("%w: slot %q has already confirmed %s; PostgreSQL cannot decode from the earlier %s. "+
			"Replaying older events needs a new slot created before them (not possible after the fact) or a backfill from the outbox table",
			ErrRefused, c.Source.Postgres.Slot, conf, pos)
	}
	if l > conf {
		fmt.Fprintf(w, "warning: transactions between the slot's confirmed %s and %s will be skipped (not delivered)\n", conf, pos)
	}
	return nil
}
