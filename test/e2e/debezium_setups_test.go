package e2e

import (
	"fmt"
	"strings"

	"github.com/outboxd/outboxd/internal/testenv"
)

// The setups of the Debezium comparison (issue 15, item 10): for each, one Debezium connector on
// the shared Kafka Connect worker (its own slot and publication, connector-level converters) and
// one outboxd (its own slot, publication, offsets and DLQ topic) with the matching options. Each
// tool writes its own topics: Debezium dbz<S>.…, outboxd obx<S>.… (S the setup's name); a topic
// neither prefix marks (route.topic.regex did not match, the raw aggregatetype) is shared, and its
// records are told apart by the producer id of each tool's producer.

// dbzSetup is one Debezium configuration and outboxd's equivalent.
type dbzSetup struct {
	name string // A, T, B, C, D, E: topic prefixes dbz<name>. and obx<name>.
	what string // one line for the logs and the golden README
	// table is the outbox table both tools read (public.outbox: jsonb payload; public.outbox_text:
	// text payload, for blank payloads).
	table string
	// connector is merged over testenv.DebeziumPostgresOutbox (StringConverter, header eventType).
	connector map[string]string
	// outbox is outboxd's outbox: block (indented two spaces) without topic (added: obx<name>.…).
	outbox string
	// topic is the route.topic.replacement after the dbz<name>. / obx<name>. prefix.
	topic string
	// tsColumn is the column Debezium's record timestamp comes from (table.field.event.timestamp):
	// timestamps must be equal (ms), except where the column is NULL. Empty: Debezium's timestamp
	// is its processing time (the change event's ts_ms), compared loosely with outboxd's (the
	// commit time): within tsSlack (cmpOpts.exactTS).
	tsColumn string
	// keyNullBytes: the converter writes a NULL key as bytes (JsonConverter), so its partition is
	// deterministic and compared; StringConverter writes a Kafka null key (partition not compared).
	keyNullBytes bool
	deliberate   []deliberate
}

// JSON converter settings for a connector (schemas on or off), key and value alike.
func jsonConverters(schemas bool) map[string]string {
	return map[string]string{
		"key.converter":                  testenv.JsonConverter,
		"value.converter":                testenv.JsonConverter,
		"key.converter.schemas.enable":   fmt.Sprint(schemas),
		"value.converter.schemas.enable": fmt.Sprint(schemas),
	}
}

