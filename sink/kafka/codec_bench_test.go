package kafka

import (
	"context"
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/sink"
)

// BenchmarkCodec produces the bench's outbox records (internal/bench pgPayloadSQL: a ~300 B
// jsonb order document with a 64-hex-digit note, key customer-<i%1000>, an "id" uuid header,
// round-robin over four topics of three partitions) through the Producer to a kfake broker over
// TCP with each kafka.compression, waiting for every ack. window is how many records may be
// outstanding: 4096 (kafka.max_inflight's default) is a backlog drain, 8 a trickle where each
// request carries a few records. Reported per record: ns/op (wall), cpu-ns/rec (this process's
// user+system CPU: sarama, the Producer and kfake, which does not decompress on produce),
// wire-B/rec (record batch bytes in the Produce requests the broker received, i.e. after
// compression) and rec/batch (records per partition batch).
//
//	go test ./sink/kafka -run '^$' -bench BenchmarkCodec -benchtime 200000x -count 1
func BenchmarkCodec(b *testing.B) {
	recs := codecBenchRecords(8192)
	var raw int
	for _, r := range recs {
		raw += len(r.Key) + len(r.Value) + len(r.Headers[0].Key) + len(r.Headers[0].Value)
	}
	b.Logf("record: key+value+header %d B on average; value e.g. %s", raw/len(recs), recs[1].Value)
	for _, window := range []int{4096, 8} {
		for _, codec := range []string{"none", "lz4", "zstd", "snappy", "gzip"} {
			b.Run(fmt.Sprintf("window=%d/%s", window, codec), func(b *testing.B) {
				benchCodec(b, codec, window, recs)
			})
		}
	}
}

func benchCodec(b *testing.B, codec string, window int, recs []sink.Record) {
	br := newBroker(b)
	var wire wireCounter
	br.Cluster().ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		wire.observe(req.(*kmsg.ProduceRequest))
		return nil, nil, false // observe only: the broker handles it
	})
	cfg := testConfig(br.Addr())
	cfg.Compression = codec
	cfg.MaxInflightRecords = window
	p, err := New(cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()

	// Warm-up: create the four topics and fetch their metadata.
	for i := range 4 {
		warm := make(chan error, 1)
		if err := p.Produce(context.Background(), &recs[i], func(err error) { warm <- err }); err != nil {
			b.Fatal(err)
		}
		select {
		case err := <-warm:
			if err != nil {
				b.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			b.Fatal("a warm-up record was not acked within 30s")
		}
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
	wire.reset()
	cpu0 := processCPU(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := p.Produce(context.Background(), &recs[i%len(recs)], done); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-all:
	case <-time.After(2 * time.Minute):
		b.Fatalf("%d of %d records acked within two minutes", acked.Load(), b.N)
	}
	b.StopTimer()
	cpu := processCPU(b) - cpu0
	if failed.Load() > 0 {
		b.Fatalf("%d records failed", failed.Load())
	}
	bytes, batches, records := wire.totals()
	if records < int64(b.N) {
		b.Fatalf("the broker saw %d records in Produce requests, %d were acked", records, b.N)
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/rec")
	b.ReportMetric(float64(bytes)/float64(records), "wire-B/rec")
	b.ReportMetric(float64(records)/float64(batches), "rec/batch")
}

// codecBenchRecords builds n records shaped like the bench's PostgreSQL outbox rows as
// outboxd sends them: the jsonb text form of pgPayloadSQL (keys in jsonb order: by length,
// then bytewise), key = aggregateid, one "id" header (the row's uuid), topic by aggregatetype.
func codecBenchRecords(n int) []sink.Record {
	topics := []string{"bench.codec.order", "bench.codec.customer", "bench.codec.payment", "bench.codec.shipment"}
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	recs := make([]sink.Record, n)
	for i := range recs {
		ts := t0.Add(time.Duration(i) * 37 * time.Microsecond)
		note := md5.Sum([]byte(fmt.Sprint(i)))
		note2 := md5.Sum([]byte(fmt.Sprint(i + 1)))
		value := fmt.Sprintf(`{"ts": %d, "note": "%s%s", "lines": [{"qty": %d, "sku": "SKU-%d", "price": 9.99}, `+
			`{"qty": 2, "sku": "SKU-%d", "price": 19.5}], "amount": %.2f, "status": "CREATED", "orderId": %d, `+
			`"currency": "EUR", "createdAt": "%s", "customerId": "customer-%d"}`,
			ts.UnixMicro(), hex.EncodeToString(note[:]), hex.EncodeToString(note2[:]), 1+i%5, i%500, i%77,
			float64(i%10000)*1.37, i, ts.Format("2006-01-02 15:04:05.999999-07"), i%1000)
		id := md5.Sum(binary.BigEndian.AppendUint64(nil, uint64(i)))
		u := hex.EncodeToString(id[:])
		uuid := u[0:8] + "-" + u[8:12] + "-4" + u[13:16] + "-a" + u[17:20] + "-" + u[20:32]
		recs[i] = sink.Record{
			Topic:   topics[i%len(topics)],
			Key:     []byte(fmt.Sprintf("customer-%d", i%1000)),
			Value:   []byte(value),
			Headers: []sink.Header{{Key: "id", Value: []byte(uuid)}},
		}
	}
	return recs
}

// wireCounter sums the record batches of the Produce requests the broker receives.
type wireCounter struct {
	mu                      sync.Mutex
	bytes, batches, records int64
}

func (w *wireCounter) observe(req *kmsg.ProduceRequest) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			for rest := p.Records; len(rest) > 0; {
				var batch kmsg.RecordBatch
				if err := batch.ReadFrom(rest); err != nil {
					return // not a v2 batch: not counted (the bench then fails on records < acked)
				}
				n := 12 + int(batch.Length) // baseOffset and length precede the counted bytes
				w.bytes += int64(n)
				w.batches++
				w.records += int64(batch.NumRecords)
				rest = rest[min(n, len(rest)):]
			}
		}
	}
}

func (w *wireCounter) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.bytes, w.batches, w.records = 0, 0, 0
}

func (w *wireCounter) totals() (bytes, batches, records int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.bytes, w.batches, w.records
}

// processCPU is this process's user+system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
