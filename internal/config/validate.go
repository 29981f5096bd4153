package config

import (
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/outboxd/outboxd/transform/outbox"
)

func (c *Config) applyDefaults() {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 30 * time.Second
	}
	col := &c.Outbox.Columns
	def(&col.ID, "id")
	def(&col.AggregateType, "aggregatetype")
	def(&col.AggregateID, "aggregateid")
	def(&col.Type, "type")
	def(&col.Payload, "payload")
	def(&c.Outbox.Topic, "outbox.event.${routedByValue}")
	def(&c.Outbox.NullKey, outbox.NullKeyDLQ)
	def(&c.Outbox.Encoding, outbox.EncodingRaw)
	def(&c.Outbox.MissingField, outbox.MissingFieldError)
	def(&c.Outbox.HeaderValues, outbox.HeaderValuesDebezium)
	def(&c.Outbox.Timestamp, outbox.TimestampCommit)
	for i := range c.Outbox.Fields {
		def(&c.Outbox.Fields[i].Alias, c.Outbox.Fields[i].Column)
	}
	if c.Outbox.Cleanup.Interval == 0 {
		c.Outbox.Cleanup.Interval = 10 * time.Second
	}
	if c.Outbox.Cleanup.Batch == 0 {
		c.Outbox.Cleanup.Batch = 1000
	}
	def(&c.Kafka.OnPermanentError, "dlq")
	def(&c.Kafka.ClientID, "outboxd")
	def(&c.Kafka.Delivery, "at_least_once")
	def(&c.Kafka.Compression, "snappy") // the cheapest CPU per record at lz4's size: sink/kafka BenchmarkCodec
	def(&c.Kafka.DLQTopic, "outboxd.dlq")
	if c.Kafka.MaxInflight == 0 {
		c.Kafka.MaxInflight = 4096 // as sink/kafka.DefaultMaxInflightRecords
	}
	if c.Kafka.MaxRecordBytes == 0 {
		c.Kafka.MaxRecordBytes = 1 << 20
	}
	// kafka.linger 0 (the default) is adaptive batching: see sink/kafka Config.Linger.
	if c.Kafka.TransactionTimeout == 0 {
		c.Kafka.TransactionTimeout = 60 * time.Second // as sink/kafka.DefaultTxnTimeout
	}
	if c.Offsets.Store == "" {
		c.Offsets.Store = "file"
		if c.Kafka.Delivery == "exactly_once" {
			c.Offsets.Store = "kafka"
		}
	}
	def(&c.Offsets.Path, "/var/lib/outboxd/offsets.json")
	def(&c.Offsets.Topic, "outboxd.offsets")
	if c.Offsets.CommitInterval == 0 {
		c.Offsets.CommitInterval = 100 * time.Millisecond
	}
	if !c.HTTP.set {
		c.HTTP.Listen = DefaultListen
	}
	def(&c.Log.Level, "info")
	def(&c.Log.Format, "text")
}

func oneOf(key, v string, allowed ...string) error {
	for _, a := range allowed {
		if v == a {
			return nil
		}
	}
	return &Error{Key: key, Msg: fmt.Sprintf("%q is not one of %s", v, strings.Join(allowed, " | "))}
}

