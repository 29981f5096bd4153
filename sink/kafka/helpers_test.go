package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/sink"
)

func newBroker(t testing.TB, opts ...kfake.Opt) *testenv.Broker {
	t.Helper()
	return testenv.NewBroker(t, opts...)
}

// testConfig is a Config for a test broker with short backoffs.
func testConfig(addr string) Config {
	return Config{
		Brokers:         []string{addr},
		ClientID:        "outboxd-test",
		RetryBackoffMin: 20 * time.Millisecond,
		RetryBackoffMax: 300 * time.Millisecond,
	}
}

func newProducer(t testing.TB, cfg Config) *Producer {
	t.Helper()
	p, err := New(cfg, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo})))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Shutdown(ctx)
	})
	return p
}

// outcomes records done calls per record id and fails the test on a second call.
type outcomes struct {
	t    testing.TB
	mu   sync.Mutex
	errs map[int]error
	seen map[int]int
	all  chan struct{}
	want int
}

func newOutcomes(t testing.TB, want int) *outcomes {
	return &outcomes{t: t, errs: map[int]error{}, seen: map[int]int{}, all: make(chan struct{}), want: want}
}

func (o *outcomes) done(id int) func(error) {
	return func(err error) {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.seen[id]++
		if o.seen[id] > 1 {
			o.t.Errorf("done called %d times for record %d", o.seen[id], id)
			return
		}
		if err != nil {
			o.errs[id] = err
		}
		if len(o.seen) == o.want {
			close(o.all)
		}
	}
}

func (o *outcomes) wait(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case <-o.all:
	case <-time.After(d):
		o.mu.Lock()
		defer o.mu.Unlock()
		t.Fatalf("only %d of %d records reported after %v", len(o.seen), o.want, d)
	}
}

func (o *outcomes) failures() map[int]error {
	o.mu.Lock()
	defer o.mu.Unlock()
	m := make(map[int]error, len(o.errs))
	for k, v := range o.errs {
		m[k] = v
	}
	return m
}

// consume reads n records of topic from the start (read_committed is irrelevant here).
func consume(t testing.TB, addr, topic string, n int, timeout time.Duration) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records of %s before timeout", len(out), n, topic)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Logf("fetch: %v", err) })
		out = append(out, fs.Records()...)
	}
	return out
}

// seqRecord makes record i of a per-key sequence: key "k<i%keys>", value "<i>".
func seqRecord(topic string, i, keys int) *sink.Record {
	return &sink.Record{
		Topic: topic,
		Key:   []byte("k" + strconv.Itoa(i%keys)),
		Value: []byte(strconv.Itoa(i)),
	}
}

// checkPerKeyOrder checks that every value 0..n-1 arrived and that, per key, first occurrences
// are in increasing order and on the key's Java partition. It returns the duplicate count.
func checkPerKeyOrder(t testing.TB, recs []*kgo.Record, n int, partitions int32) int {
	t.Helper()
	last := map[string]int{}
	got := make(map[int]bool, n)
	dups := 0
	for _, r := range recs {
		v, err := strconv.Atoi(string(r.Value))
		if err != nil {
			t.Fatalf("bad value %q", r.Value)
		}
		if want := PartitionFor(r.Key, partitions); r.Partition != want {
			t.Fatalf("key %s on partition %d, Java partitioner says %d", r.Key, r.Partition, want)
		}
		if got[v] {
			dups++
			continue
		}
		got[v] = true
		if prev, ok := last[string(r.Key)]; ok && v < prev {
			t.Fatalf("key %s: value %d after %d (reordered)", r.Key, v, prev)
		}
		last[string(r.Key)] = v
	}
	for i := range n {
		if !got[i] {
			t.Fatalf("value %d missing", i)
		}
	}
	return dups
}

func topicName(t testing.TB) string {
	return fmt.Sprintf("outbox.event.%s.%d", sanitize(t.Name()), time.Now().UnixNano()%1e6)
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if ValidTopicName(string(c)) != nil {
			b[i] = '_'
		}
	}
	return string(b)
}

func atoi(t testing.TB, b []byte) int {
	t.Helper()
	v, err := strconv.Atoi(string(b))
	if err != nil {
		t.Fatalf("bad value %q", b)
	}
	return v
}
