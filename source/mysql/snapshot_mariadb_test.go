package mysql

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/source"
)

// snapConfig is a source configuration with source.mysql.snapshot: initial and no start.
func snapConfig(m *testenv.MariaDB, useGTID *bool, tables ...string) Config {
	return Config{DSN: m.DSN("app"), Tables: tables, ServerID: serverIDs.Add(1), UseGTID: useGTID, Snapshot: SnapshotInitial,
		HeartbeatPeriod: time.Second, ReconnectTimeout: 30 * time.Second, ChunkRows: 7}
}

func openCfg(t *testing.T, cfg Config, from source.Position) *Source {
	t.Helper()
	s := New(cfg, testLogger())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Open(ctx, from); err != nil {
		t.Fatalf("Open(%q): %v", from, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// snapRun is what a test read from a source: every row id in order, and the transactions.
type snapRun struct {
	ids      []int64
	seen     map[int64]int
	last     source.Position // the last Tx's position (the one a pipeline would store)
	chunks   int             // snapshot chunks (More) before its closing chunk
	closing  int             // index in ids where the snapshot's rows end (-1: not yet)
	firstPos source.Position // the first position handed out (the snapshot's, if any)
}

// read takes transactions from s until stop says so, checking the chunk rules: More chunks
// have rows and no position, at most 7 rows.
func (r *snapRun) read(t *testing.T, s *Source, stop func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	for !stop() {
		tx, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("Next after %d rows: %v", len(r.ids), err)
		}
		if tx.More && (tx.Position != "" || len(tx.Rows) == 0 || len(tx.Rows) > 7) {
			t.Fatalf("a More chunk with position %q and %d rows", tx.Position, len(tx.Rows))
		}
		for _, row := range tx.Rows {
			id, err := strconv.ParseInt(string(row.Values[0].Bytes), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			r.ids = append(r.ids, id)
			r.seen[id]++
		}
		if tx.More {
			r.chunks++
		}
		if tx.Position != "" {
			if r.firstPos == "" {
				r.firstPos, r.closing = tx.Position, len(r.ids)
			}
			r.last = tx.Position
		}
	}
}

func newSnapRun() *snapRun { return &snapRun{seen: map[int64]int{}, closing: -1} }

// writer inserts rows with ids from next, one transaction each, until stopped; committed
// reports the last committed id.
type writer struct {
	next, committed atomic.Int64
	stop            chan struct{}
	once            sync.Once
	wg              sync.WaitGroup
}

func startWriter(t *testing.T, m *testenv.MariaDB, from int64) *writer {
	w := &writer{stop: make(chan struct{})}
	w.next.Store(from)
	w.committed.Store(from - 1)
	c := db(t, m)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			id := w.next.Add(1) - 1
			if _, err := c.Execute(fmt.Sprintf("INSERT INTO ob VALUES (%d, 'w')", id)); err != nil {
				t.Errorf("writer: %v", err)
				return
			}
			w.committed.Store(id)
			time.Sleep(time.Millisecond)
		}
	}()
	t.Cleanup(func() { w.halt() })
	return w
}

func (w *writer) halt() int64 {
	w.once.Do(func() { close(w.stop) })
	w.wg.Wait()
	return w.committed.Load()
}

// TestSnapshotInitial: with source.mysql.snapshot: initial and neither a stored position nor
// source.mysql.start, the rows already in the table are delivered once, as one chunked source
// transaction whose closing chunk carries the snapshot's position, and every row written while
// the snapshot is taken and read (a concurrent writer, and rows inserted between two snapshot
// chunks) comes from the binlog after it: none missing, none twice. A restart from the stored
// position does no snapshot. For GTID and file:pos positions.
func TestSnapshotInitial(t *testing.T) {
	t.Parallel()
	m := testenv.NewMariaDB(t, testenv.MariaDBOptions{RowMetadata: true})
	c := db(t, m)
	for _, tc := range []struct {
		name    string
		useGTID *bool
	}{{"gtid", nil}, {"filepos", boolp(false)}} {
		t.Run(tc.name, func(t *testing.T) {
			mustExec(t, c, "DROP TABLE IF EXISTS ob, empty_ob")
			mustExec(t, c, "CREATE TABLE ob (id BIGINT NOT NULL PRIMARY KEY, note VARCHAR(20))")
			mustExec(t, c, "CREATE TABLE empty_ob (id BIGINT NOT NULL PRIMARY KEY)")
			const before = 40
			for i := int64(1); i <= before; i++ {
				mustExec(t, c, fmt.Sprintf("INSERT INTO ob VALUES (%d, 'before')", i))
			}
			w := startWriter(t, m, 1000)
			cfg := snapConfig(m, tc.useGTID, "app.ob", "app.empty_ob")
			s := openCfg(t, cfg, "")
			r := newSnapRun()
			inserted := false
			r.read(t, s, func() bool {
				if r.chunks == 1 && !inserted { // between two snapshot chunks
					mustExec(t, c, "INSERT INTO ob VALUES (500, 'during'), (501, 'during')")
					inserted = true
				}
				return r.closing >= 0
			})
			r.read(t, s, func() bool { return len(r.ids)-r.closing >= 30 }) // the writer goes on meanwhile
			last := w.halt()
			r.read(t, s, func() bool { return r.seen[last] > 0 && r.seen[501] > 0 })
			if r.closing < before || r.chunks != (r.closing+6)/7 {
				t.Errorf("snapshot: %d rows in %d chunks before the closing chunk", r.closing, r.chunks)
			}
			for id := int64(1); id <= before; id++ {
				if r.seen[id] != 1 {
					t.Errorf("row %d (in the table before the start) delivered %d times", id, r.seen[id])
				}
			}
			for _, id := range r.ids[:r.closing] {
				if id == 500 || id == 501 {
					t.Errorf("row %d, inserted after the snapshot was taken, is in the snapshot", id)
				}
			}
			for id := int64(1000); id <= last; id++ {
				if r.seen[id] != 1 {
					t.Errorf("row %d (concurrent writer) delivered %d times", id, r.seen[id])
				}
			}
			if r.seen[500] != 1 || r.seen[501] != 1 {
				t.Errorf("rows inserted during the snapshot delivered %d, %d times", r.seen[500], r.seen[501])
			}
			if len(r.seen) != len(r.ids) {
				t.Errorf("%d deliveries of %d distinct rows", len(r.ids), len(r.seen))
			}
			pos, err := parsePosition(r.firstPos)
			if err != nil || (tc.useGTID == nil) != (pos.kind == kindMariaGTID) {
				t.Errorf("snapshot position %q: kind %v, %v", r.firstPos, pos.kind, err)
			}
			t.Logf("snapshot: %d rows in %d chunks, position %s; %d rows streamed after it", r.closing, r.chunks, r.firstPos, len(r.ids)-r.closing)
			s.Close()

			// A restart with the stored position: no snapshot, the next row comes from the binlog.
			s2 := openCfg(t, cfg, r.last)
			mustExec(t, c, "INSERT INTO ob VALUES (9000, 'after restart')")
			r2 := newSnapRun()
			r2.read(t, s2, func() bool { return len(r2.ids) > 0 })
			if len(r2.ids) != 1 || r2.ids[0] != 9000 || r2.chunks != 0 {
				t.Errorf("restart from %s: rows %v in %d More chunks; want [9000] from the binlog", r.last, r2.ids, r2.chunks)
			}
			s2.Close()

			// A restart from exactly the snapshot's position: accepted (checkStart), and the binlog
			// after the snapshot comes again, from its first row.
			s3 := openCfg(t, cfg, r.firstPos)
			r3 := newSnapRun()
			r3.read(t, s3, func() bool { return len(r3.ids) > 0 })
			if r3.chunks != 0 || r3.ids[0] != r.ids[r.closing] {
				t.Errorf("restart from the snapshot's position %s: first row %d (%d More chunks); want %d", r.firstPos, r3.ids[0], r3.chunks, r.ids[r.closing])
			}
		})
	}
}

// TestSnapshotRestartMidway: a source closed in the middle of its snapshot stored nothing (no
// position was handed out), so the next start takes a new snapshot and delivers every row
// (again: the rows of the first attempt come twice in all, with the same ids), then streams.
func TestSnapshotRestartMidway(t *testing.T) {
	t.Parallel()
	m := testenv.NewMariaDB(t, testenv.MariaDBOptions{RowMetadata: false})
	c := db(t, m)
	mustExec(t, c, "CREATE TABLE ob (id BIGINT NOT NULL PRIMARY KEY, note VARCHAR(20))")
	for i := int64(1); i <= 30; i++ {
		mustExec(t, c, fmt.Sprintf("INSERT INTO ob VALUES (%d, 'before')", i))
	}
	cfg := snapConfig(m, nil, "app.ob")
	cfg.AllowMinimalRowMetadata = true
	s := openCfg(t, cfg, "")
	r := newSnapRun()
	r.read(t, s, func() bool { return r.chunks == 2 })
	if r.firstPos != "" || len(r.ids) != 14 {
		t.Fatalf("first attempt: %d rows, position %q; want 14 rows and no position", len(r.ids), r.firstPos)
	}
	s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.Next(ctx); err == nil {
		t.Error("Next after Close succeeded")
	}
	mustExec(t, c, "INSERT INTO ob VALUES (31, 'between')")

	s2 := openCfg(t, cfg, "") // nothing stored
	r2 := newSnapRun()
	r2.read(t, s2, func() bool { return r2.closing >= 0 })
	mustExec(t, c, "INSERT INTO ob VALUES (32, 'after')")
	r2.read(t, s2, func() bool { return r2.seen[32] > 0 })
	for id := int64(1); id <= 32; id++ {
		if r2.seen[id] != 1 {
			t.Errorf("second attempt: row %d delivered %d times", id, r2.seen[id])
		}
	}
	if r2.closing != 31 {
		t.Errorf("second attempt: the snapshot has %d rows, want 31", r2.closing)
	}
	s2.Close()

	// A restart from exactly the snapshot's position (stored, nothing after it acked) is
	// accepted as this server's position and goes on with the binlog after the snapshot.
	s3 := openCfg(t, cfg, r2.firstPos)
	r3 := newSnapRun()
	r3.read(t, s3, func() bool { return len(r3.ids) > 0 })
	if len(r3.ids) != 1 || r3.ids[0] != 32 || r3.chunks != 0 {
		t.Errorf("restart from the snapshot's position %s: rows %v (%d More chunks); want [32] from the binlog", r2.firstPos, r3.ids, r3.chunks)
	}
}

// TestSnapshotCheck: `outboxd check` with snapshot: initial and nothing stored passes the start
// line when the snapshot can be taken, and fails it for a missing table or order column.
func TestSnapshotCheck(t *testing.T) {
	t.Parallel()
	m := testenv.NewMariaDB(t, testenv.MariaDBOptions{RowMetadata: true})
	mustExec(t, db(t, m), "CREATE TABLE ob (id BIGINT NOT NULL PRIMARY KEY, note VARCHAR(20))")
	nothing := func(context.Context) (source.Position, error) { return "", nil }
	check := func(s Settings) (bool, string) {
		var ok bool
		var reason string
		NewAdapter(s, nil).Preflight(context.Background(), nothing, func(name string, k bool, r, _ string) {
			if name == "start position" {
				ok, reason = k, r
			}
		})
		return ok, reason
	}
	mustExec(t, db(t, m), "CREATE TABLE ob2 (id BIGINT NOT NULL PRIMARY KEY)")
	mustExec(t, db(t, m), "INSERT INTO ob VALUES (1, 'a'), (2, 'b'), (3, 'c')")
	mustExec(t, db(t, m), "INSERT INTO ob2 VALUES (1)")
	s := Settings{DSN: m.DSN("app"), Tables: []string{"app.ob", "app.ob2"}, Snapshot: SnapshotInitial}
	if ok, reason := check(s); !ok || reason != snapshotLine("3 rows of app.ob and 1 row of app.ob2", "") {
		t.Errorf("snapshot possible: %v %q", ok, reason)
	}
	var b strings.Builder
	if err := NewAdapter(s, nil).ShowOffsets(context.Background(), "", &b); err != nil || !strings.Contains(b.String(),
		"next run starts at:   a snapshot of the outbox tables (source.mysql.snapshot: initial), then the binlog from its position") {
		t.Errorf("offsets show: %v\n%s", err, b.String())
	}
	bad := s
	bad.OrderColumn = "nope"
	if ok, reason := check(bad); ok || !strings.Contains(reason, `no column "nope"`) {
		t.Errorf("missing order column: %v %q", ok, reason)
	}
	bad = s
	bad.Tables = []string{"app.ob", "app.missing"}
	if ok, reason := check(bad); ok || !strings.Contains(reason, "does not exist") {
		t.Errorf("missing table: %v %q", ok, reason)
	}
}
