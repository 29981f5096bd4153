// Package app wires outboxd's parts together from a Config: the one place that knows every
// concrete type (source adapters, the Kafka producer, the offsets store, metrics).
package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/metrics"
	"github.com/outboxd/outboxd/internal/pipeline"
	"github.com/outboxd/outboxd/offsets"
	"github.com/outboxd/outboxd/sink/kafka"
	"github.com/outboxd/outboxd/source"
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

// KafkaConfig maps the kafka section to the producer's config.
func KafkaConfig(c *config.Config) kafka.Config {
	kc := kafka.Config{Brokers: c.Kafka.Brokers, ClientID: c.Kafka.ClientID, Compression: c.Kafka.Compression,
		MaxInflightRecords: c.Kafka.MaxInflight, Linger: c.Kafka.Linger, MaxRecordBytes: c.Kafka.MaxRecordBytes}
	if t := c.Kafka.TLS; t != nil {
		kc.TLS = &kafka.TLSConfig{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile, InsecureSkipVerify: t.InsecureSkipVerify}
	}
	if s := c.Kafka.SASL; s != nil {
		kc.SASL = &kafka.SASLConfig{Mechanism: s.Mechanism, Username: s.Username, Password: s.Password,
			TokenURL: s.TokenURL, ClientID: s.ClientID, ClientSecret: s.ClientSecret, Scope: s.Scope, Region: s.Region}
	}
	return kc
}

// Router builds the outbox transform.
func Router(c *config.Config) (*outbox.Router, error) {
	return outbox.New(config.OutboxConfig(c))
}

// Store builds the configured offsets store.
func Store(c *config.Config) (offsets.Store, error) { return offsetStore(c, SourceName(c)) }

// offsetStore builds the offsets store of c for the source named sourceName (the adapter's Name).
func offsetStore(c *config.Config, sourceName string) (offsets.Store, error) {
	switch c.Offsets.Store {
	case "file":
		return &offsets.FileStore{Path: c.Offsets.Path, Source: sourceName}, nil
	case "kafka":
		return &kafka.OffsetStore{Kafka: KafkaConfig(c), Topic: c.Offsets.Topic, Key: pipelineID(c, sourceName), Source: sourceName, Log: slog.Default()}, nil
	default:
		return nil, &config.Error{Key: "offsets.store", Msg: fmt.Sprintf("%q is not available in this version (use file)", c.Offsets.Store)}
	}
}

// SourceName identifies the pipeline's source in stored offsets (the adapter's Name:
// "postgres:<slot>", "mysql:<server_id>"); "" for an unknown source.type.
func SourceName(c *config.Config) string {
	if a, ok := newAdapter(c, nil); ok {
		return a.Name()
	}
	return ""
}

// pipelineID identifies the pipeline: its key in offsets.topic (offsets.key overrides the
// source's name).
func pipelineID(c *config.Config, sourceName string) string {
	if c.Offsets.Key != "" {
		return c.Offsets.Key
	}
	return sourceName
}

// transactionalID is the exactly_once producer's transactional.id (kafka.transactional_id
// overrides "outboxd-" + the pipeline id).
func transactionalID(c *config.Config, sourceName string) string {
	if c.Kafka.TransactionalID != "" {
		return c.Kafka.TransactionalID
	}
	return "outboxd-" + pipelineID(c, sourceName)
}

// Run runs the pipeline of c until ctx ends (graceful stop) or a fatal error.
func Run(ctx context.Context, c *config.Config, log *slog.Logger) error {
	ad, err := adapterFor(c, log)
	if err != nil {
		return err
	}
	secrets := secretsOf(c, ad)
	if err := preflight(ctx, c, ad, log); err != nil {
		return err
	}
	router, err := Router(c)
	if err != nil {
		return &config.Error{Key: "outbox", Msg: err.Error()}
	}
	store, err := offsetStore(c, ad.Name())
	if err != nil {
		return err
	}
	if ks, ok := store.(*kafka.OffsetStore); ok {
		ks.Log = log
		defer ks.Close()
	}
	m := metrics.New()
	if err := m.Serve(ctx, c.HTTP.Listen, log); err != nil {
		return fmt.Errorf("http.listen %s: %w", c.HTTP.Listen, err)
	}
	// Hot standby (standby.go): wait while another instance of this pipeline is active.
	return runStandby(ctx, ad, log, m, secrets, func(ctx context.Context) error {
		return runActive(ctx, c, ad, log, m, store, router, secrets)
	})
}

