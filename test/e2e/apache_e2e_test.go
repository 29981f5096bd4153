package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
)

// Broker faults a real broker produces, and kcat (librdkafka, read_committed) as an independent
// judge. Every e2e test runs on kfake and, with OUTBOXD_TEST_KAFKA=apache, on Apache Kafka 4.4
// (brokers_test.go); these are the tests of what the broker itself does when it goes away.

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

// txWriter commits outbox rows in small transactions until stopped and keeps, per transaction,
// its ids and an LSN inside it (a stored position covers the transaction iff it is past it).
type txWriter struct {
	stop chan struct{}
	done chan []writtenTx
	n    atomic.Int64 // transactions committed so far
}

type writtenTx struct {
	ids []string
	in  string
}

func (e *env) startTxWriter(agg string) *txWriter {
	w := &txWriter{stop: make(chan struct{}), done: make(chan []writtenTx, 1)}
	c := e.conn()
	go func() {
		var txs []writtenTx
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				w.done <- txs
				return
			default:
			}
			ids, in := e.insertInTx(c, fmt.Sprintf("%s%d", agg, i%5), 1+i%3)
			txs = append(txs, writtenTx{ids, in})
			w.n.Add(1)
			harness.Hold(20*time.Millisecond, "paces the writer")
		}
	}()
	return w
}

func (w *txWriter) finish() []writtenTx { close(w.stop); return <-w.done }

// waitWritten waits until w has committed n more transactions than now.
func (e *env) waitWritten(w *txWriter, n int64, within time.Duration) {
	e.t.Helper()
	base := w.n.Load()
	harness.WaitFor(e.t, within, fmt.Sprintf("%d more transactions written", n), func() bool { return w.n.Load() >= base+n })
}

func allIDs(txs []writtenTx) []string {
	var out []string
	for _, tx := range txs {
		out = append(out, tx.ids...)
	}
	return out
}

// watchOutage checks, until outboxd has sent two standby status updates after the outage began
// (it has had a whole status interval to confirm, wrongly, what Kafka never acked), that outboxd
// keeps running and that neither the stored position nor the slot passes bound (nothing after it
// can have been acked); it returns the last stored position seen.
func (e *env) watchOutage(p *harness.Proc, c *pgx.Conn, bound string, since time.Time) string {
	e.t.Helper()
	t := e.t
	var last string
	e.waitStatusRepliesAfter(c, since, 30*time.Second, func() {
		select {
		case <-p.Done:
			t.Fatalf("outboxd exited %d while the broker was down (it must block and retry):\n%s", p.Code, p.Out.String())
		default:
		}
		last = e.storedPosition()
		if lsn(t, last) > lsn(t, bound) {
			t.Fatalf("stored position %s passed %s while the broker was down", last, bound)
		}
		if conf := e.slotConfirmed(c); lsn(t, conf) > lsn(t, bound) {
			t.Fatalf("slot confirmed %s passed %s while the broker was down", conf, bound)
		}
	})
	return last
}

// TestBrokerKilledWhileRunning (at_least_once): the broker is killed under load (Apache Kafka:
// SIGKILL of the single node; kfake: closed, state on disk). outboxd keeps running and neither
// the stored position nor the slot moves past the WAL at the kill; then outboxd is killed too.
// After the broker restarts, Kafka holds every transaction the stored position covers (the
// position was never ahead of the acks), and a restarted outboxd delivers every row. (A broker
// back while outboxd runs: TestEOSBrokerOutage, TestSlotNeverPassesKafkaAcks.)
func TestBrokerKilledWhileRunning(t *testing.T) {
	b := newRestartableBroker(t)
	e := newEnvOn(t, b.b, "")
	c := e.conn()
	p := e.start()
	e.deliveredAndStored("before", 2)

	w := e.startTxWriter("k")
	e.waitFlowing(20, 30*time.Second) // the broker dies under load
	b.kill()
	killedAt, since := e.walLSN(c), time.Now()
	// Rows keep coming after the kill: WAL past killedAt that outboxd must not confirm.
	e.waitWritten(w, 20, 30*time.Second)
	e.watchOutage(p, c, killedAt, since)
	p.Stop(t, syscall.SIGKILL)
	txs := w.finish()
	stored := e.storedPosition()
	if lsn(t, stored) > lsn(t, killedAt) {
		t.Fatalf("stored position %s passed %s, the WAL at the broker's kill", stored, killedAt)
	}
	b.start(t)
	held := map[string]bool{}
	for _, id := range ids(testenv.ConsumeAll(t, e.broker.Addr(), `outbox\.event\.order`)) {
		held[id] = true
	}
	covered := 0
	for _, tx := range txs {
		if lsn(t, stored) <= lsn(t, tx.in) {
			continue
		}
		covered++
		for _, id := range tx.ids {
			if !held[id] {
				t.Fatalf("row %s: its transaction (inside it: %s) is covered by the stored position %s, but Kafka does not hold it", id, tx.in, stored)
			}
		}
	}
	if covered == 0 {
		t.Fatalf("the stored position %s covers none of the %d transactions written before the kill: nothing was checked", stored, len(txs))
	}
	t.Logf("stored position %s covers %d of %d transactions, all in Kafka after the broker's restart", stored, covered, len(txs))
	want := allIDs(txs)
	p = e.start()
	harness.WaitFor(t, 60*time.Second, "every row delivered after outboxd restarted", func() bool {
		return hasAll(testenv.Consume(t, e.broker.Addr(), `outbox\.event\..*`, len(want), 2*time.Second), want) == nil
	})
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
}

