package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
	"github.com/outboxd/outboxd/sink/kafka"
)

func lsn(t *testing.T, s string) pglogrepl.LSN {
	t.Helper()
	if s == "" {
		return 0
	}
	l, err := pglogrepl.ParseLSN(s)
	if err != nil {
		t.Fatalf("parse LSN %q: %v", s, err)
	}
	return l
}

// TestDeliversOutboxInserts checks the records against the contract: topics, keys, values as
// PostgreSQL prints them, id headers, per-key order, partitions, and what must not be published.
func TestDeliversOutboxInserts(t *testing.T) {
	e := newEnv(t, "outbox:\n  headers:\n    type: eventType\n")
	p := e.start()
	c := e.conn()
	ctx := context.Background()

	var want []string
	want = append(want, e.insert(c, "A", 3)...) // multi-row
	want = append(want, e.insert(c, "B", 1)...) // single-row
	// rolled back: absent
	tx, _ := c.Begin(ctx)
	tx.Exec(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, payload) VALUES ('11111111-1111-4111-8111-111111111111', 'order', 'R', '{}')`)
	tx.Rollback(ctx)
	// insert-then-delete in one transaction: published once
	tx, _ = c.Begin(ctx)
	tx.Exec(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ('22222222-2222-4222-8222-222222222222', 'order', 'D', 'x', '{"deleted": "later",  "n":1}')`)
	tx.Exec(ctx, `DELETE FROM outbox WHERE id = '22222222-2222-4222-8222-222222222222'`)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	want = append(want, "22222222-2222-4222-8222-222222222222")
	// updates, deletes and other tables ignored
	if _, err := c.Exec(ctx, `UPDATE outbox SET type = 'changed' WHERE aggregateid = 'A'`); err != nil {
		t.Fatal(err)
	}
	c.Exec(ctx, `DELETE FROM outbox WHERE aggregateid = 'B'`)
	c.Exec(ctx, `INSERT INTO orders (note) VALUES ('not an event')`)
	// another aggregate type routes to another topic
	c.Exec(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ('33333333-3333-4333-8333-333333333333', 'customer', 'C', 'y', '[1, 2,3]')`)
	want = append(want, "33333333-3333-4333-8333-333333333333")
	for i := 0; i < 20; i++ { // per-key order across many transactions
		want = append(want, e.insert(c, fmt.Sprintf("K%d", i%3), 1)...)
	}

	// Once the position stored covers the last commit, Kafka has acked every record outboxd
	// produced for it and before it: the whole topic is the output, extras included.
	e.waitStored(e.walLSN(c), 30*time.Second)
	got := testenv.ConsumeAll(t, e.broker.Addr(), `outbox\.event\..*`)
	if missing := hasAll(got, want); len(missing) > 0 {
		t.Fatalf("missing %d records: %v\noutput:\n%s", len(missing), missing, p.Out.String())
	}
	if len(got) != len(want) {
		t.Fatalf("got %d records, want %d (rolled-back, updated, deleted or other-table rows published?): %v", len(got), len(want), ids(got))
	}

	// Values are PostgreSQL's own text of the payload; keys, headers, partitions.
	db := outboxRows(t, c)
	db["22222222-2222-4222-8222-222222222222"] = dbRow{"order", "D", "x", `{"n": 1, "deleted": "later"}`}
	db["33333333-3333-4333-8333-333333333333"] = dbRow{"customer", "C", "y", `[1, 2, 3]`}
	lastByKey := map[string]int64{}
	for _, r := range got {
		id := r.Header("id")
		d, ok := db[id]
		if !ok {
			if strings.HasPrefix(id, "") && r.Topic == "outbox.event.order" && string(r.Key) == "B" {
				continue // deleted after publishing: checked by count above
			}
			t.Fatalf("record %s has no database row", id)
		}
		if r.Topic != "outbox.event."+d.agg || string(r.Key) != d.key || string(r.Value) != d.payload {
			t.Errorf("record %s: topic %s key %s value %s; want %s %s %s", id, r.Topic, r.Key, r.Value, "outbox.event."+d.agg, d.key, d.payload)
		}
		if d.typ != "" && r.Header("eventType") != d.typ && d.typ != "changed" {
			t.Errorf("record %s: eventType header %q, want %q", id, r.Header("eventType"), d.typ)
		}
		if want := kafka.PartitionFor(r.Key, 3); r.Partition != want {
			t.Errorf("record %s key %s on partition %d, murmur2 says %d", id, r.Key, r.Partition, want)
		}
		k := r.Topic + "/" + string(r.Key)
		if prev, ok := lastByKey[k]; ok && r.Offset <= prev {
			t.Errorf("key %s out of order", k)
		}
		lastByKey[k] = r.Offset
	}
	// Per-key order follows commit order: the i-th record of key K<j> is the i-th insert.
	var order []string
	for _, r := range got {
		if strings.HasPrefix(string(r.Key), "K") && string(r.Key) == "K0" {
			order = append(order, r.Header("id"))
		}
	}
	var wantOrder []string
	for i, id := range want[len(want)-20:] {
		if i%3 == 0 {
			wantOrder = append(wantOrder, id)
		}
	}
	if strings.Join(order, ",") != strings.Join(wantOrder, ",") {
		t.Errorf("key K0 order %v, want %v", order, wantOrder)
	}

	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
	// kcat, an independent client, sees the same records.
	if kc, err := exec.LookPath("kcat"); err == nil {
		out, err := exec.Command(kc, "-C", "-b", e.broker.Addr(), "-t", "outbox.event.customer", "-o", "beginning", "-e", "-q",
			"-f", "%k %h %s\n").CombinedOutput()
		if err != nil {
			t.Fatalf("kcat: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "C id=33333333-3333-4333-8333-333333333333") || !strings.Contains(string(out), "[1, 2, 3]") {
			t.Errorf("kcat output: %s", out)
		}
	} else if testenv.InCI() {
		t.Fatalf("kcat not installed (the README's test command installs it)")
	}
}

// TestRestartAfterSIGTERMAndSIGKILL: a clean stop loses and duplicates nothing; a SIGKILL loses
// nothing.
func TestRestartAfterSIGTERMAndSIGKILL(t *testing.T) {
	e := newEnv(t, "")
	c := e.conn()
	var want []string
	p := e.start()
	for i := 0; i < 50; i++ {
		want = append(want, e.insert(c, fmt.Sprintf("k%d", i%5), 1+i%3)...)
	}
	harness.WaitFor(t, 30*time.Second, "first batch delivered", func() bool {
		return len(hasAll(testenv.Consume(t, e.broker.Addr(), `outbox\.event\..*`, len(want), 2*time.Second), want)) == 0
	})
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
	stored := e.storedPosition()
	if stored == "" {
		t.Fatal("nothing stored after a clean stop")
	}
	// Written while outboxd is down.
	for i := 0; i < 20; i++ {
		want = append(want, e.insert(c, fmt.Sprintf("k%d", i%5), 1)...)
	}
	p = e.start()
	harness.WaitFor(t, 30*time.Second, "all delivered after SIGTERM restart", func() bool {
		return len(hasAll(testenv.Consume(t, e.broker.Addr(), `outbox\.event\..*`, len(want), 2*time.Second), want)) == 0
	})
	e.waitStored(e.walLSN(c), 30*time.Second) // a duplicate of a record before it is in Kafka by then
	got := testenv.ConsumeAll(t, e.broker.Addr(), `outbox\.event\..*`)
	if n, dups := countDistinct(got); dups != 0 || n != len(want) {
		t.Fatalf("after SIGTERM+restart: %d distinct, %d duplicates, want %d and 0", n, dups, len(want))
	}

	// SIGKILL in the middle of a stream, restart: nothing lost (duplicates allowed in at_least_once).
	stop := make(chan struct{})
	writerDone := make(chan []string)
	var written atomic.Int64
	go func() {
		wc := e.conn()
		var w []string
		for i := 0; ; i++ {
			select {
			case <-stop:
				writerDone <- w
				return
			default:
			}
			w = append(w, e.insert(wc, fmt.Sprintf("k%d", i%5), 1+i%2)...)
			written.Add(1)
			harness.Hold(2*time.Millisecond, "paces the writer")
		}
	}()
	// Mid-stream: the writer's rows are flowing into Kafka when the SIGKILL comes.
	e.waitFlowing(30, 30*time.Second)
	p.Stop(t, syscall.SIGKILL)
	// Rows committed while outboxd is dead are read from the slot after the restart.
	down := written.Load()
	harness.WaitFor(t, 30*time.Second, "20 transactions written while outboxd is dead", func() bool { return written.Load() >= down+20 })
	p = e.start()
	e.waitFlowing(30, 30*time.Second) // the restarted outboxd delivers the writer's rows
	close(stop)
	want = append(want, <-writerDone...)
	harness.WaitFor(t, 60*time.Second, "all delivered after SIGKILL restart", func() bool {
		return len(hasAll(testenv.Consume(t, e.broker.Addr(), `outbox\.event\..*`, len(want), 2*time.Second), want)) == 0
	})
	e.waitStored(e.walLSN(c), 30*time.Second)
	got = testenv.ConsumeAll(t, e.broker.Addr(), `outbox\.event\..*`)
	n, dups := countDistinct(got)
	t.Logf("after SIGKILL: %d events, %d distinct, %d duplicates (at_least_once)", len(got), n, dups)
	if n != len(want) {
		t.Fatalf("%d distinct ids delivered, want %d", n, len(want))
	}
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
}

// TestSlotNeverPassesKafkaAcks stalls the broker's produce path (a kfake fault hook refusing with
// NOT_ENOUGH_REPLICAS, or on Apache Kafka the broker frozen with SIGSTOP) and
// checks that neither the stored position nor the slot's confirmed_flush_lsn moves past what
// Kafka acked.
func TestSlotNeverPassesKafkaAcks(t *testing.T) {
	e := newEnv(t, "")
	c := e.conn()
	p := e.start()
	first := e.insert(c, "x", 2)
	harness.WaitFor(t, 30*time.Second, "first delivered", func() bool {
		return len(hasAll(testenv.Consume(t, e.broker.Addr(), `outbox\.event\..*`, 2, time.Second), first)) == 0
	})
	harness.WaitFor(t, 10*time.Second, "first stored", func() bool { return e.storedPosition() != "" })
	// Everything up to beforeStall is delivered; the first stalled transaction ends after it.
	var beforeStallText string
	c.QueryRow(context.Background(), "SELECT pg_current_wal_insert_lsn()::text").Scan(&beforeStallText)
	beforeStall := lsn(t, beforeStallText)

	// Stall: every produce fails with a retriable error until removed.
	h := e.stallProduce("outbox.event.order")
	stalled := e.insert(c, "x", 3)
	for i := 0; i < 10; i++ {
		stalled = append(stalled, e.insert(c, "y", 1)...)
	}
	var walNow string
	c.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&walNow)
	notPast := func() {
		if s := lsn(t, e.storedPosition()); s > beforeStall {
			t.Fatalf("stored position %s passed %s, the WAL before the first unacked transaction", s, beforeStall)
		}
		if conf := lsn(t, e.slotConfirmed(c)); conf > beforeStall {
			t.Fatalf("slot confirmed_flush_lsn %s passed %s, the WAL before the first unacked transaction", conf, beforeStall)
		}
	}
	// Once outboxd holds the stalled rows (the stall is reached), two standby status updates
	// later it has had a whole status interval to confirm them, wrongly; neither the stored
	// position nor the slot may have moved past the acked WAL meanwhile or then.
	harness.WaitFor(t, 10*time.Second, "the stall reached", func() bool { notPast(); return h.reached() })
	e.waitStatusRepliesAfter(c, time.Now(), 15*time.Second, notPast)
	notPast()
	if !onApache() { // a frozen Apache node cannot be read
		if got := hasAll(testenv.ConsumeAll(t, e.broker.Addr(), `outbox\.event\..*`), stalled); len(got) != len(stalled) {
			t.Fatalf("%d of %d stalled records in Kafka during the stall", len(stalled)-len(got), len(stalled))
		}
	}
	h.release()
	all := append(first, stalled...)
	harness.WaitFor(t, 60*time.Second, "everything delivered after the stall", func() bool {
		return len(hasAll(testenv.Consume(t, e.broker.Addr(), `outbox\.event\..*`, len(all), 2*time.Second), all)) == 0
	})
	harness.WaitFor(t, 10*time.Second, "position stored past the stalled records", func() bool {
		return lsn(t, e.storedPosition()) >= lsn(t, walNow)-1 && lsn(t, e.slotConfirmed(c)) > beforeStall
	})
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
}

// TestIdleOutboxBusyDatabaseHoldsNoWAL: writes to another table only; the slot keeps up.
func TestIdleOutboxBusyDatabaseHoldsNoWAL(t *testing.T) {
	e := newEnv(t, "")
	c := e.conn()
	p := e.start()
	e.insert(c, "x", 1)
	harness.WaitFor(t, 20*time.Second, "slot confirmed", func() bool { return e.slotConfirmed(c) != "" && e.storedPosition() != "" })
	var start string
	c.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&start)
	// ~20 MB of WAL into another table.
	for i := 0; i < 40; i++ {
		if _, err := c.Exec(context.Background(), `INSERT INTO orders (note) SELECT repeat('x', 500) FROM generate_series(1, 1000)`); err != nil {
			t.Fatal(err)
		}
	}
	var end string
	c.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&end)
	written := lsn(t, end) - lsn(t, start)
	var retained int64
	harness.WaitFor(t, 30*time.Second, "slot to catch up with the idle outbox", func() bool {
		c.QueryRow(context.Background(), `SELECT (pg_current_wal_lsn() - confirmed_flush_lsn)::bigint FROM pg_replication_slots WHERE slot_name='outboxd'`).Scan(&retained)
		return retained < 2<<20
	})
	t.Logf("wrote %d bytes of WAL to another table; slot retains %d bytes", written, retained)
	if written < 10<<20 {
		t.Fatalf("the test wrote only %d bytes of WAL", written)
	}
	p.Stop(t, syscall.SIGTERM)
}

// TestBadConfigExits2 checks that a config error names the key and exits 2.
func TestBadConfigExits2(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/bad.yaml"
	for _, c := range []struct{ yaml, key string }{
		{"source: {type: postgres, dsn: 'postgres://u@h/db', tables: [public.outbox]}\nkafka: {brokers: ['k:9092'], acks: 1}\n", "kafka.acks"},
		{"source: {type: postgres, dsn: 'postgres://u:${NOPE_NOT_SET}@h/db', tables: [public.outbox]}\nkafka: {brokers: ['k:9092']}\n", "NOPE_NOT_SET"},
	} {
		writeFile(t, path, c.yaml)
		out, err := exec.Command(binPath, "run", "-c", path).CombinedOutput()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), c.key) {
			t.Errorf("exit %v, output %q; want exit 2 naming %s", err, out, c.key)
		}
	}
	if out, err := exec.Command(binPath, "version").CombinedOutput(); err != nil || !strings.Contains(string(out), "outboxd") {
		t.Errorf("version: %v %s", err, out)
	}
}
