package mysql

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	th "github.com/outboxd/outboxd/internal/testenv/harness"
)

const outboxCols = "id,aggregatetype,aggregateid,type,payload,created_at"

// TestAlterBetweenRows: the outbox is altered between inserts that the source reads only after
// both ALTERs; each row decodes with the schema current when it was written. In
// information_schema mode a restart from before the ALTERs cannot know the old column names and
// must fail loudly instead of mis-decoding; with binlog column names it just works.
func TestAlterBetweenRows(t *testing.T) {
	t.Parallel()
	for _, full := range []bool{false, true} {
		name := "information_schema"
		if full {
			name = "binlog-metadata"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m := testenv.NewMariaDB(t, testenv.MariaDBOptions{RowMetadata: full})
			c := db(t, m)
			mustExec(t, c, testenv.MariaDBOutboxDDL("outbox", "CHAR(36)"))
			ins := "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES (?, ?, ?, ?, ?)"
			e1, e2, e3 := newEvent("a1"), newEvent("a2"), newEvent("a3")

			s := open(t, m, "", nil, "app.outbox")
			mustExec(t, c, ins, e1.ID, e1.AggregateType, e1.AggregateID, e1.Type, e1.Payload)
			mustExec(t, c, "ALTER TABLE outbox ADD COLUMN extra VARCHAR(32) NOT NULL DEFAULT 'old' AFTER aggregateid")
			mustExec(t, c, "INSERT INTO outbox (id, aggregatetype, aggregateid, extra, type, payload) VALUES (?, ?, ?, 'new', ?, ?)",
				e2.ID, e2.AggregateType, e2.AggregateID, e2.Type, e2.Payload)
			mustExec(t, c, "ALTER TABLE `app`.`outbox` DROP COLUMN type, CHANGE COLUMN aggregateid agg_id VARCHAR(255) NOT NULL FIRST")
			mustExec(t, c, "INSERT INTO outbox (id, aggregatetype, agg_id, payload) VALUES (?, ?, ?, ?)",
				e3.ID, e3.AggregateType, e3.AggregateID, e3.Payload)

			tx1 := nextRows(t, s)
			expectRow(t, tx1.Rows[0], outboxCols, map[string]string{"id": e1.ID, "aggregateid": "a1", "type": "created", "payload": e1.Payload})
			tx2 := nextRows(t, s)
			expectRow(t, tx2.Rows[0], "id,aggregatetype,aggregateid,extra,type,payload,created_at",
				map[string]string{"id": e2.ID, "aggregateid": "a2", "extra": "new", "type": "created", "payload": e2.Payload})
			tx3 := nextRows(t, s)
			expectRow(t, tx3.Rows[0], "agg_id,id,aggregatetype,extra,payload,created_at",
				map[string]string{"id": e3.ID, "agg_id": "a3", "extra": "old", "payload": e3.Payload})
			s.Close()

			// Restart from the first row's position: the schema in information_schema is the
			// newest one, which does not describe e2's row.
			s2 := New(Config{DSN: m.DSN("app"), Tables: []string{"app.outbox"}, ServerID: serverIDs.Add(1), AllowMinimalRowMetadata: true}, testLogger())
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := s2.Open(ctx, tx1.Position); err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer s2.Close()
			var err error
			for err == nil {
				got, e := s2.Next(ctx)
				err = e
				if e == nil && len(got.Rows) > 0 {
					if !full {
						t.Fatalf("information_schema mode decoded a row written before the ALTER with the current schema: %v", rowMap(got.Rows[0]))
					}
					if got.Rows[0].Columns[3] != "extra" || rowMap(got.Rows[0])["extra"] != "new" {
						t.Fatalf("restart decoded %v", rowMap(got.Rows[0]))
					}
					break
				}
			}
			if !full && (err == nil || !strings.Contains(err.Error(), "binlog_row_metadata=FULL")) {
				t.Fatalf("want a loud layout error, got %v", err)
			}
		})
	}
}

