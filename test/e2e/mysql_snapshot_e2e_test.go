package e2e

import (
	"maps"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
)

// TestMariaDBSnapshotInitial: the outboxd binary with source.mysql.snapshot: initial and no
// source.mysql.start publishes the rows already in the outbox table at its first start, then the
// rows written afterwards from the binlog, each exactly once; a restart with the stored position
// takes no snapshot (a row written after it is the only new record).
func TestMariaDBSnapshotInitial(t *testing.T) {
	e := newMySQLEnv(t)
	cfg, err := os.ReadFile(e.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, e.cfgPath, strings.Replace(string(cfg), "    start: current\n", "    snapshot: initial\n", 1))

	txs := makeEvents(60)
	var want []string
	for _, tx := range txs {
		for _, ev := range tx {
			want = append(want, ev.id)
		}
	}
	e.write(txs[:40]) // in the table before the first start
	p := e.start()    // returns once the binlog stream runs: after the snapshot
	if !strings.Contains(p.Out.String(), "snapshot delivered") {
		t.Errorf("no snapshot logged:\n%s", p.Out.String())
	}
	e.write(txs[40:])
	harness.WaitFor(t, 60*time.Second, "every row delivered (snapshot, then binlog)", func() bool {
		return len(hasAll(testenv.Consume(t, e.broker.Addr(), `outbox\.event\..*`, len(want), 2*time.Second), want)) == 0
	})
	end := e.gtidNow()
	harness.WaitFor(t, 30*time.Second, "the position stored up to the binlog end", func() bool { return mariaSeq(e.storedPosition()) >= end })
	got := testenv.ConsumeAll(t, e.broker.Addr(), `outbox\.event\..*`)
	if distinct, dups := countDistinct(got); distinct != len(want) || dups != 0 {
		t.Fatalf("%d distinct records, %d duplicates; want %d and none", distinct, dups, len(want))
	}
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}

	p = e.start()
	if strings.Contains(p.Out.String(), "snapshot delivered") {
		t.Error("a restart with a stored position took a snapshot")
	}
	marker := []event{{id: "ffffffff-0000-4000-8000-000000000002", agg: "order", key: "M", typ: "created", payload: `{"n": 0}`}}
	e.write([][]event{marker})
	harness.WaitFor(t, 30*time.Second, "a row written after the restart delivered", func() bool {
		return hasAll(testenv.ConsumeAll(t, e.broker.Addr(), `outbox\.event\..*`), []string{marker[0].id}) == nil
	})
	end = e.gtidNow()
	harness.WaitFor(t, 30*time.Second, "the position stored past the marker", func() bool { return mariaSeq(e.storedPosition()) >= end })
	if after := len(testenv.ConsumeAll(t, e.broker.Addr(), `outbox\.event\..*`)); after != len(got)+1 {
		t.Fatalf("after the restart %d records, want %d (no snapshot again)", after, len(got)+1)
	}
	p.Stop(t, syscall.SIGTERM)
}

// TestMariaDBRepublish: `outboxd republish` on MariaDB publishes every row already in the outbox
// table again with exactly the record the binlog stream gave it (topic, partition, key, value,
// headers), and --where selects rows.
func TestMariaDBRepublish(t *testing.T) {
	e := newMySQLEnv(t)
	p := e.start()
	txs := makeEvents(20)
	n := 0
	for _, tx := range txs {
		n += len(tx)
	}
	e.write(txs)
	streamed := testenv.Consume(t, e.broker.Addr(), `outbox\.event\..*`, n, 30*time.Second)
	if len(streamed) != n {
		t.Fatalf("the stream delivered %d records, want %d", len(streamed), n)
	}
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
	out, err := exec.Command(binPath, "republish", "-c", e.cfgPath, "--batch", "7").CombinedOutput()
	if err != nil {
		t.Fatalf("outboxd republish: %v\n%s", err, out)
	}
	all := testenv.Consume(t, e.broker.Addr(), `outbox\.event\..*`, 2*n, 30*time.Second)
	byID := map[string][]testenv.Consumed{}
	for _, r := range all {
		byID[r.Header("id")] = append(byID[r.Header("id")], r)
	}
	if len(all) != 2*n || len(byID) != n {
		t.Fatalf("%d records for %d ids after republish; want %d for %d\n%s", len(all), len(byID), 2*n, n, out)
	}
	for id, rs := range byID {
		a, b := rs[0], rs[1]
		if len(rs) != 2 || a.Topic != b.Topic || a.Partition != b.Partition || string(a.Key) != string(b.Key) ||
			string(a.Value) != string(b.Value) || !maps.Equal(a.Headers, b.Headers) {
			t.Errorf("id %s: streamed and republished records differ:\n%+v\n%+v", id, a, b)
		}
	}
	customers := 0
	for _, tx := range txs {
		for _, ev := range tx {
			if ev.agg == "customer" {
				customers++
			}
		}
	}
	out, err = exec.Command(binPath, "republish", "-c", e.cfgPath, "--where", "aggregatetype = 'customer'").CombinedOutput()
	if err != nil {
		t.Fatalf("outboxd republish --where: %v\n%s", err, out)
	}
	if got := len(testenv.Consume(t, e.broker.Addr(), `outbox\.event\..*`, 2*n+customers, 30*time.Second)); got != 2*n+customers {
		t.Errorf("after republish --where: %d records, want %d (%d customer rows)\n%s", got, 2*n+customers, customers, out)
	}
}
