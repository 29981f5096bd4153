package e2e

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
)

// Tests of failure handling against the real PostgreSQL, the kfake broker over TCP and the real
// binary: poison rows go to the DLQ while the stream moves on; transient errors block and are
// never dead-lettered; an unwritable DLQ and kafka.dlq_max_rate stop outboxd; `outboxd dlq tail`
// and `outboxd dlq replay`.

// TestDLQPoisonRowsTailAndReplay: a stream of good rows mixed with every kind of poison row.
// Good records arrive in order, each poison one is in the DLQ with the contract's headers, the
// stored position passes them, the metric counts them; `dlq tail` shows them; `dlq replay`
// reports what still fails and, once the topics are fixed, delivers them. The size refusal is the
// broker's own (a topic created with a small max.message.bytes), on kfake and on Apache Kafka.
// The poison row inside a transaction of good rows is refused by authorization on kfake (a fault
// hook); on Apache Kafka, which runs without an authorizer here (ACLs are the security tests'),
// it is a second too-large record, on its own small-limit topic.
func TestDLQPoisonRowsTailAndReplay(t *testing.T) {
	start := time.Now().Add(-time.Second)
	e := newEnv(t, "outbox:\n  headers:\n    type: eventType\n")
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", port)
	e.editConfig(`listen: ""`, "listen: "+metricsAddr)

	// A topic whose max.message.bytes the big payload exceeds (kfake checks a produce request's
	// record batch against it, as Kafka does), and one whose writes fail authorization.
	admin := clusterAdmin(t, e.broker.Addr())
	if err := admin.CreateTopic("outbox.event.big", &sarama.TopicDetail{NumPartitions: 3, ReplicationFactor: 1,
		ConfigEntries: map[string]*string{"max.message.bytes": sp("4096")}}, false); err != nil {
		t.Fatal(err)
	}
	if v := topicConfig(t, admin, "outbox.event.big", "max.message.bytes"); v != "4096" {
		t.Fatalf("outbox.event.big max.message.bytes = %q, want 4096", v)
	}
	blob := make([]byte, 9000)
	rand.Read(blob)
	bigPayload := fmt.Sprintf(`{"blob": "%s"}`, base64.StdEncoding.EncodeToString(blob)) // ~12 kB, barely compressible
	inTx := dlqPoison{name: "secret", reason: "topic_authorization_failed", topic: "outbox.event.secret", row: dlqRow{sp("secret"), sp("ks"), `{"s": 1}`}}
	var fixInTx func()
	if onApache() {
		inTx = dlqPoison{name: "big2", reason: "record_too_large", topic: "outbox.event.big2", row: dlqRow{sp("big2"), sp("kbig2"), bigPayload}}
		createTopic(t, admin, "outbox.event.big2", map[string]string{"max.message.bytes": "4096"})
		fixInTx = func() { setTopicConfig(t, admin, "outbox.event.big2", "max.message.bytes", sp("1048576")) }
	} else {
		auth := e.broker.Cluster().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "outbox.event.secret",
			Err: kerr.TopicAuthorizationFailed, Count: -1})
		fixInTx = auth.Remove
	}

	p := e.start()
	c := e.conn()

	type poison struct {
		name, reason, stage, topic string
		row                        dlqRow
		id                         string
	}
	poisons := []*poison{
		{name: "big", reason: "record_too_large", stage: "produce", topic: "outbox.event.big", row: dlqRow{sp("big"), sp("kbig"), bigPayload}},
		{name: "null aggregatetype", reason: "missing_column", stage: "transform", topic: "", row: dlqRow{nil, sp("k1"), `{"x": 1}`}},
		{name: "space", reason: "invalid_topic", stage: "transform", topic: "outbox.event.has space", row: dlqRow{sp("has space"), sp("k2"), `{}`}},
		{name: "bang", reason: "invalid_topic", stage: "transform", topic: "outbox.event.bang!", row: dlqRow{sp("bang!"), sp("k3"), `{}`}},
		{name: "null aggregateid", reason: "missing_column", stage: "transform", topic: "outbox.event.order", row: dlqRow{sp("order"), nil, `{}`}},
		{name: inTx.name, reason: inTx.reason, stage: "produce", topic: inTx.topic, row: inTx.row},
	}
	walStart := lsn(t, e.walLSN(c))
	var good []string
	n := 0
	for _, ps := range poisons[:5] { // good, poison, good, poison, ...
		good = append(good, e.insertTx(c, goodRow(n))...)
		n++
		ps.id = e.insertTx(c, ps.row)[0]
	}
	// One transaction holding good rows around a poison one.
	ids3 := e.insertTx(c, goodRow(n), poisons[5].row, goodRow(n+1))
	good = append(good, ids3[0], ids3[2])
	poisons[5].id = ids3[1]
	walAfterPoison := e.walLSN(c)
	good = append(good, e.insertTx(c, goodRow(n+2))...)

	// Every good record, in commit order (one key: one partition).
	// Once the stored position covers the last commit, every record before it was acked or
	// dead-lettered: the topics hold the whole output, a poison row delivered after all included.
	e.waitStored(e.walLSN(c), 30*time.Second)
	got := testenv.ConsumeAll(t, e.broker.Addr(), `outbox\.event\..*`)
	if strings.Join(ids(got), ",") != strings.Join(good, ",") {
		t.Fatalf("delivered %v\nwant      %v\noutput:\n%s", ids(got), good, p.Out.String())
	}

	// Every poison row in the DLQ with the contract's headers.
	dlq := testenv.Consume(t, e.broker.Addr(), `outboxd\.dlq`, len(poisons), 20*time.Second)
	if len(dlq) != len(poisons) {
		t.Fatalf("%d dead letters, want %d: %v\noutput:\n%s", len(dlq), len(poisons), ids(dlq), p.Out.String())
	}
	dl := byEventID(dlq)
	for _, ps := range poisons {
		r, ok := dl[ps.id]
		if !ok {
			t.Errorf("%s: no dead letter with header id=%s", ps.name, ps.id)
			continue
		}
		h := r.Header
		if h("outboxd.error.reason") != ps.reason || h("outboxd.error.stage") != ps.stage || h("outboxd.original.topic") != ps.topic ||
			h("outboxd.source.table") != "public.outbox" || h("outboxd.error.message") == "" {
			t.Errorf("%s: headers %v", ps.name, r.Headers)
		}
		pos := lsn(t, h("outboxd.source.position"))
		if pos <= walStart || pos > lsn(t, walAfterPoison) {
			t.Errorf("%s: outboxd.source.position %s not within this test's WAL (%s, %s]", ps.name, h("outboxd.source.position"), walStart, walAfterPoison)
		}
		if ts, err := time.Parse(time.RFC3339, h("outboxd.error.time")); err != nil || ts.Before(start.Truncate(time.Second)) || ts.After(time.Now()) {
			t.Errorf("%s: outboxd.error.time %q (%v)", ps.name, h("outboxd.error.time"), err)
		}
		if ps.stage == "produce" {
			// The original record: key, value, headers.
			if string(r.Key) != *ps.row.aggID || h("eventType") != "created" || !json.Valid(r.Value) {
				t.Errorf("%s: key %q eventType %q value %.60s", ps.name, r.Key, h("eventType"), r.Value)
			}
		} else {
			// The row as a JSON object of column to text.
			var row map[string]*string
			if err := json.Unmarshal(r.Value, &row); err != nil || row["id"] == nil || *row["id"] != ps.id ||
				(ps.row.aggType == nil) != (row["aggregatetype"] == nil) || (ps.row.aggID == nil) != (row["aggregateid"] == nil) {
				t.Errorf("%s: value %s (%v)", ps.name, r.Value, err)
			}
		}
	}
	// The size limit was the broker's (the topic's max.message.bytes), not the producer's.
	if m := dl[poisons[0].id].Header("outboxd.error.message"); strings.Contains(m, "kafka.max_record_bytes") || !strings.Contains(m, "partition") {
		t.Errorf("record_too_large message %q: not the broker's refusal", m)
	}

	// The stored position passes every poison row.
	harness.WaitFor(t, 10*time.Second, "position stored past the poison rows", func() bool {
		return lsn(t, e.storedPosition()) >= lsn(t, walAfterPoison)
	})
	wantMetric := map[string]int{}
	for _, ps := range poisons {
		wantMetric[ps.reason]++
	}
	if m := dlqMetric(t, metricsAddr); fmt.Sprint(m) != fmt.Sprint(wantMetric) {
		t.Errorf("outboxd_dlq_events_total: %v, want %v", m, wantMetric)
	}
	out := p.Out.String()
	if strings.Count(out, "dead-lettering record") != len(poisons) || strings.Contains(out, bigPayload[20:60]) {
		t.Errorf("want one log line per dead letter, without the payload:\n%s", out)
	}

	// dlq tail: one line per dead letter, never the payload.
	stdout, stderr, code := e.dlqRun("tail")
	if code != 0 || strings.Count(stdout, "\n") != len(poisons) || strings.Contains(stdout, bigPayload[20:60]) {
		t.Fatalf("dlq tail: exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, ps := range poisons {
		line := ""
		for _, l := range strings.Split(stdout, "\n") {
			if strings.Contains(l, " id="+ps.id+" ") {
				line = l
			}
		}
		if !strings.Contains(line, "reason="+ps.reason+" stage="+ps.stage) || !strings.Contains(line, "table=public.outbox position=0/") ||
			!strings.Contains(line, "message=") || (ps.topic != "" && !strings.Contains(line, "topic=")) || !strings.HasPrefix(line, "time=20") {
			t.Errorf("dlq tail line for %s: %q", ps.name, line)
		}
	}
	// dlq tail --json: the value and every header.
	stdout, stderr, code = e.dlqRun("tail", "--json")
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if code != 0 || len(lines) != len(poisons) {
		t.Fatalf("dlq tail --json: exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, l := range lines {
		var j struct {
			ID            string            `json:"id"`
			OriginalTopic string            `json:"original_topic"`
			Value         *string           `json:"value"`
			Headers       map[string]string `json:"headers"`
		}
		if err := json.Unmarshal([]byte(l), &j); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		if j.ID == poisons[0].id && (j.Value == nil || *j.Value != bigPayload || j.Headers["eventType"] != "created" ||
			j.Headers["outboxd.error.reason"] != "record_too_large" || j.OriginalTopic != "outbox.event.big") {
			t.Errorf("dlq tail --json, big record: %.300s", l)
		}
	}

	// dlq tail --follow prints the same and runs until interrupted (exit 0).
	follow := exec.Command(binPath, "dlq", "tail", "--follow", "-c", e.cfgPath)
	fout := &harness.SyncBuf{}
	follow.Stdout, follow.Stderr = fout, fout
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 15*time.Second, "dlq tail --follow output", func() bool { return strings.Count(fout.String(), "\n") >= len(poisons) })
	follow.Process.Signal(syscall.SIGINT)
	if err := follow.Wait(); err != nil {
		t.Errorf("dlq tail --follow after SIGINT: %v\n%s", err, fout.String())
	}

	// dlq replay: usage, records that still fail, a row that never was a record.
	if _, stderr, code := e.dlqRun("replay"); code != 2 || !strings.Contains(stderr, "--all") {
		t.Errorf("dlq replay without --id/--all: exit %d %s", code, stderr)
	}
	big, secret := poisons[0].id, poisons[5].id
	stdout, stderr, code = e.dlqRun("replay", "--id", big, "--id", secret)
	if code != 1 || !strings.Contains(stdout, "failed dlq=") || !strings.Contains(stdout, "record_too_large") ||
		!strings.Contains(stdout, inTx.reason) || !strings.Contains(stdout, "0 replayed, 2 failed") {
		t.Fatalf("replay of still-failing records: exit %d\n%s\n%s", code, stdout, stderr)
	}
	stdout, stderr, code = e.dlqRun("replay", "--id", poisons[1].id)
	if code != 1 || !strings.Contains(stdout, "not replayable") {
		t.Errorf("replay of a row-as-JSON dead letter: exit %d\n%s\n%s", code, stdout, stderr)
	}
	// Nothing was written back to the DLQ.
	if n := len(testenv.ConsumeAll(t, e.broker.Addr(), `outboxd\.dlq`)); n != len(poisons) {
		t.Errorf("the DLQ holds %d records after failed replays, want %d", n, len(poisons))
	}

	// Fix the topics, replay: delivered with the original key, value and headers.
	fixInTx()
	if err := admin.AlterConfig(sarama.TopicResource, "outbox.event.big", map[string]*string{"max.message.bytes": sp("1048576")}, false); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code = e.dlqRun("replay", "--id", big, "--id", secret)
	if code != 0 || strings.Count(stdout, "replayed dlq=") != 2 || !strings.Contains(stdout, "2 replayed, 0 failed") {
		t.Fatalf("replay after the fix: exit %d\n%s\n%s", code, stdout, stderr)
	}
	replayed := byEventID(testenv.Consume(t, e.broker.Addr(), `outbox\.event\.(big|big2|secret)`, 2, 10*time.Second))
	for _, ps := range []*poison{poisons[0], poisons[5]} {
		r, ok := replayed[ps.id]
		orig := dl[ps.id]
		if !ok || r.Topic != ps.topic || string(r.Key) != string(orig.Key) || string(r.Value) != string(orig.Value) ||
			r.Header("eventType") != "created" || len(r.Headers) != 2 {
			t.Errorf("replayed %s: %+v (ok %v)", ps.name, r, ok)
		}
	}
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
}

