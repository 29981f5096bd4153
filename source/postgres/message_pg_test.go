package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/source"
	"github.com/outboxd/outboxd/source/sourcetest"
)

// Tableless outbox tests on a real PostgreSQL (message.go): messages with the prefix come as
// rows of their transaction in write order, rolled-back ones never, non-transactional ones
// not at all, and positions, restarts and the slot treat them as rows.

const testPrefix = DefaultMessagePrefix

func newMessageSource(dsn, slot string, mod func(*Config)) *Source {
	cfg := Config{DSN: dsn, Tables: []string{"public.outbox"}, Slot: slot, Publication: slot,
		StandbyTimeout: testStandby, MessagePrefix: testPrefix}
	if mod != nil {
		mod(&cfg)
	}
	return New(cfg, testLog())
}

// emit runs pg_logical_emit_message(transactional, prefix, content) on q.
func emit(t *testing.T, q interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, transactional bool, prefix, content string) {
	t.Helper()
	if _, err := q.Exec(context.Background(), `SELECT pg_logical_emit_message($1, $2, $3)`, transactional, prefix, content); err != nil {
		t.Fatalf("pg_logical_emit_message(%v, %q): %v", transactional, prefix, err)
	}
}

// label is a row as the tests compare it: "row:<aggregate id>" for an insert, "msg:<content>" for a
// message (checking its table, column and type on the way).
func label(t *testing.T, r source.Row) string {
	t.Helper()
	if !r.Message {
		agg, _ := r.Get("aggregateid")
		if r.Table != "public.outbox" {
			t.Errorf("row of table %q", r.Table)
		}
		return "row:" + string(agg.Bytes)
	}
	if r.Table != "pg_logical_emit_message:"+testPrefix || len(r.Columns) != 1 || r.Columns[0] != source.MessageColumn ||
		len(r.Types) != 1 || r.Types[0].Kind != source.KindJSON || len(r.Values) != 1 || r.Values[0].Null {
		t.Errorf("message row %+v", r)
	}
	return "msg:" + string(r.Values[0].Bytes)
}

// collect reads chunks until a transaction whose rows include a message with content end has
// ended, and returns each transaction's labels (chunks joined) and its chunks' row counts.
func collect(t *testing.T, s *Source, end string) (txs [][]string, shapes []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var cur []string
	var shape []string
	for {
		tx, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("Next after %v: %v", txs, err)
		}
		if len(tx.Rows) == 0 && !tx.More && len(cur) == 0 {
			continue // idle progress
		}
		for _, r := range tx.Rows {
			cur = append(cur, label(t, r))
		}
		shape = append(shape, fmt.Sprint(len(tx.Rows)))
		if tx.More {
			if tx.Position != "" {
				t.Errorf("a More chunk has position %s", tx.Position)
			}
			continue
		}
		if tx.Position == "" {
			t.Error("a transaction's last chunk has no position")
		}
		txs, shapes = append(txs, cur), append(shapes, strings.Join(shape, "+"))
		done := false
		for _, l := range cur {
			done = done || l == "msg:"+end
		}
		cur, shape = nil, nil
		if done {
			return txs, shapes
		}
	}
}

