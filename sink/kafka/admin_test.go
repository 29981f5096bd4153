package kafka

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/sink"
)

// TestAdmin runs the admin helper against kfake: topics created (with configs, validate-only,
// twice), listed, described, counted by list-offsets, deleted; broker configs read.
func TestAdmin(t *testing.T) {
	b := testenv.NewBroker(t, kfake.BrokerConfigs(map[string]string{"transaction.max.timeout.ms": "5000"}))
	a, err := Dial(testKafka(b.Addr()), 3, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()

	if err := a.CreateTopic("adm.t", 2, map[string]string{"cleanup.policy": "compact"}, false); err != nil {
		t.Fatal(err)
	}
	if err := a.CreateTopic("adm.t", 2, nil, false); !errors.Is(err, ErrTopicExists) {
		t.Fatalf("creating it again: %v, want ErrTopicExists", err)
	}
	if err := a.CreateTopic("adm.only-validated", -1, nil, true); err != nil {
		t.Fatalf("validate only: %v", err)
	}
	brokers, topics, err := a.Cluster()
	if err != nil || brokers < 1 || !slices.Contains(topics, "adm.t") || slices.Contains(topics, "adm.only-validated") {
		t.Fatalf("Cluster: %d brokers, topics %v, %v; want adm.t and not adm.only-validated", brokers, topics, err)
	}
	if parts, err := a.Partitions("adm.t"); err != nil || !slices.Equal(parts, []int32{0, 1}) {
		t.Fatalf("Partitions: %v %v, want [0 1]", parts, err)
	}
	if p, err := a.TopicConfig("adm.t", "cleanup.policy"); err != nil || p != "compact" {
		t.Fatalf("cleanup.policy: %q %v", p, err)
	}
	if v, err := a.BrokerConfig("transaction.max.timeout.ms"); err != nil || len(v) == 0 {
		t.Fatalf("BrokerConfig: %v %v", v, err)
	} else {
		for id, s := range v {
			if s != "5000" {
				t.Fatalf("broker %d: transaction.max.timeout.ms %q, want 5000", id, s)
			}
		}
	}

	prod, err := New(testKafka(b.Addr()), nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 3)
	for _, k := range []string{"a", "b", "c"} {
		if err := prod.Produce(context.Background(), &sink.Record{Topic: "adm.t", Key: []byte(k), Value: []byte(k)}, func(err error) { done <- err }); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	prod.Close()
	sum := func(at int64, iso Isolation) int64 {
		t.Helper()
		offs, err := a.ListOffsets([]string{"adm.t", "adm.absent"}, at, iso)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := offs["adm.absent"]; ok || len(offs["adm.t"]) != 2 {
			t.Fatalf("ListOffsets: %v, want adm.t's 2 partitions and no adm.absent", offs)
		}
		var n int64
		for _, o := range offs["adm.t"] {
			n += o
		}
		return n
	}
	if hwm, lso, start := sum(Latest, ReadUncommitted), sum(Latest, ReadCommitted), sum(Earliest, ReadUncommitted); hwm != 3 || lso != 3 || start != 0 {
		t.Fatalf("high-water marks %d, last stable offsets %d, starts %d; want 3, 3, 0", hwm, lso, start)
	}
	p := PartitionFor([]byte("a"), 2)
	if off, err := a.Offset("adm.t", p, Latest, ReadCommitted); err != nil || off < 1 {
		t.Fatalf("Offset of a's partition: %d %v, want >= 1", off, err)
	}

	if err := a.DeleteTopic("adm.t"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Partitions("adm.t"); !errors.Is(err, ErrUnknownTopic) {
		t.Fatalf("Partitions after delete: %v, want ErrUnknownTopic", err)
	}
	if !Retriable(ErrLeaderNotAvailable) || Retriable(errors.New("x")) || Retriable(ErrTopicExists) {
		t.Fatal("Retriable")
	}
}
