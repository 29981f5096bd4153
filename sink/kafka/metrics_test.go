package kafka

import (
	"context"
	"testing"
	"time"

	metrics "github.com/rcrowley/go-metrics"

	"github.com/outboxd/outboxd/sink"
)

// After records went through a Producer, every metric sarama registered for its brokers and
// topics is a go-metrics no-op: nothing is sampled or kept per request.
func TestSaramaClientMetricsAreOff(t *testing.T) {
	br := newBroker(t)
	p := newProducer(t, testConfig(br.Addr()))
	o := newOutcomes(t, 20)
	for i := range 20 {
		rec := &sink.Record{Topic: "metrics-off", Key: []byte{byte(i)}, Value: []byte("v")}
		if err := p.Produce(context.Background(), rec, o.done(i)); err != nil {
			t.Fatal(err)
		}
	}
	o.wait(t, 30*time.Second)
	n := 0
	p.client.Config().MetricRegistry.Each(func(name string, m any) {
		n++
		switch m.(type) {
		case metrics.NilHistogram, metrics.NilMeter, metrics.NilCounter, metrics.NilGauge, metrics.NilTimer:
		default:
			t.Errorf("sarama metric %q is a live %T, want a no-op", name, m)
		}
	})
	if n == 0 {
		t.Fatal("sarama registered no metrics at all: the check saw nothing (did sarama stop using Config.MetricRegistry?)")
	}
}
