package kafka

import metrics "github.com/rcrowley/go-metrics"

// sarama records client metrics in a go-metrics registry (Config.MetricRegistry): per broker
// and per topic it keeps meters and exponentially decaying histograms (1028-sample reservoirs),
// and updates about 25 of them under their locks for every produce request. outboxd never
// reads them (its own metrics are Prometheus, internal/metrics), so they are turned off: every
// go-metrics constructor then returns a no-op metric. It is the switch sarama's documentation of
// Config.MetricRegistry names; it is process-wide, and sarama is go-metrics' only user here.
func init() { metrics.UseNilMetrics = true }
