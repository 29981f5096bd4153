package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
	"github.com/outboxd/outboxd/sink/kafka"
)

// Helpers of the huge-transaction tests (largetx_e2e_test.go): one environment over either source
// (a private PostgreSQL or MariaDB) in either delivery mode, transactions of many rows written
// with one INSERT … SELECT, the topic's end offsets as a cheap progress meter, and kcat
// (librdkafka, read_committed) as the judge of what arrived.

const (
	bigTopic  = "outbox.event.order"
	heldTopic = "outbox.event.held" // rows with aggregatetype held (see bigEnv.held)
	bigKeys   = 8                   // aggregateid K0..K7: rows spread over partitions, per-key order checkable
)

// bigID is the id of row i of the big-transaction tests (a valid UUID that carries i).
func bigID(i int) string { return fmt.Sprintf("00000000-0000-4000-a000-%012d", i) }

// bigIndex parses bigID back (-1: not one of ours).
func bigIndex(id string) int {
	s, ok := strings.CutPrefix(id, "00000000-0000-4000-a000-")
	if !ok {
		return -1
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}

func bigKey(i int) string { return fmt.Sprintf("K%d", i%bigKeys) }

// bigEnv is one source (PostgreSQL or MariaDB), a broker and an outboxd config, in one delivery
// mode. at_least_once stores positions in the file store, exactly_once in offsets.topic.
type bigEnv struct {
	t      *testing.T
	eos    bool
	broker *testenv.Broker
	cfg    *env      // the config file (editConfig); for PostgreSQL the whole env
	pg     *env      // nil for MariaDB
	my     *mysqlEnv // nil for PostgreSQL
	key    string    // the pipeline's key in offsets.topic

	metricsURL string // set by serveMetrics
	held       int    // insert gives the row with this number aggregatetype held (0: none)
}

// newBigEnv builds the environment; src is "postgres" or "mariadb".
func newBigEnv(t *testing.T, src string, eos bool) *bigEnv {
	t.Helper()
	b := &bigEnv{t: t, eos: eos}
	switch src {
	case "postgres":
		b.pg = newEnv(t, "")
		b.broker, b.cfg, b.key = b.pg.broker, b.pg, "postgres:outboxd"
	case "mariadb":
		b.my = newNoLossEnv(t, testenv.MariaDBOptions{RowMetadata: true}, "app.outbox", "", testenv.MariaDBOutboxDDL("app.outbox", "CHAR(36)"))
		b.broker, b.cfg, b.key = b.my.broker, &env{t: t, cfgPath: b.my.cfgPath}, "mysql:4343"
	default:
		t.Fatalf("source %q", src)
	}
	if eos {
		b.cfg.editConfig("kafka:\n", "kafka:\n  delivery: exactly_once\n")
		b.cfg.editConfig("offsets:\n", "offsets:\n  store: kafka\n")
	}
	return b
}

// start runs outboxd (with extra environment variables) and waits until it streams.
func (b *bigEnv) start(extraEnv ...string) *harness.Proc {
	b.t.Helper()
	if b.pg != nil {
		return b.pg.startWith(true, extraEnv...)
	}
	p := startProcEnv(b.t, b.my.cfgPath, extraEnv)
	harness.WaitFor(b.t, 30*time.Second, "binlog dump connected", func() bool {
		select {
		case <-p.Done:
			b.t.Fatalf("outboxd exited with %d:\n%s", p.Code, p.Out.String())
		default:
		}
		if !strings.Contains(p.Out.String(), "mysql source opening") {
			return false
		}
		rows, _ := b.my.db.Query("", "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'")
		return len(rows) == 1 && rows[0][0] != "0"
	})
	return p
}

// bigTx is one transaction written by insert: rows first..first+n-1.
type bigTx struct {
	first, n int
	// covers reports whether a stored position covers the transaction (PostgreSQL: past an LSN
	// taken inside it, after its rows; MariaDB: at or past its GTID).
	covers func(pos string) bool
	mark   string // that LSN or GTID, for messages
}

func (x bigTx) ids() []string {
	out := make([]string, x.n)
	for i := range out {
		out[i] = bigID(x.first + i)
	}
	return out
}

// insert commits rows first..first+n-1 in ONE transaction (one INSERT … SELECT).
func (b *bigEnv) insert(first, n int) bigTx {
	b.t.Helper()
	ctx := context.Background()
	t0 := time.Now()
	defer func() {
		b.t.Logf("inserted %d rows in one transaction in %v", n, time.Since(t0).Round(time.Millisecond))
	}()
	x := bigTx{first: first, n: n}
	if b.pg != nil {
		c := b.pg.conn()
		tx, err := c.Begin(ctx)
		if err != nil {
			b.t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
			SELECT ('00000000-0000-4000-a000-' || lpad(i::text, 12, '0'))::uuid, CASE WHEN i = $4 THEN 'held' ELSE 'order' END,
				'K' || (i % $3), 'created', jsonb_build_object('i', i)
			FROM generate_series($1::int, $2::int) i`, first, first+n-1, bigKeys, b.held); err != nil {
			b.t.Fatal(err)
		}
		var in string
		if err := tx.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&in); err != nil {
			b.t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			b.t.Fatal(err)
		}
		x.mark = in
		x.covers = func(pos string) bool { return lsn(b.t, pos) > lsn(b.t, in) }
		return x
	}
	q := fmt.Sprintf(`INSERT INTO app.outbox (id, aggregatetype, aggregateid, type, payload)
		SELECT CONCAT('00000000-0000-4000-a000-', LPAD(seq, 12, '0')), IF(seq = %d, 'held', 'order'), CONCAT('K', seq %% %d), 'created',
			CONCAT('{"i": ', seq, '}')
		FROM seq_%d_to_%d`, b.held, bigKeys, first, first+n-1)
	if err := b.my.db.Exec(ctx, "app", q); err != nil {
		b.t.Fatal(err)
	}
	seq := b.my.gtidNow()
	x.mark = fmt.Sprintf("0-1-%d", seq)
	x.covers = func(pos string) bool { return mariaSeq(pos) >= seq }
	return x
}

// position is the stored position: the file store (at_least_once) or the last position in
// offsets.topic visible to read_committed now (exactly_once; open transactions not awaited).
func (b *bigEnv) position() string {
	b.t.Helper()
	if !b.eos {
		if b.pg != nil {
			return b.pg.storedPosition()
		}
		return b.my.storedPosition()
	}
	return visiblePositionOf(b.t, b.broker.Addr(), b.key)
}

// visiblePositionOf is the last position of pipeline key in outboxd.offsets that a
// read_committed consumer (kcat) sees now, "" while the topic does not exist (kcat is not given
// a topic before outboxd has created it: the broker would auto-create it).
func visiblePositionOf(t *testing.T, addr, key string) string {
	t.Helper()
	if !topicExists(t, addr, "outboxd.offsets") {
		return ""
	}
	out := kcat(t, addr, "outboxd.offsets", "%k\t%s\n")
	pos := ""
	for _, line := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(line, "\t")
		if !ok || k != key {
			continue
		}
		var d struct{ Position string }
		if err := json.Unmarshal([]byte(v), &d); err != nil {
			t.Fatalf("offsets record %s: %v", v, err)
		}
		pos = d.Position
	}
	return pos
}

// admin is a sink/kafka admin client of the broker at addr; the caller closes it.
func admin(t *testing.T, addr string) *kafka.Admin {
	t.Helper()
	a, err := kafka.Dial(kafka.Config{Brokers: []string{addr}}, 3, 100*time.Millisecond)
	if err != nil {
		t.Fatalf("admin client of %s: %v", addr, err)
	}
	return a
}

// topicExists asks the broker for topic's metadata without auto-creating it.
func topicExists(t *testing.T, addr, topic string) bool {
	t.Helper()
	a := admin(t, addr)
	defer a.Close()
	err := harness.Until(10*time.Second, 100*time.Millisecond, func() error {
		_, err := a.Partitions(topic)
		if errors.Is(err, kafka.ErrUnknownTopic) || err != nil && !kafka.Retriable(err) {
			return harness.Final(err) // an answer: absent, or an error no retry cures
		}
		return err // leaders still being elected: ask again
	})
	if errors.Is(err, kafka.ErrUnknownTopic) {
		return false
	}
	if err != nil {
		t.Fatalf("metadata of %s: %v", topic, err)
	}
	return true
}

// waitCovered waits until the stored position covers x.
func (b *bigEnv) waitCovered(x bigTx, d time.Duration, what string) {
	b.t.Helper()
	t0 := time.Now()
	harness.WaitFor(b.t, d, what+": the stored position covers the transaction ("+x.mark+")", func() bool { return x.covers(b.position()) })
	b.t.Logf("%s: stored position covers it after %v", what, time.Since(t0).Round(time.Millisecond))
}

// endOffsets sums, over the partitions of topic, the high watermark (records written, committed
// or not, plus transaction markers) and the last stable offset (read_committed's end). A topic
// that does not exist yet has 0, 0.
func endOffsets(t *testing.T, addr, topic string) (hwm, lso int64) {
	t.Helper()
	a := admin(t, addr)
	defer a.Close()
	for _, iso := range []kafka.Isolation{kafka.ReadUncommitted, kafka.ReadCommitted} {
		var offs map[string]map[int32]int64
		err := harness.Until(10*time.Second, 100*time.Millisecond, func() (err error) {
			if offs, err = a.ListOffsets([]string{topic}, kafka.Latest, iso); err != nil && !kafka.Retriable(err) {
				return harness.Final(err)
			}
			return err // a leader still being elected: ask again
		})
		if err != nil {
			t.Fatalf("list offsets of %s: %v", topic, err)
		}
		var sum int64
		for _, o := range offs[topic] {
			sum += o
		}
		if iso == kafka.ReadUncommitted {
			hwm = sum
		} else {
			lso = sum
		}
	}
	return hwm, lso
}

// kcatRec is one record as kcat (read_committed) printed it.
type kcatRec struct{ key, id string }

// kcat reads topic from the beginning to its end with kcat, read_committed, printing each
// record with format.
func kcat(t *testing.T, addr, topic, format string) string {
	t.Helper()
	kc, err := exec.LookPath("kcat")
	if err != nil {
		testenv.Unavailable(t, "kcat (bash .ci/deps installs it)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var stderr strings.Builder
	cmd := exec.CommandContext(ctx, kc, "-C", "-b", addr, "-t", topic, "-e", "-o", "beginning", "-q",
		"-X", "isolation.level=read_committed", "-f", format)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kcat -C -t %s: %v\n%s", topic, err, stderr.String())
	}
	return string(out)
}

// kcatRecords reads topic with kcat (read_committed) and returns each record's key and id
// header, per partition in offset order.
func kcatRecords(t *testing.T, addr, topic string) map[int32][]kcatRec {
	t.Helper()
	recs := map[int32][]kcatRec{}
	for _, line := range strings.Split(kcat(t, addr, topic, "%p %k %h\n"), "\n") {
		if line == "" {
			continue
		}
		f := strings.SplitN(line, " ", 3)
		if len(f) != 3 {
			t.Fatalf("kcat line %q", line)
		}
		p, err := strconv.Atoi(f[0])
		if err != nil {
			t.Fatalf("kcat line %q: %v", line, err)
		}
		r := kcatRec{key: f[1]}
		for _, h := range strings.Split(f[2], ",") {
			if id, ok := strings.CutPrefix(h, "id="); ok {
				r.id = id
			}
		}
		recs[int32(p)] = append(recs[int32(p)], r)
	}
	return recs
}

// kcatCounts counts each id in bigTopic and, when the env holds a row back, heldTopic (kcat,
// read_committed).
func (b *bigEnv) kcatCounts() map[string]int {
	n := idCounts(kcatRecords(b.t, b.broker.Addr(), bigTopic))
	if b.held != 0 {
		for id, k := range idCounts(kcatRecords(b.t, b.broker.Addr(), heldTopic)) {
			n[id] += k
		}
	}
	return n
}

// idCounts counts each id over all partitions.
func idCounts(recs map[int32][]kcatRec) map[string]int {
	n := map[string]int{}
	for _, rs := range recs {
		for _, r := range rs {
			n[r.id]++
		}
	}
	return n
}

// serveMetrics makes outboxd serve /metrics on a free port.
func (b *bigEnv) serveMetrics() {
	b.t.Helper()
	port, err := testenv.FreePort()
	if err != nil {
		b.t.Fatal(err)
	}
	b.cfg.editConfig(`listen: ""`, fmt.Sprintf("listen: 127.0.0.1:%d", port))
	b.metricsURL = fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
}

var eventsReadRE = regexp.MustCompile(`(?m)^outboxd_events_read_total ([0-9.e+]+)$`)

// eventsRead is outboxd's outboxd_events_read_total (rows taken from the source into delivery),
// -1 while /metrics does not answer.
func (b *bigEnv) eventsRead() int {
	resp, err := http.Get(b.metricsURL)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := eventsReadRE.FindSubmatch(body)
	if m == nil {
		return -1
	}
	f, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		b.t.Fatalf("outboxd_events_read_total %q: %v", m[1], err)
	}
	return int(f)
}

// stallTopic holds every produce to bigTopic unacknowledged until the returned release is
// called: kfake refuses it with NOT_ENOUGH_REPLICAS (retriable; the producer retries), Apache
// Kafka is frozen (SIGSTOP). hit reports whether a produce request met the stall (Apache: true).
func (b *bigEnv) stallTopic() (hit func() bool, release func()) {
	b.t.Helper()
	if k := apacheNode(b.broker); k != nil {
		k.Pause()
		b.t.Cleanup(k.Resume)
		return func() bool { return true }, k.Resume
	}
	h := b.broker.Cluster().Fault(kfakeNER(bigTopic))
	return func() bool { return h.Hits() > 0 }, h.Remove
}
