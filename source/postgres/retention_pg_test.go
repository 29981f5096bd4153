package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
)

// TestRetentionUnlimitedPG: on the package's server, max_slot_wal_keep_size is PostgreSQL's
// default -1, and check's line for it is a WARN with the fix; the slot has no safe_wal_size
// (NULL), so no safe_wal_size line.
func TestRetentionUnlimitedPG(t *testing.T) {
	dsn, conn := testDB(t, "retunl")
	ctx := context.Background()
	var keep string
	if err := conn.QueryRow(ctx, "SHOW max_slot_wal_keep_size").Scan(&keep); err != nil || keep != "-1" {
		t.Fatalf("premise: max_slot_wal_keep_size is %q (%v), want the default -1", keep, err)
	}
	exec(t, conn, `SELECT pg_create_logical_replication_slot('retunl', 'pgoutput')`)
	res := Preflight(ctx, Config{DSN: dsn, Tables: []string{"public.outbox"}, Slot: "retunl", Publication: "retunl", Columns: adapterCols})
	r, ok := retLine(res, "max_slot_wal_keep_size")
	if !ok || retState(r) != "WARN" || !strings.Contains(r.Reason, "-1 (unlimited)") ||
		!strings.Contains(r.Fix, "ALTER SYSTEM SET max_slot_wal_keep_size") || !strings.Contains(r.Fix, "pg_reload_conf()") {
		t.Errorf("max_slot_wal_keep_size line: %+v (found %v), want a WARN with the fix", r, ok)
	}
	if r, ok := retLine(res, "slot retunl safe_wal_size"); ok {
		t.Errorf("a safe_wal_size line with max_slot_wal_keep_size = -1: %+v", r)
	}
}

// TestRetentionBoundedPG: on a private server started with max_slot_wal_keep_size = 64MB,
// check's line for it is OK naming the value, and the slot's safe_wal_size (about 64MB) is a
// WARN below a 1TB min_safe_wal_size and OK above 1kB.
func TestRetentionBoundedPG(t *testing.T) {
	p := testenv.NewPostgres(t, "max_slot_wal_keep_size=64MB")
	ctx := context.Background()
	dsn := p.DSN("app")
	if err := p.Exec(ctx, "app", testenv.OutboxDDL, `SELECT pg_create_logical_replication_slot('bounded', 'pgoutput')`); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var safe int64
	if err := conn.QueryRow(ctx, `SELECT safe_wal_size FROM pg_replication_slots WHERE slot_name = 'bounded'`).Scan(&safe); err != nil {
		t.Fatalf("premise: the slot's safe_wal_size: %v", err)
	}
	t.Logf("safe_wal_size %d (%s)", safe, formatSize(safe))
	cfg := Config{DSN: dsn, Tables: []string{"public.outbox"}, Slot: "bounded", Publication: "bounded", Columns: adapterCols}
	for _, c := range []struct {
		min   string
		state string
		words string
	}{
		{"1TB", "WARN", "below source.postgres.min_safe_wal_size 1TB"},
		{"1kB", "OK", "at least source.postgres.min_safe_wal_size 1kB"},
	} {
		min, err := ParseSize(c.min)
		if err != nil {
			t.Fatal(err)
		}
		cfg.MinSafeWALSize = min
		res := Preflight(ctx, cfg)
		if r, ok := retLine(res, "max_slot_wal_keep_size"); !ok || retState(r) != "OK" || !strings.Contains(r.Reason, "64MB") {
			t.Errorf("min %s: max_slot_wal_keep_size line %+v (found %v), want OK naming 64MB", c.min, r, ok)
		}
		r, ok := retLine(res, "slot bounded safe_wal_size")
		if !ok || retState(r) != c.state || !strings.Contains(r.Reason, c.words) || !strings.Contains(r.Reason, formatSize(safe)) {
			t.Errorf("min %s: safe_wal_size line %+v (found %v), want %s with %q and %s", c.min, r, ok, c.state, c.words, formatSize(safe))
		}
		if c.state == "WARN" && !strings.Contains(r.Fix, "raise max_slot_wal_keep_size") {
			t.Errorf("min %s: the WARN's fix %q does not say to raise max_slot_wal_keep_size", c.min, r.Fix)
		}
	}
}

