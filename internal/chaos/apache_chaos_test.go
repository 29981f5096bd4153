package chaos

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
)

// apachePlan sizes TestApacheChaos. Short mode (the default, CI) keeps all scenarios within
// about 8 minutes on 2 cores; OUTBOXD_CHAOS=long runs the long mode (the README figures).
type apachePlan struct {
	mode          string
	leaderKills   int           // (a) SIGKILLs of a partition leader, per delivery mode
	outage        time.Duration // (b) two of three brokers down
	rollingPasses int           // (c) rolling restarts of all three brokers
	offsetKills   int           // (e) SIGKILLs of the offsets topic's leader before the full restart
	bothModes     bool          // (b) and (c) in both delivery modes (short: (b) at_least_once, (c) exactly_once)
	pause         time.Duration // writer pause between transactions
	settle        time.Duration // deadline for delivering everything at the end
}

func apacheChaosPlan() apachePlan {
	if os.Getenv("OUTBOXD_CHAOS") == "long" {
		return apachePlan{mode: "long", leaderKills: 12, outage: 60 * time.Second, rollingPasses: 3, offsetKills: 6, bothModes: true,
			pause: 3 * time.Millisecond, settle: 4 * time.Minute}
	}
	return apachePlan{mode: "short", leaderKills: 3, outage: 20 * time.Second, rollingPasses: 1, offsetKills: 2,
		pause: 3 * time.Millisecond, settle: 2 * time.Minute}
}

// apacheResult is one row of the Apache Kafka report.
type apacheResult struct {
	scenario, delivery, faults string
	tally                      tally
	disorder                   int // (topic, key) pairs out of commit order
	stall, took                time.Duration
	note                       string
}

var (
	apacheMu      sync.Mutex
	apacheResults []apacheResult
)

// TestApacheChaos runs the chaos scenarios on a real 3-node Apache Kafka cluster (RF 3,
// min.insync.replicas 2), each under a background writer, each ending with the ledger check:
// no committed row lost, per-key commit order, no dead letter, and with exactly_once no
// duplicate for a read_committed consumer. The scenarios share the cluster under their own
// topic names.
func TestApacheChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the Apache Kafka chaos scenarios need three broker JVMs and minutes")
	}
	p := apacheChaosPlan()
	start := time.Now()
	c := testenv.NewApacheCluster(t, 3, testenv.ApacheOpts{})
	t.Logf("3-node Apache Kafka %s cluster up in %v", testenv.ApacheKafkaVersion, time.Since(start).Round(100*time.Millisecond))
	t.Cleanup(func() { apacheReport(t, p, time.Since(start)) })
	t.Run("leader-sigkill", func(t *testing.T) { leaderKill(t, c, p, false) })
	t.Run("leader-sigkill-exactly-once", func(t *testing.T) { leaderKill(t, c, p, true) })
	t.Run("no-quorum", func(t *testing.T) { noQuorum(t, c, p, false) })
	if p.bothModes {
		t.Run("no-quorum-exactly-once", func(t *testing.T) { noQuorum(t, c, p, true) })
		t.Run("rolling-restart", func(t *testing.T) { rollingRestart(t, c, p, false) })
	}
	t.Run("rolling-restart-exactly-once", func(t *testing.T) { rollingRestart(t, c, p, true) })
	t.Run("zombie-fenced", func(t *testing.T) { zombie(t, c, p) })
	t.Run("kafka-offsets-full-restart", func(t *testing.T) { kafkaOffsetsRestart(t, c, p) })
}

func apacheReport(t *testing.T, p apachePlan, took time.Duration) {
	apacheMu.Lock()
	defer apacheMu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "| scenario | delivery | faults | events | lost | duplicates | out-of-order keys | max stall | time |\n|---|---|---|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range apacheResults {
		faults := r.faults
		if r.note != "" {
			faults += " (" + r.note + ")"
		}
		lost := fmt.Sprint(r.tally.lost)
		if r.tally.phantoms > 0 {
			lost += fmt.Sprintf(" (+%d unknown ids!)", r.tally.phantoms)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %s | %d | %d | %s | %s |\n", r.scenario, r.delivery, faults, r.tally.events, lost,
			r.tally.dups, r.disorder, r.stall.Round(100*time.Millisecond), r.took.Round(time.Second))
	}
	fmt.Fprintf(&b, "\nmode %s, Apache Kafka %s, 3 nodes (RF 3, min.insync.replicas 2), %d scenarios in %s\n",
		p.mode, testenv.ApacheKafkaVersion, len(apacheResults), took.Round(time.Second))
	t.Logf("Apache Kafka chaos results:\n%s", b.String())
	if path := os.Getenv("OUTBOXD_CHAOS_REPORT"); path != "" {
		path = strings.TrimSuffix(path, ".md") + "-apache.md"
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Errorf("write %s: %v", path, err)
		}
	}
}

