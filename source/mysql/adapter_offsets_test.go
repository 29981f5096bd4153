package mysql

import (
	"strings"
	"testing"

	"github.com/outboxd/outboxd/source"
)

// TestNoStoredPositionSnapshot: with source.mysql.snapshot: initial, a run without a stored
// position takes a snapshot whatever source.mysql.start says (it is ignored, and named so);
// without it, start decides. Pure.
func TestNoStoredPositionSnapshot(t *testing.T) {
	for _, c := range []struct {
		snap, start string
		want        []string
		not         string
	}{
		{SnapshotInitial, "", []string{"with source.mysql.snapshot: initial the next run takes a snapshot", "publishes the rows already in the outbox tables", "then streams the binlog from the snapshot's position"}, "ignored"},
		{" Initial", "current", []string{"takes a snapshot", "; source.mysql.start (current) is ignored"}, "refuses"},
		{SnapshotNever, "earliest", []string{"the next run starts at source.mysql.start: earliest"}, "snapshot"},
		{"", "", []string{"refuses to start until source.mysql.start is set"}, "snapshot"},
	} {
		got := NewAdapter(Settings{DSN: "u@tcp(h:3306)/app", Tables: []string{"app.ob"}, Snapshot: c.snap, Start: c.start}, nil).NoStoredPosition()
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("snapshot %q start %q: %q lacks %q", c.snap, c.start, got, w)
			}
		}
		if strings.Contains(got, c.not) {
			t.Errorf("snapshot %q start %q: %q has %q", c.snap, c.start, got, c.not)
		}
	}
}

// TestSnapshotLine: the check's start line with a snapshot, and the row counts it names. Pure.
func TestSnapshotLine(t *testing.T) {
	if got := source.JoinCounts([]string{source.RowCount(1, false) + " of app.a", source.RowCount(0, false) + " of app.b", source.RowCount(9, true) + " of app.c"}, "no rows"); got != "1 row of app.a, 0 rows of app.b and about 9 rows of app.c" {
		t.Errorf("rowsOf: %q", got)
	}
	if got := snapshotLine("3 rows of app.ob", ""); got != "none stored; the next run takes a snapshot and publishes 3 rows of app.ob first (source.mysql.snapshot: initial), then streams from the snapshot's binlog position" {
		t.Errorf("snapshotLine: %q", got)
	}
	if got := snapshotLine("3 rows of app.ob", "current"); !strings.HasSuffix(got, "; source.mysql.start (current) is ignored") {
		t.Errorf("snapshotLine with start: %q", got)
	}
}