func mergeMaps(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// setupAHeaders are the typed header columns of setup A (Debezium's placement list and
// outboxd's outbox.headers, in the same order).
var setupAHeaders = [][2]string{{"type", "eventType"}, {"tenant", "tenant"}, {"attempt", "attempt"}, {"urgent", "urgent"},
	{"amount", "amount"}, {"at", "at"}, {"day", "day"}, {"ref", "ref"}, {"doc", "doc"}, {"raw", "raw"}, {"occurred", "occurred"}}

// setupARegex is setup A's route.topic.regex: Order and Customer match, a.b-c_D and
// lower_case do not (their topic is the raw value).
const setupARegex = `(?<routedByValue>[A-Z][A-Za-z]*)`

// setupDEnvelope are setup D's envelope fields: column, alias (Debezium's placement list and
// outboxd's outbox.fields, in the same order).
var setupDEnvelope = [][2]string{{"type", "eventType"}, {"tenant", "tenant"}, {"attempt", "attempt"}, {"urgent", "urgent"},
	{"amount", "amount"}, {"at", "at"}, {"day", "day"}, {"ref", "ref"}, {"doc", "doc"}, {"raw", "raw"}, {"occurred", "occurredAt"},
	{"created_at", "createdAt"}, {"prio", "prio"}, {"label", "label"}}

func dbzSetups() []dbzSetup {
	var envelopePlacement []string
	envelopeFields := ""
	for _, f := range setupDEnvelope {
		envelopePlacement = append(envelopePlacement, f[0]+":envelope:"+f[1])
		envelopeFields += "    - {column: " + f[0] + ", placement: envelope, alias: " + f[1] + "}\n"
	}
	var placement, headers []string
	for _, h := range setupAHeaders {
		placement = append(placement, h[0]+":header:"+h[1])
		headers = append(headers, h[0]+": "+h[1])
	}
	return []dbzSetup{
		{name: "A", what: "Debezium defaults with StringConverter: route.topic.regex, typed header columns, a NULL aggregateid",
			table: "public.outbox", topic: "${routedByValue}",
			connector: map[string]string{
				"transforms.outbox.route.topic.regex":                 setupARegex,
				"transforms.outbox.table.fields.additional.placement": strings.Join(placement, ","),
			},
			outbox: "  topic_regex: '" + setupARegex + "'\n  null_key: produce\n  header_values: debezium\n  headers: {" + strings.Join(headers, ", ") + "}\n",
		},
		{name: "T", what: "StringConverter with route.tombstone.on.empty.payload=true on a text payload column (NULL, empty, blank), route.by.field=type, tracing (tracingspancontext, OpenTelemetry SDK)",
			table: "public.outbox_text", topic: "${routedByValue}",
			connector: map[string]string{"transforms.outbox.route.tombstone.on.empty.payload": "true",
				"transforms.outbox.route.by.field": "type"},
			outbox:     "  tombstone_on_empty_payload: true\n  null_key: produce\n  columns: {aggregate_type: type}\n  headers: {type: eventType}\n",
			deliberate: tracingDeliberate,
		},
		{name: "B", what: "debezium-examples' outbox: JsonConverter schemas.enable=false, table.field.event.timestamp, type:header:eventType, ${routedByValue}.events",
			table: "public.outbox", topic: "${routedByValue}.events", tsColumn: "occurred", keyNullBytes: true,
			connector: mergeMaps(jsonConverters(false), map[string]string{
				"transforms.outbox.table.field.event.timestamp": "occurred",
			}),
			outbox: "  encoding: json\n  timestamp: column:occurred\n  null_key: produce\n  headers: {type: eventType}\n",
		},
		{name: "C", what: "JsonConverter schemas.enable=false with table.expand.json.payload=true and a partition column (part:partition)",
			table: "public.outbox", topic: "${routedByValue}", keyNullBytes: true,
			connector: mergeMaps(jsonConverters(false), map[string]string{
				"transforms.outbox.table.expand.json.payload":         "true",
				"transforms.outbox.table.fields.additional.placement": "type:header:eventType,part:partition",
			}),
			outbox: "  encoding: json\n  expand_json_payload: true\n  null_key: produce\n  headers: {type: eventType}\n  fields:\n    - {column: part, placement: partition}\n",
		},
		{name: "D", what: "JsonConverter schemas.enable=true with envelope fields (type:envelope:eventType and every typed column)",
			table: "public.outbox", topic: "${routedByValue}", keyNullBytes: true,
			connector: mergeMaps(jsonConverters(true), map[string]string{
				// debezium-examples' logical name: the envelope's schema name is
				// <topic.prefix>.<schema>.<table>.<routedByValue>.Value
				"topic.prefix": "dbserver1",
				"transforms.outbox.table.fields.additional.placement": strings.Join(envelopePlacement, ","),
			}),
			outbox: "  encoding: json_schema\n  schema_name_prefix: dbserver1\n  null_key: produce\n  fields:\n" + envelopeFields,
		},
		{name: "E", what: "JsonConverter schemas.enable=true (the Debezium image's default converter) with table.expand.json.payload=true and a missing header column ignored",
			table: "public.outbox", topic: "${routedByValue}", keyNullBytes: true,
			connector: mergeMaps(jsonConverters(true), map[string]string{
				"transforms.outbox.table.expand.json.payload": "true",
				// a column the table lacks, ignored (Debezium 3.6's table.field.additional.missing)
				"transforms.outbox.table.fields.additional.placement": "type:header:eventType,ghost:header:ghost",
				"transforms.outbox.table.field.additional.missing":    "ignore",
			}),
			outbox: "  encoding: json_schema\n  expand_json_payload: true\n  null_key: produce\n  missing_field: ignore\n  headers: {type: eventType}\n  fields:\n    - {column: ghost, placement: header}\n",
		},
	}
}

// connectorConfig is setup s's Debezium connector on database db.
func (s dbzSetup) connectorConfig(db testenv.DBConn) map[string]string {
	low := strings.ToLower(s.name)
	return testenv.DebeziumPostgresOutbox(db, "dbz_"+low, "dbz_"+low, s.table, mergeMaps(map[string]string{
		"name":         "dbz-" + low,
		"topic.prefix": "dbz" + low,
		"transforms.outbox.route.topic.replacement": "dbz" + s.name + "." + s.topic,
	}, s.connector))
}

// outboxdConfig is setup s's outboxd config file.
func (s dbzSetup) outboxdConfig(dsn, brokers, offsets string) string {
	low := strings.ToLower(s.name)
	return fmt.Sprintf(`shutdown_timeout: 20s
source:
  type: postgres
  dsn: %s
  tables: [%s]
  postgres:
    slot: obx_%s
    publication: obx_%s
    status_interval: 1s
kafka:
  brokers: [%s]
  dlq_topic: obx%s.dlq
offsets:
  path: %s
  commit_interval: 20ms
http:
  listen: ""
outbox:
  topic: obx%s.%s
%s`, dsn, s.table, low, low, brokers, s.name, offsets, s.name, s.topic, s.outbox)
}

// otelJVM turns on OpenTelemetry's autoconfigured SDK in the Connect worker (testenv's Debezium
// lib has opentelemetry-api and -sdk-extension-autoconfigure): GlobalOpenTelemetry.get(), which
// Debezium's tracing calls, is then a real SDK with the default propagators (tracecontext,
// baggage), exporting nothing.
var otelJVM = []string{"-Dotel.java.global-autoconfigure.enabled=true", "-Dotel.traces.exporter=none",
	"-Dotel.metrics.exporter=none", "-Dotel.logs.exporter=none"}

// tracingDeliberate: setup T's tracing rows (Debezium's EventRouter with OpenTelemetry's SDK).
var tracingDeliberate = []deliberate{
	{row: "*", field: "header traceparent span id", dbz: "*", obx: "*",
		why: "Debezium starts a db-log-write span (a child of the writer's) and injects its random id; outboxd creates no spans and passes the writer's span id (same trace id and flags)"},
	{row: "trace-escaped-key", field: "header names", dbz: "traceparent,id,eventType", obx: "id,eventType",
		why: "a tracing column without a valid traceparent (here the key is traceparent=00-…, the = escaped): Debezium starts a new trace (a random trace id); outboxd sends no tracing headers (logged once)"},
	{row: "trace-malformed", field: "header names", dbz: "traceparent,id,eventType", obx: "id,eventType", why: "as trace-escaped-key"},
	{row: "trace-no-traceparent", field: "header names", dbz: "traceparent,id,eventType", obx: "id,eventType", why: "as trace-escaped-key"},
}
