package e2e

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
)

// Huge source transactions (issue 13), black-box against the real binary, on both sources and in
// both delivery modes. kcat (librdkafka, read_committed) judges what arrived.

const (
	largeTxRows = 200_000
	// killAfter is how many records of the big transaction must be in the topic before the
	// SIGKILL: half, so that the kill comes while it is being delivered, and a runner that
	// stores a position before every record is acked has had the time to do it (the wait checks
	// the stored position against the topic at every step).
	killAfter = largeTxRows / 2
	preFirst  = 1_000_000 // rows of the small transaction written before the big one
)

// TestLargeTxCrash: one transaction of 200,000 outbox rows; outboxd is SIGKILLed while its
// records are being written to Kafka (half of them in the topic). Until then, at every step, a
// stored position that covers the transaction must come with all of its records in the topic.
// While it is dead the stored position (at_least_once: the offsets file; exactly_once: the last
// position in offsets.topic visible to read_committed) does not cover the transaction and still
// covers the one before (on PostgreSQL it may have moved to a keepalive position inside the big
// transaction's WAL, before its commit: idle progress, from which the transaction is read
// again); exactly_once: read_committed (kcat) sees none of the transaction's records although
// they are in the log. After a restart every row arrives (at_least_once: duplicates allowed;
// exactly_once: read_committed sees each row exactly once and nothing else).
func TestLargeTxCrash(t *testing.T) {
	for _, src := range []string{"postgres", "mariadb"} {
		for _, mode := range []string{"at_least_once", "exactly_once"} {
			t.Run(src+"/"+mode, func(t *testing.T) {
				parallelOnKfake(t)
				testLargeTxCrash(t, crashCase{src: src, eos: mode == "exactly_once", rows: largeTxRows})
			})
		}
	}
}

// heldRows is the size of the transaction of TestLargeTxCrashHeldRecord.
const heldRows = 20_000

// TestLargeTxCrashHeldRecord is TestLargeTxCrash with the window made certain: the first row of
// the transaction goes to topic outbox.event.held, whose produce requests kfake refuses
// (NOT_ENOUGH_REPLICAS, retried) until the restart. outboxd writes every other record of the
// transaction to Kafka, and for 2 s more the stored position must still not cover it (a runner
// that stores a position before every record of the transaction is acked, e.g. at its last
// chunk, fails here); then SIGKILL and the checks of TestLargeTxCrash.
func TestLargeTxCrashHeldRecord(t *testing.T) {
	kfakeOnly(t, "refuses one topic's produce requests with a kfake fault hook (a single Apache Kafka node cannot refuse them retriably for one topic)")
	for _, src := range []string{"postgres", "mariadb"} {
		for _, mode := range []string{"at_least_once", "exactly_once"} {
			t.Run(src+"/"+mode, func(t *testing.T) {
				parallelOnKfake(t)
				testLargeTxCrash(t, crashCase{src: src, eos: mode == "exactly_once", rows: heldRows, held: true})
			})
		}
	}
}

// parallelOnKfake runs the subtests of one test at once on kfake (each has its own broker and
// database); on Apache Kafka they share the node, whose topics every test deletes first.
func parallelOnKfake(t *testing.T) {
	if !onApache() {
		t.Parallel()
	}
}

type crashCase struct {
	src  string
	eos  bool
	rows int
	held bool // the transaction's first row to heldTopic, refused until the restart
}

