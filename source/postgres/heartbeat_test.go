package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
	"github.com/outboxd/outboxd/source/postgres/pgoutputtest"
)

func messageBytes(transactional bool, lsn uint64, prefix string, content []byte) []byte {
	return pgoutputtest.Message(transactional, lsn, prefix, string(content))
}

func TestParseMessage(t *testing.T) {
	m, err := parseMessage(messageBytes(false, 0x16B3748, HeartbeatPrefix, []byte(`{"x":1}`)))
	if err != nil {
		t.Fatal(err)
	}
	if m.transactional || m.lsn != 0x16B3748 || m.prefix != HeartbeatPrefix || string(m.content) != `{"x":1}` {
		t.Fatalf("got %+v", m)
	}
	m, err = parseMessage(messageBytes(true, 1, "other", nil))
	if err != nil || !m.transactional || m.prefix != "other" || len(m.content) != 0 {
		t.Fatalf("got %+v, %v", m, err)
	}
	full := messageBytes(false, 1, HeartbeatPrefix, []byte("abc"))
	for i := 1; i < len(full); i++ {
		if _, err := parseMessage(full[:i]); err == nil {
			t.Fatalf("truncated message of %d bytes parsed", i)
		}
	}
}

// TestHeartbeatMessageIsIdleProgress: a heartbeat outside a transaction becomes an empty Tx at
// its LSN, in stream order; one at or before the last position handed out is dropped.
func TestHeartbeatMessageIsIdleProgress(t *testing.T) {
	s := New(Config{DSN: "x", Tables: []string{"public.outbox"}}, testLog())
	st := &stream{s: s, dec: NewDecoder(s.cfg.Tables), from: 100, lastHanded: 200}
	for _, lsn := range []uint64{50, 200} {
		if err := st.message(messageBytes(false, lsn, HeartbeatPrefix, nil)); err != nil || st.hasOut {
			t.Fatalf("heartbeat at %d: out %v err %v", lsn, st.out, err)
		}
	}
	if err := st.message(messageBytes(false, 300, "someone.else", nil)); err != nil || st.hasOut {
		t.Fatalf("foreign message: out %v err %v", st.out, err)
	}
	if err := st.message(messageBytes(false, 300, HeartbeatPrefix, nil)); err != nil || !st.hasOut {
		t.Fatalf("heartbeat at 300: out %v err %v", st.out, err)
	}
	if st.out.Position != lsnPosition(300) || len(st.out.Rows) != 0 {
		t.Fatalf("got %+v", st.out)
	}
	if _, seen := s.Heartbeats(); seen != 3 {
		t.Fatalf("seen %d heartbeats, want 3", seen)
	}
}

// consume runs a pipeline stand-in: every Tx handed out is confirmed at once.
func consume(ctx context.Context, s *Source) {
	for {
		tx, err := s.Next(ctx)
		if err != nil {
			return
		}
		s.Confirm(ctx, tx.Position)
	}
}

