package pipeline

import (
	"fmt"
	"testing"
	"time"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/sink/sinktest"
)

// TestFakeProducersConform: the fakes that stand in for the Kafka producer in these tests keep
// its contract (sinktest runs the same suite against sink/kafka.Producer), so what the tests
// prove about the pipeline holds with the real producer.
func TestFakeProducersConform(t *testing.T) {
	rec := func(t *testing.T, i int) *sink.Record {
		return &sink.Record{Topic: "outbox.event.x", Key: []byte(fmt.Sprint(i % 7)), Value: []byte(fmt.Sprint(i))}
	}
	t.Run("fakeProducer/auto", func(t *testing.T) {
		sinktest.Run(t, sinktest.Harness{Record: rec, Wait: 10 * time.Second,
			New: func(t *testing.T) sinktest.Producer { return &fakeProducer{auto: true} }})
	})
	t.Run("fakeProducer/acked-by-the-test", func(t *testing.T) {
		sinktest.Run(t, sinktest.Harness{Record: rec, Wait: 10 * time.Second,
			New: func(t *testing.T) sinktest.Producer { return newAcker(t, &fakeProducer{}) }})
	})
	t.Run("cappedProducer", func(t *testing.T) {
		sinktest.Run(t, sinktest.Harness{Record: rec, Wait: 10 * time.Second,
			New: func(t *testing.T) sinktest.Producer {
				return &cappedProducer{fakeProducer: fakeProducer{auto: true}, cap: 1 << 20, t: t}
			}})
	})
}

// TestFakeTxnProducersConform: the same for the transactional fakes of the exactly_once tests
// (sinktest.RunTxn also runs against sink/kafka.TxnProducer).
func TestFakeTxnProducersConform(t *testing.T) {
	rec := func(t *testing.T, i int) *sink.Record {
		return &sink.Record{Topic: "outbox.event.x", Key: []byte(fmt.Sprint(i % 7)), Value: []byte(fmt.Sprint(i))}
	}
	t.Run("fakeTxn", func(t *testing.T) {
		sinktest.RunTxn(t, sinktest.TxnHarness{Record: rec, Wait: 10 * time.Second,
			New: func(t *testing.T) sinktest.TxnProducer {
				p, err := (&fakeCluster{}).newProducer()
				if err != nil {
					t.Fatal(err)
				}
				return p
			}})
	})
	t.Run("fakeTxn/one-record-requests", func(t *testing.T) {
		sinktest.RunTxn(t, sinktest.TxnHarness{Record: rec, Wait: 10 * time.Second,
			New: func(t *testing.T) sinktest.TxnProducer {
				p, err := (&fakeCluster{reqSize: 1}).newProducer()
				if err != nil {
					t.Fatal(err)
				}
				return p
			}})
	})
	t.Run("benchTxn", func(t *testing.T) {
		sinktest.RunTxn(t, sinktest.TxnHarness{Record: rec, Wait: 10 * time.Second,
			New: func(t *testing.T) sinktest.TxnProducer { return &benchTxn{} }})
	})
}

// acker is a manual fakeProducer driven the way the tests drive it: something else (here a
// goroutine standing in for the test) acks each record once it is queued.
type acker struct {
	*fakeProducer
	stop, stopped chan struct{}
}

func newAcker(t *testing.T, p *fakeProducer) *acker {
	a := &acker{fakeProducer: p, stop: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(a.stopped)
		acked := 0
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			for ; acked < p.count(); acked++ {
				p.ack(acked, nil)
			}
			select {
			case <-a.stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { a.Close() })
	return a
}

func (a *acker) Close() error {
	select {
	case <-a.stop:
	default:
		close(a.stop)
	}
	<-a.stopped
	return a.fakeProducer.Close()
}
