package bench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/sink/sinktest"
)

// TestInstantProducerConforms: the producer BenchmarkPipelineLoop measures the loop with keeps
// the contract of the Kafka producer it stands in for (sinktest runs the same suite against
// sink/kafka.Producer), so the loop it measures is the loop that runs in production.
func TestInstantProducerConforms(t *testing.T) {
	rec := func(t *testing.T, i int) *sink.Record {
		return &sink.Record{Topic: "outbox.event.x", Key: []byte(fmt.Sprint(i % 7)), Value: []byte(fmt.Sprint(i))}
	}
	sinktest.Run(t, sinktest.Harness{Record: rec, Wait: 10 * time.Second,
		New:   func(t *testing.T) sinktest.Producer { return newInstantProducer(10000) },
		AtCap: instantAtCap,
	})
}

// instantAtCap returns an instantProducer of capacity 1 whose queue is full: its ack goroutine
// is held inside the first record's done until release, and a second record fills the queue.
func instantAtCap(t *testing.T) (sinktest.Producer, func()) {
	p := newInstantProducer(1)
	entered, gate := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	if err := p.Produce(context.Background(), &sink.Record{Topic: "outbox.event.x"}, func(error) {
		close(entered)
		<-gate
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered: // the queue is empty again, its one slot free
	case <-time.After(10 * time.Second):
		t.Fatal("the first record's done did not run within 10s")
	}
	if err := p.Produce(context.Background(), &sink.Record{Topic: "outbox.event.x"}, func(error) {}); err != nil {
		t.Fatal(err)
	}
	return p, release
}