func deliveryName(eos bool) string {
	if eos {
		return "exactly_once"
	}
	return "at_least_once"
}

// apacheFinish stops the writer and the stall meter, waits for delivery, records the row and
// fails on a lost row, an unknown id, a key out of order, a dead letter, or (exactly_once) a
// duplicate.
func apacheFinish(t *testing.T, f *fixture, c *testenv.ApacheCluster, w *writer, sm *stallMeter, p apachePlan, r apacheResult, started time.Time, dlq string) {
	t.Helper()
	w.stop()
	truth, recs := deliverAll(t, f, p.settle)
	r.stall = max(r.stall, sm.stop())
	r.tally = count(truth, toConsumed(recs))
	var example string
	r.disorder, example = outOfOrder(recs, f.exactlyOnce)
	r.took = time.Since(started)
	apacheMu.Lock()
	apacheResults = append(apacheResults, r)
	apacheMu.Unlock()
	t.Logf("%s (%s): %d events, %d records, %d lost, %d duplicates, %d keys out of order, max stall %v (writer: %d transactions, %d failed attempts)",
		r.scenario, r.delivery, r.tally.events, r.tally.records, r.tally.lost, r.tally.dups, r.disorder, r.stall.Round(100*time.Millisecond),
		w.txs.Load(), w.failures.Load())
	if r.tally.lost > 0 || r.tally.phantoms > 0 {
		t.Errorf("%s: %d committed events lost (e.g. %s), %d unknown ids in Kafka", r.scenario, r.tally.lost, strings.Join(r.tally.lostIDs, " "), r.tally.phantoms)
	}
	if r.disorder > 0 {
		t.Errorf("%s: %d (topic, key) pairs out of commit order, e.g. %s", r.scenario, r.disorder, example)
	}
	if f.exactlyOnce && r.tally.dups > 0 {
		t.Errorf("%s: exactly_once delivered %d duplicates to a read_committed consumer", r.scenario, r.tally.dups)
	}
	if n := deadLetters(t, c, dlq); n > 0 {
		t.Errorf("%s: %d records dead-lettered to %s; a broker failure must block, not dead-letter", r.scenario, n, dlq)
	}
	if r.tally.events < 100 {
		t.Errorf("%s: only %d events written: the scenario did not run under load", r.scenario, r.tally.events)
	}
}

// leaderKill (a): SIGKILL the leader of partition 0 of an outbox topic under load, restart it,
// wait until it is back in every ISR, again and again.
func leaderKill(t *testing.T, c *testenv.ApacheCluster, p apachePlan, eos bool) {
	started := time.Now()
	healthy(t, c)
	prefix := "a-" + deliveryName(eos)
	f := newApacheFixture(t, c, prefix)
	f.exactlyOnce = eos
	addr := freeAddr(t)
	proc := startProc(t, "a", f.config("a", addr, ""), f.dir)
	f.waitStreaming(proc)
	w := startWriter(f.db, p.pause)
	sm := startStallMeter(addr)
	topic := prefix + ".outbox.event.order"
	harness.WaitFor(t, time.Minute, topic+" has a leader", func() bool { proc.MustBeRunning(t); _, err := c.Leader(topic, 0); return err == nil })
	var rejoin time.Duration
	for i := 0; i < p.leaderKills; i++ {
		sleepBetween(time.Second, 3*time.Second)
		proc.MustBeRunning(t)
		id, err := c.Leader(topic, 0)
		if err != nil {
			t.Fatal(err)
		}
		c.Node(id).Kill()
		t.Logf("round %d: SIGKILLed node %d, the leader of %s/0", i+1, id, topic)
		sleepBetween(2*time.Second, 4*time.Second) // under load on two brokers
		startNodes(t, c.Node(id))
		rejoin = max(rejoin, waitISR(t, c, 2*time.Minute))
	}
	f.waitDelivering(proc, 50, time.Minute)
	proc.MustBeRunning(t)
	apacheFinish(t, f, c, w, sm, p, apacheResult{scenario: "SIGKILL the leader of an outbox partition", delivery: deliveryName(eos),
		faults: fmt.Sprintf("%d leader SIGKILLs + restarts", p.leaderKills), note: fmt.Sprintf("slowest ISR rejoin %s", rejoin.Round(100*time.Millisecond))},
		started, prefix+".dlq")
	if code := proc.Term(); code != 0 {
		t.Errorf("SIGTERM exit %d; output:\n%s", code, harness.Tail(proc.Out.String(), 40))
	}
}