// TestHeartbeatsAdvanceSlotOnOtherDatabaseWrites: the cluster's only writes go to another
// database. Three slots stream the idle outbox database:
//
//	hb:        heartbeats every 200ms, keepalive-based idle progress disabled
//	none:      neither heartbeats nor keepalive-based idle progress
//	keepalive: the default idle progress from keepalives, heartbeats off
//
// hb must retain little WAL, none must retain all of it (so the test can tell); keepalive is
// reported (it keeps up as well, which is why heartbeats are a second mechanism, not the only one).
func TestHeartbeatsAdvanceSlotOnOtherDatabaseWrites(t *testing.T) {
	pg, err := testenv.StartPostgres()
	if err != nil {
		testenv.Unavailable(t, "private PostgreSQL", err)
	}
	t.Cleanup(pg.Destroy)
	ctx := context.Background()
	if err := pg.Exec(ctx, "postgres", "CREATE DATABASE app", "CREATE DATABASE other"); err != nil {
		t.Fatal(err)
	}
	if err := pg.Exec(ctx, "app", testenv.OutboxDDL); err != nil {
		t.Fatal(err)
	}
	if err := pg.Exec(ctx, "other", "CREATE TABLE busy (id bigserial PRIMARY KEY, note text)"); err != nil {
		t.Fatal(err)
	}
	type slot struct {
		name      string
		heartbeat time.Duration
		noKA      bool
		src       *Source
	}
	slots := []*slot{{name: "hb", heartbeat: 200 * time.Millisecond, noKA: true}, {name: "none", noKA: true}, {name: "keepalive"}}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	for _, sl := range slots {
		sl.src = New(Config{DSN: pg.DSN("app"), Tables: []string{"public.outbox"}, Slot: sl.name, Publication: sl.name,
			StandbyTimeout: testStandby, HeartbeatInterval: sl.heartbeat}, testLog())
		sl.src.ext.noKeepaliveProgress = sl.noKA
		if err := sl.src.Open(ctx, ""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sl.src.Close() })
		go consume(runCtx, sl.src)
	}
	app, err := pgx.Connect(ctx, pg.DSN("app"))
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close(ctx)
	other, err := pgx.Connect(ctx, pg.DSN("other"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	walLSN := func() pglogrepl.LSN {
		var s string
		if err := app.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&s); err != nil {
			t.Fatal(err)
		}
		l, _ := pglogrepl.ParseLSN(s)
		return l
	}
	retained := func(slot string) int64 {
		var n int64
		if err := app.QueryRow(ctx, `SELECT (pg_current_wal_lsn() - restart_lsn)::bigint FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	start := walLSN()
	for i := 0; i < 40; i++ { // ~25 MB of WAL, all in database "other"
		if _, err := other.Exec(ctx, `INSERT INTO busy (note) SELECT repeat('x', 500) FROM generate_series(1, 1000)`); err != nil {
			t.Fatal(err)
		}
		if i%10 == 9 {
			other.Exec(ctx, "CHECKPOINT") // logs running_xacts, which lets restart_lsn move
		}
		harness.Hold(50*time.Millisecond, "pace the writer: the WAL grows over ~2 s while heartbeats and keepalives go on")
	}
	written := int64(walLSN() - start)
	if written < 16<<20 {
		t.Fatalf("the test wrote only %d bytes of WAL", written)
	}
	const small = 8 << 20
	err = harness.Until(30*time.Second, 100*time.Millisecond, func() error {
		other.Exec(ctx, "CHECKPOINT") // a running_xacts record the slots can move their restart_lsn to
		if hb, ka := retained("hb"), retained("keepalive"); hb >= small || ka >= small {
			return fmt.Errorf("slot hb retains %d bytes, keepalive %d, after %d bytes written to another database; want < %d", hb, ka, written, small)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sent, seen := slots[0].src.Heartbeats()
	t.Logf("wrote %d bytes of WAL to another database; retained: hb %d (heartbeats sent %d, seen %d), none %d, keepalive %d",
		written, retained("hb"), sent, seen, retained("none"), retained("keepalive"))
	if sent == 0 || seen == 0 {
		t.Fatalf("heartbeats sent %d, seen %d: want both > 0", sent, seen)
	}
	if n := retained("none"); n < written {
		t.Fatalf("slot none (no heartbeats, no keepalive progress) retains %d bytes < %d written: the test cannot tell heartbeats work", n, written)
	}
	if s, _ := slots[1].src.Heartbeats(); s != 0 {
		t.Fatalf("heartbeat_interval 0 sent %d heartbeats", s)
	}
	if _, s := slots[2].src.Heartbeats(); s != 0 {
		t.Fatalf("a slot without heartbeats saw %d heartbeat messages (messages option must be off)", s)
	}
	// No outbox row and no Tx with rows came out of any of it.
	var n int
	app.QueryRow(ctx, "SELECT count(*) FROM outbox").Scan(&n)
	if n != 0 {
		t.Fatal(fmt.Sprint("outbox has rows: ", n))
	}
}

// TestHeartbeatNotWhileBusy: heartbeats are only emitted after HeartbeatInterval without an
// outbox change.
func TestHeartbeatNotWhileBusy(t *testing.T) {
	dsn, conn := testDB(t, "hbbusy")
	const iv = 700 * time.Millisecond
	s := New(Config{DSN: dsn, Tables: []string{"public.outbox"}, Slot: "hbbusy", Publication: "hbbusy",
		StandbyTimeout: testStandby, HeartbeatInterval: iv}, testLog())
	if err := s.Open(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go consume(ctx, s)
	busy := time.Now()
	for i := 0; i < 20; i++ { // an outbox change every 100ms for 2s
		exec(t, conn, `INSERT INTO outbox (id, aggregatetype, aggregateid, payload) VALUES (gen_random_uuid(), 'a', 'b', '{}')`)
		harness.Hold(100*time.Millisecond, "an outbox change every 100 ms keeps the outbox busy")
	}
	// The heartbeat loop had its chance: the outbox was busy for more than two intervals, so a
	// loop that ignored the changes would have sent one by now.
	if d := time.Since(busy); d < 2*iv {
		t.Fatalf("the busy phase lasted %v, less than two heartbeat intervals (%v): the test cannot tell", d, iv)
	}
	if sent, _ := s.Heartbeats(); sent != 0 {
		t.Fatalf("%d heartbeats sent while the outbox was busy", sent)
	}
	err := harness.Until(2*time.Second, harness.Interval, func() error {
		if sent, seen := s.Heartbeats(); sent == 0 || seen == 0 {
			return fmt.Errorf("idle with a %v interval: sent %d, seen %d heartbeats", iv, sent, seen)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
