package kafka

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/sink"
)

func TestProduceRoundTrip(t *testing.T) {
	b := newBroker(t)
	p := newProducer(t, testConfig(b.Addr()))
	topic := topicName(t)

	recs := []*sink.Record{
		{Topic: topic, Key: []byte("order-1"), Value: []byte(`{"a":1}`),
			Headers: []sink.Header{{Key: "id", Value: []byte("0b9c7f5e-8c1a-4d6e-9a43-2f7f1b3c9d10")}, {Key: "eventType", Value: []byte("Created")}}},
		{Topic: topic, Key: []byte("order-2"), Value: nil}, // null value
		{Topic: topic, Key: []byte("order-3"), Value: []byte{}},
		{Topic: topic, Key: []byte("order-4"), Value: []byte{0, 1, 2, 0xff},
			Headers: []sink.Header{{Key: "a", Value: []byte("1")}, {Key: "b"}, {Key: "c", Value: []byte("3")},
				{Key: "d", Value: []byte("4")}, {Key: "e", Value: []byte("5")}, {Key: "a", Value: []byte("dup")}}},
		{Topic: topic, Key: nil, Value: []byte("no key")},
		{Topic: topic, Key: []byte{}, Value: []byte("empty key")},
	}
	o := newOutcomes(t, len(recs))
	for i, r := range recs {
		if err := p.Produce(context.Background(), r, o.done(i)); err != nil {
			t.Fatal(err)
		}
	}
	o.wait(t, 10*time.Second)
	if f := o.failures(); len(f) > 0 {
		t.Fatalf("failures: %v", f)
	}
	n, err := p.Partitions(topic)
	if err != nil || n != 3 {
		t.Fatalf("Partitions = %d, %v", n, err)
	}

	got := consume(t, b.Addr(), topic, len(recs), 10*time.Second)
	byValue := map[string]int{}
	for i, r := range recs {
		byValue[string(r.Value)+"|"+string(r.Key)] = i
	}
	for _, g := range got {
		i, ok := byValue[string(g.Value)+"|"+string(g.Key)]
		if !ok {
			t.Fatalf("unexpected record key=%q value=%q", g.Key, g.Value)
		}
		want := recs[i]
		if (want.Key == nil) != (g.Key == nil) || !bytes.Equal(want.Key, g.Key) {
			t.Errorf("record %d key %q (nil=%v), want %q (nil=%v)", i, g.Key, g.Key == nil, want.Key, want.Key == nil)
		}
		if (want.Value == nil) != (g.Value == nil) || !bytes.Equal(want.Value, g.Value) {
			t.Errorf("record %d value %q (nil=%v), want %q (nil=%v)", i, g.Value, g.Value == nil, want.Value, want.Value == nil)
		}
		if len(g.Headers) != len(want.Headers) {
			t.Fatalf("record %d: %d headers, want %d", i, len(g.Headers), len(want.Headers))
		}
		for j, h := range want.Headers {
			if g.Headers[j].Key != h.Key || !bytes.Equal(g.Headers[j].Value, h.Value) {
				t.Errorf("record %d header %d = %q:%q, want %q:%q", i, j, g.Headers[j].Key, g.Headers[j].Value, h.Key, h.Value)
			}
		}
		if want.Key != nil {
			if wantP := PartitionFor(want.Key, 3); g.Partition != wantP {
				t.Errorf("record %d (key %q) on partition %d, PartitionFor says %d", i, want.Key, g.Partition, wantP)
			}
		}
	}
	if _, err := p.Partitions("no.such.topic"); err == nil {
		t.Error("Partitions of a missing topic should fail")
	}
	if _, err := p.Partitions("bad topic"); err == nil {
		t.Error("Partitions of an invalid name should fail")
	}
}

