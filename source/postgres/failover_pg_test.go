package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestFailoverSlotPG15: on PostgreSQL 15 (the server here), source.postgres.failover_slot: on
// is refused at Open (naming the key, creating nothing) and is a check FAIL; auto (and off)
// creates a normal slot, and check says failover slots need 17+.
func TestFailoverSlotPG15(t *testing.T) {
	dsn, conn := testDB(t, "fo15")
	ctx := context.Background()
	vnum, err := serverVersion(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if vnum >= failoverVersion {
		t.Fatalf("this test is about servers below 17; the server is %d", vnum)
	}
	cfg := Config{DSN: dsn, Tables: []string{"public.outbox"}, Slot: "fo15", Publication: "fo15", Columns: adapterCols, StandbyTimeout: testStandby}

	on := cfg
	on.FailoverSlot = FailoverOn
	res := Preflight(ctx, on)
	if r, ok := retLine(res, "slot fo15 failover"); !ok || retState(r) != "FAIL" ||
		!strings.Contains(r.Reason, "source.postgres.failover_slot is on") || !strings.Contains(r.Reason, "17 or later") {
		t.Errorf("check with on: %+v (found %v), want a FAIL naming the key", r, ok)
	}
	err = New(on, testLog()).Open(ctx, "")
	var ref *failoverRefusal
	if err == nil || !errors.As(err, &ref) || !strings.Contains(err.Error(), "source.postgres.failover_slot") {
		t.Fatalf("Open with failover_slot: on on PostgreSQL %d: %v, want the refusal naming the key", vnum, err)
	}
	t.Logf("Open: %v", err)
	var slots, pubs int
	conn.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'fo15'`).Scan(&slots)
	conn.QueryRow(ctx, `SELECT count(*) FROM pg_publication WHERE pubname = 'fo15'`).Scan(&pubs)
	if slots != 0 || pubs != 0 {
		t.Errorf("the refused Open created %d slot(s) and %d publication(s)", slots, pubs)
	}

	for _, setting := range []string{"", FailoverOff} {
		c := cfg
		c.FailoverSlot = setting
		s := New(c, testLog())
		open(t, s, "")
		var typ string
		if err := conn.QueryRow(ctx, `SELECT slot_type FROM pg_replication_slots WHERE slot_name = 'fo15'`).Scan(&typ); err != nil || typ != "logical" {
			t.Fatalf("failover_slot %q: slot after Open: %q, %v", setting, typ, err)
		}
		res := Preflight(ctx, c)
		if r, ok := retLine(res, "slot fo15 failover"); !ok || retState(r) != "OK" || !strings.Contains(r.Reason, "need 17+") {
			t.Errorf("check with failover_slot %q: %+v (found %v), want OK saying failover slots need 17+", setting, r, ok)
		}
		s.Close()
		dropSlot(t, conn, "fo15")
	}
}

// TestCreateSlotCommandPG15: the parenthesised command outboxd sends on 15+ creates the slot,
// with and without an exported snapshot; with FAILOVER (17+ only) PostgreSQL 15's walsender
// parses the whole command and refuses only the option it does not know, which is why the
// version gate exists.
func TestCreateSlotCommandPG15(t *testing.T) {
	dsn, conn := testDB(t, "slotcmd")
	ctx := context.Background()
	vnum, err := serverVersion(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{DSN: dsn, Tables: []string{"public.outbox"}, Slot: "slotcmd"}, testLog())
	for _, c := range []struct {
		slot   string
		export bool
	}{{"slotcmd", false}, {"slotcmd_export", true}} {
		repl, err := s.connectReplication(ctx)
		if err != nil {
			t.Fatal(err)
		}
		created, err := createSlot(ctx, repl, c.slot, vnum, c.export, false)
		repl.Close(ctx)
		if err != nil || created.SlotName != c.slot || created.ConsistentPoint == "" || (created.SnapshotName != "") != c.export {
			t.Errorf("%s: %+v, %v", createSlotCommand(c.slot, vnum, c.export, false), created, err)
		}
	}
	repl, err := s.connectReplication(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer repl.Close(ctx)
	_, err = createSlot(ctx, repl, "slotcmd_failover", vnum, false, true)
	if err == nil || !strings.Contains(err.Error(), "unrecognized option: failover") {
		t.Errorf("%s on PostgreSQL %d: %v, want `unrecognized option: failover`", createSlotCommand("slotcmd_failover", vnum, false, true), vnum, err)
	}
}
