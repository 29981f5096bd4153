package kafka

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxd/outboxd/sink"
)

// BenchmarkProduce measures records/s through the producer to a kfake broker over TCP,
// including the wait for every ack. Records are ~200 bytes with 2 headers over 1000 keys.
func BenchmarkProduce(b *testing.B) {
	br := newBroker(b)
	cfg := testConfig(br.Addr())
	cfg.Compression = "lz4"
	p, err := New(cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	topic := "bench.produce"
	value := make([]byte, 160)
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	keys := make([][]byte, 1000)
	for i := range keys {
		keys[i] = []byte("aggregate-" + strconv.Itoa(i))
	}
	hdrs := []sink.Header{{Key: "id", Value: []byte("0b9c7f5e-8c1a-4d6e-9a43-2f7f1b3c9d10")}, {Key: "eventType", Value: []byte("Created")}}
	recs := make([]sink.Record, 4096)
	for i := range recs {
		recs[i] = sink.Record{Topic: topic, Key: keys[i%len(keys)], Value: value, Headers: hdrs}
	}

	// warm up: create the topic, fetch metadata
	warm := make(chan error, 1)
	if err := p.Produce(context.Background(), &recs[0], func(err error) { warm <- err }); err != nil {
		b.Fatal(err)
	}
	select {
	case err := <-warm:
		if err != nil {
			b.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		b.Fatal("the warm-up record was not acked within 30s")
	}

	var acked, failed atomic.Int64
	all := make(chan struct{}) // closed by the b.N-th done
	done := func(err error) {
		if err != nil {
			failed.Add(1)
		}
		if acked.Add(1) == int64(b.N) {
			close(all)
		}
	}

	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if err := p.Produce(context.Background(), &recs[i%len(recs)], done); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-all:
	case <-time.After(time.Minute):
		b.Fatalf("%d of %d records acked within a minute", acked.Load(), b.N)
	}
	b.StopTimer()
	if failed.Load() > 0 {
		b.Fatalf("%d records failed", failed.Load())
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "records/s")
}

func BenchmarkMurmur2(b *testing.B) {
	key := []byte("3f1e9a52-6c0b-4e1d-8f4a-0a9b7c6d5e4f") // a uuid-sized aggregate id
	b.SetBytes(int64(len(key)))
	var sink int32
	for i := 0; i < b.N; i++ {
		sink += Murmur2(key)
	}
	_ = sink
}
