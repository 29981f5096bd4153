// Package metrics exposes outboxd's Prometheus metrics and the /healthz and /readyz endpoints.
package metrics

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxd/outboxd/source"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics implements pipeline.Metrics on a private Prometheus registry.
type Metrics struct {
	Registry     *prometheus.Registry
	eventsRead   prometheus.Counter
	produced     *prometheus.CounterVec
	dlq          *prometheus.CounterVec
	commitToAck  prometheus.Histogram
	lagBytes     prometheus.Gauge
	inflight     prometheus.Gauge
	up           prometheus.Gauge
	standbyG     prometheus.Gauge
	slotStatus   *prometheus.GaugeVec
	slotRetained prometheus.Gauge
	// outbox.cleanup (internal/app/cleanup.go)
	cleanDeleted *prometheus.CounterVec
	cleanFailed  prometheus.Counter
	cleanCycles  prometheus.Counter
	cleanDropped prometheus.Counter
	outboxRows   *prometheus.GaugeVec
	standby      atomic.Bool
	lastCommit   atomic.Int64 // unix nanos of the last stored position
	lastProgress atomic.Int64 // unix nanos of the last ack or commit
	ready        atomic.Bool
	byTopic      sync.Map // topic → prometheus.Counter of produced
	inflightN    atomic.Int64
}

