// Package app wires outboxd's parts together from a Config: the one place that knows every
// concrete type (source adapters, the Kafka producer, the offsets store, metrics).
package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/metrics"
	"github.com/outboxd/outboxd/internal/pipeline"
	"github.com/outboxd/outboxd/offsets"
	"github.com/outboxd/outboxd/sink/kafka"
	"github.com/outboxd/outboxd/source"
	"github.com/outboxd/outboxd/source/mysql"
	"github.com/outboxd/outboxd/source/postgres"
	"github.com/outboxd/outboxd/transform/outbox"
)

// NewLogger builds the slog logger of log.level / log.format.
func NewLogger(c config.Log, w io.Writer) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: lvl}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// NewSource returns a constructor of the configured source adapter.
func NewSource(c *config.Config, log *slog.Logger) func() source.Source {
	switch c.Source.Type {
	case "mysql":
		return func() source.Source {
			return mysql.New(mysql.Config{DSN: c.Source.DSN, Tables: c.Source.Tables, ServerID: c.Source.MySQL.ServerID}, log)
		}
	default:
		return func() source.Source {
			return postgres.New(postgres.Config{DSN: c.Source.DSN, Tables: c.Source.Tables, Slot: c.Source.Postgres.Slot,
				Publication: c.Source.Postgres.Publication, StandbyTimeout: c.Source.Postgres.StatusInterval}, log)
		}
	}
}

// KafkaConfig maps the kafka section to the producer's config.
func KafkaConfig(c *config.Config) kafka.Config {
	kc := kafka.Config{Brokers: c.Kafka.Brokers, ClientID: c.Kafka.ClientID, Compression: c.Kafka.Compression,
		MaxInflightRecords: c.Kafka.MaxInflight, Linger: c.Kafka.Linger, MaxRecordBytes: c.Kafka.MaxRecordBytes}
	if t := c.Kafka.TLS; t != nil {
		kc.TLS = &kafka.TLSConfig{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile, InsecureSkipVerify: t.InsecureSkipVerify}
	}
	if s := c.Kafka.SASL; s != nil {
		kc.SASL = &kafka.SASLConfig{Mechanism: s.Mechanism, Username: s.Username, Password: s.Password}
	}
	return kc
}

// Router builds the outbox transform.
func Router(c *config.Config) (*outbox.Router, error) {
	oc := outbox.Config{IDColumn: c.Outbox.Columns.ID, AggregateTypeColumn: c.Outbox.Columns.AggregateType,
		AggregateIDColumn: c.Outbox.Columns.AggregateID, TypeColumn: c.Outbox.Columns.Type,
		PayloadColumn: c.Outbox.Columns.Payload, Topic: c.Outbox.Topic}
	for _, h := range c.Outbox.Headers {
		oc.Headers = append(oc.Headers, outbox.Header{Column: h.Column, Name: h.Name})
	}
	return outbox.New(oc)
}

// Store builds the configured offsets store.
func Store(c *config.Config) (offsets.Store, error) {
	switch c.Offsets.Store {
	case "file":
		return &offsets.FileStore{Path: c.Offsets.Path, Source: SourceName(c)}, nil
	default:
		return nil, &config.Error{Key: "offsets.store", Msg: fmt.Sprintf("%q is not available in this version (use file)", c.Offsets.Store)}
	}
}

// SourceName identifies the pipeline's source in stored offsets.
func SourceName(c *config.Config) string {
	if c.Source.Type == "mysql" {
		return fmt.Sprintf("mysql:%d", c.Source.MySQL.ServerID)
	}
	return "postgres:" + c.Source.Postgres.Slot
}

// Run runs the pipeline of c until ctx ends (graceful stop) or a fatal error.
func Run(ctx context.Context, c *config.Config, log *slog.Logger) error {
	if c.Kafka.Delivery == "exactly_once" {
		return &config.Error{Key: "kafka.delivery", Msg: "exactly_once is not available in this version yet; use at_least_once"}
	}
	secrets := secretsOf(c)
	if err := Preflight(ctx, c, log); err != nil {
		return err
	}
	router, err := Router(c)
	if err != nil {
		return &config.Error{Key: "outbox", Msg: err.Error()}
	}
	store, err := Store(c)
	if err != nil {
		return err
	}
	m := metrics.New()
	if err := m.Serve(ctx, c.HTTP.Listen, log); err != nil {
		return fmt.Errorf("http.listen %s: %w", c.HTTP.Listen, err)
	}
	prod, err := kafka.New(KafkaConfig(c), log)
	if err != nil {
		return fmt.Errorf("kafka producer (kafka.brokers %s): %s", strings.Join(c.Kafka.Brokers, ","), Scrub(err.Error(), secrets...))
	}
	log.Info("starting outboxd", "source", c.Source.Type, "dsn", Redact(c.Source.DSN), "tables", c.Source.Tables,
		"brokers", c.Kafka.Brokers, "delivery", c.Kafka.Delivery, "offsets", c.Offsets.Store)
	breaker, err := pipeline.ParseRate(c.Kafka.DLQMaxRate)
	if err != nil {
		return &config.Error{Key: "kafka.dlq_max_rate", Msg: err.Error()}
	}
	newSource := NewSource(c, log)
	var current atomic.Pointer[source.Source]
	go reportLag(ctx, &current, m)
	opts := pipeline.Options{
		DLQBreaker: breaker,
		NewSource: func() source.Source {
			s := newSource()
			current.Store(&s)
			return s
		},
		Producer: prod, Route: router.Route, Classify: kafka.Classify,
		Store: store, DLQTopic: c.Kafka.DLQTopic, MaxInflight: c.Kafka.MaxInflight, MaxRecordBytes: c.Kafka.MaxRecordBytes,
		CommitInterval: c.Offsets.CommitInterval, ShutdownTimeout: c.ShutdownTimeout, Log: log, Metrics: m,
		OnOpen: func() { m.SetUp(true) },
	}
	err = pipeline.Run(ctx, opts)
	m.SetUp(false)
	if err != nil {
		return fmt.Errorf("%s", Scrub(err.Error(), secrets...))
	}
	return nil
}

// reportLag sets outboxd_source_lag_bytes from the PostgreSQL source's view of the server's WAL
// end and the confirmed LSN, every few seconds.
func reportLag(ctx context.Context, current *atomic.Pointer[source.Source], m *metrics.Metrics) {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if sp := current.Load(); sp != nil {
			if pg, ok := (*sp).(interface {
				Progress() (pglogrepl.LSN, pglogrepl.LSN)
			}); ok {
				end, conf := pg.Progress()
				if end >= conf && conf > 0 {
					m.SetLagBytes(int64(end - conf))
				}
			}
		}
	}
}

func secretsOf(c *config.Config) []string {
	var s []string
	if c.Kafka.SASL != nil {
		s = append(s, c.Kafka.SASL.Password)
	}
	if i := strings.Index(c.Source.DSN, "://"); i >= 0 {
		rest := c.Source.DSN[i+3:]
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if colon := strings.Index(rest[:at], ":"); colon >= 0 {
				s = append(s, rest[colon+1:at])
			}
		}
	} else if m := driverDSN.FindStringSubmatch(c.Source.DSN); m != nil {
		s = append(s, m[2])
	}
	return s
}
