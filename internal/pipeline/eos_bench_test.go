package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
	"github.com/outboxd/outboxd/transform/outbox"
)

// benchTxn is a transactional producer that costs nothing: Flush and Commit ack everything
// queued (as a broker answering one request), nothing is kept. The acks come from its
// deliverer goroutine, as the Kafka producer's come from its result goroutine.
type benchTxn struct {
	mu     sync.Mutex
	dones  []func(error)
	batch  []fakeDelivery
	closed bool
	dl     deliverer
}

func (p *benchTxn) Begin() error { return nil }
func (p *benchTxn) Produce(_ context.Context, _ *sink.Record, done func(error)) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("bench producer closed")
	}
	p.dones = append(p.dones, done)
	return nil
}

// Flush acks everything queued on the deliverer and waits for it; failed (closing) with err.
func (p *benchTxn) flush(err error) {
	p.mu.Lock()
	p.batch = p.batch[:0]
	for i, d := range p.dones {
		p.batch = append(p.batch, fakeDelivery{done: d, err: err})
		p.dones[i] = nil
	}
	p.dones = p.dones[:0]
	if len(p.batch) > 0 {
		p.dl.push(p.batch...)
	}
	p.mu.Unlock()
	p.dl.idle()
}

func (p *benchTxn) Flush(context.Context) error { p.flush(nil); return nil }
func (p *benchTxn) Commit() error               { p.flush(nil); return nil }
func (p *benchTxn) Abort() error                { p.flush(nil); return nil }
func (p *benchTxn) Usable() bool                { return true }
func (p *benchTxn) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.flush(errors.New("bench producer closed with the record queued"))
	p.dl.close()
	return nil
}

type benchPosStore struct{}

func (benchPosStore) Load(context.Context) (source.Position, error) { return "", nil }
func (benchPosStore) Record(p source.Position) sink.Record {
	return sink.Record{Topic: "offsets", Key: []byte("pipe"), Value: []byte(p)}
}

// BenchmarkEOSLoop: one op is one record through RunExactlyOnce (reader goroutine, batching,
// Route, Produce, acks, position record, commit, confirm) with a producer that costs nothing:
// the exactly-once loop's own overhead per event, for single-row transactions and for
// transactions of 100 rows.
func BenchmarkEOSLoop(b *testing.B) {
	for _, perTx := range []int{1, 100} {
		b.Run(fmt.Sprintf("tx=%d", perTx), func(b *testing.B) {
			rt, _ := outbox.New(outbox.DefaultConfig())
			n := (b.N + perTx - 1) / perTx
			all := make([]source.Tx, n)
			for i := range all {
				tx := source.Tx{Position: source.Position(fmt.Sprintf("%012d", i+1)), CommitTime: time.Now()}
				for j := 0; j < perTx; j++ {
					tx.Rows = append(tx.Rows, row("6d3f1c2e-5a4b-4c3d-9e8f-0a1b2c3d4e5f", "order"))
				}
				all[i] = tx
			}
			last := all[n-1].Position
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			src := &fakeSource{txs: all}
			o := EOSOptions{
				NewSource:   func() source.Source { return src },
				NewProducer: func() (TxnProducer, error) { return &benchTxn{}, nil },
				Route:       rt.Route, Classify: classifyFake, Fatal: fatalFake, Fenced: fencedFake,
				Store: benchPosStore{}, TransactionalID: "bench", DLQTopic: "dlq",
				Log: slog.New(slog.DiscardHandler),
				OnCommit: func(p source.Position) {
					if p == last {
						cancel()
					}
				},
			}
			b.ReportAllocs()
			b.ResetTimer()
			if err := RunExactlyOnce(ctx, o); err != nil {
				b.Fatal(err)
			}
		})
	}
}