// TestMessagesInCommitOrder: rows and messages of one transaction come in the order they were
// written, cut into chunks by the caps like rows; rolled-back transactions and savepoints never
// appear; non-transactional messages with the prefix (outside and inside a transaction), other
// prefixes and heartbeats are not rows; a message-only transaction is a transaction.
func TestMessagesInCommitOrder(t *testing.T) {
	dsn, conn := testDB(t, "msgorder")
	s := newMessageSource(dsn, "msgorder", func(c *Config) { c.ChunkRows = 3 })
	open(t, s, "")
	ctx := context.Background()
	ev := func(id string) sourcetest.Event { return sourcetest.NewEvent(id) }

	inTx(t, conn, false, func(tx pgx.Tx) { // mixed, 5 rows: chunks 3+2
		insertEvent(t, tx, ev("a"))
		emit(t, tx, true, testPrefix, `{"m":1}`)
		insertEvent(t, tx, ev("b"))
		emit(t, tx, true, testPrefix, `{"m":2}`)
		emit(t, tx, false, testPrefix, `{"nontx":"inside"}`) // sent at once, outside any transaction
		emit(t, tx, true, "other.app", `{"m":"other"}`)
		insertEvent(t, tx, ev("c"))
	})
	inTx(t, conn, true, func(tx pgx.Tx) { // rolled back: nothing
		emit(t, tx, true, testPrefix, `{"rolledback":1}`)
		insertEvent(t, tx, ev("rb"))
	})
	inTx(t, conn, false, func(tx pgx.Tx) { // a savepoint rolled back: its message and row vanish
		emit(t, tx, true, testPrefix, `{"m":3}`)
		if _, err := tx.Exec(ctx, `SAVEPOINT s1`); err != nil {
			t.Fatal(err)
		}
		emit(t, tx, true, testPrefix, `{"inSavepoint":1}`)
		insertEvent(t, tx, ev("sp"))
		if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT s1`); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `SAVEPOINT s2`); err != nil { // a savepoint released: kept
			t.Fatal(err)
		}
		emit(t, tx, true, testPrefix, `{"m":4}`)
		if _, err := tx.Exec(ctx, `RELEASE SAVEPOINT s2`); err != nil {
			t.Fatal(err)
		}
	})
	emit(t, conn, false, testPrefix, `{"nontx":"outside"}`)
	emit(t, conn, false, HeartbeatPrefix, `{"slot":"msgorder"}`)
	emit(t, conn, true, testPrefix, `{"m":"autocommit"}`) // a transaction of its own
	inTx(t, conn, false, func(tx pgx.Tx) { emit(t, tx, true, testPrefix, `end`) })

	txs, shapes := collect(t, s, "end")
	want := [][]string{
		{"row:a", `msg:{"m":1}`, "row:b", `msg:{"m":2}`, "row:c"},
		{`msg:{"m":3}`, `msg:{"m":4}`},
		{`msg:{"m":"autocommit"}`},
		{"msg:end"},
	}
	if fmt.Sprint(txs) != fmt.Sprint(want) {
		t.Fatalf("transactions\n got %q\nwant %q", txs, want)
	}
	if fmt.Sprint(shapes) != "[3+2 2 1 1]" {
		t.Errorf("chunks %v, want [3+2 2 1 1] (chunk cap 3 rows)", shapes)
	}
	if n := s.ForeignMessages(); n != 1 {
		t.Errorf("ForeignMessages %d, want 1 (other.app; the non-transactional outbox-prefix ones are ignored quietly)", n)
	}
}

// TestMessagesIdleTableSlotAdvances: a message-only workload (the outbox table idle, no
// heartbeats, keepalive progress off) hands out positions that, confirmed, move the slot's
// confirmed_flush_lsn past every message.
func TestMessagesIdleTableSlotAdvances(t *testing.T) {
	dsn, conn := testDB(t, "msgidle")
	s := newMessageSource(dsn, "msgidle", nil)
	s.ext.noKeepaliveProgress = true
	open(t, s, "")
	ctx := context.Background()
	start := slotConfirmed(t, conn, "msgidle")
	var last source.Position
	for i := 0; i < 20; i++ {
		emit(t, conn, true, testPrefix, fmt.Sprintf(`{"seq":%d}`, i))
		tx := nextRows(t, s)
		if len(tx.Rows) != 1 || !tx.Rows[0].Message || string(tx.Rows[0].Values[0].Bytes) != fmt.Sprintf(`{"seq":%d}`, i) {
			t.Fatalf("message %d: %+v", i, tx)
		}
		if last != "" && CompareLSN(tx.Position, last) <= 0 {
			t.Fatalf("position %s not after %s", tx.Position, last)
		}
		last = tx.Position
		if err := s.Confirm(ctx, last); err != nil {
			t.Fatal(err)
		}
	}
	var lsn string
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	waitConfirmed(t, conn, "msgidle", last)
	if CompareLSN(last, start) <= 0 || CompareLSN(last, source.Position(lsn)) > 0 {
		t.Errorf("confirmed %s: want after the start %s and at most the WAL end %s", last, start, lsn)
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM public.outbox`).Scan(&n); err != nil || n != 0 {
		t.Errorf("outbox table rows %d (%v), want 0: the workload is messages only", n, err)
	}
}

// TestMessagesRestart: closing and reopening from a stored position (the last transaction a
// consumer finished) delivers every later message exactly once, also those emitted while the
// source was closed, and none from before.
func TestMessagesRestart(t *testing.T) {
	dsn, conn := testDB(t, "msgrestart")
	s := newMessageSource(dsn, "msgrestart", func(c *Config) { c.ChunkRows = 2 })
	open(t, s, "")
	const n = 30
	for i := 0; i < n/2; i++ {
		inTx(t, conn, false, func(tx pgx.Tx) {
			emit(t, tx, true, testPrefix, fmt.Sprintf("%d.a", i))
			emit(t, tx, true, testPrefix, fmt.Sprintf("%d.b", i))
			emit(t, tx, true, testPrefix, fmt.Sprintf("%d.c", i)) // chunks 2+1
		})
	}
	var seen []string
	var stored source.Position
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for len(seen) < 3*7 { // the first 7 transactions, then one chunk of the 8th
		tx, err := s.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range tx.Rows {
			seen = append(seen, string(r.Values[0].Bytes))
		}
		if !tx.More && tx.Position != "" {
			stored = tx.Position
		}
	}
	if tx, err := s.Next(ctx); err != nil || !tx.More || len(tx.Rows) != 2 {
		t.Fatalf("want the first chunk of the 8th transaction: %+v, %v", tx, err)
	}
	s.Close()
	for i := n / 2; i < n; i++ {
		emit(t, conn, true, testPrefix, fmt.Sprintf("%d.a", i))
	}
	s2 := newMessageSource(dsn, "msgrestart", func(c *Config) { c.ChunkRows = 2 })
	open(t, s2, stored)
	var after []string
	for len(after) < 3*(n/2-7)+(n-n/2) {
		tx := nextRows(t, s2)
		for _, r := range tx.Rows {
			after = append(after, string(r.Values[0].Bytes))
		}
	}
	var want []string
	for i := 7; i < n/2; i++ {
		want = append(want, fmt.Sprintf("%d.a", i), fmt.Sprintf("%d.b", i), fmt.Sprintf("%d.c", i))
	}
	for i := n / 2; i < n; i++ {
		want = append(want, fmt.Sprintf("%d.a", i))
	}
	if strings.Join(after, " ") != strings.Join(want, " ") {
		t.Fatalf("after reopening from %s:\n got %v\nwant %v", stored, after, want)
	}
	noNext2(t, s2)
}

// noNext2 checks that nothing but idle progress follows for a moment.
func noNext2(t *testing.T, s *Source) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	for {
		tx, err := s.Next(ctx)
		if err != nil {
			return
		}
		if len(tx.Rows) > 0 {
			t.Fatalf("an extra transaction after every message: %s", label(t, tx.Rows[0]))
		}
	}
}

