package mysql

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outboxd/outboxd/source"
)

// feedErr feeds events until one fails and returns that error with the transactions handed out
// before it.
func feedErr(a *assembler, evs ...*replication.BinlogEvent) ([]source.Tx, error) {
	var out []source.Tx
	for _, e := range evs {
		err := a.handle(e)
		for tx, ok := a.pop(); ok; tx, ok = a.pop() {
			out = append(out, tx)
		}
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

func wantStop(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want one containing %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("error %q lacks %q", err, p)
		}
	}
	if !errors.Is(err, source.ErrPositionLost) {
		t.Fatalf("error %q is retried by the pipeline (it does not wrap source.ErrPositionLost)", err)
	}
}

func xaPrepareEvent(logPos uint32) *replication.BinlogEvent {
	e := ev(logPos, &replication.GenericEvent{})
	e.Header.EventType = replication.XA_PREPARE_LOG_EVENT
	return e
}

func mariaXAGTID(seq uint64, flags byte) *replication.BinlogEvent {
	return ev(0, &replication.MariadbGTIDEvent{GTID: gomysql.MariadbGTID{DomainID: 0, ServerID: 1, SequenceNumber: seq}, Flags: flags})
}

// TestAssemblerStatementFormat: a data change to an outbox table logged as a statement stops
// at its transaction's end, without handing out its position; statements on other tables, and
// statements that only mention the name in a string, do not.
func TestAssemblerStatementFormat(t *testing.T) {
	k := newStreamKit(t)
	a := k.assembler(t, "0-1-1", true)
	got := feed(t, a, mariaGTID(2, false), q(0, "INSERT INTO other2 (note) VALUES ('types')"), ev(0, &replication.XIDEvent{}),
		mariaGTID(3, false), k.tm, k.wr, ev(0, &replication.XIDEvent{}))
	expectTxs(t, got, "0-1-3/1")
	got, err := feedErr(a, mariaGTID(4, false), q(0, "INSERT INTO types (id) VALUES (5)"), ev(0, &replication.HeartbeatEvent{}),
		ev(0, &replication.XIDEvent{}))
	if len(got) != 0 {
		t.Fatalf("handed out %v", got)
	}
	wantStop(t, err, "app.types", "logged as a statement", "binlog_format=ROW", "position just after it is 0-1-4")

	// Autocommitted (no transaction around it, e.g. a non-transactional table): a stop too.
	b := k.assembler(t, "0-1-1", true)
	_, err = feedErr(b, mariaGTID(2, true), q(0, "REPLACE INTO `app`.`types` SET id = 1"))
	wantStop(t, err, "logged as a statement", "0-1-2")

	// LOAD DATA logged as a statement (Execute_load_query): its raw text is searched.
	c := k.assembler(t, "0-1-1", true)
	load := ev(0, &replication.ExecuteLoadQueryEvent{})
	load.RawData = []byte("....LOAD DATA INFILE '/tmp/x' INTO TABLE `Types`")
	_, err = feedErr(c, mariaGTID(2, false), load, ev(0, &replication.XIDEvent{}))
	wantStop(t, err, "LOAD DATA")
}

// TestAssemblerPartialImage: an insert into an outbox table whose column bitmap lacks columns
// (binlog_row_image MINIMAL/NOBLOB in the writing session) stops; a full one passes.
func TestAssemblerPartialImage(t *testing.T) {
	k := newStreamKit(t)
	a := k.assembler(t, "0-1-1", true)
	full := *k.wr.Event.(*replication.RowsEvent)
	if len(missingColumns(full.ColumnBitmap1, int(full.ColumnCount))) != 0 {
		t.Fatalf("fixture bitmap %x not full", full.ColumnBitmap1)
	}
	partial := full
	partial.ColumnBitmap1 = bytes.Clone(full.ColumnBitmap1)
	partial.ColumnBitmap1[0] &^= 0x04 // third column absent
	pe := ev(0, &partial)
	got, err := feedErr(a, mariaGTID(2, false), k.tm, k.wr, ev(0, &replication.XIDEvent{}),
		mariaGTID(3, false), k.tm, pe, ev(0, &replication.XIDEvent{}))
	expectTxs(t, got, "0-1-2/1")
	wantStop(t, err, "partial row image", "column(s) "+string(full.Table.ColumnName[2])+" missing", "binlog_row_image=FULL", "0-1-3")
}

