package mysql

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/source"
	"github.com/outboxd/outboxd/source/sourcetest"
)

var serverIDs, eventSeq atomic.Uint32

// newEvent is sourcetest.NewEvent for tests that run in parallel (the suite's counter is not
// safe for concurrent use).
func newEvent(agg string) sourcetest.Event {
	n := eventSeq.Add(1)
	return sourcetest.Event{ID: fmt.Sprintf("00000000-0000-4000-8000-%012x", uint64(n)<<8), AggregateType: "order",
		AggregateID: agg, Type: "created", Payload: fmt.Sprintf(`{"n": %d, "agg": "%s"}`, n, agg)}
}

func init() { serverIDs.Store(1000) }

func testLogger() *slog.Logger {
	lvl := slog.LevelWarn
	if os.Getenv("OUTBOXD_TEST_LOG") != "" {
		lvl = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
}

// db opens a SQL connection to database app of m.
func db(t testing.TB, m *testenv.MariaDB) *client.Conn {
	t.Helper()
	c, err := client.Connect(fmt.Sprintf("127.0.0.1:%d", m.Port), "root", "", "app")
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func mustExec(t testing.TB, c *client.Conn, q string, args ...any) {
	t.Helper()
	if _, err := c.Execute(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// harness binds the conformance suite to table app.<table> of m.
func harness(t *testing.T, m *testenv.MariaDB, table, idType string, useGTID *bool) sourcetest.Harness {
	c := db(t, m)
	mustExec(t, c, testenv.MariaDBOutboxDDL(table, idType))
	mustExec(t, c, "CREATE TABLE IF NOT EXISTS other (id INT AUTO_INCREMENT PRIMARY KEY, note VARCHAR(64))")
	idExpr := "?"
	if strings.HasPrefix(idType, "BINARY") {
		idExpr = "UNHEX(REPLACE(?, '-', ''))"
	}
	insert := fmt.Sprintf("INSERT INTO %s (id, aggregatetype, aggregateid, type, payload) VALUES (%s, ?, ?, ?, ?)", table, idExpr)
	tx := func(t *testing.T, end string, f func()) {
		t.Helper()
		mustExec(t, c, "BEGIN")
		f()
		mustExec(t, c, end)
	}
	ins := func(t *testing.T, ev sourcetest.Event) {
		mustExec(t, c, insert, ev.ID, ev.AggregateType, ev.AggregateID, ev.Type, ev.Payload)
	}
	newScope := func(t *testing.T) sourcetest.Scope {
		// A server id of its own, starting at the binlog's current end.
		cfg := Config{Start: "current", DSN: m.DSN("app"), Tables: []string{"app." + table}, ServerID: serverIDs.Add(1), UseGTID: useGTID,
			AllowMinimalRowMetadata: true, HeartbeatPeriod: time.Second, ChunkRows: 7}
		return sourcetest.Scope{
			NewSource: func() source.Source { return New(cfg, testLogger()) },
			// A transaction after p, then every binlog up to a new one purged: p's file, or
			// the GTIDs after p, are gone.
			LosePosition: func(t *testing.T, _ source.Position) {
				mustExec(t, c, "FLUSH BINARY LOGS")
				mustExec(t, c, "INSERT INTO other (note) VALUES ('purged')")
				purgeTo(t, m)
			},
			// The error names what was purged and tells the operator about offsets set
			// (the file variant: the oldest binlog still there, as the position to use).
			CheckLost: func(t *testing.T, err error, p source.Position) {
				want := []string{"purged", "offsets set"}
				pos, perr := parsePosition(p)
				if perr != nil {
					t.Fatal(perr)
				}
				if pos.kind == kindFile {
					rows, qerr := m.Query("", "SHOW BINARY LOGS")
					if qerr != nil {
						t.Fatal(qerr)
					}
					want = append(want, pos.file, rows[0][0]+":4")
				} else {
					want = append(want, string(p), "GTID 0-")
				}
				for _, w := range want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("Open(%s): error lacks %q: %v", p, w, err)
					}
				}
			},
		}
	}
	return sourcetest.Harness{
		Table:    "app." + table,
		NewScope: newScope,
		Insert: func(t *testing.T, evs ...sourcetest.Event) {
			tx(t, "COMMIT", func() {
				for _, ev := range evs {
					ins(t, ev)
				}
			})
		},
		InsertRollback: func(t *testing.T, evs ...sourcetest.Event) {
			tx(t, "ROLLBACK", func() {
				for _, ev := range evs {
					ins(t, ev)
				}
			})
		},
		InsertThenDelete: func(t *testing.T, ev sourcetest.Event) {
			tx(t, "COMMIT", func() {
				ins(t, ev)
				mustExec(t, c, fmt.Sprintf("DELETE FROM %s WHERE id = %s", table, idExpr), ev.ID)
			})
		},
		UpdateDelete: func(t *testing.T, id string) {
			tx(t, "COMMIT", func() {
				mustExec(t, c, fmt.Sprintf("UPDATE %s SET type = 'updated' WHERE id = %s", table, idExpr), id)
				mustExec(t, c, fmt.Sprintf("DELETE FROM %s WHERE id = %s", table, idExpr), id)
			})
			mustExec(t, c, "INSERT INTO other (note) VALUES ('not an outbox row')")
		},
		Compare:   ComparePosition,
		ChunkRows: 7,
		ErrClosed: ErrClosed,
		Types:     true,
	}
}

func boolp(b bool) *bool { return &b }

// TestConformance runs the source conformance suite against private MariaDB servers: GTID and
// file:pos positions, BINARY(16) and CHAR(36) ids, column names from the binlog (FULL row
// metadata) and from information_schema (MINIMAL). The variants sharing a server run one after
// the other: PositionLost purges that server's binlogs.
func TestConformance(t *testing.T) {
	t.Parallel()
	full := testenv.NewMariaDB(t, testenv.MariaDBOptions{RowMetadata: true})
	minimal := testenv.NewMariaDB(t, testenv.MariaDBOptions{RowMetadata: false, ServerID: 7})
	for _, tc := range []struct {
		name    string
		m       *testenv.MariaDB
		table   string
		idType  string
		useGTID *bool
	}{
		{"gtid_binary16_binlog-metadata", full, "outbox_gtid", "BINARY(16)", nil},
		{"filepos_char36_binlog-metadata", full, "outbox_file", "CHAR(36)", boolp(false)},
		{"gtid_binary16_information_schema", minimal, "outbox_gtid", "BINARY(16)", boolp(true)},
		{"filepos_char36_information_schema", minimal, "outbox_file", "CHAR(36)", boolp(false)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := harness(t, tc.m, tc.table, tc.idType, tc.useGTID)
			sourcetest.Run(t, h)
		})
	}
}

// open opens a source on m for the given tables.
func open(t *testing.T, m *testenv.MariaDB, from source.Position, useGTID *bool, tables ...string) *Source {
	t.Helper()
	s := New(Config{Start: "current", DSN: m.DSN("app"), Tables: tables, ServerID: serverIDs.Add(1), UseGTID: useGTID, AllowMinimalRowMetadata: true,
		HeartbeatPeriod: time.Second, ReconnectTimeout: 30 * time.Second}, testLogger())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Open(ctx, from); err != nil {
		t.Fatalf("Open(%q): %v", from, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// nextRows returns the next transaction with rows.
func nextRows(t *testing.T, s source.Source) source.Tx {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		tx, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		if len(tx.Rows) > 0 {
			return tx
		}
	}
}

// rowMap renders a row as column -> text ("NULL" for NULL).
func rowMap(r source.Row) map[string]string {
	m := map[string]string{}
	for i, c := range r.Columns {
		if r.Values[i].Null {
			m[c] = "NULL"
		} else {
			m[c] = string(r.Values[i].Bytes)
		}
	}
	return m
}

func expectRow(t *testing.T, r source.Row, columns string, want map[string]string) {
	t.Helper()
	if got := strings.Join(r.Columns, ","); got != columns {
		t.Errorf("columns %s, want %s", got, columns)
	}
	got := rowMap(r)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("column %s = %q, want %q (row %v)", k, got[k], v, got)
		}
	}
}