// TestDLQBrokerStallIsNotDeadLettered: a transient produce error on the outbox topic (kfake: a
// fault hook refusing with NOT_ENOUGH_REPLICAS; Apache Kafka: the broker frozen, requests
// unanswered) blocks the pipeline (the position stays), nothing goes to the DLQ, and everything
// arrives once it clears.
func TestDLQBrokerStallIsNotDeadLettered(t *testing.T) {
	e := newEnv(t, "")
	p := e.start()
	c := e.conn()
	first := e.insertTx(c, goodRow(0))
	harness.WaitFor(t, 20*time.Second, "first record stored", func() bool { return e.storedPosition() != "" })
	beforeStall := lsn(t, e.walLSN(c))
	h := e.stallProduce("outbox.event.order")
	var stalled []string
	for i := 1; i <= 5; i++ {
		stalled = append(stalled, e.insertTx(c, goodRow(i), goodRow(100+i))...)
	}
	walEnd := e.walLSN(c)
	notPast := func() {
		if s := lsn(t, e.storedPosition()); s > beforeStall {
			t.Fatalf("stored position %s passed %s while the records were unacked", s, beforeStall)
		}
	}
	// outboxd holds the stalled records (the stall is reached); two standby status updates
	// later it has had a whole status interval to move the position, or to dead-letter them.
	harness.WaitFor(t, 10*time.Second, "the stall reached", func() bool { notPast(); return h.reached() })
	e.waitStatusRepliesAfter(c, time.Now(), 15*time.Second, notPast)
	notPast()
	h.release()
	all := append(first, stalled...)
	got := testenv.Consume(t, e.broker.Addr(), `outbox\.event\..*`, len(all), 30*time.Second)
	if strings.Join(ids(got), ",") != strings.Join(all, ",") {
		t.Fatalf("after the stall: %v\nwant %v", ids(got), all)
	}
	harness.WaitFor(t, 10*time.Second, "position stored after the stall", func() bool { return lsn(t, e.storedPosition()) >= lsn(t, walEnd) })
	if n := len(testenv.ConsumeAll(t, e.broker.Addr(), `outboxd\.dlq`)); n != 0 || strings.Contains(p.Out.String(), "dead-lettering") {
		t.Fatalf("%d records dead-lettered by a transient error\n%s", n, p.Out.String())
	}
	if stdout, stderr, code := e.dlqRun("tail"); code != 0 || stdout != "" || !strings.Contains(stderr, "nothing has been dead-lettered") {
		t.Fatalf("dlq tail with no DLQ topic: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
}

// TestDLQUnwritableStops: when the DLQ refuses writes (kfake: TOPIC_AUTHORIZATION_FAILED by a
// fault hook; Apache Kafka: the DLQ topic's max.message.bytes below any dead letter's size),
// outboxd exits 1 without storing a position past the poison row.
func TestDLQUnwritableStops(t *testing.T) {
	e := newEnv(t, "")
	if onApache() {
		a := e.admin()
		createTopic(t, a, "outboxd.dlq", map[string]string{"max.message.bytes": "100"})
		// Back to the default before the next test's reset deletes the topic: once, a later test's
		// auto-created outboxd.dlq on the shared node refused a small dead letter with
		// MESSAGE_TOO_LARGE right after its creation.
		t.Cleanup(func() { setTopicConfig(t, a, "outboxd.dlq", "max.message.bytes", nil) })
	} else {
		e.broker.Cluster().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "outboxd.dlq", Err: kerr.TopicAuthorizationFailed, Count: -1})
	}
	p := e.start()
	c := e.conn()
	first := e.insertTx(c, goodRow(0))
	harness.WaitFor(t, 20*time.Second, "first record stored", func() bool { return e.storedPosition() != "" })
	beforePoison := lsn(t, e.walLSN(c))
	e.insertTx(c, dlqRow{nil, sp("k"), `{}`})
	e.insertTx(c, goodRow(1))
	select {
	case <-p.Done:
	case <-time.After(20 * time.Second):
		t.Fatalf("outboxd still runs with an unwritable DLQ:\n%s", p.Out.String())
	}
	if p.Code != 1 || !strings.Contains(p.Out.String(), "dead-letter topic outboxd.dlq cannot be written") {
		t.Fatalf("exit %d, want 1 with the DLQ named:\n%s", p.Code, p.Out.String())
	}
	if s := lsn(t, e.storedPosition()); s > beforePoison {
		t.Fatalf("stored position %s passed %s, before the poison row", s, beforePoison)
	}
	if conf := lsn(t, e.slotConfirmed(c)); conf > beforePoison {
		t.Fatalf("slot confirmed %s past %s, before the poison row", conf, beforePoison)
	}
	if missing := hasAll(testenv.Consume(t, e.broker.Addr(), `outbox\.event\..*`, 1, 5*time.Second), first); len(missing) > 0 {
		t.Fatalf("the record before the poison row was not delivered")
	}
}