func TestPerKeyOrderAndDoneOnce(t *testing.T) {
	b := newBroker(t)
	cfg := testConfig(b.Addr())
	cfg.Compression = "lz4"
	cfg.MaxInflightRecords = 2000 // exercise backpressure too
	p := newProducer(t, cfg)
	topic := topicName(t)
	const n, keys = 20000, 37
	o := newOutcomes(t, n)
	for i := range n {
		if err := p.Produce(context.Background(), seqRecord(topic, i, keys), o.done(i)); err != nil {
			t.Fatal(err)
		}
	}
	o.wait(t, 30*time.Second)
	if f := o.failures(); len(f) > 0 {
		t.Fatalf("%d failures, e.g. %v", len(f), f)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Produce(context.Background(), seqRecord(topic, 0, 1), func(error) { t.Error("done after Close") }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Produce after Close = %v, want ErrClosed", err)
	}
	if dups := checkPerKeyOrder(t, consume(t, b.Addr(), topic, n, 20*time.Second), n, 3); dups != 0 {
		t.Fatalf("%d duplicates without any failure", dups)
	}
}

func TestLocalFailures(t *testing.T) {
	b := newBroker(t)
	cfg := testConfig(b.Addr())
	cfg.MaxRecordBytes = 1000
	p := newProducer(t, cfg)
	o := newOutcomes(t, 2)
	if err := p.Produce(context.Background(), &sink.Record{Topic: topicName(t), Value: make([]byte, 2000)}, o.done(0)); err != nil {
		t.Fatal(err)
	}
	if err := p.Produce(context.Background(), &sink.Record{Topic: "bad topic!", Value: []byte("x")}, o.done(1)); err != nil {
		t.Fatal(err)
	}
	o.wait(t, 5*time.Second)
	f := o.failures()
	var tooLarge *RecordTooLargeError
	if perm, reason := Classify(f[0]); !perm || reason != "record_too_large" || !errors.As(f[0], &tooLarge) {
		t.Errorf("oversized record: %v (%v %s)", f[0], perm, reason)
	}
	if perm, reason := Classify(f[1]); !perm || reason != "invalid_topic" || !strings.Contains(f[1].Error(), "bad topic!") {
		t.Errorf("bad topic: %v (%v %s)", f[1], perm, reason)
	}
}

// permanentFault produces to a topic whose produce requests all fail with kerr and expects
// every record to fail permanently with reason.
func permanentFault(t *testing.T, fe *kerr.Error, reason string) {
	b := newBroker(t)
	p := newProducer(t, testConfig(b.Addr()))
	topic := topicName(t)
	b.Cluster().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: fe, Count: -1})
	const n = 5
	o := newOutcomes(t, n)
	for i := range n {
		if err := p.Produce(context.Background(), seqRecord(topic, i, 2), o.done(i)); err != nil {
			t.Fatal(err)
		}
	}
	o.wait(t, 20*time.Second)
	f := o.failures()
	if len(f) != n {
		t.Fatalf("%d of %d records failed, want all", len(f), n)
	}
	for i, err := range f {
		var de *DeliveryError
		if perm, r := Classify(err); !perm || r != reason || !errors.As(err, &de) || de.Topic != topic {
			t.Errorf("record %d: %v, classified %v %q; want permanent %q", i, err, perm, r, reason)
		}
	}
}

func TestFaultMessageTooLargeIsPermanent(t *testing.T) {
	permanentFault(t, kerr.MessageTooLarge, "record_too_large")
}

func TestFaultTopicAuthorizationFailedIsPermanent(t *testing.T) {
	permanentFault(t, kerr.TopicAuthorizationFailed, "topic_authorization_failed")
}

func TestFaultInvalidRecordIsPermanent(t *testing.T) {
	permanentFault(t, kerr.InvalidRecord, "invalid_record")
}

// A batch refused once as too large is split: its records are re-sent one by one and all land,
// in order.
func TestBatchRefusedOnceIsSplit(t *testing.T) {
	b := newBroker(t)
	cfg := testConfig(b.Addr())
	// All 50 records in the one refused batch: with the adaptive default the first records go
	// out alone and the rest behind them, and records sarama already holds behind a refused
	// batch land before its re-sent members (the package doc's "What remains").
	cfg.Linger = 200 * time.Millisecond
	p := newProducer(t, cfg)
	topic := topicName(t)
	b.Cluster().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.MessageTooLarge, Count: 1})
	const n = 50
	o := newOutcomes(t, n)
	for i := range n {
		if err := p.Produce(context.Background(), seqRecord(topic, i, 3), o.done(i)); err != nil {
			t.Fatal(err)
		}
	}
	o.wait(t, 20*time.Second)
	if f := o.failures(); len(f) > 0 {
		t.Fatalf("failures: %v", f)
	}
	checkPerKeyOrder(t, consume(t, b.Addr(), topic, n, 10*time.Second), n, 3)
}