// TestRetentionStatusPG: a slot left behind on a private server: with max_wal_size = 32MB and
// max_slot_wal_keep_size = -1, once the server wrote more WAL than max_wal_size past the slot's
// restart_lsn its wal_status is extended (a WARN); after ALTER SYSTEM SET
// max_slot_wal_keep_size = '16MB' (and a larger max_wal_size, so no checkpoint runs) it is
// unreserved (a WARN, its safe_wal_size negative); after a CHECKPOINT it is lost, which the slot
// line FAILs, and no retention line repeats it.
func TestRetentionStatusPG(t *testing.T) {
	p := testenv.NewPostgres(t, "max_wal_size=32MB", "min_wal_size=32MB")
	ctx := context.Background()
	dsn := p.DSN("app")
	if err := p.Exec(ctx, "app", testenv.OutboxDDL, `SELECT pg_create_logical_replication_slot('behind', 'pgoutput')`); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	writeSegments := func(n int) {
		for i := 0; i < n; i++ {
			exec(t, conn, `INSERT INTO public.outbox (id) VALUES (gen_random_uuid())`)
			exec(t, conn, `SELECT pg_switch_wal()`)
		}
	}
	status := func() string {
		var st string
		if err := conn.QueryRow(ctx, `SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'behind'`).Scan(&st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	cfg := Config{DSN: dsn, Tables: []string{"public.outbox"}, Slot: "behind", Publication: "behind", Columns: adapterCols}

	writeSegments(5) // 80MB past the slot's restart_lsn, over max_wal_size (32MB)
	if st := status(); st != "extended" {
		t.Fatalf("premise: wal_status %q after 80MB of WAL with max_wal_size 32MB, want extended", st)
	}
	res := Preflight(ctx, cfg)
	if r, ok := retLine(res, "slot behind wal_status"); !ok || retState(r) != "WARN" || !strings.Contains(r.Reason, "extended") {
		t.Errorf("extended: wal_status line %+v (found %v), want a WARN", r, ok)
	}
	if r, _ := retLine(res, "max_slot_wal_keep_size"); retState(r) != "WARN" {
		t.Errorf("extended: max_slot_wal_keep_size line %+v, want the -1 WARN", r)
	}

	// A checkpoint first (the slot still retains its WAL): none is left in progress that would
	// remove the slot's WAL, once bounded, before the unreserved state is seen.
	exec(t, conn, `CHECKPOINT`)
	exec(t, conn, `ALTER SYSTEM SET max_slot_wal_keep_size = '16MB'`)
	exec(t, conn, `ALTER SYSTEM SET max_wal_size = '1GB'`)
	exec(t, conn, `SELECT pg_reload_conf()`)
	err = harness.Until(10*time.Second, harness.Interval, func() error {
		if st := status(); st != "unreserved" {
			return fmt.Errorf("wal_status %q after max_slot_wal_keep_size = 16MB, want unreserved", st)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("premise: %v", err)
	}
	res = Preflight(ctx, cfg)
	if r, ok := retLine(res, "slot behind wal_status"); !ok || retState(r) != "WARN" || !strings.Contains(r.Reason, "unreserved") {
		t.Errorf("unreserved: wal_status line %+v (found %v), want a WARN", r, ok)
	}
	if r, ok := retLine(res, "slot behind safe_wal_size"); !ok || retState(r) != "WARN" || !strings.Contains(r.Reason, "-") {
		t.Errorf("unreserved: safe_wal_size line %+v (found %v), want a WARN with a negative size", r, ok)
	}
	if r, _ := retLine(res, "max_slot_wal_keep_size"); retState(r) != "OK" || !strings.Contains(r.Reason, "16MB") {
		t.Errorf("unreserved: max_slot_wal_keep_size line %+v, want OK naming 16MB", r)
	}

	exec(t, conn, `CHECKPOINT`)
	if st := status(); st != "lost" {
		t.Fatalf("premise: wal_status %q after a CHECKPOINT, want lost", st)
	}
	res = Preflight(ctx, cfg)
	if r, ok := retLine(res, "slot behind"); !ok || retState(r) != "FAIL" || !strings.Contains(r.Reason, "lost") {
		t.Errorf("lost: slot line %+v (found %v), want the FAIL", r, ok)
	}
	for _, n := range []string{"slot behind wal_status", "slot behind safe_wal_size"} {
		if r, ok := retLine(res, n); ok {
			t.Errorf("lost: a %s line besides the slot's FAIL: %+v", n, r)
		}
	}
}
