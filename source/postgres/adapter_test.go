package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxd/outboxd/source"
)

var adapterCols = []string{"id", "aggregateid", "payload", "aggregatetype"}

// TestAdapterSettings: the defaults the config reference documents, and Validate's keys and
// messages (the first problem, in the reference's order).
func TestAdapterSettings(t *testing.T) {
	a := NewAdapter(Settings{DSN: "postgres://u@h/db", Tables: []string{"public.outbox"}}, nil)
	if c := a.Config(); c.Slot != "outboxd" || c.Publication != "outboxd" || c.HeartbeatInterval != DefaultHeartbeatInterval ||
		c.StandbyTimeout != 10*time.Second || a.Name() != "postgres:outboxd" || a.Validate() != nil {
		t.Errorf("defaults: %+v name %s validate %v", c, a.Name(), a.Validate())
	}
	zero := time.Duration(0)
	if c := NewAdapter(Settings{DSN: "postgres://u@h/db", HeartbeatInterval: &zero}, nil).Config(); c.HeartbeatInterval != 0 {
		t.Errorf("an explicit 0 heartbeat_interval must disable heartbeats: %v", c.HeartbeatInterval)
	}
	neg := -time.Second
	for _, c := range []struct {
		s        Settings
		key, msg string
	}{
		{Settings{DSN: "postgres://u@h:5432/db%zz"}, "source.dsn", "not a valid PostgreSQL URL"},
		{Settings{DSN: "postgres://u@h/db", HeartbeatInterval: &neg}, "source.postgres.heartbeat_interval", "must be 0 (off) or positive"},
		{Settings{DSN: "postgres://u@h/db", StatusInterval: -1}, "source.postgres.status_interval", "must be positive"},
		{Settings{DSN: "postgres://u@h/db", Slot: "Bad-Slot"}, "source.postgres.slot", `"Bad-Slot": slot names use lower-case letters`},
		{Settings{DSN: "host=h password='hunter2"}, "source.dsn", "PostgreSQL's driver cannot parse it (the DSN is not shown"},
		{Settings{DSN: "host=h sslmode=verify-full sslrootcert=/nonexistent/ca.pem"}, "source.dsn", "a file it names cannot be read"},
	} {
		err := NewAdapter(c.s, nil).Validate()
		var se *SettingError
		if !errors.As(err, &se) || se.Key != c.key || !strings.Contains(se.Msg, c.msg) || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%+v: %v, want %s: %s", c.s, err, c.key, c.msg)
		}
	}
}

// TestAdapterPreflight: on a database ready for outboxd every line is OK, the slot and the
// publication to be created; an unreachable server is one FAIL naming source.dsn.
func TestAdapterPreflight(t *testing.T) {
	dsn, _ := testDB(t, "adpre")
	lines := map[string]string{}
	fails := 0
	a := NewAdapter(Settings{DSN: dsn, Tables: []string{"public.outbox"}, Columns: adapterCols, Slot: "adpre", Publication: "adpre"}, nil)
	a.Preflight(context.Background(), nil, func(name string, ok bool, reason, fix string) {
		lines[name] = reason
		if !ok {
			fails++
			t.Errorf("FAIL %s: %s — %s", name, reason, fix)
		}
	})
	for _, want := range []string{"postgres reachable", "wal_level", "replication privilege", "slot adpre"} {
		if _, ok := lines[want]; !ok {
			t.Errorf("no %q line in %v", want, lines)
		}
	}
	if lines["slot adpre"] != "absent, will be created" {
		t.Errorf("slot line: %q", lines["slot adpre"])
	}
	var got []string
	NewAdapter(Settings{DSN: "postgres://u:hunter2@127.0.0.1:1/db?connect_timeout=2", Tables: []string{"public.outbox"}}, nil).
		Preflight(context.Background(), nil, func(name string, ok bool, reason, fix string) {
			got = append(got, fmt.Sprintf("%s %v %v", name, ok, strings.Contains(fix, "source.dsn")))
		})
	if len(got) != 1 || got[0] != "postgres reachable false true" {
		t.Errorf("unreachable server: %v", got)
	}
}

