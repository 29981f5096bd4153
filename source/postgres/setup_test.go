package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/internal/testenv"
)

// Open's failure cases: a stored position the slot can no longer serve is a loud error.

// A stored position whose slot is gone (dropped): sourcetest's PositionLost, run by
// TestConformance, with the error text and the no-slot-created check in its CheckLost.

func TestStoredPositionBehindSlot(t *testing.T) {
	dsn, conn := testDB(t, "behind")
	s := newTestSource(dsn, "behind")
	open(t, s, "")
	exec(t, conn, `INSERT INTO public.outbox (id) VALUES (gen_random_uuid())`)
	exec(t, conn, `INSERT INTO public.outbox (id) VALUES (gen_random_uuid())`)
	first, second := nextRows(t, s).Position, nextRows(t, s).Position
	if err := s.Confirm(context.Background(), second); err != nil {
		t.Fatal(err)
	}
	waitConfirmed(t, conn, "behind", second)
	s.Close()

	s2 := newTestSource(dsn, "behind")
	err := s2.Open(context.Background(), first)
	if err == nil {
		s2.Close()
		t.Fatalf("Open(%s) with the slot confirmed at %s succeeded", first, second)
	}
	t.Logf("error: %v", err)
	for _, w := range []string{`"behind"`, string(first), string(second), "confirmed_flush_lsn", "offsets set"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %q", w)
		}
	}
	// The position the slot stands at is still served.
	s3 := newTestSource(dsn, "behind")
	open(t, s3, second)
}

func TestExistingPublicationMissingTable(t *testing.T) {
	dsn, conn := testDB(t, "pubcheck")
	exec(t, conn, `CREATE PUBLICATION pubcheck FOR TABLE public.other`)
	s := newTestSource(dsn, "pubcheck")
	err := s.Open(context.Background(), "")
	if err == nil {
		s.Close()
		t.Fatal("Open with a publication lacking the outbox table succeeded")
	}
	if !strings.Contains(err.Error(), "ALTER PUBLICATION") || !strings.Contains(err.Error(), "public.outbox") {
		t.Errorf("error %v does not say how to fix it", err)
	}
}

// TestLostSlot: a slot the server invalidated (max_slot_wal_keep_size) cannot serve a stored
// position: Open fails loudly.
func TestLostSlot(t *testing.T) {
	pg := testenv.NewPostgres(t, "max_slot_wal_keep_size=1MB", "max_wal_size=64MB", "min_wal_size=32MB")
	ctx := context.Background()
	if err := pg.Exec(ctx, "app", testenv.OutboxDDL, `CREATE TABLE public.other (id bigserial PRIMARY KEY, note text)`); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, pg.DSN("app"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	s := newTestSource(pg.DSN("app"), "lost")
	open(t, s, "")
	exec(t, conn, `INSERT INTO public.outbox (id) VALUES (gen_random_uuid())`)
	pos := nextRows(t, s).Position
	s.Close()
	var status string
	for i := 0; i < 20 && status != "lost"; i++ {
		exec(t, conn, `INSERT INTO public.other (note) SELECT repeat('x', 500) FROM generate_series(1, 20000)`)
		exec(t, conn, `SELECT pg_switch_wal()`)
		exec(t, conn, `CHECKPOINT`)
		conn.QueryRow(ctx, `SELECT coalesce(wal_status, '') FROM pg_replication_slots WHERE slot_name = 'lost'`).Scan(&status)
	}
	if status != "lost" {
		t.Fatalf("could not make the slot lost (wal_status %q)", status)
	}
	err = newTestSource(pg.DSN("app"), "lost").Open(ctx, pos)
	if err == nil {
		t.Fatal("Open on a lost slot succeeded")
	}
	t.Logf("error: %v", err)
	for _, w := range []string{`"lost"`, "wal_status = lost", string(pos), "offsets set"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %q", w)
		}
	}
}
