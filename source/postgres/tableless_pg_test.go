package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/internal/testenv/harness"
	"github.com/outboxd/outboxd/source"
	"github.com/outboxd/outboxd/source/sourcetest"
)

// The tableless outbox with no outbox table at all (source.tables empty, source.postgres.messages
// set) on a real PostgreSQL: the publication is created empty, messages flow in order, rolled
// back ones never, the slot advances with messages only and while idle, a restart resumes, and a
// publication that lists tables is refused by the preflight and stops the stream at its first row.

func newNoTableSource(dsn, slot string, mod func(*Config)) *Source {
	cfg := Config{DSN: dsn, Slot: slot, Publication: slot, StandbyTimeout: testStandby, MessagePrefix: testPrefix}
	if mod != nil {
		mod(&cfg)
	}
	return New(cfg, testLog())
}

// checkLines is Preflight's result as "OK name" / "FAIL name: reason" lines.
func checkLines(rs []CheckResult) []string {
	var out []string
	for _, r := range rs {
		if r.OK {
			out = append(out, "OK "+r.Name+" ("+r.Reason+")")
		} else {
			out = append(out, "FAIL "+r.Name+": "+r.Reason+" — "+r.Fix)
		}
	}
	return out
}

func wantAllOK(t *testing.T, rs []CheckResult) []string {
	t.Helper()
	lines := checkLines(rs)
	for _, l := range lines {
		if strings.HasPrefix(l, "FAIL") {
			t.Errorf("preflight: %s", l)
		}
		if strings.HasPrefix(l, "OK table ") {
			t.Errorf("preflight has a table line with no source.tables: %s", l)
		}
	}
	return lines
}