// TestAdapterOffsets: `offsets show` and `offsets set`'s check against the slot: absent,
// created, before/at/after its confirmed position, beyond the WAL end, not an LSN; a server
// that cannot be reached is an error (not a refusal) without the password.
func TestAdapterOffsets(t *testing.T) {
	dsn, conn := testDB(t, "adofs")
	ctx := context.Background()
	a := NewAdapter(Settings{DSN: dsn, Tables: []string{"public.outbox"}, Slot: "adofs", Publication: "adofs"}, nil)
	show := func(stored source.Position) string {
		t.Helper()
		var b strings.Builder
		if err := a.ShowOffsets(ctx, stored, &b); err != nil {
			t.Fatalf("ShowOffsets: %v", err)
		}
		return b.String()
	}
	refused := func(pos source.Position, want string) {
		t.Helper()
		var w strings.Builder
		r, err := a.CheckPosition(ctx, pos, &w)
		if err != nil || r == nil || !strings.Contains(r.Error(), want) {
			t.Errorf("CheckPosition(%s) = %v, %v; want a refusal with %q", pos, r, err, want)
		}
	}
	if out := show(""); !strings.Contains(out, "server WAL end:") || !strings.Contains(out, "slot adofs:        absent (created by the next run)\n") {
		t.Errorf("no slot, nothing stored:\n%s", out)
	}
	if out := show("0/1"); !strings.Contains(out, "with a stored position the run refuses to start") {
		t.Errorf("no slot, a stored position:\n%s", out)
	}
	refused("nope", `"nope" is not a PostgreSQL LSN like 0/16B3748`)
	refused("0/1", `slot "adofs" does not exist`)

	var confirmed string
	if err := conn.QueryRow(ctx, "SELECT lsn::text FROM pg_create_logical_replication_slot('adofs', 'pgoutput')").Scan(&confirmed); err != nil {
		t.Fatal(err)
	}
	out := show(source.Position(confirmed))
	for _, want := range []string{"slot adofs confirmed_flush_lsn: " + confirmed + "\n", "(wal_status reserved, retains ", "lag:                  "} {
		if !strings.Contains(out, want) {
			t.Errorf("show with the slot lacks %q:\n%s", want, out)
		}
	}
	var w strings.Builder
	if r, err := a.CheckPosition(ctx, source.Position(confirmed), &w); r != nil || err != nil || w.Len() != 0 {
		t.Errorf("the confirmed position: %v %v %q", r, err, w.String())
	}
	refused("0/1", `slot "adofs" has already confirmed `+confirmed)
	refused("FFFF/0", "is beyond the server's WAL end")
	exec(t, conn, "INSERT INTO other (note) SELECT 'x' FROM generate_series(1, 100)")
	var now string
	conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&now)
	w.Reset()
	if r, err := a.CheckPosition(ctx, source.Position(now), &w); r != nil || err != nil ||
		!strings.Contains(w.String(), "warning: transactions between the slot's confirmed "+confirmed+" and "+now+" will be skipped") {
		t.Errorf("a position after the confirmed one: %v %v %q", r, err, w.String())
	}

	down := NewAdapter(Settings{DSN: "postgres://u:hunter2@127.0.0.1:1/db?connect_timeout=2", Slot: "adofs"}, nil)
	r, err := down.CheckPosition(ctx, "0/1", &w)
	if r != nil || err == nil || !strings.Contains(err.Error(), "connect to PostgreSQL (source.dsn postgres://u:xxxxx@127.0.0.1:1/db)") {
		t.Errorf("unreachable: refused %v err %v", r, err)
	}
	if err := down.ShowOffsets(ctx, "", &w); err == nil {
		t.Error("ShowOffsets on an unreachable server succeeded")
	}
}

