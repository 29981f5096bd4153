package chaos

// The Apache Kafka side of the chaos suite: one 3-node cluster shared by the scenarios of
// TestApacheChaos (each scenario names its own topics, transactional id, offsets key and DLQ
// topic), cluster health (every node up, every partition's ISR complete), the stall meter and
// the ledger check (lost, duplicates, per-key order, dead letters).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
	"github.com/outboxd/outboxd/sink/kafka"
)

// newApacheFixture is a PostgreSQL fixture whose outboxd delivers to cluster c under names
// of its own (prefix.outbox.event.<aggregatetype>, prefix.dlq, prefix.offsets, key prefix,
// transactional id prefix-txn), so that scenarios can share one cluster.
func newApacheFixture(t *testing.T, c *testenv.ApacheCluster, prefix string, pgExtra ...string) *fixture {
	t.Helper()
	f := newPostgresFixtureOn(t, c.Addrs(), pgExtra...)
	f.topics = `^` + regexp.QuoteMeta(prefix+".outbox.event.") + `.*`
	f.outboxExtra = "outbox:\n  topic: " + prefix + ".outbox.event.${routedByValue}\n"
	f.kafkaExtra = "  transactional_id: " + prefix + "-txn\n  dlq_topic: " + prefix + ".dlq\n"
	f.offsetsExtra = "  topic: " + prefix + ".offsets\n  key: " + prefix + "\n"
	return f
}

// runningAddrs are the addresses of the nodes that run.
func runningAddrs(c *testenv.ApacheCluster) []string {
	var out []string
	for _, k := range c.Nodes {
		if k.Running() {
			out = append(out, k.Addr())
		}
	}
	return out
}

// startNodes starts the given stopped nodes at once (a node is ready only when the controller
// quorum has a leader, so nodes that make the quorum must start together).
func startNodes(t *testing.T, nodes ...*testenv.ApacheKafka) {
	t.Helper()
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, k := range nodes {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = k.Start() }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("restart Kafka node %d: %v", nodes[i].NodeID, err)
		}
	}
}

// metadata asks the running nodes for the metadata of topics (nil: every topic).
func metadata(c *testenv.ApacheCluster, topics ...string) (*kmsg.MetadataResponse, error) {
	addrs := runningAddrs(c)
	if len(addrs) == 0 {
		return nil, fmt.Errorf("no Kafka node runs")
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RequestRetries(2))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	req := kmsg.NewPtrMetadataRequest()
	if topics != nil {
		for _, tp := range topics {
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(tp)
			req.Topics = append(req.Topics, rt)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return req.RequestWith(ctx, cl)
}

// isrGap returns "" when every partition of every topic has a leader and all n replicas in
// its ISR, or else the first partition that has not.
func isrGap(c *testenv.ApacheCluster) string {
	resp, err := metadata(c)
	if err != nil {
		return err.Error()
	}
	for _, tp := range resp.Topics {
		for _, p := range tp.Partitions {
			if p.ErrorCode != 0 || p.Leader < 0 || len(p.ISR) < len(c.Nodes) {
				return fmt.Sprintf("%s/%d leader %d isr %v (error %d)", *tp.Topic, p.Partition, p.Leader, p.ISR, p.ErrorCode)
			}
		}
	}
	return ""
}

// waitISR waits until every node runs and every partition's ISR is complete.
func waitISR(t *testing.T, c *testenv.ApacheCluster, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	if err := harness.Until(within, 200*time.Millisecond, func() error {
		if gap := isrGap(c); gap != "" {
			return errors.New(gap)
		}
		return nil
	}); err != nil {
		t.Fatalf("the ISR is not complete %v after the restart: %v", within, err)
	}
	return time.Since(start)
}

// healthy makes sure a scenario starts on a whole cluster (a failed earlier one may have left a
// node down).
func healthy(t *testing.T, c *testenv.ApacheCluster) {
	t.Helper()
	var down []*testenv.ApacheKafka
	for _, k := range c.Nodes {
		if !k.Running() {
			down = append(down, k)
		}
	}
	startNodes(t, down...)
	waitISR(t, c, 2*time.Minute)
}

// notInISR reports whether node id is in no partition's ISR of the given topics (the
// controller has noticed it is gone).
func notInISR(c *testenv.ApacheCluster, id int, topics ...string) bool {
	resp, err := metadata(c, topics...)
	if err != nil {
		return false
	}
	for _, tp := range resp.Topics {
		for _, p := range tp.Partitions {
			for _, r := range p.ISR {
				if int(r) == id {
					return false
				}
			}
		}
	}
	return true
}

// topicsWithPrefix lists the existing topics whose name starts with prefix.
func topicsWithPrefix(c *testenv.ApacheCluster, prefix string) []string {
	resp, err := metadata(c)
	if err != nil {
		return nil
	}
	var out []string
	for _, tp := range resp.Topics {
		if strings.HasPrefix(*tp.Topic, prefix) {
			out = append(out, *tp.Topic)
		}
	}
	sort.Strings(out)
	return out
}

// nodeLog is the whole server.log of node k.
func nodeLog(t *testing.T, k *testenv.ApacheKafka) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(k.Dir, "server.log"))
	if err != nil {
		t.Fatalf("read node %d's log: %v", k.NodeID, err)
	}
	return string(b)
}

// ---- stall meter ----

// stallMeter polls outboxd's outboxd_events_produced_total (summed over instances, the last
// known value of an instance that does not answer) and keeps the longest time between two
// increases: how long delivery stood still.
type stallMeter struct {
	stopCh chan struct{}
	done   chan struct{}
	max    atomic.Int64
}

