package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
	"github.com/outboxd/outboxd/sink/kafka"
	"github.com/outboxd/outboxd/source"
)

// deliverAll waits (up to within) until every committed id is in Kafka and returns the ids and
// every record read.
func deliverAll(t *testing.T, f *fixture, within time.Duration) ([]string, []*kgo.Record) {
	t.Helper()
	truth, err := f.db.ids(context.Background())
	if err != nil {
		t.Fatalf("read committed ids back: %v", err)
	}
	var recs []*kgo.Record
	harness.Until(within, time.Second, func() error { // on a timeout the caller's count says what is lost
		recs = testenv.ReadAll(t, f.brokerAddrs(), f.topicPattern())
		if tl := count(truth, toConsumed(recs)); tl.lost > 0 {
			return fmt.Errorf("%d of %d committed ids not in Kafka", tl.lost, tl.events)
		}
		return nil
	})
	return truth, recs
}

func toConsumed(recs []*kgo.Record) []testenv.Consumed {
	out := make([]testenv.Consumed, len(recs))
	for i, r := range recs {
		c := testenv.Consumed{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value, Headers: map[string]string{}}
		for _, h := range r.Headers {
			c.Headers[h.Key] = string(h.Value)
		}
		out[i] = c
	}
	return out
}

// producerOf is a record's producer identity.
type producerOf struct {
	id    int64
	epoch int16
}

