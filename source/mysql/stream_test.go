package mysql

import (
	"testing"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/google/uuid"

	"github.com/outboxd/outboxd/source"
)

// streamKit parses the captured fixture once and hands out its TableMap and WriteRows events
// (one row into app.types), to be mixed with synthetic events.
type streamKit struct {
	tm, wr *replication.BinlogEvent
	clock  time.Time
}

func newStreamKit(t testing.TB) *streamKit {
	raws := fixtureEvents(t, "full")
	p := replication.NewBinlogParser()
	p.SetFlavor("mariadb")
	p.SetTimestampStringLocation(time.UTC)
	k := &streamKit{clock: time.Unix(1_700_000_000, 0)}
	for _, raw := range raws {
		ev, err := p.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Event.(type) {
		case *replication.TableMapEvent:
			k.tm = ev
		case *replication.RowsEvent:
			k.wr = ev
		}
	}
	return k
}

func (k *streamKit) assembler(t testing.TB, start source.Position, captured bool) *assembler {
	p, err := parsePosition(start)
	if err != nil {
		t.Fatal(err)
	}
	tables := map[tableKey]string{{"app", "other"}: "app.other"}
	if captured {
		tables[tableKey{"app", "types"}] = "app.types"
	}
	a := newAssembler(p, tables, nil, true, time.Second, testLogger())
	a.now = func() time.Time { return k.clock }
	a.lastEmit = k.clock
	return a
}

func ev(logPos uint32, e replication.Event) *replication.BinlogEvent {
	return &replication.BinlogEvent{Header: &replication.EventHeader{LogPos: logPos, Timestamp: 1_700_000_123}, Event: e}
}

func mariaGTID(seq uint64, standalone bool) *replication.BinlogEvent {
	var flags byte
	if standalone {
		flags = replication.BINLOG_MARIADB_FL_STANDALONE
	}
	return ev(0, &replication.MariadbGTIDEvent{GTID: gomysql.MariadbGTID{DomainID: 0, ServerID: 1, SequenceNumber: seq}, Flags: flags})
}

func q(logPos uint32, sql string) *replication.BinlogEvent {
	return ev(logPos, &replication.QueryEvent{Schema: []byte("app"), Query: []byte(sql)})
}

func feed(t *testing.T, a *assembler, evs ...*replication.BinlogEvent) []source.Tx {
	t.Helper()
	var out []source.Tx
	for _, e := range evs {
		if err := a.handle(e); err != nil {
			t.Fatal(err)
		}
		for tx, ok := a.pop(); ok; tx, ok = a.pop() {
			out = append(out, tx)
		}
	}
	return out
}

func expectTxs(t *testing.T, got []source.Tx, want ...string) {
	t.Helper()
	var s []string
	for _, tx := range got {
		s = append(s, string(tx.Position)+"/"+string(rune('0'+len(tx.Rows))))
	}
	if len(s) != len(want) {
		t.Fatalf("transactions %v, want %v", s, want)
	}
	for i := range s {
		if s[i] != want[i] {
			t.Fatalf("transactions %v, want %v", s, want)
		}
	}
}

func TestAssemblerMariaGTID(t *testing.T) {
	k := newStreamKit(t)
	a := k.assembler(t, "0-1-1", true)

	// A transaction is delivered whole at its XID; the position does not move before.
	got := feed(t, a, mariaGTID(2, false), k.tm, k.wr, k.tm, k.wr, ev(0, &replication.HeartbeatEvent{}))
	expectTxs(t, got)
	if a.committed != "0-1-1" {
		t.Fatalf("position advanced inside a transaction: %s", a.committed)
	}
	got = feed(t, a, ev(900, &replication.XIDEvent{}))
	expectTxs(t, got, "0-1-2/2")
	if !got[0].CommitTime.Equal(time.Unix(1_700_000_123, 0)) || got[0].Rows[0].Table != "app.types" {
		t.Fatalf("tx %+v", got[0])
	}

	// ROLLBACK drops the rows; no idle Tx before idleEvery; a heartbeat reports the progress.
	expectTxs(t, feed(t, a, mariaGTID(3, false), k.tm, k.wr, q(0, "ROLLBACK")))
	expectTxs(t, feed(t, a, ev(0, &replication.HeartbeatEvent{})), "0-1-3/0")
	expectTxs(t, feed(t, a, ev(0, &replication.HeartbeatEvent{}))) // nothing moved

	// A DDL is a transaction of its own; once idleEvery has passed it yields an idle Tx.
	expectTxs(t, feed(t, a, mariaGTID(4, true), q(0, "CREATE TABLE x (a INT)")))
	k.clock = k.clock.Add(time.Second)
	expectTxs(t, feed(t, a, mariaGTID(5, true), q(0, "DROP TABLE x")), "0-1-5/0")

	// COMMIT (non-transactional engines) ends a transaction like XID; SAVEPOINT does not.
	expectTxs(t, feed(t, a, mariaGTID(6, false), k.tm, k.wr, q(0, "SAVEPOINT s"), k.tm, k.wr, q(0, "COMMIT")), "0-1-6/2")

	// Rows of tables that are not captured are ignored.
	b := k.assembler(t, "0-1-1", false)
	expectTxs(t, feed(t, b, mariaGTID(2, false), k.tm, k.wr, ev(0, &replication.XIDEvent{})))
	if b.committed != "0-1-2" {
		t.Fatal(b.committed)
	}
}