func testLargeTxCrash(t *testing.T, cc crashCase) {
	t0 := time.Now()
	b := newBigEnv(t, cc.src, cc.eos)
	addr := b.broker.Addr()
	p := b.start()
	pre := b.insert(preFirst, 3)
	b.waitCovered(pre, 30*time.Second, "a small transaction first")
	p0 := b.position()
	hwm0, lso0 := endOffsets(t, addr, bigTopic)

	killAt, hit, release := int64(cc.rows/2), func() bool { return true }, func() {}
	hits := func() int { return 0 }
	if cc.held {
		f := b.broker.Cluster().Fault(kfakeNER(heldTopic))
		t.Cleanup(f.Remove)
		hit, release = func() bool { return f.Hits() > 0 }, f.Remove
		hits = func() int { return int(f.Hits()) }
		killAt, b.held = int64(cc.rows-1), 1
	}
	big := b.insert(1, cc.rows)
	tIns := time.Now()
	var inTopic int64
	noCover := func() {
		var pos string
		if !b.eos { // the file: cheap to read at every step (read before the topic: see below)
			pos = b.position()
		}
		h, _ := endOffsets(t, addr, bigTopic)
		inTopic = h - hwm0
		// A position stored after every record was acked is read before offsets that include them.
		if pos != "" && big.covers(pos) && (cc.held || inTopic < int64(cc.rows)) {
			t.Fatalf("stored position %s covers the big transaction (%s) with only %d of its %d records in Kafka", pos, big.mark, inTopic, cc.rows)
		}
	}
	harness.WaitFor(t, 3*time.Minute, "records of the big transaction in Kafka", func() bool {
		select {
		case <-p.Done:
			t.Fatalf("outboxd exited %d while delivering the big transaction:\n%s", p.Code, p.Out.String())
		default:
		}
		noCover()
		return inTopic >= killAt && hit()
	})
	if cc.held { // every record but the held one is in Kafka: a wrong runner stores now
		// Three more refusals of the held record: outboxd's pipeline has gone on retrying it with
		// everything else acked, long enough for its offsets loop (every 20 ms) to store.
		h0 := hits()
		harness.WaitFor(t, 30*time.Second, "three more refusals of the held record", func() bool {
			noCover()
			if pos := b.position(); big.covers(pos) {
				t.Fatalf("stored position %s covers the big transaction (%s) while its first record is not acked", pos, big.mark)
			}
			return hits() >= h0+3
		})
	}
	p.Stop(t, syscall.SIGKILL)
	release()
	hwm, lso := endOffsets(t, addr, bigTopic)
	t.Logf("SIGKILL %v after the commit: %d of %d records in the topic, %d once the kill settled (read_committed end moved by %d)",
		time.Since(tIns).Round(time.Millisecond), inTopic, cc.rows, hwm-hwm0, lso-lso0)

	recs := b.kcatCounts()
	got := 0
	for _, id := range big.ids() {
		if recs[id] > 0 {
			got++
		}
	}
	if got == cc.rows {
		t.Fatalf("every record of the big transaction was in Kafka (read_committed) at the kill: the test missed the window it tests (kill after %d)", killAt)
	}
	pos := b.position()
	if !pre.covers(pos) {
		t.Fatalf("stored position %q no longer covers the small transaction before (%s); was %q", pos, pre.mark, p0)
	}
	if big.covers(pos) {
		t.Fatalf("stored position %q covers the big transaction (%s), which was not delivered whole", pos, big.mark)
	}
	if cc.eos && got != 0 {
		t.Fatalf("read_committed (kcat) sees %d of the big transaction's %d records after the kill: a partial transaction is visible", got, cc.rows)
	}
	t.Logf("while dead: stored position %q (before the transaction), kcat read_committed sees %d of its records", pos, got)

	p = b.start()
	b.waitCovered(big, 4*time.Minute, "after the restart")
	want := append(pre.ids(), big.ids()...)
	recs = b.kcatCounts()
	missing, dups := 0, 0
	for _, id := range want {
		switch n := recs[id]; {
		case n == 0:
			missing++
		case n > 1:
			dups += n - 1
		}
	}
	t.Logf("after the restart: kcat read_committed %d distinct ids, %d missing, %d duplicates (%d rows written)", len(recs), missing, dups, len(want))
	if missing > 0 {
		t.Fatalf("%d of %d rows never arrived", missing, len(want))
	}
	if cc.eos {
		if dups > 0 || len(recs) != len(want) {
			t.Fatalf("exactly_once: %d duplicates, %d distinct ids (want 0 duplicates, %d ids)", dups, len(recs), len(want))
		}
		// A second judge (franz-go, read_committed). Not expectExactlyOnce: its 1.5 s final read
		// does not get through 200,000 records on a loaded machine with Apache Kafka.
		got := testenv.Consume(t, addr, eventsPattern, len(want), 2*time.Minute)
		if n, d := countDistinct(got); n != len(want) || d != 0 || len(hasAll(got, want)) != 0 {
			t.Fatalf("exactly_once, franz-go read_committed: %d records, %d distinct, %d duplicates (want %d once each)", len(got), n, d, len(want))
		}
	}
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
	t.Logf("%s: %v", t.Name(), time.Since(t0).Round(time.Millisecond))
}