// noQuorum (b): two of three brokers down (one SIGKILLed, then one shut down in a controlled
// way, so the survivor leads every partition with an ISR of one: NOT_ENOUGH_REPLICAS; the
// controller quorum is gone too). outboxd must block without dead-lettering or exiting, and
// catch up when the brokers return.
func noQuorum(t *testing.T, c *testenv.ApacheCluster, p apachePlan, eos bool) {
	started := time.Now()
	healthy(t, c)
	prefix := "b-" + deliveryName(eos)
	f := newApacheFixture(t, c, prefix)
	f.exactlyOnce = eos
	addr := freeAddr(t)
	proc := startProc(t, "a", f.config("a", addr, ""), f.dir)
	f.waitStreaming(proc)
	w := startWriter(f.db, p.pause)
	sm := startStallMeter(addr)
	harness.WaitFor(t, time.Minute, "first records acked", func() bool { proc.MustBeRunning(t); v, _ := produced(addr); return v > 0 })
	f.waitDelivering(proc, 50, time.Minute) // the brokers go while outboxd delivers
	x, y := c.Node(1), c.Node(2)
	x.Kill()
	harness.WaitFor(t, time.Minute, "node 1 out of every ISR", func() bool { return notInISR(c, 1) })
	y.Stop()
	down := time.Now()
	t.Logf("nodes 1 (SIGKILL) and 2 (SIGTERM) down; node 3 alone, no controller quorum")
	harness.Hold(min(5*time.Second, p.outage/2), "the outage's first part: acks already on their way may still land")
	before, ok := produced(addr)
	if !ok {
		t.Fatalf("outboxd's /metrics does not answer during the outage")
	}
	harness.Hold(p.outage-time.Since(down), "the rest of the outage under test")
	proc.MustBeRunning(t)
	after, _ := produced(addr)
	if after != before {
		t.Errorf("outboxd acked %v records with only one broker of three in the ISR (min.insync.replicas 2)", after-before)
	}
	// The survivor refused the appends: the fault is the one meant, not a broker outboxd
	// cannot reach.
	refused := strings.Count(nodeLog(t, c.Node(3)), "min.isr requirement of 2 for partition "+prefix+".")
	if refused == 0 {
		t.Errorf("node 3 logged no NotEnoughReplicasException for %s topics during the outage", prefix)
	}
	if !eos && !strings.Contains(proc.Out.String(), "no acknowledgement from Kafka") {
		// The producer retries inside sarama; without the pipeline's stall warning the outage
		// would pass without a log line.
		t.Errorf("outboxd logged no stall warning during a %s outage; output:\n%s", p.outage, harness.Tail(proc.Out.String(), 20))
	}
	startNodes(t, x, y)
	waitISR(t, c, 2*time.Minute)
	f.waitDelivering(proc, 50, time.Minute) // catching up
	proc.MustBeRunning(t)
	apacheFinish(t, f, c, w, sm, p, apacheResult{scenario: "two of three brokers down (no ISR quorum, no controller quorum)", delivery: deliveryName(eos),
		faults: fmt.Sprintf("%s outage", p.outage), note: fmt.Sprintf("0 records acked while down; the survivor refused %d appends with NOT_ENOUGH_REPLICAS", refused)},
		started, prefix+".dlq")
	if code := proc.Term(); code != 0 {
		t.Errorf("SIGTERM exit %d; output:\n%s", code, harness.Tail(proc.Out.String(), 40))
	}
}

// rollingRestart (c): SIGTERM each broker in turn under load, start it again, wait until it is
// back in every ISR, then the next one.
func rollingRestart(t *testing.T, c *testenv.ApacheCluster, p apachePlan, eos bool) {
	started := time.Now()
	healthy(t, c)
	prefix := "c-" + deliveryName(eos)
	f := newApacheFixture(t, c, prefix)
	f.exactlyOnce = eos
	addr := freeAddr(t)
	proc := startProc(t, "a", f.config("a", addr, ""), f.dir)
	f.waitStreaming(proc)
	w := startWriter(f.db, p.pause)
	sm := startStallMeter(addr)
	var rejoin time.Duration
	for pass := 0; pass < p.rollingPasses; pass++ {
		for _, k := range c.Nodes {
			sleepBetween(time.Second, 2*time.Second)
			proc.MustBeRunning(t)
			k.Stop()
			t.Logf("pass %d: node %d stopped (SIGTERM)", pass+1, k.NodeID)
			startNodes(t, k)
			rejoin = max(rejoin, waitISR(t, c, 2*time.Minute))
		}
	}
	f.waitDelivering(proc, 50, time.Minute)
	proc.MustBeRunning(t)
	apacheFinish(t, f, c, w, sm, p, apacheResult{scenario: "rolling restart of all three brokers", delivery: deliveryName(eos),
		faults: fmt.Sprintf("%d × 3 broker SIGTERM + restarts", p.rollingPasses), note: fmt.Sprintf("slowest ISR rejoin %s", rejoin.Round(100*time.Millisecond))},
		started, prefix+".dlq")
	if code := proc.Term(); code != 0 {
		t.Errorf("SIGTERM exit %d; output:\n%s", code, harness.Tail(proc.Out.String(), 40))
	}
}