// TestNoTablesMessages: no table configured — the preflight is all OK and says the publication
// is created empty, Open creates it with no table, messages come in commit order (rolled back
// and savepoint-rolled-back ones never), inserts into other tables are not streamed, and a
// reopen from a stored position delivers exactly the later messages.
func TestNoTablesMessages(t *testing.T) {
	dsn, conn := testDB(t, "notables")
	ctx := context.Background()
	cfg := Config{DSN: dsn, Slot: "notables", Publication: "notables", MessagePrefix: testPrefix}
	lines := wantAllOK(t, Preflight(ctx, cfg))
	if !strings.Contains(strings.Join(lines, "\n"), `(source.tables is empty, the tableless outbox: only logical decoding messages are streamed): CREATE PUBLICATION "notables" WITH (publish = 'insert')`) {
		t.Errorf("preflight does not say the publication is created empty:\n%s", strings.Join(lines, "\n"))
	}

	s := newNoTableSource(dsn, "notables", nil)
	open(t, s, "")
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_publication_tables WHERE pubname = 'notables'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("publication lists %d tables (%v), want an empty publication", n, err)
	}
	lines = wantAllOK(t, Preflight(ctx, cfg))
	if all := strings.Join(lines, "\n"); !strings.Contains(all, "OK publication notables (exists; source.tables is empty") ||
		!strings.Contains(all, "OK publication notables streams no table") {
		t.Errorf("preflight after Open:\n%s", all)
	}

	inTx(t, conn, false, func(tx pgx.Tx) {
		emit(t, tx, true, testPrefix, `{"m":1}`)
		exec(t, conn, `INSERT INTO public.other (note) VALUES ('not published')`) // another session's, autocommit
		insertEvent(t, tx, sourcetest.NewEvent("x"))                              // public.outbox is not configured nor published: not streamed
		emit(t, tx, true, testPrefix, `{"m":2}`)
	})
	inTx(t, conn, true, func(tx pgx.Tx) { emit(t, tx, true, testPrefix, `{"rolledback":1}`) })
	inTx(t, conn, false, func(tx pgx.Tx) {
		emit(t, tx, true, testPrefix, `{"m":3}`)
		if _, err := tx.Exec(ctx, `SAVEPOINT s1`); err != nil {
			t.Fatal(err)
		}
		emit(t, tx, true, testPrefix, `{"inSavepoint":1}`)
		if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT s1`); err != nil {
			t.Fatal(err)
		}
	})
	emit(t, conn, false, testPrefix, `{"nontx":1}`)
	emit(t, conn, true, testPrefix, `{"m":4}`)
	txs, _ := collect(t, s, `{"m":4}`)
	want := [][]string{{`msg:{"m":1}`, `msg:{"m":2}`}, {`msg:{"m":3}`}, {`msg:{"m":4}`}}
	if fmt.Sprint(txs) != fmt.Sprint(want) {
		t.Fatalf("transactions\n got %q\nwant %q", txs, want)
	}

	// Restart: stored position after the first two transactions' worth, more emitted while closed.
	for i := 0; i < 5; i++ {
		emit(t, conn, true, testPrefix, fmt.Sprintf("a%d", i))
	}
	var stored source.Position
	for i := 0; i < 3; i++ {
		tx := nextRows(t, s)
		if got := string(tx.Rows[0].Values[0].Bytes); got != fmt.Sprintf("a%d", i) {
			t.Fatalf("message %d: %q", i, got)
		}
		stored = tx.Position
	}
	s.Close()
	for i := 5; i < 8; i++ {
		emit(t, conn, true, testPrefix, fmt.Sprintf("a%d", i))
	}
	s2 := newNoTableSource(dsn, "notables", nil)
	open(t, s2, stored)
	var after []string
	for len(after) < 5 {
		tx := nextRows(t, s2)
		for _, r := range tx.Rows {
			after = append(after, string(r.Values[0].Bytes))
		}
	}
	if got := strings.Join(after, " "); got != "a3 a4 a5 a6 a7" {
		t.Fatalf("after reopening from %s: %s, want a3 a4 a5 a6 a7", stored, got)
	}
	noNext2(t, s2)
}

// TestNoTablesSlotAdvances: with no table, a message-only workload moves confirmed_flush_lsn
// past every message it confirms, and so does a completely idle period afterwards (heartbeats:
// the database writes nothing else).
func TestNoTablesSlotAdvances(t *testing.T) {
	dsn, conn := testDB(t, "notablesidle")
	ctx := context.Background()
	s := newNoTableSource(dsn, "notablesidle", func(c *Config) { c.HeartbeatInterval = 200 * time.Millisecond })
	s.ext.noKeepaliveProgress = true // the heartbeats alone must move it
	open(t, s, "")
	start := slotConfirmed(t, conn, "notablesidle")
	var last source.Position
	for i := 0; i < 10; i++ {
		emit(t, conn, true, testPrefix, fmt.Sprintf(`{"seq":%d}`, i))
		tx := nextRows(t, s)
		if len(tx.Rows) != 1 || string(tx.Rows[0].Values[0].Bytes) != fmt.Sprintf(`{"seq":%d}`, i) {
			t.Fatalf("message %d: %+v", i, tx)
		}
		last = tx.Position
		if err := s.Confirm(ctx, last); err != nil {
			t.Fatal(err)
		}
	}
	waitConfirmed(t, conn, "notablesidle", last)
	if CompareLSN(last, start) <= 0 {
		t.Fatalf("confirmed %s not after the start %s", last, start)
	}

	// Idle: nothing is written but the heartbeats; their idle progress, confirmed, moves the slot.
	ictx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var idle source.Position
	for idle == "" || CompareLSN(idle, last) <= 0 {
		tx, err := s.Next(ictx)
		if err != nil {
			t.Fatalf("no idle progress past %s with no table and heartbeats every 200ms: %v", last, err)
		}
		if len(tx.Rows) > 0 {
			t.Fatalf("a row while idle: %+v", tx.Rows[0])
		}
		if tx.Position != "" {
			idle = tx.Position
			if err := s.Confirm(ctx, idle); err != nil {
				t.Fatal(err)
			}
		}
	}
	err := harness.Until(10*time.Second, harness.Interval, func() error {
		if got := slotConfirmed(t, conn, "notablesidle"); CompareLSN(got, last) <= 0 {
			return fmt.Errorf("confirmed_flush_lsn %s, not past the last message %s while idle", got, last)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestNoTablesPublicationWithTables: an existing publication that lists a table, with no table
// configured — the preflight FAILs naming it with the fix, Open accepts it (outboxd never alters
// an existing publication), and the first INSERT into it stops the stream loudly (a row outboxd
// cannot attribute is never skipped); messages before it are delivered.
func TestNoTablesPublicationWithTables(t *testing.T) {
	dsn, conn := testDB(t, "notablespub")
	ctx := context.Background()
	exec(t, conn, `CREATE PUBLICATION notablespub FOR TABLE public.other WITH (publish = 'insert')`)
	cfg := Config{DSN: dsn, Slot: "notablespub", Publication: "notablespub", MessagePrefix: testPrefix}
	var fail string
	for _, l := range checkLines(Preflight(ctx, cfg)) {
		if strings.HasPrefix(l, "FAIL") {
			fail += l + "\n"
		}
	}
	if !strings.Contains(fail, "FAIL publication notablespub streams no table (source.tables is empty): it also publishes inserts of public.other") ||
		!strings.Contains(fail, `ALTER PUBLICATION "notablespub" DROP TABLE`) || strings.Count(fail, "\n") != 1 {
		t.Errorf("preflight FAILs:\n%s", fail)
	}

	s := newNoTableSource(dsn, "notablespub", nil)
	open(t, s, "")
	emit(t, conn, true, testPrefix, "before")
	if tx := nextRows(t, s); string(tx.Rows[0].Values[0].Bytes) != "before" {
		t.Fatalf("first message %+v", tx.Rows[0])
	}
	exec(t, conn, `INSERT INTO public.other (note) VALUES ('x')`)
	nctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for {
		tx, err := s.Next(nctx)
		if err == nil {
			if len(tx.Rows) > 0 {
				t.Fatalf("a row of public.other was handed out: %+v", tx.Rows[0])
			}
			continue
		}
		if !strings.Contains(err.Error(), "INSERT into public.other") || !strings.Contains(err.Error(), "remove it from the publication") {
			t.Fatalf("Next: %v, want the stop naming public.other and the fix", err)
		}
		return
	}
}

// TestNoTablesSnapshotInitial: snapshot: initial with no table has nothing to snapshot: Open
// creates the slot as for never (logged), hands out no snapshot transaction, and streams.
func TestNoTablesSnapshotInitial(t *testing.T) {
	dsn, conn := testDB(t, "notablessnap")
	emit(t, conn, true, testPrefix, "before the slot") // in no table: not snapshotted, not streamed
	s := newNoTableSource(dsn, "notablessnap", func(c *Config) { c.Snapshot = SnapshotInitial })
	open(t, s, "")
	emit(t, conn, true, testPrefix, "after")
	if tx := nextRows(t, s); len(tx.Rows) != 1 || string(tx.Rows[0].Values[0].Bytes) != "after" || tx.More {
		t.Fatalf("first transaction %+v, want the message emitted after Open alone", tx)
	}
	noNext2(t, s)
}

// TestNoTablesPublicationChanges: with no table an ALTER PUBLICATION changes no message, so the
// stream goes on; a dropped publication still stops it (the walsender needs it), naming it.
func TestNoTablesPublicationChanges(t *testing.T) {
	dsn, conn := testDB(t, "notablesalter")
	s := newNoTableSource(dsn, "notablesalter", nil)
	open(t, s, "")
	exec(t, conn, `ALTER PUBLICATION notablesalter SET (publish = 'insert, update')`)
	var at string
	if err := conn.QueryRow(context.Background(), `SELECT pg_current_wal_flush_lsn()::text`).Scan(&at); err != nil {
		t.Fatal(err)
	}
	altered, err := ParseLSN(source.Position(at))
	if err != nil {
		t.Fatal(err)
	}
	// A coverage reading after the ALTER passes (it would stop the stream with a table).
	if err := harness.Until(10*time.Second, harness.Interval, func() error {
		if p := s.ext.cov.passed.Load(); p < uint64(altered) {
			return fmt.Errorf("no passed coverage reading at or after the ALTER (%s); passed %d", at, p)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		emit(t, conn, true, testPrefix, fmt.Sprintf("after alter %d", i))
		if tx := nextRows(t, s); string(tx.Rows[0].Values[0].Bytes) != fmt.Sprintf("after alter %d", i) {
			t.Fatalf("message %d: %+v", i, tx.Rows[0])
		}
	}
	exec(t, conn, `DROP PUBLICATION notablesalter`)
	emit(t, conn, true, testPrefix, "after drop")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		_, err := s.Next(ctx)
		if err == nil {
			continue // the message may still come before the watch reads the catalog
		}
		if !strings.Contains(err.Error(), `publication "notablesalter" was dropped`) {
			t.Fatalf("Next: %v, want the stop naming the dropped publication", err)
		}
		return
	}
}