// TestDLQMaxRateStops: more than N dead letters among the last M records stops outboxd with a
// message, before the position passes the record that tripped it.
func TestDLQMaxRateStops(t *testing.T) {
	e := newEnv(t, "")
	e.editConfig("kafka:\n", "kafka:\n  dlq_max_rate: 2/10\n")
	p := e.start()
	c := e.conn()
	e.insertTx(c, goodRow(0))
	harness.WaitFor(t, 20*time.Second, "first record stored", func() bool { return e.storedPosition() != "" })
	var walBefore []string
	for i := 0; i < 5; i++ {
		walBefore = append(walBefore, e.walLSN(c))
		e.insertTx(c, dlqRow{sp("bad topic"), sp("k"), `{}`})
	}
	select {
	case <-p.Done:
	case <-time.After(20 * time.Second):
		t.Fatalf("outboxd did not stop on kafka.dlq_max_rate:\n%s", p.Out.String())
	}
	if p.Code != 1 || !strings.Contains(p.Out.String(), "kafka.dlq_max_rate exceeded: 3 of the last 10 records") {
		t.Fatalf("exit %d, want 1 with the kafka.dlq_max_rate message:\n%s", p.Code, p.Out.String())
	}
	// The third bad row tripped the breaker: the position stays before it.
	if s := lsn(t, e.storedPosition()); s > lsn(t, walBefore[2]) {
		t.Fatalf("stored position %s passed the row that tripped the breaker (%s)", s, walBefore[2])
	}
	if n := len(testenv.Consume(t, e.broker.Addr(), `outboxd\.dlq`, 2, 5*time.Second)); n != 2 {
		t.Fatalf("%d dead letters, want the 2 before the breaker tripped", n)
	}
}
