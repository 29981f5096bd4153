package mysql

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/source"
)

// keptRead is what a test read of a snapshot from a source: every row as "id/note" in order, the
// closing chunk's position and every chunk's CommitTime.
type keptRead struct {
	rows   []string
	chunks int
	pos    source.Position
	at     time.Time
}

// readSnapshot takes chunks from s until the snapshot's closing chunk, or until chunks More
// chunks were read when chunks > 0.
func readSnapshot(t *testing.T, s *Source, chunks int) keptRead {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var r keptRead
	for {
		tx, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("Next after %d rows: %v", len(r.rows), err)
		}
		if r.at.IsZero() {
			r.at = tx.CommitTime
		} else if !tx.CommitTime.Equal(r.at) {
			t.Fatalf("snapshot chunk with CommitTime %v after %v", tx.CommitTime, r.at)
		}
		for _, row := range tx.Rows {
			r.rows = append(r.rows, string(row.Values[0].Bytes)+"/"+string(row.Values[1].Bytes))
		}
		if !tx.More {
			r.pos = tx.Position
			return r
		}
		if r.chunks++; chunks > 0 && r.chunks == chunks {
			return r
		}
	}
}

// sharedSource opens a Source sharing k, as the Adapter's NewSource builds them (with the
// test's chunk cap).
func sharedSource(t *testing.T, k *snapKeeper, cfg Config, from source.Position) *Source {
	t.Helper()
	s := k.share(New(cfg, testLogger()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Open(ctx, from); err != nil {
		t.Fatalf("Open(%q): %v", from, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// sessionGone waits until the server has no session id any more.
func sessionGone(t *testing.T, m *testenv.MariaDB, id uint32) {
	t.Helper()
	c := db(t, m)
	deadline := time.Now().Add(15 * time.Second)
	for {
		rows, err := query(c, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", id)
		if err != nil {
			t.Fatal(err)
		}
		if rows[0][0] == "0" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the kept snapshot's session %d is still on the server", id)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSnapshotReopenSameProcess: Sources of one Adapter re-opened without a stored position
// (the pipeline's reopen, exactly_once re-reading a spilled snapshot) read the kept snapshot
// again: the same rows in the same order, with the same CommitTime, ending at the same position,
// although rows whose keys sort before the snapshot's were inserted and a snapshot row was
// deleted in between, and also after a Source closed in the middle of a table. The rows written
// meanwhile come from the binlog after the snapshot, once each; a Confirm of the snapshot's
// position lets the kept transaction go (its session ends).
func TestSnapshotReopenSameProcess(t *testing.T) {
	t.Parallel()
	m := testenv.NewMariaDB(t, testenv.MariaDBOptions{RowMetadata: true})
	c := db(t, m)
	mustExec(t, c, "CREATE TABLE ob (id CHAR(36) NOT NULL PRIMARY KEY, note VARCHAR(20))")
	mustExec(t, c, "CREATE TABLE ob2 (id CHAR(36) NOT NULL PRIMARY KEY, note VARCHAR(20))")
	for i := 0; i < 40; i++ {
		mustExec(t, c, fmt.Sprintf("INSERT INTO ob VALUES ('m-%03d', 'before')", i))
	}
	mustExec(t, c, "INSERT INTO ob2 VALUES ('m-x', 'before2')")
	a := NewAdapter(Settings{DSN: m.DSN("app"), Tables: []string{"app.ob", "app.ob2"}, Snapshot: SnapshotInitial}, nil)
	if s := a.NewSource().(*Source); s.keeper != &a.keep || s.ownKeeper {
		t.Fatal("the Adapter's NewSource does not share the Adapter's snapshot keeper")
	}
	cfg := snapConfig(m, nil, "app.ob", "app.ob2")
	k := &a.keep

	s1 := sharedSource(t, k, cfg, "")
	first := readSnapshot(t, s1, 0)
	if len(first.rows) != 41 || first.pos == "" {
		t.Fatalf("first read: %d rows, position %q; want 41 rows and a position", len(first.rows), first.pos)
	}
	s1.Close() // no Confirm: nothing was stored
	mustExec(t, c, "INSERT INTO ob VALUES ('a-001', 'between'), ('0-001', 'between')")
	mustExec(t, c, "DELETE FROM ob WHERE id = 'm-005'")
	mustExec(t, c, "INSERT INTO ob2 VALUES ('a-x', 'between2')")

	// Closed in the middle of the first table: the rest of its result set is read and dropped.
	s2 := sharedSource(t, k, cfg, "")
	part := readSnapshot(t, s2, 2)
	if !slices.Equal(part.rows, first.rows[:14]) {
		t.Errorf("re-read closed after 2 chunks: %v; want %v", part.rows, first.rows[:14])
	}
	s2.Close()
	mustExec(t, c, "INSERT INTO ob VALUES ('0-002', 'between')")

	s3 := sharedSource(t, k, cfg, "")
	again := readSnapshot(t, s3, 0)
	if !slices.Equal(again.rows, first.rows) || again.pos != first.pos || !again.at.Equal(first.at) {
		t.Errorf("re-read differs from the first read:\n got  %v at %s (%v)\n want %v at %s (%v)", again.rows, again.pos, again.at, first.rows, first.pos, first.at)
	}
	// The stream after the snapshot has what was written in between, once each.
	want := map[string]bool{"a-001/between": true, "0-001/between": true, "a-x/between2": true, "0-002/between": true}
	got := map[string]int{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for len(got) < len(want) {
		tx, err := s3.Next(ctx)
		if err != nil {
			t.Fatalf("stream after the snapshot: %v (got %v)", err, got)
		}
		for _, row := range tx.Rows {
			r := string(row.Values[0].Bytes) + "/" + string(row.Values[1].Bytes)
			if !want[r] {
				t.Errorf("streamed row %s was not written after the snapshot", r)
			}
			got[r]++
		}
	}
	for r, n := range got {
		if n != 1 {
			t.Errorf("row %s streamed %d times", r, n)
		}
	}
	id := s3.readKept.conn.GetConnectionID()
	if !k.holding() {
		t.Fatal("the snapshot was let go of before its position was confirmed")
	}
	if err := s3.Confirm(ctx, first.pos); err != nil {
		t.Fatal(err)
	}
	sessionGone(t, m, id)
	if k.holding() {
		t.Error("the keeper still holds the snapshot after its position was confirmed")
	}
	s3.Close()

	// Nothing kept: a Source opened without a stored position now takes a new snapshot.
	s4 := sharedSource(t, k, cfg, "")
	fresh := readSnapshot(t, s4, 0)
	if len(fresh.rows) != 44 || fresh.pos == first.pos {
		t.Errorf("after the release: %d rows at %s; want a new snapshot of 44 rows", len(fresh.rows), fresh.pos)
	}
}

// TestSnapshotKeptReleased: a kept snapshot no Source takes again is let go of keptIdle after
// its last Source closed (its session ends on the server); a Source opened at a stored position
// lets go of it at once; a Source built with New keeps nothing once its snapshot is read.
func TestSnapshotKeptReleased(t *testing.T) {
	// Not parallel: it sets keptIdle (parallel tests resume after it).
	defer func(d time.Duration) { keptIdle = d }(keptIdle)
	keptIdle = 300 * time.Millisecond
	m := testenv.NewMariaDB(t, testenv.MariaDBOptions{RowMetadata: true})
	c := db(t, m)
	mustExec(t, c, "CREATE TABLE ob (id BIGINT NOT NULL PRIMARY KEY, note VARCHAR(20))")
	for i := 1; i <= 20; i++ {
		mustExec(t, c, "INSERT INTO ob VALUES ("+strconv.Itoa(i)+", 'before')")
	}
	cfg := snapConfig(m, nil, "app.ob")
	k := &snapKeeper{}

	s1 := sharedSource(t, k, cfg, "")
	r := readSnapshot(t, s1, 0)
	id := s1.readKept.conn.GetConnectionID()
	s1.Close()
	if !k.holding() {
		t.Fatal("the snapshot was let go of when its Source closed")
	}
	sessionGone(t, m, id) // keptIdle later
	if k.holding() {
		t.Error("the keeper still holds the snapshot keptIdle after its last Source closed")
	}

	// A stored position lets go of a kept snapshot at once.
	keptIdle = time.Hour
	s2 := sharedSource(t, k, cfg, "")
	readSnapshot(t, s2, 0)
	id = s2.readKept.conn.GetConnectionID()
	s2.Close()
	s3 := sharedSource(t, k, cfg, r.pos)
	if k.holding() {
		t.Error("a Source opened at a stored position left the kept snapshot held")
	}
	sessionGone(t, m, id)
	s3.Close()

	// New's Source: its own keeper lets go once the snapshot is read.
	s4 := openCfg(t, cfg, "")
	readSnapshot(t, s4, 0)
	id = s4.readKept.conn.GetConnectionID()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mustExec(t, c, "INSERT INTO ob VALUES (100, 'after')")
	if _, err := s4.Next(ctx); err != nil { // starts the stream after the closing chunk
		t.Fatal(err)
	}
	sessionGone(t, m, id)
	if s4.keeper.holding() {
		t.Error("a Source built with New kept its snapshot after reading it")
	}
}
