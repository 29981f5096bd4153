package kafka

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/sink/sinktest"
)

// TestConformance runs the producer conformance suite against the Kafka producer on a kfake
// broker: the contract every fake producer of the pipeline tests also passes.
func TestConformance(t *testing.T) {
	b := newBroker(t)
	sinktest.Run(t, sinktest.Harness{
		New: func(t *testing.T) sinktest.Producer { return newProducer(t, testConfig(b.Addr())) },
		Record: func(t *testing.T, i int) *sink.Record {
			return seqRecord(topicName(t), i, 7)
		},
		ReadBack: readBack(b.Addr()),
		// A producer with a cap of one record, whose first record the broker holds (kfake's
		// SleepControl parks the Produce request without stopping the cluster) until release.
		AtCap: func(t *testing.T) (sinktest.Producer, func()) {
			held := newBroker(t)
			cfg := testConfig(held.Addr())
			cfg.MaxInflightRecords = 1
			p := newProducer(t, cfg)
			topic := topicName(t)
			warm := newOutcomes(t, 1) // the topic exists and its metadata is known
			if err := p.Produce(context.Background(), seqRecord(topic, 0, 1), warm.done(0)); err != nil {
				t.Fatal(err)
			}
			warm.wait(t, 10*time.Second)
			c := held.Cluster()
			unblock := make(chan struct{})
			arrived := make(chan struct{})
			c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
				close(arrived)
				c.SleepControl(func() { <-unblock })
				return nil, nil, false
			})
			first := newOutcomes(t, 1)
			if err := p.Produce(context.Background(), seqRecord(topic, 1, 1), first.done(1)); err != nil {
				t.Fatal(err)
			}
			select {
			case <-arrived: // the one record allowed in flight is held at the broker
			case <-time.After(10 * time.Second):
				t.Fatal("the held record's Produce request never reached the broker")
			}
			var once sync.Once
			return p, func() { once.Do(func() { close(unblock) }) }
		},
	})
}

// TestTxnConformance runs the transactional producer suite against the Kafka TxnProducer on a
// kfake broker: the contract the exactly_once runner's fakes also pass.
func TestTxnConformance(t *testing.T) {
	b := newBroker(t)
	var n int
	sinktest.RunTxn(t, sinktest.TxnHarness{
		New: func(t *testing.T) sinktest.TxnProducer {
			n++
			p, err := NewTxn(testConfig(b.Addr()), TxnOptions{ID: fmt.Sprintf("conformance-%d", n)}, nil)
			if err != nil {
				t.Fatalf("NewTxn: %v", err)
			}
			return p
		},
		Record:   func(t *testing.T, i int) *sink.Record { return seqRecord(topicName(t), i, 7) },
		ReadBack: readBack(b.Addr()),
	})
}

// readBack reads records back from the kfake broker at addr (3 partitions per topic).
func readBack(addr string) *sinktest.ReadBack {
	return &sinktest.ReadBack{Partitions: 3, Read: func(t *testing.T, topic string, n int) []sink.Record {
		var out []sink.Record
		for _, r := range consume(t, addr, topic, n, 30*time.Second) {
			rec := sink.Record{Topic: r.Topic, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp,
				Partition: r.Partition, PartitionSet: true}
			for _, h := range r.Headers {
				rec.Headers = append(rec.Headers, sink.Header{Key: h.Key, Value: h.Value})
			}
			out = append(out, rec)
		}
		return out
	}}
}
