package main

import (
	"context"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/sink/kafka"
)

// End-to-end tests of the binary against Apache Kafka 4.4 (KRaft, one node) instead of kfake:
// what users run. Each test gets its own node (about 3 s to start with a warm lib cache), so
// topics, transactional ids and offsets keys are as on kfake. kcat, an independent client
// (librdkafka), reads the topics back with read_committed.

// newApacheEnv is newEnv on a fresh Apache Kafka node.
func newApacheEnv(t *testing.T, extraYAML string) *env {
	t.Helper()
	k := testenv.NewApacheKafka(t, testenv.ApacheOpts{})
	return newEnvOn(t, &testenv.Broker{Port: k.Port}, extraYAML)
}

// newApacheEOSEnv is newEOSEnv on a fresh Apache Kafka node.
func newApacheEOSEnv(t *testing.T) *env {
	t.Helper()
	e := newApacheEnv(t, "")
	e.editConfig("kafka:\n", "kafka:\n  delivery: exactly_once\n")
	e.editConfig("offsets:\n", "offsets:\n  store: kafka\n")
	return e
}

// kcatIDs reads topic from the beginning to its end with kcat (read_committed) and returns the
// id header of every record, in the order read.
func kcatIDs(t *testing.T, addr, topic string) []string {
	t.Helper()
	kc, err := exec.LookPath("kcat")
	if err != nil {
		testenv.Unavailable(t, "kcat (bash .ci/deps installs it)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, kc, "-C", "-b", addr, "-t", topic, "-e", "-o", "beginning", "-q",
		"-X", "isolation.level=read_committed", "-f", "%h\n").CombinedOutput()
	if err != nil {
		t.Fatalf("kcat -C -t %s: %v\n%s", topic, err, out)
	}
	var ids []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		for _, h := range strings.Split(line, ",") {
			if id, ok := strings.CutPrefix(h, "id="); ok {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// sameSet fails unless got and want hold the same ids, each once.
func sameSet(t *testing.T, what string, got, want []string) {
	t.Helper()
	g := append([]string(nil), got...)
	w := append([]string(nil), want...)
	sort.Strings(g)
	sort.Strings(w)
	if strings.Join(g, ",") != strings.Join(w, ",") {
		t.Fatalf("%s: %d ids, want %d (missing or duplicated)", what, len(g), len(w))
	}
}

// TestApacheAtLeastOnceDelivers: at_least_once to Apache Kafka delivers what it delivers on kfake:
// every committed row once after a clean stop, on the topic of its aggregate type, keyed by
// aggregate id, the payload as PostgreSQL prints it, the partition murmur2 picks among 3, per-key
// order; a restart resumes with nothing lost or repeated; kcat agrees.
func TestApacheAtLeastOnceDelivers(t *testing.T) {
	e := newApacheEnv(t, "outbox:\n  headers:\n    type: eventType\n")
	p := e.start()
	c := e.conn()
	ctx := context.Background()
	var want []string
	want = append(want, e.insert(c, "A", 3)...)
	if _, err := c.Exec(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
		VALUES ('33333333-3333-4333-8333-333333333333', 'customer', 'C', 'y', '[1, 2,3]')`); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 30; i++ {
		want = append(want, e.insert(c, fmt.Sprintf("K%d", i%4), 1+i%2)...)
	}
	all := append(append([]string(nil), want...), "33333333-3333-4333-8333-333333333333")
	got := testenv.Consume(t, e.broker.Addr(), `outbox\.event\..*`, len(all), 60*time.Second)
	if missing := hasAll(got, all); len(missing) > 0 {
		t.Fatalf("%d of %d rows not delivered to Apache Kafka: %v", len(missing), len(all), missing[:min(5, len(missing))])
	}
	if code := p.stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
	for i := 0; i < 5; i++ { // written while outboxd is down
		want = append(want, e.insert(c, "K0", 1)...)
	}
	p = e.start()
	all = append(all, want[len(want)-5:]...)
	waitUntil(t, 60*time.Second, "rows written while down delivered", func() bool {
		return len(hasAll(testenv.Consume(t, e.broker.Addr(), `outbox\.event\..*`, len(all), 2*time.Second), all)) == 0
	})
	if code := p.stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}

	got = testenv.Consume(t, e.broker.Addr(), `outbox\.event\..*`, 0, 1500*time.Millisecond)
	if n, dups := countDistinct(got); n != len(all) || dups != 0 {
		t.Fatalf("%d distinct records, %d duplicates; want %d and 0 (clean stops)", n, dups, len(all))
	}
	db := outboxRows(t, c)
	pos := map[string]int{}
	for i, id := range want {
		pos[id] = i
	}
	last := map[string]int{}
	for _, r := range got {
		id := r.Header("id")
		d := db[id]
		if r.Topic != "outbox.event."+d.agg || string(r.Key) != d.key || string(r.Value) != d.payload || r.Header("eventType") != d.typ {
			t.Errorf("record %s: topic %s key %s value %s type %s; want %s %s %s %s", id, r.Topic, r.Key, r.Value,
				r.Header("eventType"), "outbox.event."+d.agg, d.key, d.payload, d.typ)
		}
		if wantP := kafka.PartitionFor(r.Key, 3); r.Partition != wantP {
			t.Errorf("record %s key %s on partition %d, murmur2 says %d", id, r.Key, r.Partition, wantP)
		}
		if r.Topic == "outbox.event.order" {
			if prev, ok := last[string(r.Key)]; ok && pos[id] < prev {
				t.Errorf("key %s out of commit order", r.Key)
			}
			last[string(r.Key)] = pos[id]
		}
	}
	sameSet(t, "kcat read_committed of outbox.event.order", kcatIDs(t, e.broker.Addr(), "outbox.event.order"), want)
}

// TestApacheEOSDeliversOnceAndResumes is TestEOSDeliversOnceAndResumes on Apache Kafka (real
// transactions, read_committed, the position in a compacted offsets topic), and kcat
// (read_committed) sees every row exactly once.
func TestApacheEOSDeliversOnceAndResumes(t *testing.T) {
	e := newApacheEOSEnv(t)
	want := testEOSDeliversOnceAndResumes(t, e)
	sameSet(t, "kcat read_committed of outbox.event.order", kcatIDs(t, e.broker.Addr(), "outbox.event.order"), want)
}

// TestApacheEOSFencing is TestEOSFencing on Apache Kafka, whose transaction coordinator (unlike
// kfake's) refuses the fenced instance's stale producer epoch.
func TestApacheEOSFencing(t *testing.T) { testEOSFencing(t, newApacheEOSEnv(t)) }

// TestApacheEOSSIGKILLLoop is TestEOSSIGKILLLoop on Apache Kafka: outboxd killed five times with
// transactions open; each restart's InitProducerID makes the real coordinator abort the open one.
func TestApacheEOSSIGKILLLoop(t *testing.T) { testEOSSIGKILLLoop(t, newApacheEOSEnv(t)) }

// TestApacheAtLeastOnceKafkaOffsets is TestAtLeastOnceKafkaOffsets on Apache Kafka: outboxd
// creates the compacted offsets topic itself and resumes from the position it stored there.
func TestApacheAtLeastOnceKafkaOffsets(t *testing.T) {
	testAtLeastOnceKafkaOffsets(t, newApacheEnv(t, ""))
}