// firstProducer returns the producer of the first record visible in the fixture's topics.
func firstProducer(t *testing.T, f *fixture) producerOf {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.brokerAddrs()...), kgo.ConsumeRegex(), kgo.ConsumeTopics(f.topicPattern()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.MetadataMinAge(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for ctx.Err() == nil {
		if recs := cl.PollFetches(ctx).Records(); len(recs) > 0 {
			return producerOf{recs[0].ProducerID, recs[0].ProducerEpoch}
		}
	}
	t.Fatalf("no record visible in %s within a minute", f.topicPattern())
	return producerOf{}
}

// zombieWrites counts records of producer z that lie, in their partition, after a record of
// another producer: what z made visible after it was replaced.
func zombieWrites(recs []*kgo.Record, z producerOf) int {
	type tp struct {
		topic string
		p     int32
	}
	firstOther := map[tp]int64{}
	for _, r := range recs {
		k := tp{r.Topic, r.Partition}
		if (producerOf{r.ProducerID, r.ProducerEpoch}) != z {
			if o, ok := firstOther[k]; !ok || r.Offset < o {
				firstOther[k] = r.Offset
			}
		}
	}
	n := 0
	for _, r := range recs {
		if o, ok := firstOther[tp{r.Topic, r.Partition}]; ok && (producerOf{r.ProducerID, r.ProducerEpoch}) == z && r.Offset > o {
			n++
		}
	}
	return n
}

// zombie (d): the active exactly_once instance is frozen (SIGSTOP) under load; its walsender
// times out (wal_sender_timeout 5s), a second instance with the same config (same slot, same
// transactional id) takes over and delivers; the first one is continued (SIGCONT). Apache
// Kafka fences its producer epoch: nothing it writes afterwards becomes visible to a
// read_committed consumer, and it exits 1 saying it was fenced.
func zombie(t *testing.T, c *testenv.ApacheCluster, p apachePlan) {
	started := time.Now()
	healthy(t, c)
	prefix := "d-zombie"
	f := newApacheFixture(t, c, prefix, "wal_sender_timeout=5s")
	f.exactlyOnce = true
	addrA, addrB := freeAddr(t), freeAddr(t)
	a := startProc(t, "a", f.config("a", addrA, ""), f.dir)
	f.waitStreaming(a)
	w := startWriter(f.db, p.pause)
	sm := startStallMeter(addrA, addrB)
	harness.WaitFor(t, time.Minute, "a delivers", func() bool { a.MustBeRunning(t); v, _ := produced(addrA); return v > 200 })
	za := firstProducer(t, f)
	if err := a.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	t.Cleanup(func() { a.Cmd.Process.Signal(syscall.SIGCONT) })
	t.Logf("a (producer id %d epoch %d) frozen with SIGSTOP", za.id, za.epoch)
	b := startProc(t, "b", f.config("b", addrB, ""), f.dir)
	harness.WaitFor(t, 2*time.Minute, "b takes over and delivers", func() bool {
		b.MustBeRunning(t)
		v, _ := produced(addrB)
		return v > 200
	})
	takeover := time.Since(frozen)
	t.Logf("b delivering %v after the freeze", takeover.Round(100*time.Millisecond))
	f.waitDelivering(b, 100, time.Minute) // b delivers on while the zombie is frozen
	if err := a.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	cont := time.Now()
	t.Logf("a continued (SIGCONT)")
	select {
	case <-a.Done:
	case <-time.After(90 * time.Second):
		t.Fatalf("the zombie still runs 90s after SIGCONT:\n%s", harness.Tail(a.Out.String(), 40))
	}
	exited := time.Since(cont)
	out := a.Out.String()
	msg := fmt.Sprintf(`producer fenced: another producer initialised transactional id \"%s-txn\" (kafka.transactional_id)`, prefix)
	if a.Code != 1 || !strings.Contains(out, msg) {
		t.Errorf("the zombie exited %d, want 1 with %q; output:\n%s", a.Code, msg, harness.Tail(out, 40))
	} else {
		t.Logf("the zombie exited 1: %s", strings.TrimSpace(out[strings.LastIndex(out, "level=ERROR"):]))
	}
	f.waitDelivering(b, 50, time.Minute) // b delivers on after the zombie's exit
	r := apacheResult{scenario: "zombie: SIGSTOP the active instance, a second one takes over, SIGCONT", delivery: "exactly_once",
		faults: "1 SIGSTOP + SIGCONT",
		note:   fmt.Sprintf("b delivering %s after the freeze; zombie exit %d %s after SIGCONT", takeover.Round(100*time.Millisecond), a.Code, exited.Round(100*time.Millisecond))}
	apacheFinish(t, f, c, w, sm, p, r, started, prefix+".dlq")
	_, recs := deliverAll(t, f, time.Minute)
	if n := zombieWrites(recs, za); n > 0 {
		t.Errorf("%d records of the zombie's producer (id %d epoch %d) are visible after the takeover's first record", n, za.id, za.epoch)
	}
	if code := b.Term(); code != 0 {
		t.Errorf("SIGTERM exit %d; output:\n%s", code, harness.Tail(b.Out.String(), 40))
	}
}

// storedPosition reads the offsets topic directly (read_committed) and returns the last
// position stored under key, and how many records the key has.
func storedPosition(t *testing.T, c *testenv.ApacheCluster, topic, key string) (source.Position, int) {
	t.Helper()
	var pos source.Position
	n := 0
	for _, r := range testenv.ReadAll(t, runningAddrs(c), "^"+regexp.QuoteMeta(topic)+"$") {
		if string(r.Key) != key {
			continue
		}
		var doc struct {
			Position source.Position `json:"position"`
		}
		if err := json.Unmarshal(r.Value, &doc); err != nil {
			t.Fatalf("offsets record %s/%d@%d: %v: %q", r.Topic, r.Partition, r.Offset, err, r.Value)
		}
		pos, n = doc.Position, n+1
	}
	return pos, n
}

// kafkaOffsetsRestart (e): at_least_once with offsets.store kafka, the offsets topic's leader
// SIGKILLed under load; then outboxd stopped, every broker SIGKILLed and started again: the
// position read back (outboxd's KafkaStore, and outboxd's own resume log line) is the last
// one the offsets topic holds, and no record delivered before the stop is delivered again.
func kafkaOffsetsRestart(t *testing.T, c *testenv.ApacheCluster, p apachePlan) {
	started := time.Now()
	healthy(t, c)
	prefix := "e-offsets"
	f := newApacheFixture(t, c, prefix)
	f.kafkaOffsets = true
	addr := freeAddr(t)
	cfg := f.config("a", addr, "")
	proc := startProc(t, "a", cfg, f.dir)
	f.waitStreaming(proc)
	w := startWriter(f.db, p.pause)
	sm := startStallMeter(addr)
	otopic := prefix + ".offsets"
	harness.WaitFor(t, time.Minute, otopic+" has a leader", func() bool { proc.MustBeRunning(t); _, err := c.Leader(otopic, 0); return err == nil })
	for i := 0; i < p.offsetKills; i++ {
		sleepBetween(time.Second, 3*time.Second)
		proc.MustBeRunning(t)
		id, err := c.Leader(otopic, 0)
		if err != nil {
			t.Fatal(err)
		}
		c.Node(id).Kill()
		t.Logf("round %d: SIGKILLed node %d, the leader of %s/0", i+1, id, otopic)
		sleepBetween(2*time.Second, 4*time.Second)
		startNodes(t, c.Node(id))
		waitISR(t, c, 2*time.Minute)
	}
	w.stop()
	_, before := deliverAll(t, f, p.settle)
	stall := sm.stop() // the deliberate stop below is no stall
	if code := proc.Term(); code != 0 {
		t.Fatalf("SIGTERM exit %d; output:\n%s", code, harness.Tail(proc.Out.String(), 40))
	}
	last, saves := storedPosition(t, c, otopic, prefix)
	if last == "" {
		t.Fatalf("no position under key %s in %s", prefix, otopic)
	}
	t.Logf("%s holds %d positions for %s, the last %s", otopic, saves, prefix, last)

	for _, k := range c.Nodes {
		k.Kill()
	}
	startNodes(t, c.Nodes...)
	waitISR(t, c, 2*time.Minute)
	t.Logf("every broker SIGKILLed and started again")
	s := &kafka.OffsetStore{Kafka: kafka.Config{Brokers: c.Addrs()}, Topic: otopic, Key: prefix, Source: "postgres:outboxd"}
	loaded, err := s.Load(context.Background())
	s.Close()
	if err != nil || loaded != last {
		t.Fatalf("position read back after the cluster restart: %q (%v), want the last one stored, %q", loaded, err, last)
	}
	if again, _ := storedPosition(t, c, otopic, prefix); again != last {
		t.Fatalf("the offsets topic's last position changed across the restart: %q, was %q", again, last)
	}
	proc = startProc(t, "a", cfg, f.dir)
	resume := "msg=\"resuming from stored position\" position=" + string(last)
	harness.WaitFor(t, time.Minute, "the resume log line", func() bool { proc.MustBeRunning(t); return strings.Contains(proc.Out.String(), resume) })
	w = startWriter(f.db, p.pause)
	sm = startStallMeter(addr)
	f.waitDelivering(proc, 50, time.Minute) // the restarted outboxd delivers the new writer's rows
	apacheFinish(t, f, c, w, sm, p, apacheResult{stall: stall, scenario: "offsets.store kafka: offsets leader SIGKILLs, then every broker and outboxd restarted",
		delivery: "at_least_once", faults: fmt.Sprintf("%d leader SIGKILLs + 1 full-cluster SIGKILL", p.offsetKills), note: "resumed at the last stored position"},
		started, prefix+".dlq")
	_, after := deliverAll(t, f, time.Minute)
	n0, n1 := map[string]int{}, map[string]int{}
	for _, r := range before {
		n0[headerOf(r, "id")]++
	}
	for _, r := range after {
		n1[headerOf(r, "id")]++
	}
	again := 0
	for id, n := range n0 {
		again += n1[id] - n
	}
	if again > 0 {
		t.Errorf("%d records delivered before the stop were delivered again after the restart: the resume position is older than the last stored one", again)
	}
	if code := proc.Term(); code != 0 {
		t.Errorf("SIGTERM exit %d; output:\n%s", code, harness.Tail(proc.Out.String(), 40))
	}
}