// New registers the contract's metrics plus Go runtime and process collectors.
func New() *Metrics {
	r := prometheus.NewRegistry()
	m := &Metrics{Registry: r,
		eventsRead: prometheus.NewCounter(prometheus.CounterOpts{Name: "outboxd_events_read_total", Help: "Outbox rows read from the source."}),
		produced: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "outboxd_events_produced_total", Help: "Records acked by Kafka, by topic."},
			[]string{"topic"}),
		dlq: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "outboxd_dlq_events_total", Help: "Records dead-lettered, by reason."},
			[]string{"reason"}),
		commitToAck: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "outboxd_commit_to_ack_seconds",
			Help: "Time from the source transaction's commit to the Kafka ack of its record.",
			// Fine below 10 ms: with the adaptive linger a healthy pipeline acks in 1–3 ms.
			Buckets: []float64{.0005, .001, .0015, .002, .0025, .003, .004, .005, .0075, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}}),
		lagBytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "outboxd_source_lag_bytes", Help: "PostgreSQL: server WAL end minus the slot's confirmed LSN."}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "outboxd_inflight_events", Help: "Records read and not yet acked or dead-lettered."}),
		up:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "outboxd_up", Help: "1 while the pipeline runs with its source and Kafka connected."}),
		standbyG: prometheus.NewGauge(prometheus.GaugeOpts{Name: "outboxd_standby", Help: "1 while this instance waits as a hot standby (another instance is active)."}),
		slotStatus: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "outboxd_slot_wal_status",
			Help: "PostgreSQL: 1 for the replication slot's current pg_replication_slots.wal_status, 0 for the others."}, []string{"status"}),
		slotRetained: prometheus.NewGauge(prometheus.GaugeOpts{Name: "outboxd_slot_retained_bytes", Help: "PostgreSQL: server WAL position minus the slot's restart_lsn (WAL kept for the slot)."}),
		cleanDeleted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "outboxd_cleanup_deleted_total",
			Help: "outbox.cleanup: delivered outbox rows deleted, by table."}, []string{"table"}),
		cleanFailed: prometheus.NewCounter(prometheus.CounterOpts{Name: "outboxd_cleanup_failed_cycles_total",
			Help: "outbox.cleanup: cleanup cycles in which a DELETE or the row estimate failed (retried next cycle; delivery goes on)."}),
		cleanCycles: prometheus.NewCounter(prometheus.CounterOpts{Name: "outboxd_cleanup_cycles_total",
			Help: "outbox.cleanup: cleanup cycles run (every outbox.cleanup.interval), failed ones included."}),
		cleanDropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "outboxd_cleanup_dropped_ids_total",
			Help: "outbox.cleanup: ids of delivered rows dropped from memory by the tracker's cap (internal/cleanup.DefaultMaxIDs): those rows stay in the table."}),
		outboxRows: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "outboxd_outbox_table_rows",
			Help: "outbox.cleanup: the server's estimate of the outbox table's row count (PostgreSQL pg_class.reltuples, MySQL information_schema.TABLES.TABLE_ROWS), each cycle."}, []string{"table"}),
	}
	r.MustRegister(m.cleanDeleted, m.cleanFailed, m.cleanCycles, m.cleanDropped, m.outboxRows)
	r.MustRegister(m.standbyG, m.slotStatus, m.slotRetained)
	r.MustRegister(m.eventsRead, m.produced, m.dlq, m.commitToAck, m.lagBytes, m.inflight, m.up,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// CleanupDeleted counts n outbox rows of table deleted by outbox.cleanup.
func (m *Metrics) CleanupDeleted(table string, n int64) {
	m.cleanDeleted.WithLabelValues(table).Add(float64(n))
}

// CleanupCycle counts a cleanup cycle run.
func (m *Metrics) CleanupCycle() { m.cleanCycles.Inc() }

// CleanupFailed counts a cleanup cycle that failed.
func (m *Metrics) CleanupFailed() { m.cleanFailed.Inc() }

// CleanupDropped counts n ids the cleanup tracker dropped by its cap.
func (m *Metrics) CleanupDropped(n int64) { m.cleanDropped.Add(float64(n)) }

// SetOutboxRows sets the row estimate of an outbox table.
func (m *Metrics) SetOutboxRows(table string, n int64) {
	m.outboxRows.WithLabelValues(table).Set(float64(n))
}

func (m *Metrics) EventsRead(n int) { m.eventsRead.Add(float64(n)) }
func (m *Metrics) Produced(topic string, commitTime, ackedAt time.Time) {
	c, ok := m.byTopic.Load(topic)
	if !ok { // hashing label values on every record showed in profiles: cache per topic
		c, _ = m.byTopic.LoadOrStore(topic, m.produced.WithLabelValues(topic))
	}
	c.(prometheus.Counter).Inc()
	if !commitTime.IsZero() {
		m.commitToAck.Observe(ackedAt.Sub(commitTime).Seconds())
	}
	m.lastProgress.Store(ackedAt.UnixNano())
}
func (m *Metrics) DeadLettered(reason string) { m.dlq.WithLabelValues(reason).Inc() }
func (m *Metrics) Inflight(n int) {
	m.inflight.Set(float64(n))
	m.inflightN.Store(int64(n))
}
func (m *Metrics) Committed(source.Position) {
	now := time.Now().UnixNano()
	m.lastCommit.Store(now)
	m.lastProgress.Store(now)
}

// SetLagBytes sets outboxd_source_lag_bytes.
func (m *Metrics) SetLagBytes(n int64) { m.lagBytes.Set(float64(n)) }

// SetStandby marks this instance a waiting hot standby (/readyz answers 503 meanwhile).
func (m *Metrics) SetStandby(on bool) {
	m.standby.Store(on)
	if on {
		m.standbyG.Set(1)
	} else {
		m.standbyG.Set(0)
	}
}

// SetSlot sets outboxd_slot_wal_status{status} (1 for status, 0 for the other known values) and
// outboxd_slot_retained_bytes (skipped when negative: unknown).
func (m *Metrics) SetSlot(status string, retained int64) {
	for _, s := range []string{"reserved", "extended", "unreserved", "lost"} {
		m.slotStatus.WithLabelValues(s).Set(0)
	}
	m.slotStatus.WithLabelValues(status).Set(1)
	if retained >= 0 {
		m.slotRetained.Set(float64(retained))
	}
}

// SetUp marks the pipeline connected (ready) or not.
func (m *Metrics) SetUp(up bool) {
	m.ready.Store(up)
	if up {
		m.up.Set(1)
		m.lastProgress.Store(time.Now().UnixNano())
	} else {
		m.up.Set(0)
	}
}

// Handler serves /metrics, /healthz (200 while the process runs) and /readyz (200 while the
// pipeline is up and has made progress — an ack or a stored position — within stall, or has
// nothing in flight; 503 otherwise).
func (m *Metrics) Handler(stall time.Duration) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if m.standby.Load() {
			http.Error(w, "not ready: standby (another outboxd instance of this pipeline is active)", http.StatusServiceUnavailable)
			return
		}
		if !m.ready.Load() {
			http.Error(w, "not ready: source or Kafka not connected", http.StatusServiceUnavailable)
			return
		}
		last := time.Unix(0, m.lastProgress.Load())
		if time.Since(last) > stall && m.inflightN.Load() > 0 {
			http.Error(w, "not ready: records in flight and no progress for "+time.Since(last).Round(time.Second).String(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	return mux
}

// Serve listens on addr until ctx ends. An empty addr disables the server.
func (m *Metrics) Serve(ctx context.Context, addr string, log *slog.Logger) error {
	if addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: m.Handler(time.Minute), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	log.Info("serving /metrics, /healthz, /readyz", "listen", ln.Addr().String())
	return nil
}
