package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
	"github.com/outboxd/outboxd/source"
	"github.com/outboxd/outboxd/source/sourcetest"
)

// One private cluster serves every test of the package; each test gets its own database, slot
// and publication.
var (
	pgOnce   sync.Once
	pgShared *testenv.Postgres
	pgErr    error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if pgShared != nil {
		pgShared.Destroy()
	}
	os.Exit(code)
}

const testStandby = 200 * time.Millisecond

// testDB creates database name with the outbox table and a non-outbox table "other", and
// returns its DSN and an open connection to it.
func testDB(t *testing.T, name string) (string, *pgx.Conn) {
	t.Helper()
	pgOnce.Do(func() { pgShared, pgErr = testenv.StartPostgres() })
	if pgErr != nil {
		testenv.Unavailable(t, "private PostgreSQL", pgErr)
	}
	ctx := context.Background()
	if err := pgShared.Exec(ctx, "postgres", "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	if err := pgShared.Exec(ctx, name, testenv.OutboxDDL, `CREATE TABLE public.other (id bigserial PRIMARY KEY, note text)`); err != nil {
		t.Fatal(err)
	}
	// Dropped at the end (after its slots, below) so that -count=N can create it again.
	t.Cleanup(func() {
		if err := pgShared.Exec(context.Background(), "postgres", "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	// The package shares one server with max_replication_slots=20 (testenv) and every test
	// makes at least one slot: drop this database's slots once the test is done (this cleanup
	// runs after the test's own, which close its sources), so later tests find a free one.
	t.Cleanup(func() { dropSlots(t, name) })
	dsn := pgShared.DSN(name)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return dsn, conn
}

// dropSlots drops every replication slot of database db, waiting (a walsender may take a moment
// to exit after its source is closed) until none is left.
func dropSlots(t *testing.T, db string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, pgShared.DSN("postgres"))
	if err != nil {
		t.Errorf("drop the slots of database %s: %v", db, err)
		return
	}
	defer c.Close(context.Background())
	for {
		var left int
		err := c.QueryRow(ctx, `SELECT coalesce(sum(CASE WHEN active THEN 1
			ELSE (SELECT 0 FROM pg_drop_replication_slot(slot_name)) END), 0)
			FROM pg_replication_slots WHERE database = $1`, db).Scan(&left)
		if err == nil && left == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Errorf("drop the slots of database %s: %d still active, last error %v", db, left, err)
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func testLog() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func newTestSource(dsn, slot string, tables ...string) *Source {
	if len(tables) == 0 {
		tables = []string{"public.outbox"}
	}
	return New(Config{DSN: dsn, Tables: tables, Slot: slot, Publication: slot, StandbyTimeout: testStandby}, testLog())
}

func exec(t *testing.T, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// inTx runs f in one transaction and commits it, or rolls it back when rollback is set.
func inTx(t *testing.T, conn *pgx.Conn, rollback bool, f func(tx pgx.Tx)) {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f(tx)
	if rollback {
		err = tx.Rollback(ctx)
	} else {
		err = tx.Commit(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func insertEvent(t *testing.T, tx pgx.Tx, ev sourcetest.Event) {
	t.Helper()
	if _, err := tx.Exec(context.Background(), `INSERT INTO public.outbox (id, aggregatetype, aggregateid, type, payload)
		VALUES ($1, $2, $3, $4, $5::jsonb)`, ev.ID, ev.AggregateType, ev.AggregateID, ev.Type, ev.Payload); err != nil {
		t.Fatal(err)
	}
}

// conformanceChunkRows is the chunk row cap of the conformance suite's sources: small, so its
// big transaction is fast.
const conformanceChunkRows = 7

func TestConformance(t *testing.T) {
	dsn, conn := testDB(t, "conformance")
	var scopes int
	h := sourcetest.Harness{
		Table: "public.outbox",
		// Each scope is a slot and publication of its own, so every subtest starts from a slot
		// created after what earlier subtests wrote.
		NewScope: func(t *testing.T) sourcetest.Scope {
			scopes++
			slot := fmt.Sprintf("conformance_%d", scopes)
			t.Cleanup(func() {
				// Best effort: the database goes with the cluster at the end of the package.
				conn.Exec(context.Background(), `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active`, slot)
			})
			return sourcetest.Scope{
				NewSource: func() source.Source {
					return New(Config{DSN: dsn, Tables: []string{"public.outbox"}, Slot: slot, Publication: slot,
						StandbyTimeout: testStandby, ChunkRows: conformanceChunkRows}, testLog())
				},
				LosePosition: func(t *testing.T, _ source.Position) { dropSlot(t, conn, slot) },
				// The operator is told which slot, which position, and what to run; and Open
				// never creates a slot past a stored position.
				CheckLost: func(t *testing.T, err error, p source.Position) {
					for _, w := range []string{`"` + slot + `"`, string(p), "does not exist", "offsets set"} {
						if !strings.Contains(err.Error(), w) {
							t.Errorf("error lacks %q", w)
						}
					}
					var n int
					conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&n)
					if n != 0 {
						t.Error("Open created a slot past a stored position")
					}
				},
			}
		},
		ChunkRows: conformanceChunkRows,
		ErrClosed: ErrClosed,
		Types:     true,
		Insert: func(t *testing.T, evs ...sourcetest.Event) {
			inTx(t, conn, false, func(tx pgx.Tx) {
				for _, ev := range evs {
					insertEvent(t, tx, ev)
				}
			})
		},
		InsertRollback: func(t *testing.T, evs ...sourcetest.Event) {
			inTx(t, conn, true, func(tx pgx.Tx) {
				for _, ev := range evs {
					insertEvent(t, tx, ev)
				}
			})
		},
		InsertThenDelete: func(t *testing.T, ev sourcetest.Event) {
			inTx(t, conn, false, func(tx pgx.Tx) {
				insertEvent(t, tx, ev)
				if _, err := tx.Exec(context.Background(), `DELETE FROM public.outbox WHERE id = $1`, ev.ID); err != nil {
					t.Fatal(err)
				}
			})
		},
		UpdateDelete: func(t *testing.T, id string) {
			inTx(t, conn, false, func(tx pgx.Tx) {
				for _, q := range []string{`UPDATE public.outbox SET type = 'updated' WHERE id = $1`, `DELETE FROM public.outbox WHERE id = $1`} {
					if tag, err := tx.Exec(context.Background(), q, id); err != nil || tag.RowsAffected() != 1 {
						t.Fatalf("%s: %v (%d rows)", q, err, tag.RowsAffected())
					}
				}
			})
			exec(t, conn, `INSERT INTO public.other (note) VALUES ('not an outbox row')`)
		},
		Compare: CompareLSN,
	}
	sourcetest.Run(t, h)
}

// dropSlot drops slot, waiting for the walsender of a closed source to release it.
func dropSlot(t *testing.T, conn *pgx.Conn, slot string) {
	t.Helper()
	err := harness.Until(30*time.Second, harness.Interval, func() error {
		var dropped bool
		err := conn.QueryRow(context.Background(), `SELECT count(pg_drop_replication_slot(slot_name)) = 1 FROM pg_replication_slots WHERE slot_name = $1 AND NOT active`, slot).Scan(&dropped)
		if err == nil && !dropped {
			err = errors.New("still active after its source closed")
		}
		return err
	})
	if err != nil {
		t.Fatalf("drop slot %s: %v", slot, err)
	}
}

// nextRows returns the next transaction with rows, skipping idle progress.
func nextRows(t *testing.T, s *Source) source.Tx {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
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

func open(t *testing.T, s *Source, from source.Position) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Open(ctx, from); err != nil {
		t.Fatalf("Open(%q): %v", from, err)
	}
	t.Cleanup(func() { s.Close() })
}

func TestValueDecodingEndToEnd(t *testing.T) {
	dsn, conn := testDB(t, "values")
	exec(t, conn, `CREATE TYPE mood AS ENUM ('sad', 'happy')`)
	exec(t, conn, `CREATE TABLE public.vals (id int4 PRIMARY KEY, u uuid, t text, v varchar(10), j json, jb jsonb,
		b bytea, i8 int8, ts timestamptz, ip inet, m mood, n text, big text)`)
	s := newTestSource(dsn, "values", "public.vals")
	open(t, s, "")
	big := strings.Repeat("0123456789", 20000) // TOASTed on disk, sent whole for an INSERT
	exec(t, conn, `INSERT INTO public.vals VALUES (7, 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11', 'tëxt ''q''', 'vc',
		'{"b": 1,  "a": [1,2]}', '{"b": 1,  "a": [1,2]}', '\x00ff41'::bytea, 9223372036854775807,
		'2024-05-06 07:08:09.123456+02', '192.168.0.1/24', 'happy', NULL, $1)`, big)
	tx := nextRows(t, s)
	r := tx.Rows[0]
	if r.Table != "public.vals" {
		t.Errorf("table %q", r.Table)
	}
	want := map[string]string{
		"id": "7", "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "t": "tëxt 'q'", "v": "vc",
		"j": `{"b": 1,  "a": [1,2]}`, "jb": `{"a": [1, 2], "b": 1}`, "i8": "9223372036854775807",
		"ts": "2024-05-06 05:08:09.123456+00", "ip": "192.168.0.1/24", "m": "happy", "big": big,
	}
	for c, w := range want {
		wantValue(t, r, c, w)
	}
	if v, _ := r.Get("b"); v.Null || string(v.Bytes) != "\x00\xff\x41" {
		t.Errorf("bytea = %q", v.Bytes)
	}
	if v, _ := r.Get("n"); !v.Null {
		t.Errorf("NULL column = %+v", v)
	}
}

func slotConfirmed(t *testing.T, conn *pgx.Conn, slot string) source.Position {
	t.Helper()
	var p string
	if err := conn.QueryRow(context.Background(), `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&p); err != nil {
		t.Fatal(err)
	}
	return source.Position(p)
}

func waitConfirmed(t *testing.T, conn *pgx.Conn, slot string, want source.Position) {
	t.Helper()
	err := harness.Until(10*time.Second, harness.Interval, func() error {
		got := slotConfirmed(t, conn, slot)
		if CompareLSN(got, want) > 0 {
			return harness.Final(fmt.Errorf("confirmed_flush_lsn %s went beyond the confirmed position %s", got, want))
		}
		if got != want {
			return fmt.Errorf("confirmed_flush_lsn %s, want %s", got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitReplies waits until the walsender streaming slot has received n more standby status
// updates (pg_stat_replication.reply_time, the update's send time, moved n times). The
// walsender handles one message at a time and records reply_time before it applies the
// update's flush position to the slot, so after n ≥ 2 moves the updates before the last one
// have been applied: the server has had the chance to move the slot on them.
func waitReplies(t *testing.T, conn *pgx.Conn, slot string, n int) {
	t.Helper()
	moves, last := -1, ""
	err := harness.Until(10*time.Second, harness.Interval, func() error {
		var rt string
		if err := conn.QueryRow(context.Background(), `SELECT coalesce(r.reply_time::text, '') FROM pg_stat_replication r
			JOIN pg_replication_slots s ON s.active_pid = r.pid WHERE s.slot_name = $1`, slot).Scan(&rt); err != nil {
			return fmt.Errorf("walsender of slot %s: %w", slot, err)
		}
		if rt != last {
			moves, last = moves+1, rt
		}
		if moves < n {
			return fmt.Errorf("walsender of slot %s: reply_time moved %d times, want %d", slot, moves, n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestConfirmNeverBeyondConfirmed(t *testing.T) {
	dsn, conn := testDB(t, "confirm")
	s := newTestSource(dsn, "confirm")
	open(t, s, "")
	for i := 0; i < 3; i++ {
		exec(t, conn, `INSERT INTO public.outbox (id) VALUES (gen_random_uuid())`)
	}
	var pos []source.Position
	for i := 0; i < 3; i++ {
		pos = append(pos, nextRows(t, s).Position)
	}
	if err := s.Confirm(context.Background(), pos[0]); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitConfirmed(t, conn, "confirm", pos[0])
	t.Logf("confirmed_flush_lsn reached %s after %v", pos[0], time.Since(start))
	// More traffic, keepalives and status updates: the slot must stay at what was confirmed.
	for i := 0; i < 3; i++ {
		exec(t, conn, `INSERT INTO public.outbox (id) VALUES (gen_random_uuid())`)
		exec(t, conn, `INSERT INTO public.other (note) SELECT 'x' FROM generate_series(1, 1000)`)
	}
	nextRows(t, s)
	waitReplies(t, conn, "confirm", 2) // sent after the stream read the later transactions
	if got := slotConfirmed(t, conn, "confirm"); got != pos[0] {
		t.Fatalf("confirmed_flush_lsn %s, want %s (only the first transaction was confirmed)", got, pos[0])
	}
	if err := s.Confirm(context.Background(), pos[2]); err != nil {
		t.Fatal(err)
	}
	waitConfirmed(t, conn, "confirm", pos[2])
}

func TestIdleOutboxBusyDatabase(t *testing.T) {
	dsn, conn := testDB(t, "idle")
	s := newTestSource(dsn, "idle")
	open(t, s, "")
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var idleTxs, rows int
	wg.Add(1)
	go func() { // the pipeline: confirm every transaction it gets
		defer wg.Done()
		for {
			tx, err := s.Next(ctx)
			if err != nil {
				return
			}
			if len(tx.Rows) == 0 {
				idleTxs++
			}
			rows += len(tx.Rows)
			s.Confirm(ctx, tx.Position)
		}
	}()
	lsn := func() (l int64) {
		conn.QueryRow(ctx, `SELECT pg_current_wal_lsn() - '0/0'`).Scan(&l)
		return l
	}
	retained := func() (r int64) {
		conn.QueryRow(ctx, `SELECT pg_current_wal_lsn() - confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'idle'`).Scan(&r)
		return r
	}
	begin := lsn()
	var maxRetained int64
	start := time.Now()
	for time.Since(start) < 4*time.Second { // about 6 MB/s of WAL
		exec(t, conn, `INSERT INTO public.other (note) SELECT repeat('x', 500) FROM generate_series(1, 200)`)
		harness.Hold(20*time.Millisecond, "pace the writer: about 6 MB/s of WAL")
		if time.Since(start) > time.Second {
			maxRetained = max(maxRetained, retained())
		}
	}
	written := lsn() - begin
	cancel()
	wg.Wait()
	const limit = 4 << 20
	t.Logf("WAL written %.1f MB, max retained by the slot %.2f MB, %d idle-progress transactions", float64(written)/(1<<20), float64(maxRetained)/(1<<20), idleTxs)
	if rows != 0 {
		t.Errorf("%d rows from an idle outbox", rows)
	}
	if written < 3*limit {
		t.Fatalf("only %d bytes of WAL written: the test did not load the database enough", written)
	}
	if maxRetained > limit {
		t.Errorf("the slot retained up to %d bytes of WAL (limit %d)", maxRetained, limit)
	}
}

// TestStalledPipelineKeepsConnection: while the pipeline does not call Next (Kafka down), the
// stream keeps sending status updates, so the server's wal_sender_timeout does not fire.
func TestStalledPipelineKeepsConnection(t *testing.T) {
	dsn, conn := testDB(t, "stalled")
	// wal_sender_timeout is settable per connection: 1s instead of 60s.
	s := newTestSource(dsn+"&wal_sender_timeout=1s", "stalled")
	open(t, s, "")
	for i := 0; i < 3; i++ {
		exec(t, conn, `INSERT INTO public.outbox (id) VALUES (gen_random_uuid())`)
	}
	first := nextRows(t, s)
	// The pipeline stalls: the stream holds the second transaction and reads nothing. A server
	// that hears nothing for wal_sender_timeout ends the connection; the stall lasts until the
	// same walsender received a status update sent 2 s (twice the timeout) into it.
	ctx := context.Background()
	var pid int
	var stalled time.Time
	if err := conn.QueryRow(ctx, `SELECT active_pid, clock_timestamp() FROM pg_replication_slots WHERE slot_name = 'stalled'`).Scan(&pid, &stalled); err != nil {
		t.Fatal(err)
	}
	err := harness.Until(20*time.Second, harness.Interval, func() error {
		var past bool
		err := conn.QueryRow(ctx, `SELECT coalesce(reply_time >= $2::timestamptz + interval '2 s', false) FROM pg_stat_replication WHERE pid = $1`, pid, stalled).Scan(&past)
		if errors.Is(err, pgx.ErrNoRows) {
			return harness.Final(fmt.Errorf("walsender %d ended during the stall (wal_sender_timeout 1s): the stream sent no status updates", pid))
		}
		if err == nil && !past {
			err = errors.New("no status update sent 2 s into the stall yet")
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	second, third := nextRows(t, s), nextRows(t, s)
	if CompareLSN(first.Position, second.Position) >= 0 || CompareLSN(second.Position, third.Position) >= 0 {
		t.Errorf("positions out of order: %s %s %s", first.Position, second.Position, third.Position)
	}
	exec(t, conn, `INSERT INTO public.outbox (id) VALUES (gen_random_uuid())`)
	nextRows(t, s)
}

// TestAlterTableMidStream: a column added while streaming shows up in later rows.
func TestAlterTableMidStream(t *testing.T) {
	dsn, conn := testDB(t, "altered")
	s := newTestSource(dsn, "altered")
	open(t, s, "")
	exec(t, conn, `INSERT INTO public.outbox (id, type) VALUES (gen_random_uuid(), 'before')`)
	exec(t, conn, `ALTER TABLE public.outbox ADD COLUMN trace bytea`)
	exec(t, conn, `INSERT INTO public.outbox (id, type, trace) VALUES (gen_random_uuid(), 'after', '\x0102')`)
	r1, r2 := nextRows(t, s).Rows[0], nextRows(t, s).Rows[0]
	if _, ok := r1.Get("trace"); ok || len(r1.Columns) != 6 {
		t.Errorf("row before ALTER has columns %v", r1.Columns)
	}
	wantValue(t, r2, "type", "after")
	if v, ok := r2.Get("trace"); !ok || string(v.Bytes) != "\x01\x02" {
		t.Errorf("row after ALTER: trace = %q (ok=%v), columns %v", v.Bytes, ok, r2.Columns)
	}
}