// TestMessagesPreflight: with messages on, `outboxd check` has an OK line for a role that may
// call pg_logical_emit_message and a FAIL line with the GRANT for one that may not; the
// adapter refuses the heartbeat prefix as the message prefix.
func TestMessagesPreflight(t *testing.T) {
	dsn, conn := testDB(t, "msgcheck")
	line := func(dsn string) (ok bool, reason, fix string) {
		t.Helper()
		found := false
		NewAdapter(Settings{DSN: dsn, Tables: []string{"public.outbox"}, Columns: adapterCols, Slot: "msgcheck", Publication: "msgcheck",
			MessagePrefix: testPrefix}, nil).
			Preflight(context.Background(), nil, func(name string, o bool, r, f string) {
				if name == "messages "+testPrefix {
					found, ok, reason, fix = true, o, r, f
				}
			})
		if !found {
			t.Fatalf("no messages line")
		}
		return ok, reason, fix
	}
	if ok, reason, fix := line(dsn); !ok || !strings.Contains(reason, "pg_logical_emit_message(boolean,text,text)") {
		t.Errorf("superuser: ok %v %q %q", ok, reason, fix)
	}
	testRole(t, "msgcheck", "msgwriter", "LOGIN REPLICATION PASSWORD 'pw'", `GRANT SELECT ON ALL TABLES IN SCHEMA public TO msgwriter`)
	exec(t, conn, `REVOKE EXECUTE ON FUNCTION pg_logical_emit_message(boolean, text, text) FROM PUBLIC`)
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	roleDSN := fmt.Sprintf("postgres://msgwriter:pw@%s:%d/%s?sslmode=disable", cfg.Host, cfg.Port, cfg.Database)
	ok, reason, fix := line(roleDSN)
	if ok || !strings.Contains(reason, "may not call") || !strings.Contains(fix, "GRANT EXECUTE ON FUNCTION pg_logical_emit_message(boolean, text, text)") {
		t.Errorf("role without EXECUTE: ok %v %q %q", ok, reason, fix)
	}
	exec(t, conn, `GRANT EXECUTE ON FUNCTION pg_logical_emit_message(boolean, text, text) TO msgwriter`)
	if ok, reason, _ := line(roleDSN); !ok {
		t.Errorf("role granted EXECUTE: FAIL %q", reason)
	}
	err = NewAdapter(Settings{DSN: dsn, Tables: []string{"public.outbox"}, MessagePrefix: HeartbeatPrefix}, nil).Validate()
	if se, ok := err.(*SettingError); !ok || se.Key != "source.postgres.messages.prefix" {
		t.Errorf("heartbeat prefix as message prefix: %v", err)
	}
}
