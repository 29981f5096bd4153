package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
	"github.com/outboxd/outboxd/sink/kafka"
)

// mysqlEnv is a private MariaDB with an outbox table (BINARY(16) ids), a broker and a config.
type mysqlEnv struct {
	t       *testing.T
	db      *testenv.MariaDB
	broker  *testenv.Broker
	cfgPath string
	offsets string
}

func newMySQLEnv(t *testing.T) *mysqlEnv {
	t.Helper()
	e := &mysqlEnv{t: t, db: testenv.NewMariaDB(t, testenv.MariaDBOptions{RowMetadata: true}), broker: newTestBroker(t)}
	if err := e.db.Exec(context.Background(), "app", testenv.MariaDBOutboxDDL("app.outbox", "BINARY(16)"),
		"CREATE TABLE app.orders (id INT AUTO_INCREMENT PRIMARY KEY, note TEXT)"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	e.offsets = filepath.Join(dir, "offsets.json")
	e.cfgPath = filepath.Join(dir, "outboxd.yaml")
	writeFile(t, e.cfgPath, fmt.Sprintf(`source:
  type: mysql
  dsn: %s
  tables: [app.outbox]
  mysql:
    server_id: 4343
    start: current
kafka:
  brokers: [%s]
offsets:
  path: %s
  commit_interval: 20ms
http:
  listen: ""
`, e.db.DSN("app"), e.broker.Addr(), e.offsets))
	return e
}

// start runs outboxd and waits until its binlog dump connection is registered.
func (e *mysqlEnv) start() *harness.Proc {
	e.t.Helper()
	p := startProc(e.t, e.cfgPath)
	harness.WaitFor(e.t, 30*time.Second, "binlog dump connected", func() bool {
		select {
		case <-p.Done:
			e.t.Fatalf("outboxd exited with %d:\n%s", p.Code, p.Out.String())
		default:
		}
		// The log line proves this process (not a dead one's lingering dump thread) is connecting.
		if !strings.Contains(p.Out.String(), "mysql source opening") {
			return false
		}
		rows, _ := e.db.Query("", "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'")
		return len(rows) == 1 && rows[0][0] != "0"
	})
	return p
}

// event is one outbox row written identically to both databases.
type event struct{ id, agg, key, typ, payload string }

func makeEvents(n int) [][]event {
	var txs [][]event
	k := 0
	for i := 0; i < n; i++ {
		var tx []event
		for j := 0; j <= i%3; j++ { // 1, 2 or 3 rows per transaction
			k++
			agg := "order"
			if k%4 == 0 {
				agg = "customer"
			}
			// jsonb's own text form (keys by length, then bytes; ", " and ": "), so that the bytes
			// stored by MariaDB and printed by PostgreSQL are the same.
			tx = append(tx, event{id: fmt.Sprintf("%08x-0000-4000-8000-%012x", k*7919, k), agg: agg,
				key: fmt.Sprintf("K%d", k%5), typ: "created", payload: fmt.Sprintf(`{"n": %d, "agg": "K%d"}`, k, k%5)})
		}
		txs = append(txs, tx)
	}
	return txs
}

func (e *mysqlEnv) write(txs [][]event) {
	e.t.Helper()
	for _, tx := range txs {
		stmts := []string{"BEGIN"}
		for _, ev := range tx {
			stmts = append(stmts, fmt.Sprintf(`INSERT INTO app.outbox (id, aggregatetype, aggregateid, type, payload)
				VALUES (UNHEX(REPLACE('%s', '-', '')), '%s', '%s', '%s', '%s')`, ev.id, ev.agg, ev.key, ev.typ, ev.payload))
		}
		stmts = append(stmts, "COMMIT")
		if err := e.db.Exec(context.Background(), "app", stmts...); err != nil {
			e.t.Fatal(err)
		}
	}
}

func writePG(t *testing.T, e *env, txs [][]event) {
	t.Helper()
	c := e.conn()
	ctx := context.Background()
	for _, evs := range txs {
		tx, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if _, err := tx.Exec(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ($1, $2, $3, $4, $5)`,
				ev.id, ev.agg, ev.key, ev.typ, ev.payload); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// summary renders records as comparable lines: per topic and partition, in offset order.
func summary(recs []testenv.Consumed) []string {
	sort.SliceStable(recs, func(i, j int) bool {
		if recs[i].Topic != recs[j].Topic {
			return recs[i].Topic < recs[j].Topic
		}
		if recs[i].Partition != recs[j].Partition {
			return recs[i].Partition < recs[j].Partition
		}
		return recs[i].Offset < recs[j].Offset
	})
	var out []string
	for _, r := range recs {
		out = append(out, fmt.Sprintf("%s/%d@%d key=%s id=%s value=%s", r.Topic, r.Partition, r.Offset, r.Key, r.Header("id"), r.Value))
	}
	return out
}

// TestMariaDBDeliversSameRecordsAsPostgres writes the same transactions to a private MariaDB and
// a private PostgreSQL and checks that outboxd delivers identical records from both: topic,
// partition, offset (so order), key, value and id header. Both write to one broker, the
// PostgreSQL pipeline with outbox.topic pg.outbox.event.${routedByValue}.
func TestMariaDBDeliversSameRecordsAsPostgres(t *testing.T) {
	my := newMySQLEnv(t)
	pg := newEnvOn(t, my.broker, "outbox:\n  topic: pg.outbox.event.${routedByValue}\n")
	pm, pp := my.start(), pg.start()
	txs := makeEvents(30)
	total := 0
	for _, tx := range txs {
		total += len(tx)
	}
	// Ignored on both sides: updates, deletes, other tables.
	my.write(txs[:15])
	my.db.Exec(context.Background(), "app", "UPDATE app.outbox SET type = 'x'", "INSERT INTO app.orders (note) VALUES ('n')",
		"DELETE FROM app.outbox WHERE aggregateid = 'K1'")
	my.write(txs[15:])
	writePG(t, pg, txs)

	gotMy := testenv.Consume(t, my.broker.Addr(), `^outbox\.event\..*`, total, 30*time.Second)
	gotPG := testenv.Consume(t, pg.broker.Addr(), `^pg\.outbox\.event\..*`, total, 30*time.Second)
	for i := range gotPG {
		gotPG[i].Topic = strings.TrimPrefix(gotPG[i].Topic, "pg.")
	}
	if len(gotMy) != total || len(gotPG) != total {
		t.Fatalf("MariaDB delivered %d, PostgreSQL %d, want %d each", len(gotMy), len(gotPG), total)
	}
	for _, r := range gotMy {
		if want := kafka.PartitionFor(r.Key, 3); r.Partition != want {
			t.Fatalf("key %s on partition %d, murmur2 says %d", r.Key, r.Partition, want)
		}
	}
	a, b := summary(gotMy), summary(gotPG)
	if strings.Join(a, "\n") != strings.Join(b, "\n") {
		t.Fatalf("records differ:\nMariaDB:\n%s\nPostgreSQL:\n%s", strings.Join(a, "\n"), strings.Join(b, "\n"))
	}
	if code := pm.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("mysql outboxd SIGTERM exit %d", code)
	}
	pp.Stop(t, syscall.SIGTERM)
}

// TestMariaDBKillAndRestart: SIGKILL under a writer, restart from the stored position, no loss;
// then a clean stop and restart without duplicates.
func TestMariaDBKillAndRestart(t *testing.T) {
	e := newMySQLEnv(t)
	p := e.start()
	txs := makeEvents(200)
	var want []string
	for _, tx := range txs {
		for _, ev := range tx {
			want = append(want, ev.id)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.write(txs)
	}()
	// SIGKILL under the writer, while outboxd delivers its rows.
	harness.WaitFor(t, 30*time.Second, "the writer's rows flowing into Kafka", func() bool {
		return len(testenv.ConsumeAll(t, e.broker.Addr(), `outbox\.event\..*`)) >= 20
	})
	p.Stop(t, syscall.SIGKILL)
	<-done
	if b, err := os.ReadFile(e.offsets); err == nil {
		t.Logf("stored at kill: %s", b)
	}
	p = e.start()
	harness.WaitFor(t, 60*time.Second, "every event delivered after SIGKILL", func() bool {
		return len(hasAll(testenv.Consume(t, e.broker.Addr(), `outbox\.event\..*`, len(want), 2*time.Second), want)) == 0
	})
	// The killed instance may have delivered everything before its last position write: wait
	// until this one stored the binlog end too, or the restart below re-delivers what the SIGKILL
	// left unstored (at_least_once), which is not what it checks.
	end := e.gtidNow()
	harness.WaitFor(t, 30*time.Second, "the position stored up to the binlog end", func() bool { return mariaSeq(e.storedPosition()) >= end })
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
	before := len(testenv.ConsumeAll(t, e.broker.Addr(), `outbox\.event\..*`))
	p = e.start()
	// A row written after the restart: once it is delivered and the stored position covers it,
	// the restarted outboxd has read the binlog from its stored position past everything before
	// the row and Kafka has acked all it produced for it (a re-delivered record on another
	// partition included): a count now shows any re-delivery.
	marker := []event{{id: "ffffffff-0000-4000-8000-000000000001", agg: "order", key: "M", typ: "created", payload: `{"n": 0}`}}
	e.write([][]event{marker})
	harness.WaitFor(t, 30*time.Second, "a row written after the clean restart delivered", func() bool {
		return hasAll(testenv.ConsumeAll(t, e.broker.Addr(), `outbox\.event\..*`), []string{marker[0].id}) == nil
	})
	end = e.gtidNow()
	harness.WaitFor(t, 30*time.Second, "the position stored past the row written after the restart", func() bool { return mariaSeq(e.storedPosition()) >= end })
	after := len(testenv.ConsumeAll(t, e.broker.Addr(), `outbox\.event\..*`))
	if after != before+1 {
		t.Fatalf("a clean restart re-delivered %d records", after-before-1)
	}
	p.Stop(t, syscall.SIGTERM)
}
