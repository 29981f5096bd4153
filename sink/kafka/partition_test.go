package kafka

import (
	"context"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/outboxd/outboxd/sink"
)

// An explicit partition goes through the partitioner as given; one the topic lacks is a
// PartitionOutOfRangeError (permanent, invalid_partition), never a silent re-partition.
func TestJavaPartitionerExplicit(t *testing.T) {
	p := NewJavaPartitioner("t")
	dp := p.(sarama.DynamicConsistencyPartitioner)
	for _, c := range []struct {
		part, n int32
		ok      bool
	}{{0, 3, true}, {2, 3, true}, {3, 3, false}, {-1, 3, false}, {123, 200, true}} {
		rec := &sink.Record{Topic: "t", Key: []byte("k"), Partition: c.part, PartitionSet: true}
		for name, msg := range map[string]*sarama.ProducerMessage{
			"inflight": {Metadata: &inflight{rec: rec}}, "txn": {Metadata: &txnMsg{rec: rec}}} {
			got, err := p.Partition(msg, c.n)
			if c.ok && (err != nil || got != c.part) {
				t.Errorf("%s: partition %d of %d: got %d, %v", name, c.part, c.n, got, err)
			}
			if !c.ok {
				if perm, reason := Classify(err); !perm || reason != "invalid_partition" {
					t.Errorf("%s: partition %d of %d: got %d, %v classified %v %s", name, c.part, c.n, got, err, perm, reason)
				}
			}
			if !dp.MessageRequiresConsistency(msg) {
				t.Errorf("%s: an explicit partition must count all partitions, not the writable ones", name)
			}
		}
	}
}

// Through a broker (kfake, 3 partitions): partition 3 and -1 are dead letters (permanent,
// invalid_partition); a record with a valid explicit partition next to them is delivered there.
func TestExplicitPartitionOutOfRange(t *testing.T) {
	b := newBroker(t)
	topic := topicName(t)
	bad := func(part int32) *sink.Record {
		return &sink.Record{Topic: topic, Key: []byte("k"), Value: []byte("bad"), Partition: part, PartitionSet: true}
	}
	good := &sink.Record{Topic: topic, Key: []byte("k"), Value: []byte("good"), Partition: 2, PartitionSet: true}
	check := func(t *testing.T, errs []error) {
		t.Helper()
		for i, err := range errs[:2] {
			if perm, reason := Classify(err); !perm || reason != "invalid_partition" {
				t.Errorf("record %d: %v classified %v %s, want permanent invalid_partition", i, err, perm, reason)
			}
		}
	}
	t.Run("AtLeastOnce", func(t *testing.T) {
		p := newProducer(t, testConfig(b.Addr()))
		o := newOutcomes(t, 3)
		for i, rec := range []*sink.Record{bad(3), bad(-1), good} {
			if err := p.Produce(context.Background(), rec, o.done(i)); err != nil {
				t.Fatal(err)
			}
		}
		o.wait(t, 30*time.Second)
		f := o.failures()
		check(t, []error{f[0], f[1]})
		if f[2] != nil {
			t.Fatalf("the valid record failed: %v", f[2])
		}
		got := consume(t, b.Addr(), topic, 1, 30*time.Second)
		if len(got) != 1 || string(got[0].Value) != "good" || got[0].Partition != 2 {
			t.Fatalf("read back %d records, first %q on partition %d; want only good on 2", len(got), got[0].Value, got[0].Partition)
		}
	})
	t.Run("Transactional", func(t *testing.T) {
		p := newTxn(t, b.Addr(), "txn-partition")
		errs := txnRun(t, p, *bad(3), *bad(-1))
		check(t, errs)
		if err := p.Commit(); err == nil {
			t.Fatal("a transaction with a failed record committed")
		}
		if err := p.Abort(); err != nil {
			t.Fatal(err)
		}
	})
}