// Validate checks every value but the source adapter's own (source.dsn's syntax,
// source.postgres.*, source.mysql.*: internal/app.Validate runs the adapter's checks), and
// source.type against sourceTypes, the registered source types (not checked when empty); the
// first problem is returned as an *Error naming its key.
func (c *Config) Validate(sourceTypes ...string) error {
	if c.ShutdownTimeout < 0 {
		return &Error{Key: "shutdown_timeout", Msg: "must be positive"}
	}
	if len(sourceTypes) > 0 {
		if err := oneOf("source.type", c.Source.Type, sourceTypes...); err != nil {
			return err
		}
	}
	if c.Source.DSN == "" {
		return &Error{Key: "source.dsn", Msg: "is required"}
	}
	if len(c.Source.Tables) == 0 && c.Source.Postgres.Messages == nil {
		// Only the tableless outbox (source.postgres.messages, PostgreSQL 14+) carries events
		// without a table; every other setup reads its events from the tables listed here. A
		// source type without messages refuses no table itself (internal/app, adapterFor).
		return &Error{Key: "source.tables", Msg: "list at least one outbox table (schema.table or db.table); it may be empty only with source.type postgres and source.postgres.messages set (the tableless outbox)"}
	}
	for i, t := range c.Source.Tables {
		parts := strings.Split(t, ".")
		if len(parts) != 2 || parts[0] == "" || parts[1] == "" {
			return &Error{Key: fmt.Sprintf("source.tables[%d]", i), Msg: fmt.Sprintf("%q must be qualified: schema.table (postgres) or db.table (mysql)", t)}
		}
	}
	oc := OutboxConfig(c)
	if err := oneOf("outbox.null_key", c.Outbox.NullKey, outbox.NullKeyDLQ, outbox.NullKeyProduce); err != nil {
		return err
	}
	if err := oneOf("outbox.encoding", c.Outbox.Encoding, outbox.EncodingRaw, outbox.EncodingJSON, outbox.EncodingJSONSchema); err != nil {
		return err
	}
	if err := oneOf("outbox.missing_field", c.Outbox.MissingField, outbox.MissingFieldError, outbox.MissingFieldIgnore); err != nil {
		return err
	}
	if err := oneOf("outbox.header_values", c.Outbox.HeaderValues, outbox.HeaderValuesDebezium, outbox.HeaderValuesText); err != nil {
		return err
	}
	if ts := c.Outbox.Timestamp; ts != outbox.TimestampCommit && ts != outbox.TimestampProduce &&
		(!strings.HasPrefix(ts, outbox.TimestampColumnPrefix) || len(ts) == len(outbox.TimestampColumnPrefix)) {
		return &Error{Key: "outbox.timestamp", Msg: fmt.Sprintf("%q is not one of commit | produce | column:<name>", ts)}
	}
	for i, f := range c.Outbox.Fields {
		key := fmt.Sprintf("outbox.fields[%d]", i)
		if f.Column == "" {
			return &Error{Key: key + ".column", Msg: "name the column"}
		}
		if err := oneOf(key+".placement", f.Placement, outbox.PlacementHeader, outbox.PlacementEnvelope, outbox.PlacementPartition); err != nil {
			return err
		}
		if f.Placement == outbox.PlacementHeader && (f.Alias == "id" || strings.HasPrefix(f.Alias, "outboxd.")) {
			return &Error{Key: key + ".alias", Msg: fmt.Sprintf("header name %q is reserved (id, outboxd.*)", f.Alias)}
		}
	}
	if err := outbox.CheckTopicRegex(c.Outbox.TopicRegex); err != nil {
		return &Error{Key: "outbox.topic_regex", Msg: err.Error()}
	}
	if _, err := outbox.New(oc); err != nil {
		return &Error{Key: "outbox", Msg: err.Error()}
	}
	for _, h := range c.Outbox.Headers {
		if h.Name == "" || h.Name == "id" || strings.HasPrefix(h.Name, "outboxd.") {
			return &Error{Key: "outbox.headers." + h.Column, Msg: fmt.Sprintf("header name %q is empty or reserved (id, outboxd.*)", h.Name)}
		}
	}
	if cl := c.Outbox.Cleanup; cl.Interval < 0 {
		return &Error{Key: "outbox.cleanup.interval", Msg: "must be positive"}
	} else if cl.Batch < 1 || cl.Batch > 100000 {
		return &Error{Key: "outbox.cleanup.batch", Msg: fmt.Sprintf("%d: must be between 1 and 100000 rows per DELETE", cl.Batch)}
	} else if cl.Retain < 0 {
		return &Error{Key: "outbox.cleanup.retain", Msg: "must not be negative"}
	}
	if len(c.Kafka.Brokers) == 0 {
		return &Error{Key: "kafka.brokers", Msg: "list at least one broker host:port"}
	}
	for i, b := range c.Kafka.Brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			return &Error{Key: fmt.Sprintf("kafka.brokers[%d]", i), Msg: fmt.Sprintf("%q is not host:port", b)}
		}
	}
	if err := oneOf("kafka.delivery", c.Kafka.Delivery, "at_least_once", "exactly_once"); err != nil {
		return err
	}
	if err := oneOf("kafka.on_permanent_error", c.Kafka.OnPermanentError, "dlq", "stop"); err != nil {
		return err
	}
	if err := oneOf("kafka.compression", c.Kafka.Compression, "none", "gzip", "snappy", "lz4", "zstd"); err != nil {
		return err
	}
	if err := outbox.ValidTopic(c.Kafka.DLQTopic); err != nil {
		return &Error{Key: "kafka.dlq_topic", Msg: err.Error()}
	}
	if _, err := ParseRate(c.Kafka.DLQMaxRate); err != nil {
		return &Error{Key: "kafka.dlq_max_rate", Msg: err.Error()}
	}
	if c.Kafka.MaxInflight < 1 {
		return &Error{Key: "kafka.max_inflight", Msg: "must be at least 1"}
	}
	if c.Kafka.MaxRecordBytes < 1024 {
		return &Error{Key: "kafka.max_record_bytes", Msg: "must be at least 1024"}
	}
	if c.Kafka.Linger < 0 {
		return &Error{Key: "kafka.linger", Msg: "must not be negative"}
	}
	if c.Kafka.TransactionTimeout < time.Second || c.Kafka.TransactionTimeout > 24*time.Hour {
		return &Error{Key: "kafka.transaction_timeout", Msg: fmt.Sprintf("%v: must be between 1s and 24h (and at most the brokers' transaction.max.timeout.ms, default 15m)", c.Kafka.TransactionTimeout)}
	}
	if s := c.Kafka.SASL; s != nil {
		if err := validateSASL(s, c.Kafka.TLS != nil); err != nil { // sasl.go
			return err
		}
	}
	if err := oneOf("offsets.store", c.Offsets.Store, "file", "kafka"); err != nil {
		return err
	}
	if c.Kafka.Delivery == "exactly_once" && c.Offsets.Store != "kafka" {
		return &Error{Key: "offsets.store", Msg: "kafka.delivery exactly_once needs offsets.store: kafka (the position travels in the Kafka transaction)"}
	}
	if c.Offsets.Store == "kafka" {
		if err := outbox.ValidTopic(c.Offsets.Topic); err != nil {
			return &Error{Key: "offsets.topic", Msg: err.Error()}
		}
	}
	if c.Offsets.CommitInterval < 0 {
		return &Error{Key: "offsets.commit_interval", Msg: "must be positive"}
	}
	if c.HTTP.Listen != "" {
		if _, _, err := net.SplitHostPort(c.HTTP.Listen); err != nil {
			return &Error{Key: "http.listen", Msg: fmt.Sprintf("%q is not host:port (empty disables)", c.HTTP.Listen)}
		}
	}
	if err := oneOf("log.level", c.Log.Level, "debug", "info", "warn", "error"); err != nil {
		return err
	}
	return oneOf("log.format", c.Log.Format, "text", "json")
}