// runActive runs the pipeline while this instance is the active one.
func runActive(ctx context.Context, c *config.Config, ad adapter, log *slog.Logger, m *metrics.Metrics, store offsets.Store, router *outbox.Router, secrets []string) error {
	if c.Kafka.Delivery == "exactly_once" {
		return runExactlyOnce(ctx, c, ad, log, store.(*kafka.OffsetStore), router, m, secrets)
	}
	prod, err := kafka.New(KafkaConfig(c), log)
	if err != nil {
		return fmt.Errorf("kafka producer (kafka.brokers %s): %s", strings.Join(c.Kafka.Brokers, ","), Scrub(err.Error(), secrets...))
	}
	log.Info("starting outboxd", "source", c.Source.Type, "dsn", ad.RedactedDSN(), "tables", c.Source.Tables,
		"brokers", c.Kafka.Brokers, "delivery", c.Kafka.Delivery, "offsets", c.Offsets.Store)
	rate, err := config.ParseRate(c.Kafka.DLQMaxRate)
	if err != nil {
		return &config.Error{Key: "kafka.dlq_max_rate", Msg: err.Error()}
	}
	breaker := pipeline.Breaker{Max: rate.Max, Window: rate.Window}
	newSource := activeSource(ctx, ad, m)
	var current atomic.Pointer[source.Source]
	go reportLag(ctx, &current, m)
	cl, err := startCleanup(ctx, c, ad, log, m) // outbox.cleanup (cleanup.go)
	if err != nil {
		return err
	}
	defer cl.close()
	opts := pipeline.Options{
		OnAccept: cl.accepted, OnCommit: cl.committed, StopOnPermanent: c.Kafka.OnPermanentError == "stop", IDColumn: c.Outbox.Columns.ID,
		DLQBreaker: breaker,
		NewSource: func() source.Source {
			s := newSource()
			current.Store(&s)
			return s
		},
		Producer: prod, Route: router.Route, Classify: kafka.Classify,
		Store: store, DLQTopic: c.Kafka.DLQTopic, MaxInflight: c.Kafka.MaxInflight, MaxRecordBytes: c.Kafka.MaxRecordBytes,
		CommitInterval: c.Offsets.CommitInterval, ShutdownTimeout: c.ShutdownTimeout, Log: log, Metrics: m,
		OnOpen: func() { m.SetUp(true); cl.opened() },
	}
	err = pipeline.Run(ctx, opts)
	m.SetUp(false)
	if err != nil {
		return fmt.Errorf("%s", Scrub(err.Error(), secrets...))
	}
	return nil
}

// runExactlyOnce runs kafka.delivery exactly_once: transactional producer, position inside the
// Kafka transaction (internal/pipeline/eos.go).
func runExactlyOnce(ctx context.Context, c *config.Config, ad adapter, log *slog.Logger, store *kafka.OffsetStore,
	router *outbox.Router, m *metrics.Metrics, secrets []string) error {
	rate, err := config.ParseRate(c.Kafka.DLQMaxRate)
	if err != nil {
		return &config.Error{Key: "kafka.dlq_max_rate", Msg: err.Error()}
	}
	breaker := pipeline.Breaker{Max: rate.Max, Window: rate.Window}
	crash, err := pipeline.CrashHook(os.Getenv(pipeline.CrashEnv), log, func() { os.Exit(137) }) // test only
	if err != nil {
		return err
	}
	txnID := transactionalID(c, ad.Name())
	log.Info("starting outboxd", "source", c.Source.Type, "dsn", ad.RedactedDSN(), "tables", c.Source.Tables,
		"brokers", c.Kafka.Brokers, "delivery", c.Kafka.Delivery, "offsets", c.Offsets.Store, "offsets_topic", c.Offsets.Topic,
		"pipeline_id", pipelineID(c, ad.Name()), "transactional_id", txnID, "transaction_timeout", c.Kafka.TransactionTimeout)
	newSource := activeSource(ctx, ad, m)
	var current atomic.Pointer[source.Source]
	go reportLag(ctx, &current, m)
	cl, err := startCleanup(ctx, c, ad, log, m) // outbox.cleanup (cleanup.go)
	if err != nil {
		return err
	}
	defer cl.close()
	var last *kafka.TxnProducer // the runner calls NewProducer from its loop goroutine only
	err = pipeline.RunExactlyOnce(ctx, pipeline.EOSOptions{
		OnAccept: cl.accepted, OnCommit: cl.committed, StopOnPermanent: c.Kafka.OnPermanentError == "stop", IDColumn: c.Outbox.Columns.ID,
		NewSource: func() source.Source {
			s := newSource()
			current.Store(&s)
			return s
		},
		NewProducer: func() (pipeline.TxnProducer, error) {
			o := kafka.TxnOptions{ID: txnID, Timeout: c.Kafka.TransactionTimeout}
			if last != nil { // a replacement: it must not fence an instance that took the id over
				if e, ok := last.Epoch(); ok {
					o.Succeeds = &e
				}
			}
			p, err := kafka.NewTxn(KafkaConfig(c), o, log)
			if err != nil {
				return nil, err // not a typed nil
			}
			last = p
			return p, nil
		},
		Route: router.Route, Classify: kafka.Classify, Fatal: kafka.TxnFatal, Fenced: kafka.IsFenced, Store: store,
		TransactionalID: txnID, DLQTopic: c.Kafka.DLQTopic, DLQBreaker: breaker, MaxRecordBytes: c.Kafka.MaxRecordBytes,
		ShutdownTimeout: c.ShutdownTimeout, TxnTimeout: c.Kafka.TransactionTimeout, Log: log, Metrics: m, Crash: crash,
		OnOpen: func() { m.SetUp(true); cl.opened() },
	})
	m.SetUp(false)
	if err != nil {
		return fmt.Errorf("%s", Scrub(err.Error(), secrets...))
	}
	return nil
}

// reportLag sets outboxd_source_lag_bytes from the current source's LagBytes (sources that
// know it: lagReporter), every few seconds.
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
			if lr, ok := (*sp).(lagReporter); ok {
				if n, ok := lr.LagBytes(); ok {
					m.SetLagBytes(n)
				}
			}
		}
	}
}

// secretsOf are the secrets of c scrubbed from errors: the SASL password or OAuth client
// secret, and source.dsn's.
func secretsOf(c *config.Config, a opener) []string {
	var s []string
	if c.Kafka.SASL != nil {
		s = append(s, c.Kafka.SASL.Password, c.Kafka.SASL.ClientSecret)
	}
	return append(s, a.Secrets()...)
}