// chunkedRows is the size of the transaction of TestLargeTxChunkedStopRestart: many times the
// sources' chunk (1024 rows by default) and kafka.max_inflight (4096 by default).
const chunkedRows = 50_000

// TestLargeTxChunkedStopRestart: a transaction of 50,000 rows, far more than one chunk and than
// kafka.max_inflight, on both sources and in both modes. With Kafka refusing every produce
// (kfake: NOT_ENOUGH_REPLICAS, retried; Apache Kafka: frozen), outboxd takes only part of the
// transaction from the source (outboxd_events_read_total stays at most half of it: the
// transaction is handed over in chunks and backpressure holds the rest in the database; a source
// that hands it over whole fails here). A SIGTERM in that state is a clean stop (exit 0) that
// stores no position covering the transaction (exactly_once: nothing of it visible). After a
// restart every row arrives, per key in commit order (at_least_once: the rows delivered before
// the stop again from the first, as a new run; exactly_once: each once, in one run), and the
// stored position covers the transaction only once all of it is in Kafka.
func TestLargeTxChunkedStopRestart(t *testing.T) {
	for _, src := range []string{"postgres", "mariadb"} {
		for _, mode := range []string{"at_least_once", "exactly_once"} {
			t.Run(src+"/"+mode, func(t *testing.T) { parallelOnKfake(t); testLargeTxChunked(t, src, mode == "exactly_once") })
		}
	}
}

func testLargeTxChunked(t *testing.T, src string, eos bool) {
	t0 := time.Now()
	b := newBigEnv(t, src, eos)
	b.serveMetrics()
	addr := b.broker.Addr()
	p := b.start()
	pre := b.insert(preFirst, 3)
	b.waitCovered(pre, 30*time.Second, "a small transaction first")

	hit, release := b.stallTopic()
	big := b.insert(1, chunkedRows)
	// Wait until reading stops: the counter has not moved for 2 s with rows of the big
	// transaction taken and a produce refused.
	last, since := -1, time.Now()
	harness.WaitFor(t, 2*time.Minute, "outboxd to stop taking rows while Kafka refuses them", func() bool {
		select {
		case <-p.Done:
			t.Fatalf("outboxd exited %d under the stall:\n%s", p.Code, p.Out.String())
		default:
		}
		n := b.eventsRead()
		if n != last {
			last, since = n, time.Now()
			return false
		}
		// (Apache Kafka frozen, exactly_once may take none: its loop waits in the producer.)
		return n >= len(pre.ids()) && hit() && time.Since(since) >= 2*time.Second
	})
	taken := last - len(pre.ids())
	t.Logf("under the stall outboxd took %d of the transaction's %d rows from the source", taken, chunkedRows)
	if taken > chunkedRows/2 {
		t.Fatalf("under the stall outboxd took %d of the transaction's %d rows: it holds the transaction whole instead of in chunks", taken, chunkedRows)
	}

	// The loop may be inside a producer call that waits for the stalled broker (seen: exactly_once
	// on a frozen Apache Kafka node) and acts on the signal when that returns: Kafka answers
	// again once the stop has begun, or after 3 s.
	p.Signal(syscall.SIGTERM)
	began := harness.Until(3*time.Second, 50*time.Millisecond, func() error {
		if strings.Contains(p.Out.String(), "stopping: no more reads") {
			return nil
		}
		return errors.New("no stop line yet")
	}) == nil
	release()
	if !began {
		t.Logf("SIGTERM: no %q line within 3 s of the signal with Kafka stalled (it comes once Kafka answers)", "stopping: no more reads")
	}
	if code := p.WaitExit(t, 40*time.Second, "SIGTERM"); code != 0 {
		t.Fatalf("SIGTERM in the middle of the transaction: exit %d, want 0 (a clean stop)", code)
	}
	pos := b.position()
	if big.covers(pos) || !pre.covers(pos) {
		t.Fatalf("after the stop the stored position is %q: it must cover the small transaction (%s) and not the big one (%s)", pos, pre.mark, big.mark)
	}
	got := 0
	counts := b.kcatCounts()
	for _, id := range big.ids() {
		if counts[id] > 0 {
			got++
		}
	}
	t.Logf("after the stop: stored position %q, kcat read_committed sees %d of the transaction's rows", pos, got)
	if eos && got != 0 {
		t.Fatalf("exactly_once: %d rows of the unfinished transaction visible to read_committed after the stop", got)
	}

	p = b.start()
	harness.WaitFor(t, 3*time.Minute, "the stored position covers the big transaction ("+big.mark+")", func() bool {
		select {
		case <-p.Done:
			t.Fatalf("outboxd exited %d:\n%s", p.Code, p.Out.String())
		default:
		}
		pos := b.position()
		if !big.covers(pos) {
			return false
		}
		// Stored once every record was acked: the records are in the log (and visible, for
		// exactly_once) by now.
		counts := b.kcatCounts()
		for _, id := range big.ids() {
			if counts[id] == 0 {
				t.Fatalf("stored position %q covers the big transaction while row %s is not in Kafka", pos, id)
			}
		}
		return true
	})
	recs := kcatRecords(t, addr, bigTopic)
	runs := checkPerKeyOrder(t, recs, big)
	counts = idCounts(recs)
	dups := 0
	for _, id := range append(pre.ids(), big.ids()...) {
		if counts[id] == 0 {
			t.Fatalf("row %s never arrived", id)
		}
		dups += counts[id] - 1
	}
	t.Logf("after the restart: every row in Kafka, per key in commit order in %d run(s), %d duplicates", runs, dups)
	if eos && (dups != 0 || runs != 1 || len(counts) != chunkedRows+len(pre.ids())) {
		t.Fatalf("exactly_once: %d duplicates, %d runs, %d distinct ids (want 0, 1, %d)", dups, runs, len(counts), chunkedRows+len(pre.ids()))
	}
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
	t.Logf("%s: %v", t.Name(), time.Since(t0).Round(time.Millisecond))
}

