package mysql

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/source"
)

// TestStartSetting (source level, both position forms): Open without a position refuses
// without Config.Start; "earliest" reads rows written before the source ever ran; the first
// transaction handed out is the start position (so the pipeline stores it at once), with the
// server's identity; after RESET MASTER a stored position of either form is refused as lost.
func TestStartSetting(t *testing.T) {
	t.Parallel()
	m := testenv.NewMariaDB(t, testenv.MariaDBOptions{RowMetadata: true})
	c := db(t, m)
	mustExec(t, c, testenv.MariaDBOutboxDDL("outbox", "CHAR(36)"))
	ins := "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES (?, ?, ?, ?, ?)"
	early := newEvent("early")
	mustExec(t, c, ins, early.ID, early.AggregateType, early.AggregateID, early.Type, early.Payload)
	// A transaction logged under another server id (as after a failover): gtid_binlog_state then
	// lists two server ids in domain 0.
	mustExec(t, c, "SET SESSION server_id = 2")
	mustExec(t, c, "CREATE TABLE other_server (a INT)")
	mustExec(t, c, "SET SESSION server_id = 1")
	if rows, err := m.Query("", "SELECT @@GLOBAL.gtid_binlog_state"); err != nil || len(rows) != 1 || !strings.Contains(rows[0][0], "0-2-") {
		t.Fatalf("gtid_binlog_state: %v %v, want two server ids", rows, err)
	}

	newSource := func(start string, gtid bool) *Source {
		s := New(Config{DSN: m.DSN("app"), Tables: []string{"app.outbox"}, ServerID: serverIDs.Add(1), UseGTID: boolp(gtid),
			HeartbeatPeriod: time.Second, Start: start, OffsetsStore: "offsets file /x (offsets.path)"}, testLogger())
		t.Cleanup(func() { s.Close() })
		return s
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	if err := newSource("", true).Open(ctx, ""); err == nil || !strings.Contains(err.Error(), "no stored position in offsets file /x (offsets.path)") {
		t.Fatalf("Open without a position and without Start: %v", err)
	}
	stored := map[bool]source.Position{}
	for _, gtid := range []bool{true, false} {
		s := newSource("earliest", gtid)
		if err := s.Open(ctx, ""); err != nil {
			t.Fatalf("Open(earliest, gtid=%v): %v", gtid, err)
		}
		first, err := s.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// The oldest binlog of a fresh server starts with an empty GTID state: nothing to store
		// for GTIDs; file:pos starts at mysql-bin.000001:4.
		if !gtid && (len(first.Rows) != 0 || first.Position != "mysql-bin.000001:4;server_id=1") {
			t.Errorf("first transaction from earliest (file:pos): %q with %d rows, want the start position", first.Position, len(first.Rows))
		}
		tx := first
		if len(tx.Rows) == 0 {
			tx = nextRows(t, s)
		}
		if got := rowMap(tx.Rows[0])["id"]; got != early.ID {
			t.Errorf("earliest (gtid=%v): first row %s, want the one written before the source ran (%s)", gtid, got, early.ID)
		}
		if !strings.HasSuffix(string(tx.Position), ";server_id=1") || gtid != strings.Contains(string(tx.Position), ";binlog=mysql-bin.000001:") {
			t.Errorf("position %q lacks its origin", tx.Position)
		}
		stored[gtid] = tx.Position
		s.Close()
	}
	// "current" hands out the binlog end as its first transaction.
	s := newSource("current", true)
	if err := s.Open(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if tx, err := s.Next(ctx); err != nil || len(tx.Rows) != 0 || ComparePosition(tx.Position, stored[true]) < 0 || !strings.Contains(string(tx.Position), ";binlog=") {
		t.Errorf("first transaction from current: %+v %v", tx, err)
	}
	s.Close()

	mustExec(t, c, "RESET MASTER")
	// The older form (GTID alone) is caught by its numbers while the server is behind them.
	old := source.Position(strings.Split(string(stored[true]), ";")[0])
	if err := newSource("", true).Open(ctx, old); err == nil || !errors.Is(err, source.ErrPositionLost) || !strings.Contains(err.Error(), "no GTIDs of domain 0") {
		t.Errorf("Open(%q) right after RESET MASTER: %v, want a lost-position refusal", old, err)
	}
	for i := 0; i < 5; i++ {
		e := newEvent("after")
		mustExec(t, c, ins, e.ID, e.AggregateType, e.AggregateID, e.Type, e.Payload)
	}
	// Once the new numbers are past it, only the origin tells: both forms with origin are refused.
	for gtid, pos := range stored {
		err := newSource("", gtid).Open(ctx, pos)
		if err == nil || !errors.Is(err, source.ErrPositionLost) || !strings.Contains(err.Error(), "RESET MASTER") || !strings.Contains(err.Error(), "offsets set") {
			t.Errorf("Open(%q) after RESET MASTER and 5 transactions: %v, want a lost-position refusal", pos, err)
		}
	}
}