// TestAdapterStandby: WaitActive returns at once while the slot is free; while another process
// streams from it, Open through Active ends the term (lose) and WaitActive waits (calling
// waiting) until that process stops; the active source reports the slot's status and its lag.
func TestAdapterStandby(t *testing.T) {
	dsn, conn := testDB(t, "adsb")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := NewAdapter(Settings{DSN: dsn, Tables: []string{"public.outbox"}, Slot: "adsb", Publication: "adsb", StatusInterval: testStandby}, testLog())
	defer a.CloseStandby()
	waited := make(chan struct{}, 100)
	waiting := func() { waited <- struct{}{} }
	if _, lost, err := a.WaitActive(ctx, true, waiting); err != nil || lost != nil || len(waited) != 0 {
		t.Fatalf("free slot: lost %v err %v, waited %d", lost, err, len(waited))
	}

	other := newTestSource(dsn, "adsb")
	if err := other.Open(ctx, ""); err != nil {
		t.Fatal(err)
	}
	var whyLost []string
	var mu sync.Mutex
	s := a.Active(a.NewSource(), func(why string) { mu.Lock(); whyLost = append(whyLost, why); mu.Unlock() }, func(string, int64) {})
	if err := s.Open(ctx, ""); !errors.Is(err, ErrSlotActive) {
		t.Fatalf("Open of a slot another process streams from: %v", err)
	}
	s.Close()
	mu.Lock()
	if len(whyLost) != 1 || !strings.Contains(whyLost[0], "another process took the replication slot") {
		t.Errorf("lose calls: %q", whyLost)
	}
	mu.Unlock()

	type result struct {
		release func()
		err     error
	}
	done := make(chan result, 1)
	go func() {
		release, _, err := a.WaitActive(ctx, false, waiting)
		done <- result{release, err}
	}()
	select {
	case <-waited:
	case r := <-done:
		t.Fatalf("WaitActive returned while the slot is taken: %v", r.err)
	case <-ctx.Done():
		t.Fatal("WaitActive never saw the slot taken")
	}
	other.Close()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		t.Fatal("WaitActive did not return after the other process stopped")
	}
	if r.err != nil || r.release == nil {
		t.Fatalf("takeover: %v", r.err)
	}
	r.release()

	slots := make(chan string, 100)
	s = a.Active(a.NewSource(), func(why string) { t.Errorf("lost a free slot: %s", why) }, func(st string, retained int64) {
		select {
		case slots <- fmt.Sprintf("%s %v", st, retained >= 0):
		default:
		}
	})
	if err := s.Open(ctx, ""); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	select {
	case got := <-slots:
		if got != "reserved true" {
			t.Errorf("slot status %q, want reserved", got)
		}
	case <-ctx.Done():
		t.Fatal("no slot status reported")
	}
	lr, ok := s.(interface{ LagBytes() (int64, bool) })
	if !ok {
		t.Fatalf("the active source %T does not report its lag", s)
	}
	exec(t, conn, "INSERT INTO public.outbox (id, aggregatetype, aggregateid, type, payload) VALUES (gen_random_uuid(), 'a', '1', 't', '{}')")
	tx, err := s.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.Confirm(ctx, tx.Position)
	for {
		if n, ok := lr.LagBytes(); ok && n >= 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("LagBytes never known after a confirmed transaction")
		case <-time.After(50 * time.Millisecond):
		}
	}

	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if _, _, err := a.WaitActive(cctx, false, waiting); !errors.Is(err, context.Canceled) {
		t.Errorf("WaitActive after its context ended: %v", err)
	}
	if _, _, err := NewAdapter(Settings{DSN: "postgres://u@127.0.0.1:1/db?connect_timeout=2"}, nil).WaitActive(ctx, true, waiting); err != nil {
		t.Errorf("an unreachable server before the first term must be left to the pipeline to report: %v", err)
	}
}

// TestAdapterPreflightPassesSettings: check reads source.postgres.failover_slot (and
// min_safe_wal_size) from the adapter's settings: failover_slot: on is a FAIL on PostgreSQL 15
// naming the key, auto is not.
func TestAdapterPreflightPassesSettings(t *testing.T) {
	dsn, _ := testDB(t, "adprefo")
	failed := func(setting string) []string {
		var fails []string
		NewAdapter(Settings{DSN: dsn, Tables: []string{"public.outbox"}, Columns: adapterCols, Slot: "adprefo",
			Publication: "adprefo", FailoverSlot: setting, MinSafeWALSize: "2GB"}, nil).
			Preflight(context.Background(), nil, func(name string, ok bool, reason, fix string) {
				if !ok {
					fails = append(fails, name+": "+reason+" — "+fix)
				}
			})
		return fails
	}
	if f := failed("auto"); len(f) != 0 {
		t.Errorf("failover_slot auto: FAIL lines %v", f)
	}
	f := failed("on")
	if len(f) != 1 || !strings.Contains(f[0], "source.postgres.failover_slot") {
		t.Errorf("failover_slot on (PostgreSQL 15): want one FAIL naming source.postgres.failover_slot, got %v", f)
	}
}