// Against a broker limit of 4000 bytes: batches of small records get refused, are split, and
// land; only the record that is too large by itself is dead-lettered.
func TestBrokerSizeLimit(t *testing.T) {
	b := newBroker(t, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "4000"}))
	cfg := testConfig(b.Addr())
	// The records go out in few refused batches, as in TestBatchRefusedOnceIsSplit: with the
	// adaptive default, records sarama already holds behind a refused batch may land before its
	// re-sent members (the package doc's "What remains"), which the order check below would see.
	cfg.Linger = 200 * time.Millisecond
	p := newProducer(t, cfg)
	topic := topicName(t)
	const n, big = 40, 17
	o := newOutcomes(t, n)
	for i := range n {
		r := seqRecord(topic, i, 1)
		if i == big {
			r.Headers = []sink.Header{{Key: "pad", Value: make([]byte, 10000)}}
		} else {
			r.Headers = []sink.Header{{Key: "pad", Value: make([]byte, 500)}}
		}
		if err := p.Produce(context.Background(), r, o.done(i)); err != nil {
			t.Fatal(err)
		}
	}
	o.wait(t, 30*time.Second)
	f := o.failures()
	if len(f) != 1 || f[big] == nil {
		t.Fatalf("want only record %d to fail, got %v", big, f)
	}
	if perm, reason := Classify(f[big]); !perm || reason != "record_too_large" {
		t.Fatalf("big record: %v %s", perm, reason)
	}
	got := consume(t, b.Addr(), topic, n-1, 10*time.Second)
	prev := -1
	for _, r := range got {
		v := atoi(t, r.Value)
		if v <= prev || v == big {
			t.Fatalf("value %d after %d", v, prev)
		}
		prev = v
	}
}

func TestTransientFaultsAreRetried(t *testing.T) {
	for _, fe := range []*kerr.Error{kerr.NotEnoughReplicas, kerr.LeaderNotAvailable, kerr.RequestTimedOut, kerr.NotLeaderForPartition} {
		t.Run(fe.Message, func(t *testing.T) {
			b := newBroker(t)
			p := newProducer(t, testConfig(b.Addr()))
			topic := topicName(t)
			h := b.Cluster().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: fe, Count: 6})
			const n = 2000
			o := newOutcomes(t, n)
			for i := range n {
				if err := p.Produce(context.Background(), seqRecord(topic, i, 10), o.done(i)); err != nil {
					t.Fatal(err)
				}
			}
			o.wait(t, 30*time.Second)
			if f := o.failures(); len(f) > 0 {
				t.Fatalf("%d records failed, e.g. %v", len(f), f)
			}
			if h.Hits() == 0 {
				t.Fatal("fault never hit")
			}
			checkPerKeyOrder(t, consume(t, b.Addr(), topic, n, 10*time.Second), n, 3)
		})
	}
}

func TestSASL(t *testing.T) {
	for _, mech := range []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} {
		t.Run(mech, func(t *testing.T) {
			b := newBroker(t, kfake.EnableSASL(), kfake.Superuser(mech, "outboxd", "s3cret-pw"))
			cfg := testConfig(b.Addr())
			cfg.SASL = &SASLConfig{Mechanism: mech, Username: "outboxd", Password: "s3cret-pw"}
			p := newProducer(t, cfg)
			o := newOutcomes(t, 1)
			if err := p.Produce(context.Background(), seqRecord(topicName(t), 1, 1), o.done(0)); err != nil {
				t.Fatal(err)
			}
			o.wait(t, 10*time.Second)
			if f := o.failures(); len(f) > 0 {
				t.Fatal(f)
			}

			if mech != "SCRAM-SHA-512" {
				return // a refused login costs sarama's ~5 s of InitProducerID retries: test it once
			}
			cfg.SASL.Password = "wrong-pw"
			_, err := New(cfg, nil)
			if err == nil {
				t.Fatal("New with a wrong password succeeded")
			}
			if strings.Contains(err.Error(), "wrong-pw") {
				t.Fatalf("error leaks the password: %v", err)
			}
		})
	}
}
