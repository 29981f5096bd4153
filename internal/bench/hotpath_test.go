package bench

// Server-less benchmarks of outboxd's per-event hot path. The per-package ones live next to
// their code (source/postgres BenchmarkDecodeInsert, transform/outbox BenchmarkRoute, offsets
// BenchmarkTracker, sink/kafka BenchmarkProduce and BenchmarkMurmur2); these cover what only
// exists across packages:
//
//	BenchmarkHotPathPG        pgoutput bytes (XLogData) → Decoder → Route → Tracker → partition
//	BenchmarkPipelineLoop     internal/pipeline's loop with a fake source and an instant producer
//	BenchmarkRecordEncode     sarama's encoding of produce requests (record batch v2, per record)
//
// One op is one event; -benchmem's allocs/op are allocations per event.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pglogrepl"

	"github.com/outboxd/outboxd/internal/pipeline"
	"github.com/outboxd/outboxd/offsets"
	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/sink/kafka"
	"github.com/outboxd/outboxd/source"
	"github.com/outboxd/outboxd/source/postgres"
	"github.com/outboxd/outboxd/source/postgres/pgoutputtest"
	"github.com/outboxd/outboxd/transform/outbox"
)

// A ~300-byte payload as the bench's loader writes it (jsonb text form).
const benchPayload = `{"ts": 1732886400123456, "lines": [{"qty": 2, "sku": "SKU-42", "price": 9.99}, {"qty": 2, "sku": "SKU-42", "price": 19.5}], "note": "c4ca4238a0b923820dcc509a6f75849bc81e728d9d4c2f636f067f89cc14862c", "amount": 57.54, "status": "CREATED", "orderId": 42, "currency": "EUR", "createdAt": "2026-11-29 13:33:44.123456+00", "customerId": "customer-42"}`

// pgoutput protocol-version-1 messages (package pgoutputtest), wrapped in XLogData as the
// walsender sends them.

func xlog(lsn uint64, walData []byte) []byte { return pgoutputtest.XLogData(lsn, lsn, walData) }

// benchCommitTime is the transactions' commit time (any fixed time: the decoder's cost does not
// depend on it).
var benchCommitTime = pgoutputtest.Epoch.Add(0x2d0000000000 * time.Microsecond)

func relationMsg() []byte {
	return pgoutputtest.Relation(16384, "public", "outbox", pgoutputtest.OutboxColumns...)
}

func insertMsg(i int) []byte {
	return pgoutputtest.Insert(16384, pgoutputtest.Texts(fmt.Sprintf("6d3f1c2e-5a4b-4c3d-9e8f-%012d", i), "order",
		fmt.Sprintf("customer-%d", i%1000), "OrderCreated", benchPayload, "2026-11-29 13:33:44.123456+00")...)
}

func beginMsg(lsn uint64, xid uint32) []byte { return pgoutputtest.Begin(lsn, benchCommitTime, xid) }

func commitMsg(lsn, end uint64) []byte { return pgoutputtest.Commit(lsn, end, benchCommitTime) }

// hotPath is the per-event work of the PostgreSQL drain without I/O: what the stream loop, the
// pipeline and the producer's build do for each message and record.
type hotPath struct {
	dec     *postgres.Decoder
	router  *outbox.Router
	tracker *offsets.Tracker
	events  int

	msg        sarama.ProducerMessage // reused, as the producer's pooled inflight does
	key, value sarama.ByteEncoder
}

func newHotPath(b *testing.B) *hotPath {
	router, err := outbox.New(outbox.Config{IDColumn: "id", AggregateTypeColumn: "aggregatetype", AggregateIDColumn: "aggregateid",
		TypeColumn: "type", PayloadColumn: "payload", Topic: "outbox.event.${routedByValue}",
		Headers: []outbox.Header{{Column: "type", Name: "eventType"}}})
	if err != nil {
		b.Fatal(err)
	}
	h := &hotPath{dec: postgres.NewDecoder([]string{"public.outbox"}), router: router, tracker: offsets.NewTracker(10000, 40000)}
	if err := h.message(xlog(1, relationMsg())); err != nil {
		b.Fatal(err)
	}
	return h
}

func (h *hotPath) message(copyData []byte) error {
	x, err := pglogrepl.ParseXLogData(copyData[1:])
	if err != nil {
		return err
	}
	tx, done, err := h.dec.Decode(x.WALData)
	if err != nil || !done {
		return err
	}
	seq, err := h.tracker.Track(tx.Position, len(tx.Rows))
	if err != nil {
		return err
	}
	for i := range tx.Rows {
		rec, err := h.router.Route(&tx.Rows[i], time.Time{})
		if err != nil {
			return err
		}
		// The producer's build: a sarama message (reused, like its pooled inflight) and the
		// record's partition.
		h.key, h.value = rec.Key, rec.Value
		h.msg = sarama.ProducerMessage{Topic: rec.Topic, Key: &h.key, Value: &h.value}
		h.msg.Partition = kafka.PartitionFor(rec.Key, 3)
		_ = h.msg.ByteSize(2)
		if err := h.tracker.Done(seq); err != nil {
			return err
		}
		h.events++
	}
	if h.events%1000 == 0 {
		h.tracker.Commit()
	}
	return nil
}