func TestMissingColumns(t *testing.T) {
	for _, tc := range []struct {
		bitmap []byte
		n      int
		want   string
	}{
		{[]byte{0xff}, 8, ""},
		{[]byte{0x1f}, 5, ""},
		{[]byte{0x01}, 5, "1,2,3,4"},
		{[]byte{0xff, 0x00}, 10, "8,9"},
		{[]byte{0xff}, 10, "8,9"}, // bitmap shorter than the columns
	} {
		var s []string
		for _, i := range missingColumns(tc.bitmap, tc.n) {
			s = append(s, string(rune('0'+i)))
		}
		if got := strings.Join(s, ","); got != tc.want {
			t.Errorf("missingColumns(%x, %d) = %s, want %s", tc.bitmap, tc.n, got, tc.want)
		}
	}
}

// TestAssemblerXA: MariaDB's XA groups. A prepare without outbox rows and the later XA COMMIT
// are ordinary transactions (the position moves); a prepare with outbox rows stops before its
// position is handed out; a one-phase commit delivers its rows.
func TestAssemblerXA(t *testing.T) {
	const prepared, completed = 64 | 12, 128 | 12 | replication.BINLOG_MARIADB_FL_STANDALONE
	k := newStreamKit(t)
	a := k.assembler(t, "0-1-1", true)
	k.clock = k.clock.Add(2 * a.idleEvery) // let idle transactions through
	got := feed(t, a, mariaXAGTID(2, prepared), q(0, "XA END X'7831',X'',1"), xaPrepareEvent(500),
		mariaXAGTID(3, completed), q(0, "XA COMMIT X'7831',X'',1"), ev(0, &replication.HeartbeatEvent{}))
	expectTxs(t, got, "0-1-2/0", "0-1-3/0")
	got = feed(t, a, mariaGTID(4, false), q(0, "XA START X'7833',X'',1"), k.tm, k.wr, q(0, "XA END X'7833',X'',1"),
		q(0, "XA COMMIT X'7833',X'',1 ONE PHASE"))
	expectTxs(t, got, "0-1-4/1")

	got, err := feedErr(a, mariaXAGTID(5, prepared), k.tm, k.wr, q(0, "XA END X'7832',X'',1"), xaPrepareEvent(900),
		mariaXAGTID(6, completed), q(0, "XA COMMIT X'7832',X'',1"))
	if len(got) != 0 {
		t.Fatalf("handed out %v", got)
	}
	wantStop(t, err, "XA transaction was prepared with 1 outbox row", "do not write outbox rows inside XA", "0-1-5")

	// XA ROLLBACK of a prepared transaction without outbox rows: an ordinary empty transaction.
	b := k.assembler(t, "0-1-1", true)
	expectTxs(t, feed(t, b, mariaXAGTID(2, completed), q(0, "XA ROLLBACK X'7832',X'',1"), ev(0, &replication.HeartbeatEvent{})), "0-1-2/0")
}

// TestAssemblerNoEnd: a transaction with outbox rows followed by the next one's GTID, without an
// end event, is a loud error (it used to drop the rows with a warning).
func TestAssemblerNoEnd(t *testing.T) {
	k := newStreamKit(t)
	a := k.assembler(t, "0-1-1", true)
	_, err := feedErr(a, mariaGTID(2, false), k.tm, k.wr, mariaGTID(3, false))
	wantStop(t, err, "has no end event")
}

// TestAssemblerFoldedNames: with lower_case_table_names=1 the binlog says app.types whatever
// the configured spelling; the assembler finds App.Types only when names are folded.
func TestAssemblerFoldedNames(t *testing.T) {
	k := newStreamKit(t)
	p, _ := parsePosition("0-1-1")
	configured := map[tableKey]string{{"App", "Types"}: "App.Types"}
	exact := newAssembler(p, configured, nil, true, 1e9, testLogger())
	expectTxs(t, feed(t, exact, mariaGTID(2, false), k.tm, k.wr, ev(0, &replication.XIDEvent{})))

	folded := newAssembler(p, foldKeys(configured), nil, true, 1e9, testLogger())
	folded.fold = true
	got := feed(t, folded, mariaGTID(2, false), k.tm, k.wr, ev(0, &replication.XIDEvent{}))
	expectTxs(t, got, "0-1-2/1")
	if got[0].Rows[0].Table != "App.Types" {
		t.Fatalf("row table %q, want the configured name", got[0].Rows[0].Table)
	}
	// Statements are matched folded too.
	_, err := feedErr(folded, mariaGTID(3, false), q(0, "insert into APP.TYPES values (1)"), ev(0, &replication.XIDEvent{}))
	wantStop(t, err, "logged as a statement")
}
