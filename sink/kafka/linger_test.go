package kafka

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestSaramaConfigLinger: the default (Linger 0) is sarama's flush-as-soon-as-possible mode,
// which needs Frequency, Bytes and Messages all 0 (a non-zero Bytes alone would hold records
// until that many bytes are queued); a positive Linger is a fixed delay bounded by BatchBytes.
func TestSaramaConfigLinger(t *testing.T) {
	if DefaultLinger != 0 {
		t.Fatalf("DefaultLinger = %s, want 0 (adaptive)", DefaultLinger)
	}
	sc, err := Config{Brokers: []string{"127.0.0.1:9092"}}.SaramaConfig()
	if err != nil {
		t.Fatal(err)
	}
	if f := sc.Producer.Flush; f.Frequency != 0 || f.Bytes != 0 || f.Messages != 0 || f.MaxMessages != 0 {
		t.Fatalf("default Flush = %+v, want Frequency, Bytes, Messages, MaxMessages all 0", f)
	}
	sc, err = Config{Brokers: []string{"127.0.0.1:9092"}, Linger: 5 * time.Millisecond, BatchBytes: 64 << 10}.SaramaConfig()
	if err != nil {
		t.Fatal(err)
	}
	if f := sc.Producer.Flush; f.Frequency != 5*time.Millisecond || f.Bytes != 64<<10 || f.Messages != 0 {
		t.Fatalf("linger 5ms Flush = %+v, want Frequency 5ms, Bytes 65536, Messages 0", f)
	}
	if err := sc.Validate(); err != nil {
		t.Fatalf("sarama Validate: %v", err)
	}
}

// TestAdaptiveLingerSendsAtOnceAndBatchesWhileInFlight: with the default config a record
// produced to an idle producer reaches the broker without waiting for a timer or a byte count,
// no further request goes to its partition while that one is outstanding (held at the broker),
// and the records produced meanwhile go out together once it returns.
func TestAdaptiveLingerSendsAtOnceAndBatchesWhileInFlight(t *testing.T) {
	br := newBroker(t)
	p := newProducer(t, testConfig(br.Addr()))
	topic := topicName(t)
	warm := newOutcomes(t, 1) // the topic exists and its metadata is known
	if err := p.Produce(context.Background(), seqRecord(topic, 0, 1), warm.done(0)); err != nil {
		t.Fatal(err)
	}
	warm.wait(t, 30*time.Second)

	type request struct {
		records int
		at      time.Time
	}
	requests := make(chan request, 64)
	release := make(chan struct{})
	held := false
	c := br.Cluster()
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		n := 0
		for _, tp := range req.(*kmsg.ProduceRequest).Topics {
			for _, pp := range tp.Partitions {
				var batch kmsg.RecordBatch
				if err := batch.ReadFrom(pp.Records); err == nil {
					n += int(batch.NumRecords)
				}
			}
		}
		requests <- request{n, time.Now()}
		if !held {
			held = true
			c.SleepControl(func() { <-release }) // the first request's response waits for release
		}
		return nil, nil, false // the broker handles it
	})

	const more = 10
	out := newOutcomes(t, 1+more)
	start := time.Now()
	if err := p.Produce(context.Background(), seqRecord(topic, 1, 1), out.done(1)); err != nil {
		t.Fatal(err)
	}
	first := nextRequest(t, requests)
	if first.records != 1 {
		t.Fatalf("the first Produce request carried %d records, want 1", first.records)
	}
	// Sent without a linger or byte threshold (with Flush.Bytes set and no Frequency it would
	// never be sent); the bound only absorbs scheduling on a busy machine.
	if d := first.at.Sub(start); d > 2*time.Second {
		t.Fatalf("the first record reached the broker %s after Produce", d)
	}
	for i := range more {
		if err := p.Produce(context.Background(), seqRecord(topic, 2+i, 1), out.done(2+i)); err != nil {
			t.Fatal(err)
		}
	}
	releasedAt := time.Now()
	close(release)
	got, reqs := 0, 0
	for got < more {
		r := nextRequest(t, requests)
		if r.at.Before(releasedAt) {
			t.Fatalf("a Produce request (%d records) reached the broker while the first was outstanding", r.records)
		}
		got += r.records
		reqs++
	}
	if got != more || reqs >= more {
		t.Fatalf("the %d records produced while the first request was outstanding came in %d requests with %d records; want them batched", more, reqs, got)
	}
	t.Logf("%d records produced while a request was outstanding went out in %d request(s)", more, reqs)
	out.wait(t, 30*time.Second)
	if f := out.failures(); len(f) > 0 {
		t.Fatalf("records failed: %v", f)
	}
}

func nextRequest[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("no Produce request reached the broker within 30s")
	}
	var zero T
	return zero
}