// TestTopicDeletedWhileRunning (Apache Kafka, auto.create.topics.enable=false): the outbox topic
// is deleted while outboxd runs and rows keep coming. outboxd must not skip them: it blocks (or
// stops loudly), never dead-letters them, never stores a position past them; once the topic
// exists again every row written after the deletion arrives.
func TestTopicDeletedWhileRunning(t *testing.T) {
	apacheOnly(t, "kfake's test broker always auto-creates topics; the case is a topic gone on a broker that does not")
	_, b := newPrivateApache(t, testenv.ApacheOpts{Props: []string{"auto.create.topics.enable=false"}})
	e := newEnvOn(t, b, "")
	a := e.admin()
	createTopic(t, a, "outbox.event.order", nil)
	c := e.conn()
	p := e.start()
	e.deliveredAndStored("before", 2)
	storedBefore := e.storedPosition()

	if err := a.DeleteTopic("outbox.event.order"); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 30*time.Second, "the topic gone from the metadata", func() bool {
		ts, err := a.ListTopics()
		_, there := ts["outbox.event.order"]
		return err == nil && !there
	})
	first, firstIn := e.insertInTx(c, "after", 2)
	want := first
	for i := 0; i < 4; i++ {
		ids, _ := e.insertInTx(c, fmt.Sprintf("after%d", i), 1)
		want = append(want, ids...)
	}
	// Without the topic outboxd retries (it says so: the ack-stall warning) or stops; until one
	// of them, and two standby status updates after the rows (a whole status interval to
	// confirm them, wrongly), the position stays before the rows.
	exited := false
	notPast := func() {
		if s := e.storedPosition(); lsn(t, s) > lsn(t, firstIn) {
			t.Fatalf("stored position %s passed the first row written after the deletion (inside its transaction: %s)", s, firstIn)
		}
	}
	written := time.Now()
	harness.WaitFor(t, 60*time.Second, "outboxd stopping, or warning that Kafka does not acknowledge", func() bool {
		notPast()
		exited = p.Exited()
		return exited || strings.Contains(p.Out.String(), "no acknowledgement from Kafka")
	})
	if !exited {
		e.waitStatusRepliesAfter(c, written, 30*time.Second, notPast)
	}
	notPast()
	out := p.Out.String()
	if strings.Contains(out, "dead-lettering") {
		t.Fatalf("rows for a deleted topic were dead-lettered:\n%s", out)
	}
	if exited {
		t.Logf("outboxd exited %d without the topic:\n%s", p.Code, out)
		if p.Code != 1 || !strings.Contains(out, "outbox.event.order") {
			t.Fatalf("outboxd exited %d without naming the topic; want exit 1 naming outbox.event.order:\n%s", p.Code, out)
		}
	} else {
		// The producer retries a missing topic inside sarama (metadata refresh), so only the
		// pipeline's ack-stall warning tells the operator.
		harness.WaitFor(t, 30*time.Second, "the ack-stall warning", func() bool {
			return strings.Contains(p.Out.String(), "no acknowledgement from Kafka")
		})
		out = p.Out.String()
		var said []string
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
				said = append(said, l)
			}
		}
		t.Logf("outboxd keeps running without the topic (stored position %s, was %s); its warnings:\n%s", e.storedPosition(), storedBefore, strings.Join(said, "\n"))
	}
	if conf := e.slotConfirmed(c); lsn(t, conf) > lsn(t, firstIn) {
		t.Fatalf("slot confirmed %s past the first undelivered row (%s)", conf, firstIn)
	}

	createTopic(t, a, "outbox.event.order", nil)
	if exited {
		p = e.start()
	}
	harness.WaitFor(t, 90*time.Second, "every row written after the deletion delivered to the new topic", func() bool {
		return hasAll(testenv.Consume(t, e.broker.Addr(), `outbox\.event\.order`, len(want), 2*time.Second), want) == nil
	})
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d:\n%s", code, p.Out.String())
	}
}
