package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
)

func testKafka(addr string) Config {
	return Config{Brokers: []string{addr}, RetryBackoffMin: 20 * time.Millisecond, RetryBackoffMax: 200 * time.Millisecond}
}

func newOffsetStore(t *testing.T, addr, key string) *OffsetStore {
	t.Helper()
	s := &OffsetStore{Kafka: testKafka(addr), Topic: "outboxd.offsets", Key: key, Source: "postgres:" + key,
		Log: slog.New(slog.NewTextHandler(t.Output(), nil))}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustLoad(t *testing.T, s *OffsetStore) source.Position {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := s.Load(ctx)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return p
}

func topicConfig(t *testing.T, addr, topic string) (partitions int, policy string) {
	t.Helper()
	a, err := Dial(testKafka(addr), 3, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	parts, err := a.Partitions(topic)
	if err != nil {
		t.Fatalf("partitions of %s: %v", topic, err)
	}
	if policy, err = a.TopicConfig(topic, "cleanup.policy"); err != nil {
		t.Fatalf("cleanup.policy of %s: %v", topic, err)
	}
	return len(parts), policy
}

func TestOffsetStoreSaveLoad(t *testing.T) {
	b := testenv.NewBroker(t)
	ctx := context.Background()
	s := newOffsetStore(t, b.Addr(), "pipe-a")
	if p := mustLoad(t, s); p != "" {
		t.Fatalf("empty topic: %q", p)
	}
	if n, policy := topicConfig(t, b.Addr(), "outboxd.offsets"); n != 1 || policy != "compact" {
		t.Fatalf("created topic has %d partitions, cleanup.policy %q; want 1, compact", n, policy)
	}
	other := newOffsetStore(t, b.Addr(), "pipe-b")
	for i, p := range []source.Position{"0/16B3748", "0/16B3800", "1/0"} {
		if err := s.Save(ctx, p); err != nil {
			t.Fatal(err)
		}
		if err := other.Save(ctx, source.Position(fmt.Sprintf("9/%d", i))); err != nil {
			t.Fatal(err)
		}
		if got := mustLoad(t, newOffsetStore(t, b.Addr(), "pipe-a")); got != p {
			t.Fatalf("load = %q, want %q", got, p)
		}
	}
	if got := mustLoad(t, other); got != "9/2" {
		t.Fatalf("other key: %q", got)
	}
	// Compaction keeps the last value per key.
	b.Cluster().Compact()
	if got := mustLoad(t, newOffsetStore(t, b.Addr(), "pipe-a")); got != "1/0" {
		t.Fatalf("after compaction: %q", got)
	}
	// Another source's record under the same key is refused.
	wrong := newOffsetStore(t, b.Addr(), "pipe-a")
	wrong.Source = "mysql:4242"
	if _, err := wrong.Load(ctx); err == nil || !strings.Contains(err.Error(), "belongs to source") {
		t.Fatalf("another source's position accepted: %v", err)
	}
}

func TestOffsetStoreCorruptRecord(t *testing.T) {
	b := testenv.NewBroker(t)
	s := newOffsetStore(t, b.Addr(), "pipe-c")
	mustLoad(t, s)
	p, err := New(testKafka(b.Addr()), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	done := make(chan error, 1)
	p.Produce(context.Background(), &sink.Record{Topic: "outboxd.offsets", Key: []byte("pipe-c"), Value: []byte("{nope")}, func(err error) { done <- err })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := newOffsetStore(t, b.Addr(), "pipe-c").Load(context.Background()); err == nil || !strings.Contains(err.Error(), "not a position document") {
		t.Fatalf("corrupt record accepted: %v", err)
	}
}

// TestOffsetStoreReadCommitted writes positions in Kafka transactions: committed ones are
// loaded, aborted ones and the one of a transaction still open are not.
func TestOffsetStoreReadCommitted(t *testing.T) {
	b := testenv.NewBroker(t)
	ctx := context.Background()
	s := newOffsetStore(t, b.Addr(), "pipe-t")
	mustLoad(t, s) // creates the topic
	tp, err := NewTxn(testKafka(b.Addr()), TxnOptions{ID: "outboxd-pipe-t"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Close()
	write := func(p source.Position, commit bool) {
		t.Helper()
		if err := tp.Begin(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 2)
		rec := s.Record(p)
		noise := sink.Record{Topic: "some.events", Key: []byte("k"), Value: []byte(p)}
		tp.Produce(ctx, &noise, func(err error) { done <- err })
		if err := tp.Produce(ctx, &rec, func(err error) { done <- err }); err != nil {
			t.Fatal(err)
		}
		tp.Flush(ctx)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tp.Commit()
		} else {
			err = tp.Abort()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	write("0/10", true)
	write("0/20", false)
	if got := mustLoad(t, newOffsetStore(t, b.Addr(), "pipe-t")); got != "0/10" {
		t.Fatalf("after an aborted transaction: %q, want 0/10", got)
	}
	write("0/30", true)
	write("0/40", false)
	write("0/50", false)
	if got := mustLoad(t, newOffsetStore(t, b.Addr(), "pipe-t")); got != "0/30" {
		t.Fatalf("after aborted transactions: %q, want 0/30", got)
	}
	// An open transaction: its position is not committed.
	if err := tp.Begin(); err != nil {
		t.Fatal(err)
	}
	rec := s.Record("0/60")
	done := make(chan error, 1)
	tp.Produce(ctx, &rec, func(err error) { done <- err })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// A position committed by another producer after the open transaction began is held back
	// by it (last stable offset): Load waits for the open transaction instead of missing it.
	other, err := NewTxn(testKafka(b.Addr()), TxnOptions{ID: "outboxd-other"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.Begin(); err != nil {
		t.Fatal(err)
	}
	rec2 := s.Record("0/55")
	other.Produce(ctx, &rec2, func(err error) { done <- err })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := other.Commit(); err != nil {
		t.Fatal(err)
	}
	type result struct {
		p   source.Position
		err error
	}
	loaded := make(chan result, 1)
	waiter := newOffsetStore(t, b.Addr(), "pipe-t")
	go func() {
		p, err := waiter.Load(ctx)
		loaded <- result{p, err}
	}()
	select {
	case r := <-loaded:
		t.Fatalf("Load returned %q %v while a transaction was open", r.p, r.err)
	case <-time.After(500 * time.Millisecond):
	}
	if err := tp.Commit(); err != nil {
		t.Fatal(err)
	}
	if r := <-loaded; r.err != nil || r.p != "0/55" {
		t.Fatalf("after the open transaction committed: %q %v, want 0/55 (the last committed record)", r.p, r.err)
	}
	// A new producer with the same transactional id aborts what an old one left open.
	if err := tp.Begin(); err != nil {
		t.Fatal(err)
	}
	rec = s.Record("0/70")
	tp.Produce(ctx, &rec, func(err error) { done <- err })
	<-done
	tp2, err := NewTxn(testKafka(b.Addr()), TxnOptions{ID: "outboxd-pipe-t"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tp2.Close()
	if got := mustLoad(t, newOffsetStore(t, b.Addr(), "pipe-t")); got != "0/55" {
		t.Fatalf("after fencing the open transaction: %q, want 0/55", got)
	}
	if err := tp.Commit(); !IsFenced(err) {
		t.Fatalf("the fenced producer's commit: %v", err)
	}
	if got := mustLoad(t, newOffsetStore(t, b.Addr(), "pipe-t")); got != "0/55" {
		t.Fatalf("after the fenced commit: %q, want 0/55", got)
	}
}

// TestOffsetStoreExistingTopic: a topic created by someone else with several partitions is used
// as it is; every key stays on its murmur2 partition.
func TestOffsetStoreExistingTopic(t *testing.T) {
	b := testenv.NewBroker(t, kfake.DefaultNumPartitions(5))
	ctx := context.Background()
	prod, err := New(testKafka(b.Addr()), nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	prod.Produce(ctx, &sink.Record{Topic: "shared.offsets", Key: []byte("x"), Value: []byte("{}")}, func(err error) { done <- err }) // auto-created, 5 partitions
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	prod.Close()
	for i := 0; i < 8; i++ {
		key := fmt.Sprintf("pipeline-%d", i)
		s := newOffsetStore(t, b.Addr(), key)
		s.Topic = "shared.offsets"
		if err := s.Save(ctx, source.Position(fmt.Sprintf("0/%d", i+1))); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 8; i++ {
		key := fmt.Sprintf("pipeline-%d", i)
		s := newOffsetStore(t, b.Addr(), key)
		s.Topic = "shared.offsets"
		if got := mustLoad(t, s); got != source.Position(fmt.Sprintf("0/%d", i+1)) {
			t.Fatalf("%s: %q", key, got)
		}
	}
	if n, _ := topicConfig(t, b.Addr(), "shared.offsets"); n != 5 {
		t.Fatalf("partitions %d", n)
	}
}

func TestOffsetStoreUnreachable(t *testing.T) {
	port, _ := testenv.FreePort()
	s := &OffsetStore{Kafka: testKafka(fmt.Sprintf("127.0.0.1:%d", port)), Topic: "outboxd.offsets", Key: "k"}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	_, err := s.Load(ctx)
	if err == nil || !strings.Contains(err.Error(), "outboxd.offsets") {
		t.Fatalf("Load from a dead cluster: %v", err)
	}
	t.Logf("failed after %v: %v", time.Since(start), err)
}

// TestTailLastDelivered checks, on hand-made batches, which record ReadPartition stops at:
// two transactional producers interleaved, one transaction aborted, plus non-transactional
// records and control markers. It is the read_committed filter sarama's consumer applies.
func TestTailLastDelivered(t *testing.T) {
	data := func(first int64, pid int64, txn bool, vals ...string) *sarama.Records {
		rb := &sarama.RecordBatch{FirstOffset: first, ProducerID: pid, IsTransactional: txn, LastOffsetDelta: int32(len(vals) - 1)}
		for i, v := range vals {
			rb.Records = append(rb.Records, &sarama.Record{OffsetDelta: int64(i), Key: []byte("k"), Value: []byte(v)})
		}
		return &sarama.Records{RecordBatch: rb}
	}
	marker := func(off int64, pid int64, commit bool) *sarama.Records {
		typ := byte(0)
		if commit {
			typ = 1
		}
		return &sarama.Records{RecordBatch: &sarama.RecordBatch{FirstOffset: off, ProducerID: pid, IsTransactional: true, Control: true,
			Records: []*sarama.Record{{Key: []byte{0, 0, 0, typ}, Value: []byte{0, 0, 0, 0, 0, 0}}}}}
	}
	set := []*sarama.Records{
		data(0, 1, true, "a1", "a2"), // pid 1, committed at 5
		data(2, 2, true, "b1"),       // pid 2, aborted at 4
		data(3, 9, false, "plain"),
		marker(4, 2, false),
		marker(5, 1, true),
		data(6, 2, true, "b2"), // pid 2 again, committed at 8
		data(7, 1, true, "a3"), // pid 1, aborted at 9
		marker(8, 2, true),
		marker(9, 1, false),
	}
	for _, c := range []struct {
		end, last int64
	}{
		{10, 6}, // b2; a3 aborted, then two markers
		{8, 6},  // b2's marker is past end: still delivered
		{6, 3},  // plain; a2 committed at 5 is older
		{3, 1},  // a2 (committed at 5); b1 aborted
		{1, 0},  // a1
	} {
		tl := tail{end: c.end, last: -1, pending: map[int64]int64{}}
		if next := tl.addAll(set, 0); next != 10 {
			t.Fatalf("end %d: next %d, want 10", c.end, next)
		}
		if tl.last != c.last || len(tl.pending) != 0 {
			t.Errorf("end %d: last %d (pending %v), want %d", c.end, tl.last, tl.pending, c.last)
		}
	}
	// Only aborted data and markers: nothing is delivered.
	tl := tail{end: 10, last: -1, pending: map[int64]int64{}}
	tl.addAll([]*sarama.Records{data(0, 2, true, "x"), marker(1, 2, false), marker(2, 1, true)}, 0)
	if tl.last != -1 {
		t.Fatalf("aborted only: last %d, want -1", tl.last)
	}
	// A transaction whose marker was not read yet stays pending.
	tl = tail{end: 10, last: -1, pending: map[int64]int64{}}
	tl.addAll([]*sarama.Records{data(0, 9, false, "p"), data(1, 2, true, "x", "y")}, 0)
	if tl.last != 0 || tl.pending[2] != 2 {
		t.Fatalf("open: last %d pending %v, want 0 and {2: 2}", tl.last, tl.pending)
	}
}