// BenchmarkHotPathPG: one op is one event (row) of an outbox transaction of txRows rows.
func BenchmarkHotPathPG(b *testing.B) {
	for _, txRows := range []int{1, 1000} {
		b.Run(fmt.Sprintf("tx=%d", txRows), func(b *testing.B) {
			h := newHotPath(b)
			const distinct = 1000
			ins := make([][]byte, distinct)
			for i := range ins {
				ins[i] = xlog(2, insertMsg(i))
			}
			begins, commits := make([][]byte, distinct), make([][]byte, distinct)
			for i := range begins {
				lsn := uint64(i+1) * 100
				begins[i], commits[i] = xlog(lsn, beginMsg(lsn, uint32(i))), xlog(lsn+90, commitMsg(lsn+80, lsn+90))
			}
			b.SetBytes(int64(len(ins[0])))
			b.ReportAllocs()
			b.ResetTimer()
			tx := 0
			for i := 0; i < b.N; i++ {
				if i%txRows == 0 {
					if err := h.message(begins[tx%distinct]); err != nil {
						b.Fatal(err)
					}
				}
				if err := h.message(ins[i%distinct]); err != nil {
					b.Fatal(err)
				}
				if i%txRows == txRows-1 || i == b.N-1 {
					if err := h.message(commits[tx%distinct]); err != nil {
						b.Fatal(err)
					}
					tx++
				}
			}
		})
	}
}

// fakeSource hands out n single-row transactions (the same row) and then blocks.
type fakeSource struct {
	txs  []source.Tx
	next int
}

func (s *fakeSource) Open(context.Context, source.Position) error { return nil }
func (s *fakeSource) Next(ctx context.Context) (source.Tx, error) {
	if s.next < len(s.txs) {
		s.next++
		return s.txs[s.next-1], nil
	}
	<-ctx.Done()
	return source.Tx{}, ctx.Err()
}
func (s *fakeSource) Confirm(context.Context, source.Position) error { return nil }
func (s *fakeSource) Close() error                                   { return nil }

// instantProducer acks every record from one goroutine, as sarama's result loop does. It keeps
// the producer contract (sink/sinktest, TestInstantProducerConforms): Produce after Close returns
// errClosed, Close waits for every queued done. The read lock costs Produce two uncontended
// atomic adds; only Close takes the write lock.
type instantProducer struct {
	mu     sync.RWMutex // held for reading while a record is handed over; Close takes it to close ch
	closed bool
	ch     chan func(error)
	done   chan struct{}
}

var errClosed = errors.New("instantProducer: closed")

// newInstantProducer returns a producer that queues up to capacity records ahead of its acks.
func newInstantProducer(capacity int) *instantProducer {
	p := &instantProducer{ch: make(chan func(error), capacity), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for d := range p.ch {
			d(nil)
		}
	}()
	return p
}

func (p *instantProducer) Produce(ctx context.Context, rec *sink.Record, done func(error)) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return errClosed
	}
	select {
	case p.ch <- done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close refuses further records and returns once every queued record was acked. A Produce
// blocked on a full queue holds the read lock until the ack goroutine makes room.
func (p *instantProducer) Close() error {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.ch)
	}
	p.mu.Unlock()
	<-p.done
	return nil
}

type memStore struct{ pos source.Position }

func (m *memStore) Load(context.Context) (source.Position, error) { return m.pos, nil }
func (m *memStore) Save(_ context.Context, p source.Position) error {
	m.pos = p
	return nil
}