// purgeTo flushes the binlog and purges every file before the new current one.
func purgeTo(t *testing.T, m *testenv.MariaDB) string {
	t.Helper()
	c := db(t, m)
	mustExec(t, c, "FLUSH BINARY LOGS")
	rows, err := m.Query("", "SHOW BINARY LOGS")
	if err != nil {
		t.Fatal(err)
	}
	last := rows[len(rows)-1][0]
	// The server keeps binlogs that crash recovery may still need (binlog checkpoint), so
	// PURGE can lag behind FLUSH for a moment: purge until the first binlog left is last.
	err = th.Until(20*time.Second, 50*time.Millisecond, func() error {
		mustExec(t, c, fmt.Sprintf("PURGE BINARY LOGS TO '%s'", last))
		rows, err := m.Query("", "SHOW BINARY LOGS")
		if err != nil {
			return err
		}
		if rows[0][0] != last {
			return fmt.Errorf("binlogs not purged to %s: %v", last, rows)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return last
}

// TestPurgedBinlog: a position whose binlog was purged is refused without streaming
// (CheckPosition, for `outboxd offsets set` and `check`), Inspect reports the server, and the
// server's own refusal while streaming (error 1236) says how to recover.
func TestPurgedBinlog(t *testing.T) {
	t.Parallel()
	m := testenv.NewMariaDB(t, testenv.MariaDBOptions{RowMetadata: true})
	c := db(t, m)
	mustExec(t, c, testenv.MariaDBOutboxDDL("outbox", "BINARY(16)"))
	gtidSrc := open(t, m, "", nil, "app.outbox")
	fileSrc := open(t, m, "", boolp(false), "app.outbox")
	ev := newEvent("p")
	mustExec(t, c, "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES (UNHEX(REPLACE(?,'-','')), ?, ?, ?, ?)",
		ev.ID, ev.AggregateType, ev.AggregateID, ev.Type, ev.Payload)
	gpos, fpos := nextRows(t, gtidSrc).Position, nextRows(t, fileSrc).Position
	gtidSrc.Close()
	fileSrc.Close()
	mustExec(t, c, "FLUSH BINARY LOGS")
	mustExec(t, c, "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES (UNHEX(REPLACE(?,'-','')), 'o', 'lost', 't', '{}')",
		newEvent("q").ID)
	purgeTo(t, m)
	// Open from fpos and gpos now fails with ErrPositionLost, naming the purged file or GTID and
	// `offsets set`: sourcetest's PositionLost (TestConformance, CheckLost in harness) proves it
	// for both position forms on both row-metadata modes.

	// The same checks without streaming, for `outboxd offsets set` and `check`.
	cfg := Config{DSN: m.DSN("app"), Tables: []string{"app.outbox", "app.nope"}, ServerID: 99}
	if err := CheckPosition(context.Background(), cfg, fpos); err == nil || !strings.Contains(err.Error(), "purged") {
		t.Errorf("CheckPosition(%s): %v", fpos, err)
	}
	if err := CheckPosition(context.Background(), cfg, gpos); err == nil || !strings.Contains(err.Error(), "purged") {
		t.Errorf("CheckPosition(%s): %v", gpos, err)
	}
	st, err := Inspect(context.Background(), cfg, "id", "aggregatetype", "missing_col")
	if err != nil {
		t.Fatal(err)
	}
	if st.Flavor != "mariadb" || st.Prerequisites != nil || st.ColumnNames != "binlog" || !st.ReplicationGrant ||
		len(st.MissingTables) != 1 || st.MissingTables[0] != "app.nope" ||
		strings.Join(st.MissingColumns["app.outbox"], ",") != "missing_col" {
		t.Errorf("Inspect: %+v", st)
	}
	if err := CheckPosition(context.Background(), cfg, st.Position); err != nil || st.Position == "" {
		t.Errorf("CheckPosition(current %q): %v", st.Position, err)
	}

	// The server's own refusal (error 1236) gets the same treatment when the pre-check cannot
	// see the problem (here: bypassed by streaming directly).
	s := New(Config{DSN: m.DSN("app"), Tables: []string{"app.outbox"}, ServerID: serverIDs.Add(1)}, testLogger())
	s.info = serverInfo{mariadb: true}
	start, _ := parsePosition(fpos)
	s.asm = newAssembler(start, s.captured, nil, true, time.Second, testLogger())
	err = s.startStream(context.Background(), start)
	s.Close()
	if err == nil || !strings.Contains(err.Error(), "1236") || !strings.Contains(err.Error(), "offsets set") {
		t.Fatalf("stream from a purged file: %v", err)
	}
}

// TestKillServer: the server is SIGKILLed while the source reads; the source reconnects from
// the last transaction boundary once the server is back, and a restarted source resumes from
// its stored position. Nothing is lost, nothing stored is repeated.
func TestKillServer(t *testing.T) {
	t.Parallel()
	m := testenv.NewMariaDB(t, testenv.MariaDBOptions{RowMetadata: true})
	c := db(t, m)
	mustExec(t, c, testenv.MariaDBOutboxDDL("outbox", "BINARY(16)"))
	ins := "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES (UNHEX(REPLACE(?,'-','')), ?, ?, ?, ?)"
	s := open(t, m, "", nil, "app.outbox")
	e1, e2, e3 := newEvent("k1"), newEvent("k2"), newEvent("k3")
	mustExec(t, c, ins, e1.ID, e1.AggregateType, e1.AggregateID, e1.Type, e1.Payload)
	tx1 := nextRows(t, s)

	m.Kill()
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	c2 := db(t, m)
	mustExec(t, c2, ins, e2.ID, e2.AggregateType, e2.AggregateID, e2.Type, e2.Payload)
	tx2 := nextRows(t, s)
	expectRow(t, tx2.Rows[0], outboxCols, map[string]string{"id": e2.ID})
	if ComparePosition(tx2.Position, tx1.Position) <= 0 {
		t.Fatalf("position after reconnect %s not after %s", tx2.Position, tx1.Position)
	}
	s.Close()

	mustExec(t, c2, ins, e3.ID, e3.AggregateType, e3.AggregateID, e3.Type, e3.Payload)
	s2 := open(t, m, tx1.Position, nil, "app.outbox")
	expectRow(t, nextRows(t, s2).Rows[0], outboxCols, map[string]string{"id": e2.ID})
	expectRow(t, nextRows(t, s2).Rows[0], outboxCols, map[string]string{"id": e3.ID})
}

// blackhole is a TCP proxy whose existing connections can be made silent (data stops flowing,
// sockets stay open), as in a network partition; new connections work normally.
type blackhole struct {
	ln       net.Listener
	frozen   chan struct{} // closed by freeze
	freezing sync.Once
	ended    chan struct{} // closed at the test's cleanup: held connections close
}

// freeze makes the connections open now silent for the rest of the test.
func (b *blackhole) freeze() { b.freezing.Do(func() { close(b.frozen) }) }

func (b *blackhole) isFrozen() bool {
	select {
	case <-b.frozen:
		return true
	default:
		return false
	}
}

func newBlackhole(t *testing.T, target string) *blackhole {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{ln: ln, frozen: make(chan struct{}), ended: make(chan struct{})}
	t.Cleanup(func() { ln.Close(); close(b.ended) })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			born := b.isFrozen()
			pipe := func(dst, src net.Conn) {
				buf := make([]byte, 32<<10)
				for {
					n, err := src.Read(buf)
					if err != nil {
						dst.Close()
						return
					}
					if !born && b.isFrozen() { // black-holed: hold the data until the test ends
						<-b.ended
						src.Close()
						dst.Close()
						return
					}
					if _, err := dst.Write(buf[:n]); err != nil {
						src.Close()
						return
					}
				}
			}
			go pipe(u, c)
			go pipe(c, u)
		}
	}()
	return b
}

// TestSilentConnection: the replication connection goes silent without closing; the watchdog
// notices the missing heartbeats, and the source reconnects and delivers what follows.
func TestSilentConnection(t *testing.T) {
	t.Parallel()
	m := testenv.NewMariaDB(t, testenv.MariaDBOptions{RowMetadata: true})
	c := db(t, m)
	mustExec(t, c, testenv.MariaDBOutboxDDL("outbox", "CHAR(36)"))
	proxy := newBlackhole(t, fmt.Sprintf("127.0.0.1:%d", m.Port))
	s := New(Config{Start: "current", DSN: "mysql://root@" + proxy.ln.Addr().String() + "/app", Tables: []string{"app.outbox"},
		ServerID: serverIDs.Add(1), HeartbeatPeriod: 200 * time.Millisecond}, testLogger())
	if err := s.Open(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ins := "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES (?, ?, ?, ?, ?)"
	e1, e2 := newEvent("s1"), newEvent("s2")
	mustExec(t, c, ins, e1.ID, e1.AggregateType, e1.AggregateID, e1.Type, e1.Payload)
	expectRow(t, nextRows(t, s).Rows[0], outboxCols, map[string]string{"id": e1.ID})
	proxy.freeze()
	mustExec(t, c, ins, e2.ID, e2.AggregateType, e2.AggregateID, e2.Type, e2.Payload)
	began := time.Now()
	expectRow(t, nextRows(t, s).Rows[0], outboxCols, map[string]string{"id": e2.ID})
	t.Logf("row delivered %s after the connection went silent", time.Since(began).Round(time.Millisecond))
}