var producedRE = regexp.MustCompile(`(?m)^outboxd_events_produced_total\{[^}]*\} ([0-9.e+]+)$`)

func produced(addr string) (float64, bool) {
	m := harness.Metrics(addr)
	if m == "" {
		return 0, false
	}
	sum := 0.0
	for _, mm := range producedRE.FindAllStringSubmatch(m, -1) {
		v, _ := strconv.ParseFloat(mm[1], 64)
		sum += v
	}
	return sum, true
}

func startStallMeter(addrs ...string) *stallMeter {
	s := &stallMeter{stopCh: make(chan struct{}), done: make(chan struct{})}
	vals := make([]atomic.Int64, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs { // one poller per instance: a SIGSTOPped one answers nothing
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-s.stopCh:
					return
				case <-time.After(100 * time.Millisecond):
				}
				if v, ok := produced(a); ok && int64(v) > vals[i].Load() {
					vals[i].Store(int64(v))
				}
			}
		}()
	}
	go func() {
		defer close(s.done)
		defer wg.Wait()
		var last int64
		lastChange := time.Now()
		for {
			select {
			case <-s.stopCh:
				return
			case <-time.After(100 * time.Millisecond):
			}
			var sum int64
			for i := range vals {
				sum += vals[i].Load()
			}
			if sum > last {
				if gap := time.Since(lastChange); gap > time.Duration(s.max.Load()) {
					s.max.Store(int64(gap))
				}
				last, lastChange = sum, time.Now()
			}
		}
	}()
	return s
}

// stop ends the meter and returns the longest stall that ended with delivery resuming.
func (s *stallMeter) stop() time.Duration {
	close(s.stopCh)
	<-s.done
	return time.Duration(s.max.Load())
}

// ---- the ledger check ----

// payloadOrder is the writer's commit order of a record: transaction seq, row index in it.
type payloadOrder struct {
	Seq int `json:"seq"`
	I   int `json:"i"`
}

func orderOf(v []byte) (payloadOrder, bool) {
	var o payloadOrder
	if json.Unmarshal(v, &o) == nil {
		return o, true
	}
	var s string // a payload delivered as a JSON string
	if json.Unmarshal(v, &s) == nil && json.Unmarshal([]byte(s), &o) == nil {
		return o, true
	}
	return o, false
}

func headerOf(r *kgo.Record, k string) string {
	for _, h := range r.Headers {
		if h.Key == k {
			return string(h.Value)
		}
	}
	return ""
}

// outOfOrder counts the (topic, key) pairs whose records, each id taken at its first delivery
// in partition order, are not in the writer's commit order; with every=true (exactly_once) it
// looks at every record, duplicates included. example describes the first violation.
func outOfOrder(recs []*kgo.Record, every bool) (bad int, example string) {
	sorted := append([]*kgo.Record(nil), recs...)
	sort.SliceStable(sorted, func(i, j int) bool {
		a, b := sorted[i], sorted[j]
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		if a.Partition != b.Partition {
			return a.Partition < b.Partition
		}
		return a.Offset < b.Offset
	})
	type state struct {
		last payloadOrder
		any  bool
		bad  bool
		seen map[string]bool
	}
	keys := map[string]*state{}
	for _, r := range sorted {
		k := r.Topic + "|" + string(r.Key)
		st := keys[k]
		if st == nil {
			st = &state{seen: map[string]bool{}}
			keys[k] = st
		}
		id := headerOf(r, "id")
		if st.seen[id] && !every {
			continue
		}
		st.seen[id] = true
		o, ok := orderOf(r.Value)
		if !ok {
			if !st.bad {
				st.bad = true
				bad++
				if example == "" {
					example = fmt.Sprintf("%s/%d@%d: value %q carries no seq", r.Topic, r.Partition, r.Offset, r.Value)
				}
			}
			continue
		}
		if st.any && (o.Seq < st.last.Seq || o.Seq == st.last.Seq && o.I <= st.last.I) && !st.bad {
			st.bad = true
			bad++
			if example == "" {
				example = fmt.Sprintf("key %s in %s/%d: seq %d.%d at offset %d after %d.%d", r.Key, r.Topic, r.Partition, o.Seq, o.I, r.Offset, st.last.Seq, st.last.I)
			}
		}
		st.last, st.any = o, true
	}
	return bad, example
}

// deadLetters counts the records in topic (0 when it does not exist): the sum of its
// partitions' high watermarks, through sink/kafka's Admin.
func deadLetters(t *testing.T, c *testenv.ApacheCluster, topic string) int64 {
	t.Helper()
	a, err := kafka.Dial(kafka.Config{Brokers: runningAddrs(c)}, 3, 200*time.Millisecond)
	if err != nil {
		t.Fatalf("admin client: %v", err)
	}
	defer a.Close()
	var offs map[string]map[int32]int64
	if err := harness.Until(30*time.Second, 200*time.Millisecond, func() (err error) {
		if offs, err = a.ListOffsets([]string{topic}, kafka.Latest, kafka.ReadUncommitted); err != nil && !kafka.Retriable(err) {
			return harness.Final(err)
		}
		return err
	}); err != nil {
		t.Fatalf("list offsets of %s: %v", topic, err)
	}
	var n int64
	for _, o := range offs[topic] { // never created: nothing was dead-lettered
		n += o
	}
	return n
}