// checkPerKeyOrder checks the records of x in recs (per partition, in offset order): for each key
// they are one or more runs, each run the key's rows in commit order from the transaction's
// first row of that key on (a redelivery after a restart begins a new run at that first row),
// and the last run has every row of the key. It returns the largest number of runs of any key.
func checkPerKeyOrder(t *testing.T, recs map[int32][]kcatRec, x bigTx) int {
	t.Helper()
	want := map[string][]int{} // key -> its rows of x in commit order
	for i := x.first; i < x.first+x.n; i++ {
		want[bigKey(i)] = append(want[bigKey(i)], i)
	}
	next, runs, part := map[string]int{}, map[string]int{}, map[string]int32{}
	for p, rs := range recs {
		for _, r := range rs {
			i := bigIndex(r.id)
			if i < x.first || i >= x.first+x.n {
				continue
			}
			k := bigKey(i)
			if r.key != k {
				t.Fatalf("row %d has key %q, want %q", i, r.key, k)
			}
			if q, ok := part[k]; ok && q != p {
				t.Fatalf("key %s in partitions %d and %d", k, q, p)
			}
			part[k] = p
			w := want[k]
			switch {
			case next[k] < len(w) && w[next[k]] == i:
				if next[k] == 0 {
					runs[k]++
				}
				next[k]++
			case w[0] == i: // the transaction again from its start (a restart)
				runs[k]++
				next[k] = 1
			default:
				exp := "nothing (the key was complete)"
				if next[k] < len(w) {
					exp = fmt.Sprintf("row %d", w[next[k]])
				}
				t.Fatalf("key %s, partition %d: row %d after %d rows of the run; want %s or a new run from row %d", k, p, i, next[k], exp, w[0])
			}
		}
	}
	most := 0
	for k, w := range want {
		if next[k] != len(w) {
			t.Fatalf("key %s: the last run ends after %d of its %d rows", k, next[k], len(w))
		}
		most = max(most, runs[k])
	}
	return most
}
