package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/source"
)

// TestNoStoredPositionSnapshot: without a stored position, `offsets show` says the next run
// starts at the slot (snapshot never) or publishes the tables first, creating the slot or
// dropping an existing one (snapshot initial). Pure.
func TestNoStoredPositionSnapshot(t *testing.T) {
	never := NewAdapter(Settings{DSN: "postgres://h/db", Tables: []string{"public.outbox"}, Slot: "s1"}, nil).NoStoredPosition()
	if never != "the next run starts at the slot's confirmed position, or at the WAL end when it creates the slot" {
		t.Errorf("snapshot never: %q", never)
	}
	snap := NewAdapter(Settings{DSN: "postgres://h/db", Tables: []string{"public.outbox"}, Slot: "s1", Snapshot: SnapshotInitial}, nil).NoStoredPosition()
	for _, want := range []string{"source.postgres.snapshot: initial", "publishes the rows already in the tables first",
		"creates slot s1 with an exported snapshot", "when slot s1 exists (it has no stored position), drops it and takes the snapshot again"} {
		if !strings.Contains(snap, want) {
			t.Errorf("snapshot initial: %q lacks %q", snap, want)
		}
	}
}

// TestNoStoredPositionSnapshotNoTables: with no table (the tableless outbox) snapshot: initial
// takes no snapshot and drops no slot (setup.go), and NoStoredPosition says so. Pure.
func TestNoStoredPositionSnapshotNoTables(t *testing.T) {
	a := NewAdapter(Settings{DSN: "postgres://h/db", Slot: "s1", Snapshot: SnapshotInitial, MessagePrefix: DefaultMessagePrefix}, nil)
	got := a.NoStoredPosition()
	if got != noTableSnapshot || strings.Contains(got, "drops") || a.snapshots() {
		t.Errorf("no tables: NoStoredPosition %q, snapshots %v; want %q and no snapshot", got, a.snapshots(), noTableSnapshot)
	}
}

// TestRowsOf: the check line's counts. Pure.
func TestRowsOf(t *testing.T) {
	for _, c := range []struct {
		parts []string
		want  string
	}{
		{nil, "no rows (source.tables is empty)"},
		{[]string{source.RowCount(1, false) + " of a"}, "1 row of a"},
		{[]string{source.RowCount(3, false) + " of a", source.RowCount(0, false) + " of b"}, "3 rows of a and 0 rows of b"},
		{[]string{"1 row of a", "2 rows of b", source.RowCount(7, true) + " of c"}, "1 row of a, 2 rows of b and about 7 rows of c"},
	} {
		if got := source.JoinCounts(c.parts, "no rows (source.tables is empty)"); got != c.want {
			t.Errorf("JoinCounts(%q) = %q, want %q", c.parts, got, c.want)
		}
	}
}

// TestSnapshotCheckLine: `outboxd check` with snapshot: initial and nothing stored has a
// snapshot line naming the slot it creates (or drops) and the rows it publishes first; none with
// a stored position or snapshot never; a FAIL for an order column a table lacks and for a slot
// that is not pgoutput's. `offsets show` says the same.
func TestSnapshotCheckLine(t *testing.T) {
	dsn, conn := testDB(t, "snapchk")
	ctx := context.Background()
	exec(t, conn, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
		SELECT gen_random_uuid(), 'o', 'a', 't', '{}' FROM generate_series(1, 3)`)
	exec(t, conn, "INSERT INTO other (note) VALUES ('x')")
	set := Settings{DSN: dsn, Tables: []string{"public.outbox", "public.other"}, Slot: "snapchk", Publication: "snapchk", Snapshot: SnapshotInitial}
	line := func(s Settings, stored source.Position) (found, ok bool, reason string) {
		t.Helper()
		var st func(context.Context) (source.Position, error)
		st = func(context.Context) (source.Position, error) { return stored, nil }
		NewAdapter(s, nil).Preflight(ctx, st, func(name string, k bool, r, _ string) {
			if name == "snapshot" {
				found, ok, reason = true, k, r
			}
		})
		return found, ok, reason
	}
	show := func(s Settings) string {
		t.Helper()
		var b strings.Builder
		if err := NewAdapter(s, nil).ShowOffsets(ctx, "", &b); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	want := "the next run creates slot snapchk with an exported snapshot and publishes 3 rows of public.outbox and 1 row of public.other first (source.postgres.snapshot: initial)"
	if found, ok, reason := line(set, ""); !found || !ok || reason != want {
		t.Errorf("no slot: found %v ok %v %q; want %q", found, ok, reason, want)
	}
	if out := show(set); !strings.Contains(out, "absent (created by the next run with an exported snapshot: the rows already in the tables are published first") {
		t.Errorf("offsets show, no slot:\n%s", out)
	}
	if found, _, _ := line(set, "0/1"); found {
		t.Error("a snapshot line with a stored position")
	}
	never := set
	never.Snapshot = ""
	if found, _, _ := line(never, ""); found {
		t.Error("a snapshot line with snapshot never")
	}
	bad := set
	bad.OrderColumn = "nope"
	if found, ok, reason := line(bad, ""); !found || ok || !strings.Contains(reason, `outbox.order_column "nope" is not a column of public.outbox`) {
		t.Errorf("missing order column: found %v ok %v %q", found, ok, reason)
	}

	exec(t, conn, "SELECT pg_create_logical_replication_slot('snapchk', 'pgoutput')")
	want = "the next run drops the existing slot snapchk (no stored position) and takes the snapshot again: it publishes 3 rows of public.outbox and 1 row of public.other first (source.postgres.snapshot: initial)"
	if found, ok, reason := line(set, ""); !found || !ok || reason != want {
		t.Errorf("slot exists: found %v ok %v %q; want %q", found, ok, reason, want)
	}
	if out := show(set); !strings.Contains(out, "next run:             drops slot snapchk (no stored position) and takes the snapshot again") {
		t.Errorf("offsets show, slot exists:\n%s", out)
	}
	exec(t, conn, "SELECT pg_drop_replication_slot('snapchk')")
	exec(t, conn, "SELECT pg_create_logical_replication_slot('snapchk', 'test_decoding')")
	if found, ok, reason := line(set, ""); !found || ok || !strings.Contains(reason, "not a pgoutput logical slot") {
		t.Errorf("a test_decoding slot: found %v ok %v %q", found, ok, reason)
	}
}