func TestAssemblerFilePos(t *testing.T) {
	k := newStreamKit(t)
	a := k.assembler(t, "mysql-bin.000001:400", true)
	a.file = "mysql-bin.000001"
	rot := func(ts uint32, name string, pos uint64) *replication.BinlogEvent {
		e := ev(0, &replication.RotateEvent{Position: pos, NextLogName: []byte(name)})
		e.Header.Timestamp = ts
		return e
	}
	got := feed(t, a, rot(0, "mysql-bin.000001", 400), mariaGTID(2, false), k.tm, k.wr, ev(900, &replication.XIDEvent{}))
	expectTxs(t, got, "mysql-bin.000001:900/1")
	got = feed(t, a, rot(1, "mysql-bin.000002", 4), ev(0, &replication.HeartbeatEvent{}))
	expectTxs(t, got, "mysql-bin.000002:4/0")
	got = feed(t, a, mariaGTID(3, false), k.tm, k.wr, ev(700, &replication.XIDEvent{}))
	expectTxs(t, got, "mysql-bin.000002:700/1")
	if r := a.resume(); r.String() != "mysql-bin.000002:700" {
		t.Fatal(r)
	}
	// A connection lost inside a transaction: its rows are dropped, it is read again.
	feed(t, a, mariaGTID(4, false), k.tm, k.wr)
	a.dropPartial()
	if a.inTx || len(a.rows) != 0 || a.resume().String() != "mysql-bin.000002:700" {
		t.Fatalf("after dropPartial: %+v", a.resume())
	}
}

func TestAssemblerMySQLGTID(t *testing.T) {
	k := newStreamKit(t)
	const u = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	a := k.assembler(t, u+":1-5", true)
	sid := uuid.MustParse(u)
	commit := time.Date(2024, 1, 2, 3, 4, 5, 678000000, time.UTC)
	gtid := func(gno int64) *replication.BinlogEvent {
		return ev(0, &replication.GTIDEvent{SID: sid[:], GNO: gno, ImmediateCommitTimestamp: uint64(commit.UnixMicro())})
	}
	got := feed(t, a, gtid(6), q(0, "BEGIN"), k.tm, k.wr, ev(0, &replication.XIDEvent{}))
	expectTxs(t, got, u+":1-6/1")
	if !got[0].CommitTime.Equal(commit) {
		t.Fatalf("commit time %v, want %v", got[0].CommitTime, commit)
	}
	// binlog_transaction_compression: the transaction arrives inside a payload event.
	payload := ev(0, &replication.TransactionPayloadEvent{Events: []*replication.BinlogEvent{
		q(0, "BEGIN"), k.tm, k.wr, k.tm, k.wr, ev(0, &replication.XIDEvent{})}})
	expectTxs(t, feed(t, a, gtid(7), payload), u+":1-7/2")
	if ComparePosition(a.committed, u+":1-6") <= 0 {
		t.Fatal(a.committed)
	}
}

// TestAssemblerCarvedRows: rows and values carved from shared chunks never overlap between
// transactions, and appending to one Tx's slices cannot write into another's.
func TestAssemblerCarvedRows(t *testing.T) {
	k := newStreamKit(t)
	a := k.assembler(t, "0-1-1", true)
	var txs []source.Tx
	for i := range 3 * chunkRows {
		evs := []*replication.BinlogEvent{mariaGTID(uint64(i+2), false), k.tm, k.wr}
		if i%3 == 0 {
			evs = append(evs, k.tm, k.wr) // two rows events: a.rows grows past its carved room
		}
		txs = append(txs, feed(t, a, append(evs, ev(900, &replication.XIDEvent{}))...)...)
	}
	if len(txs) != 3*chunkRows {
		t.Fatalf("%d transactions", len(txs))
	}
	want := string(txs[0].Rows[0].Values[0].Bytes)
	seen := map[*source.Value]bool{}
	for i := range txs {
		tx := &txs[i]
		for _, r := range tx.Rows {
			if cap(r.Values) != len(r.Values) || seen[&r.Values[0]] {
				t.Fatalf("tx %d: values share memory (len %d cap %d)", i, len(r.Values), cap(r.Values))
			}
			seen[&r.Values[0]] = true
			r.Values = append(r.Values, source.Value{Bytes: []byte("x")})
		}
		tx.Rows = append(tx.Rows, source.Row{Table: "scribble"})
	}
	for i, tx := range txs {
		n := 1
		if i%3 == 0 {
			n = 2
		}
		if len(tx.Rows) != n+1 {
			t.Fatalf("tx %d: %d rows", i, len(tx.Rows))
		}
		for _, r := range tx.Rows[:n] {
			if r.Table != "app.types" || string(r.Values[0].Bytes) != want {
				t.Fatalf("tx %d: row overwritten: %s %q", i, r.Table, r.Values[0].Bytes)
			}
		}
	}
}
