package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
	"github.com/outboxd/outboxd/source"
)

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuf) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// TestSlotWatch drives a slot through reserved → extended → unreserved → lost and checks what
// the watcher reports at each step; then that Open refuses the lost slot with ErrPositionLost.
func TestSlotWatch(t *testing.T) {
	pg, err := testenv.StartPostgres("max_wal_size=32MB", "min_wal_size=32MB", "checkpoint_timeout=1h")
	if err != nil {
		testenv.Unavailable(t, "private PostgreSQL", err)
	}
	t.Cleanup(pg.Destroy)
	ctx := context.Background()
	if err := pg.Exec(ctx, "postgres", "CREATE DATABASE app"); err != nil {
		t.Fatal(err)
	}
	if err := pg.Exec(ctx, "app", testenv.OutboxDDL, "CREATE TABLE busy (id bigserial PRIMARY KEY, note text)",
		"SELECT pg_create_logical_replication_slot('watched', 'pgoutput')"); err != nil {
		t.Fatal(err)
	}
	var stored string
	c := connect(t, pg.DSN("app"))
	c.QueryRow(ctx, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'watched'").Scan(&stored)

	logs := &lockedBuf{}
	s := New(Config{DSN: pg.DSN("app"), Tables: []string{"public.outbox"}, Slot: "watched", SlotCheckInterval: 100 * time.Millisecond},
		slog.New(slog.NewTextHandler(logs, nil)))
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { s.watchSlot(wctx); close(done) }()
	defer func() { stop(); <-done }()

	waitStatus := func(want string) SlotStatus {
		t.Helper()
		var st SlotStatus
		err := harness.Until(30*time.Second, harness.Interval, func() error {
			var ok bool
			if st, ok = s.SlotStatus(); !ok || st.WALStatus != want {
				return fmt.Errorf("slot status %+v (ok %v), want wal_status %s", st, ok, want)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%v; log:\n%s", err, logs.String())
		}
		return st
	}
	st := waitStatus("reserved")
	if st.RetainedBytes < 0 || st.RetainedBytes > 16<<20 {
		t.Fatalf("fresh slot retains %d bytes", st.RetainedBytes)
	}
	for i := 0; i < 160; i++ { // ~100 MB of WAL, well over max_wal_size (32MB + 1 segment)
		exec(t, c, `INSERT INTO busy (note) SELECT repeat('x', 500) FROM generate_series(1, 1000)`)
	}
	exec(t, c, "CHECKPOINT")
	st = waitStatus("extended")
	if st.RetainedBytes < 48<<20 {
		t.Fatalf("extended slot retains only %d bytes", st.RetainedBytes)
	}
	if !strings.Contains(logs.String(), "replication slot in danger") || !strings.Contains(logs.String(), "wal_status=extended") {
		t.Fatalf("no warning for the extended slot; log:\n%s", logs.String())
	}
	exec(t, c, "ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'")
	exec(t, c, "SELECT pg_reload_conf()")
	st = waitStatus("unreserved")
	if st.SafeWALSize == nil || *st.SafeWALSize > 0 {
		t.Fatalf("unreserved slot: safe_wal_size %v, want <= 0", st.SafeWALSize)
	}
	if !strings.Contains(logs.String(), "wal_status=unreserved") {
		t.Fatalf("no warning for the unreserved slot; log:\n%s", logs.String())
	}
	exec(t, c, "CHECKPOINT") // removes the WAL: the slot is lost
	select {
	case <-s.ext.fatal:
	case <-time.After(30 * time.Second):
		t.Fatalf("the watcher did not fail the source on a lost slot; log:\n%s", logs.String())
	}
	if !errors.Is(s.ext.fatalErr, source.ErrPositionLost) || !strings.Contains(s.ext.fatalErr.Error(), "pg_drop_replication_slot") {
		t.Fatalf("fatal error %v: want ErrPositionLost with what to do", s.ext.fatalErr)
	}
	t.Logf("lost: %v", s.ext.fatalErr)

	// Open from the stored position refuses the lost slot, loudly and for good.
	s2 := New(Config{DSN: pg.DSN("app"), Tables: []string{"public.outbox"}, Slot: "watched", Publication: "watched"}, testLog())
	err = s2.Open(ctx, source.Position(stored))
	s2.Close()
	if err == nil || !errors.Is(err, source.ErrPositionLost) {
		t.Fatalf("Open on a lost slot: %v, want ErrPositionLost", err)
	}
}

// TestFatalErrorEndsNext: an error raised by a background helper is what Next returns.
func TestFatalErrorEndsNext(t *testing.T) {
	dsn, _ := testDB(t, "fatalnext")
	s := newTestSource(dsn, "fatalnext")
	open(t, s, "")
	defer s.Close()
	boom := errors.New("boom")
	// Fail once this goroutine waits in Next: the error must end a Next that is blocked.
	me := harness.GoroutineID()
	go func() {
		// Past 10s it fails anyway: Next's context ends first and the test fails on that.
		_ = harness.Until(10*time.Second, harness.BlockedInterval, func() error {
			if !harness.Blocked(me, "postgres.(*Source).Next") {
				return errors.New("Next not waiting")
			}
			return nil
		})
		s.fail(boom)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		_, err := s.Next(ctx)
		if err == nil {
			continue // idle progress
		}
		if !errors.Is(err, boom) {
			t.Fatalf("Next: %v, want boom", err)
		}
		return
	}
}

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}