// BenchmarkPipelineLoop: one op is one single-row transaction through pipeline.Run (reader
// goroutine, txCh, tracker, Route, Produce, done callbacks, outcomes, commits) with a source and
// a producer that cost nothing: the loop's own overhead per event.
func BenchmarkPipelineLoop(b *testing.B) {
	router, _ := outbox.New(outbox.DefaultConfig())
	row := source.Row{Table: "public.outbox", Columns: []string{"id", "aggregatetype", "aggregateid", "type", "payload"},
		Values: []source.Value{{Bytes: []byte("6d3f1c2e-5a4b-4c3d-9e8f-0a1b2c3d4e5f")}, {Bytes: []byte("order")},
			{Bytes: []byte("customer-42")}, {Bytes: []byte("OrderCreated")}, {Bytes: []byte(benchPayload)}}}
	txs := make([]source.Tx, b.N)
	for i := range txs {
		txs[i] = source.Tx{Position: source.Position(pglogrepl.LSN(uint64(i+1) * 100).String()), CommitTime: time.Now(), Rows: []source.Row{row}}
	}
	last := txs[len(txs)-1].Position
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := &fakeSource{txs: txs}
	opts := pipeline.Options{
		NewSource: func() source.Source { return src }, Producer: newInstantProducer(10000), Route: router.Route,
		Classify: kafka.Classify, Store: &memStore{}, DLQTopic: "dlq", CommitInterval: 100 * time.Millisecond,
		Log: slog.New(slog.DiscardHandler), OnCommit: func(p source.Position) {
			if p == last {
				cancel()
			}
		},
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	if err := pipeline.Run(ctx, opts); err != nil {
		b.Fatal(err)
	}
	// CPU time, not wall time, is what this loop costs per event (the machine is shared).
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
}

// processCPU is this process's CPU time (user+system, all threads: the GC's too) in ns.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// variedPayload is benchPayload with row-specific numbers and hashes (compression sees
// realistic, not identical, records).
func variedPayload(i int) []byte {
	h := sha256.Sum256([]byte(strconv.Itoa(i)))
	p := strings.Replace(benchPayload, "c4ca4238a0b923820dcc509a6f75849bc81e728d9d4c2f636f067f89cc14862c", hex.EncodeToString(h[:]), 1)
	p = strings.Replace(p, `"orderId": 42`, `"orderId": `+strconv.Itoa(i), 1)
	p = strings.Replace(p, "1732886400123456", strconv.Itoa(1732886400123456+i*397), 1)
	return []byte(strings.Replace(p, "customer-42", fmt.Sprintf("customer-%d", i%1000), 1))
}

// BenchmarkRecordEncode: one op is one ~420-byte record (key, 300-byte value, id and eventType
// headers) encoded by sarama into a produce request (record batch v2, 1000 records per batch,
// idempotent producer fields) and written to a TCP socket that discards it — the per-record
// cost of sarama's encoding and compression in outboxd's producer.
func BenchmarkRecordEncode(b *testing.B) {
	for _, codec := range []sarama.CompressionCodec{sarama.CompressionNone, sarama.CompressionLZ4, sarama.CompressionZSTD} {
		b.Run(codec.String(), func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					go io.Copy(io.Discard, c)
				}
			}()
			sc := sarama.NewConfig()
			sc.Version = sarama.V2_8_0_0
			sc.ApiVersionsRequest = false
			br := sarama.NewBroker(ln.Addr().String())
			if err := br.Open(sc); err != nil {
				b.Fatal(err)
			}
			defer br.Close()
			const batch = 1000
			recs := make([]*sarama.Record, batch)
			for i := range recs {
				recs[i] = &sarama.Record{OffsetDelta: int64(i), Key: []byte(fmt.Sprintf("customer-%d", i)), Value: variedPayload(i),
					Headers: []*sarama.RecordHeader{{Key: []byte("id"), Value: []byte(fmt.Sprintf("6d3f1c2e-5a4b-4c3d-9e8f-%012d", i))},
						{Key: []byte("eventType"), Value: []byte("OrderCreated")}}}
			}
			b.SetBytes(int64(len(benchPayload) + len("customer-000") + 36 + len("OrderCreated")))
			b.ReportAllocs()
			b.ResetTimer()
			now := time.Now()
			for done := 0; done < b.N; done += batch {
				n := min(batch, b.N-done)
				rb := &sarama.RecordBatch{Version: 2, Codec: codec, CompressionLevel: sarama.CompressionLevelDefault,
					FirstTimestamp: now, MaxTimestamp: now, LastOffsetDelta: int32(n - 1), ProducerID: 1, ProducerEpoch: 0,
					FirstSequence: int32(done), Records: recs[:n]}
				req := &sarama.ProduceRequest{RequiredAcks: sarama.NoResponse, Timeout: 10000, Version: 7}
				req.AddBatch("outbox.event.order", 0, rb)
				if _, err := br.Produce(req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestHotPathFixtures checks the hand-built pgoutput messages decode to the expected record.
func TestHotPathFixtures(t *testing.T) {
	dec := postgres.NewDecoder([]string{"public.outbox"})
	for _, m := range [][]byte{relationMsg(), beginMsg(90, 7), insertMsg(42)} {
		if _, _, err := dec.Decode(m); err != nil {
			t.Fatal(err)
		}
	}
	tx, done, err := dec.Decode(commitMsg(90, 100))
	if err != nil || !done || len(tx.Rows) != 1 {
		t.Fatalf("commit: tx %+v done %v err %v", tx, done, err)
	}
	router, _ := outbox.New(outbox.DefaultConfig())
	rec, err := router.Route(&tx.Rows[0], time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Topic != "outbox.event.order" || string(rec.Key) != "customer-42" || string(rec.Value) != benchPayload ||
		!strings.HasSuffix(string(rec.Headers[0].Value), "000000000042") || tx.Position != "0/64" {
		t.Fatalf("record %+v position %s", rec, tx.Position)
	}
	if ts, ok := payloadTS([]byte(benchPayload)); !ok || ts != 1732886400123456 {
		t.Fatalf("payloadTS = %d, %v", ts, ok)
	}
	h := &histogram{bounds: []float64{0.001, 0.01, math.Inf(1)}, cum: []float64{50, 100, 100}, count: 100}
	if q := h.quantile(0.5); q != 0.001 {
		t.Fatalf("quantile(0.5) = %g", q)
	}
	if q := h.quantile(0.75); q < 0.0054 || q > 0.0056 {
		t.Fatalf("quantile(0.75) = %g", q)
	}
}
