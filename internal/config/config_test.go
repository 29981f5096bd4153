package config

import (
	"strings"
	"testing"
	"time"
)

const full = `
shutdown_timeout: 10s
source:
  type: postgres
  dsn: postgres://outboxd:${PGPASSWORD}@127.0.0.1:5432/app?sslmode=disable
  tables: [public.outbox]
  postgres:
    slot: outboxd
    publication: outboxd
    heartbeat_interval: 30s
outbox:
  columns:
    id: id
    aggregate_type: aggregatetype
    aggregate_id: aggregateid
    type: type
    payload: payload
  topic: outbox.event.${routedByValue}
  headers:
    type: eventType
    tenant: tenantId
kafka:
  brokers: [127.0.0.1:9092]
  client_id: outboxd
  delivery: at_least_once
  compression: lz4
  dlq_topic: outboxd.dlq
offsets:
  store: file
  path: /tmp/x/offsets.json
  topic: outboxd.offsets
http:
  listen: 127.0.0.1:9464
`

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestParseFull(t *testing.T) {
	c, err := Parse([]byte(full), env(map[string]string{"PGPASSWORD": "s3cr$t"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Source.DSN != "postgres://outboxd:s3cr$t@127.0.0.1:5432/app?sslmode=disable" {
		t.Errorf("dsn %q", c.Source.DSN)
	}
	if c.Outbox.Topic != "outbox.event.${routedByValue}" {
		t.Errorf("routedByValue must stay: %q", c.Outbox.Topic)
	}
	if len(c.Outbox.Headers) != 2 || c.Outbox.Headers[0] != (Header{"type", "eventType"}) || c.Outbox.Headers[1] != (Header{"tenant", "tenantId"}) {
		t.Errorf("headers %+v", c.Outbox.Headers)
	}
	if hb := c.Source.Postgres.HeartbeatInterval; c.ShutdownTimeout != 10*time.Second || hb == nil || *hb != 30*time.Second {
		t.Errorf("durations %v %v", c.ShutdownTimeout, hb)
	}
}

func TestDefaults(t *testing.T) {
	c, err := Parse([]byte("source: {type: postgres, dsn: 'postgres://x@h/db', tables: [public.outbox]}\nkafka: {brokers: ['k:9092']}\n"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	// The source's defaults (slot, publication, server_id, heartbeat_interval) are its adapter's:
	// internal/app TestSourceDefaults.
	if c.ShutdownTimeout != 30*time.Second ||
		c.Outbox.Topic != "outbox.event.${routedByValue}" || c.Outbox.Columns.AggregateID != "aggregateid" ||
		c.Kafka.Delivery != "at_least_once" || c.Kafka.Compression != "snappy" || c.Kafka.DLQTopic != "outboxd.dlq" ||
		c.Offsets.Store != "file" || c.Offsets.Path != "/var/lib/outboxd/offsets.json" || c.Offsets.Topic != "outboxd.offsets" ||
		c.Kafka.ClientID != "outboxd" || c.Kafka.TransactionTimeout != 60*time.Second {
		t.Errorf("defaults wrong: %+v", c)
	}
	c, err = Parse([]byte("source: {type: postgres, dsn: 'postgres://x@h/db', tables: [public.outbox]}\nkafka: {brokers: ['k:9092'], delivery: exactly_once}\n"), env(nil))
	if err != nil || c.Offsets.Store != "kafka" {
		t.Errorf("exactly_once must default offsets.store to kafka: %v %+v", err, c)
	}
	c, err = Parse([]byte("source: {type: postgres, dsn: 'postgres://x@h/db', tables: [public.outbox]}\nkafka: {brokers: ['k:9092'], transaction_timeout: 10m}\n"), env(nil))
	if err != nil || c.Kafka.TransactionTimeout != 10*time.Minute {
		t.Errorf("kafka.transaction_timeout 10m: %v %v", err, c.Kafka.TransactionTimeout)
	}
}

func TestExpand(t *testing.T) {
	for in, want := range map[string]string{"a${X}b": "a1b", "$$": "$", "$${X}": "${X}", "${routedByValue}": "${routedByValue}",
		"a$b": "a$b", "${X}${X}": "11"} {
		got, err := Expand(in, env(map[string]string{"X": "1"}))
		if err != nil || got != want {
			t.Errorf("Expand(%q) = %q %v, want %q", in, got, err, want)
		}
	}
	if _, err := Expand("${NOPE}", env(nil)); err == nil || !strings.Contains(err.Error(), "NOPE") {
		t.Errorf("unset variable: %v", err)
	}
}

func TestErrorsNameTheKey(t *testing.T) {
	base := "source: {type: postgres, dsn: 'postgres://x@h/db', tables: [public.outbox]}\nkafka: {brokers: ['k:9092']}\n"
	cases := []struct{ yaml, key string }{
		{"source: {type: postgres, tables: [a.b]}\nkafka: {brokers: ['k:9092']}", "source.dsn"},
		{"source: {type: postgres, dsn: x, tables: [outbox]}\nkafka: {brokers: ['k:9092']}", "source.tables[0]"},
		{"source: {type: postgres, dsn: x, tables: [a.b]}\n", "kafka.brokers"},
		{"source: {type: postgres, dsn: x, tables: [a.b]}\nkafka: {brokers: ['nope']}", "kafka.brokers[0]"},
		{base + "kafka2: {}", "kafka2"},
		{"source: {type: postgres, dsn: x, tables: [a.b]}\nkafka: {brokers: ['k:9092'], acks: 1}", "kafka.acks"},
		{"source: {type: postgres, dsn: x, tables: [a.b], postgres: {slott: a}}\nkafka: {brokers: ['k:9092']}", "source.postgres.slott"},
		{"source: {type: postgres, dsn: x, tables: [a.b]}\nkafka: {brokers: ['k:9092'], compression: brotli}", "kafka.compression"},
		{"source: {type: postgres, dsn: x, tables: [a.b]}\nkafka: {brokers: ['k:9092'], delivery: maybe}", "kafka.delivery"},
		{"source: {type: postgres, dsn: x, tables: [a.b]}\nkafka: {brokers: ['k:9092'], delivery: exactly_once}\noffsets: {store: file}", "offsets.store"},
		{"source: {type: postgres, dsn: x, tables: [a.b]}\nkafka: {brokers: ['k:9092'], dlq_topic: 'bad topic'}", "kafka.dlq_topic"},
		{"source: {type: postgres, dsn: x, tables: [a.b]}\nkafka: {brokers: ['k:9092'], transaction_timeout: 500ms}", "kafka.transaction_timeout"},
		{"source: {type: postgres, dsn: x, tables: [a.b]}\nkafka: {brokers: ['k:9092'], transaction_timeout: -1m}", "kafka.transaction_timeout"},
		{"source: {type: postgres, dsn: x, tables: [a.b]}\nkafka: {brokers: ['k:9092'], transaction_timeout: 1000h}", "kafka.transaction_timeout"},
		{"source: {type: postgres, dsn: 'postgres://u:${MISSING}@h/db', tables: [a.b]}\nkafka: {brokers: ['k:9092']}", "source.dsn"},
		{"source: {type: postgres, dsn: x, tables: [a.b]}\nkafka: {brokers: ['k:9092']}\nshutdown_timeout: forever", "shutdown_timeout"},
		{"source: {type: postgres, dsn: x, tables: [a.b]}\nkafka: {brokers: ['k:9092']}\nhttp: {listen: nohost}", "http.listen"},
		{"source: {type: postgres, dsn: x, tables: [a.b]}\nkafka: {brokers: ['k:9092'], sasl: {mechanism: GSSAPI}}", "kafka.sasl.mechanism"},
		{"source: {type: postgres, dsn: x, tables: [a.b]}\nkafka: {brokers: ['k:9092']}\noutbox: {topic: 'a b'}", "outbox"},
		{"source: {type: postgres, dsn: x, tables: [a.b]}\nkafka: {brokers: ['k:9092']}\nlog: {level: loud}", "log.level"},
		{base + "outbox: {null_key: drop}", "outbox.null_key"},
		{base + "outbox: {topic_regex: '(?<routedByValue>(?=a).*)'}", "outbox.topic_regex"},
		{base + "outbox: {topic_regex: '(.*)'}", "outbox.topic_regex"},
		{base + "outbox: {tombstone_on_empty_payload: maybe}", "outbox.tombstone_on_empty_payload"},
	}
	// source.type against the registered names, and the adapters' own keys: internal/app
	// TestLoadSourceErrorsNameTheKey.
	cases = append(cases, struct{ yaml, key string }{"source: {type: oracle, dsn: x, tables: [a.b]}\nkafka: {brokers: ['k:9092']}", "source.type"})
	for _, c := range cases {
		_, err := Parse([]byte(c.yaml), env(nil), "postgres", "mysql")
		if err == nil {
			t.Errorf("accepted:\n%s", c.yaml)
			continue
		}
		if !IsConfigError(err) || !strings.Contains(err.Error(), c.key) {
			t.Errorf("error %q does not name %s", err, c.key)
		}
	}
}

// TestTablesOptionalOnlyForTablelessOutbox: source.tables may be empty (or absent) only with
// source.postgres.messages set; otherwise the error names source.tables.
func TestTablesOptionalOnlyForTablelessOutbox(t *testing.T) {
	k := "\nkafka: {brokers: ['k:9092']}\n"
	for _, y := range []string{
		"source: {type: postgres, dsn: x, postgres: {messages: {}}}",
		"source: {type: postgres, dsn: x, tables: [], postgres: {messages: {prefix: app.event}}}",
	} {
		c, err := Parse([]byte(y+k), env(nil), "postgres", "mysql")
		if err != nil {
			t.Errorf("refused %s: %v", y, err)
			continue
		}
		if len(c.Source.Tables) != 0 || c.Source.Postgres.Messages == nil {
			t.Errorf("%s: tables %v messages %v", y, c.Source.Tables, c.Source.Postgres.Messages)
		}
	}
	for _, y := range []string{
		"source: {type: postgres, dsn: x}",
		"source: {type: postgres, dsn: x, tables: []}",
		"source: {type: mysql, dsn: x}",
		"source: {type: mysql, dsn: x, tables: []}",
		// mysql with source.postgres.messages and no table: refused by internal/app (the
		// adapter has no messages), TestNoTablesOnlyWithMessages there.
	} {
		_, err := Parse([]byte(y+k), env(nil), "postgres", "mysql")
		if err == nil {
			t.Errorf("accepted %s", y)
			continue
		}
		if !IsConfigError(err) || !strings.Contains(err.Error(), "source.tables") || !strings.Contains(err.Error(), "source.postgres.messages") {
			t.Errorf("%s: error %q does not name source.tables and say when it may be empty", y, err)
		}
	}
}

func TestSecretNotInErrors(t *testing.T) {
	_, err := Parse([]byte("source: {type: oracle, dsn: 'postgres://u:hunter2@h/db', tables: [a.b]}\nkafka: {brokers: ['k:9092']}"), env(nil), "postgres", "mysql")
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("err %v", err)
	}
}

func TestHTTPListen(t *testing.T) {
	base := "source: {type: postgres, dsn: 'postgres://x@h/db', tables: [public.outbox]}\nkafka: {brokers: ['k:9092']}\n"
	for yaml, want := range map[string]string{"": DefaultListen, "http: {listen: ''}\n": "", "http: {listen: '0.0.0.0:1'}\n": "0.0.0.0:1", "http: {}\n": DefaultListen} {
		c, err := Parse([]byte(base+yaml), env(nil))
		if err != nil || c.HTTP.Listen != want {
			t.Errorf("%q: listen %q %v, want %q", yaml, c.HTTP.Listen, err, want)
		}
	}
	if _, err := Parse([]byte(base+"http: {lisen: x}\n"), env(nil)); err == nil || !strings.Contains(err.Error(), "http.lisen") {
		t.Errorf("typo under http: %v", err)
	}
}

func TestOutboxRouteOptions(t *testing.T) {
	base := "source: {type: postgres, dsn: 'postgres://x@h/db', tables: [public.outbox]}\nkafka: {brokers: ['k:9092']}\n"
	c, err := Parse([]byte(base), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Outbox.NullKey != "dlq" || c.Outbox.TombstoneOnEmptyPayload || c.Outbox.TopicRegex != "" {
		t.Errorf("defaults: null_key %q tombstone_on_empty_payload %v topic_regex %q", c.Outbox.NullKey, c.Outbox.TombstoneOnEmptyPayload, c.Outbox.TopicRegex)
	}
	c, err = Parse([]byte(base+"outbox:\n  topic: '${routedByValue}.events'\n  topic_regex: '(?<routedByValue>[a-z]+)_v[0-9]+$'\n  tombstone_on_empty_payload: true\n  null_key: produce\n"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Outbox.NullKey != "produce" || !c.Outbox.TombstoneOnEmptyPayload || c.Outbox.TopicRegex != "(?<routedByValue>[a-z]+)_v[0-9]+$" {
		t.Errorf("parsed: null_key %q tombstone_on_empty_payload %v topic_regex %q", c.Outbox.NullKey, c.Outbox.TombstoneOnEmptyPayload, c.Outbox.TopicRegex)
	}
}
