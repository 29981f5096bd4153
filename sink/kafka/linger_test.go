package kafka

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestLingerFlushSettings(t *testing.T) {
	for _, c := range []struct {
		name      string
		linger    time.Duration
		batch     int
		wantFreq  time.Duration
		wantBytes int
	}{
		{"default adaptive", 0, 0, 0, 0},
		{"adaptive ignores batch_bytes", 0, 64 << 10, 0, 0},
		{"fixed linger", 7 * time.Millisecond, 0, 7 * time.Millisecond, DefaultBatchBytes},
		{"fixed linger and batch", 20 * time.Millisecond, 64 << 10, 20 * time.Millisecond, 64 << 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			sc, err := Config{Brokers: []string{"k:9092"}, Linger: c.linger, BatchBytes: c.batch}.SaramaConfig()
			if err != nil {
				t.Fatal(err)
			}
			f := sc.Producer.Flush
			if f.Frequency != c.wantFreq || f.Bytes != c.wantBytes || f.MaxMessages != 0 || f.Messages != 0 {
				t.Fatalf("Flush = %+v, want Frequency %s Bytes %d and no message triggers", f, c.wantFreq, c.wantBytes)
			}
			if err := sc.Validate(); err != nil {
				t.Fatalf("sarama Validate: %v", err)
			}
		})
	}
}

// produceRequests counts the broker's Produce requests for one topic and the records in each,
// and can hold the first one until release is closed.
type produceRequests struct {
	topic   string
	mu      sync.Mutex
	records []int         // per request, in arrival order
	first   chan struct{} // closed when the first request arrived
	release chan struct{} // the first request is answered once this is closed
}

func watchProduce(c *kfake.Cluster, topic string, hold bool) *produceRequests {
	w := &produceRequests{topic: topic, first: make(chan struct{}), release: make(chan struct{})}
	if !hold {
		close(w.release)
	}
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		n := 0
		for _, tp := range req.(*kmsg.ProduceRequest).Topics {
			if tp.Topic != topic {
				continue
			}
			for _, p := range tp.Partitions {
				var rb kmsg.RecordBatch
				if err := rb.ReadFrom(p.Records); err == nil {
					n += int(rb.NumRecords)
				}
			}
		}
		if n == 0 {
			return nil, nil, false
		}
		w.mu.Lock()
		w.records = append(w.records, n)
		isFirst := len(w.records) == 1
		w.mu.Unlock()
		if isFirst {
			close(w.first)
			c.SleepControl(func() { <-w.release })
		}
		return nil, nil, false // the cluster handles it as usual
	})
	return w
}

func (w *produceRequests) counts() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]int(nil), w.records...)
}

// With the default (adaptive) linger a record on an idle producer is sent at once: the broker
// sees its request although nothing else is produced and BatchBytes is far away. Records
// produced while that request is held at the broker collect into few requests instead of one
// request each, and all land in order.
func TestAdaptiveLingerSendsAtOnceAndBatchesWhileInFlight(t *testing.T) {
	b := newBroker(t)
	topic := topicName(t)
	w := watchProduce(b.Cluster(), topic, true)
	p := newProducer(t, testConfig(b.Addr()))
	const n = 200
	o := newOutcomes(t, n)
	if err := p.Produce(context.Background(), seqRecord(topic, 0, 1), o.done(0)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.first:
	case <-time.After(10 * time.Second):
		close(w.release)
		t.Fatal("the broker saw no Produce request for a lone record within 10s: the producer is waiting for more records (not adaptive)")
	}
	for i := 1; i < n; i++ {
		if err := p.Produce(context.Background(), seqRecord(topic, i, 1), o.done(i)); err != nil {
			t.Fatal(err)
		}
	}
	close(w.release)
	o.wait(t, 20*time.Second)
	if f := o.failures(); len(f) > 0 {
		t.Fatalf("failures: %v", f)
	}
	got := w.counts()
	if len(got) == 0 || got[0] != 1 {
		t.Fatalf("first request carried %v records, want the lone record alone", got)
	}
	// sarama may write one more request behind the held one (its response reader takes the
	// first promise and the connection accepts the second write); everything else produced
	// meanwhile must wait for them and go out together.
	if len(got) > 4 {
		t.Fatalf("%d records produced while a request was in flight went out in %d requests %v: not batched", n-1, len(got)-1, got)
	}
	checkPerKeyOrder(t, consume(t, b.Addr(), topic, n, 10*time.Second), n, 3)
}

// A fixed linger holds a lone record back until the linger passes: the request arrives only
// after it (checked against a linger long enough that the two cannot be confused).
func TestFixedLingerWaits(t *testing.T) {
	b := newBroker(t)
	topic := topicName(t)
	w := watchProduce(b.Cluster(), topic, false)
	cfg := testConfig(b.Addr())
	cfg.Linger = 700 * time.Millisecond
	p := newProducer(t, cfg)
	o := newOutcomes(t, 1)
	start := time.Now()
	if err := p.Produce(context.Background(), seqRecord(topic, 0, 1), o.done(0)); err != nil {
		t.Fatal(err)
	}
	o.wait(t, 20*time.Second)
	if d := time.Since(start); d < cfg.Linger {
		t.Fatalf("acked after %s, before the %s linger passed: Flush.Frequency not applied", d, cfg.Linger)
	}
	if got := w.counts(); len(got) != 1 || got[0] != 1 {
		t.Fatalf("requests %v, want one with the record", got)
	}
}
