package outbox

import (
	"testing"

	"github.com/outboxd/outboxd/source"
	"github.com/outboxd/outboxd/transform/connectjson"
)

// goldenDObject is real Debezium 3.6.1's value for the row "object" of the Debezium comparison's
// setup D (JsonConverter schemas.enable=true, every column an envelope field, topic.prefix
// dbserver1; test/e2e debezium_setups_test.go), copied from its golden dump: created_at
// timestamptz NOT NULL DEFAULT now() carries "default":"1970-01-01T00:00:00.000000Z" (now() is a
// function: Debezium's placeholder, the epoch), prio int NOT NULL DEFAULT 5 "default":5, label
// text DEFAULT 'none' "default":"none".
const goldenDObject = "{\"schema\":{\"type\":\"struct\",\"fields\":[{\"type\":\"string\",\"optional\":true,\"name\":\"io.debezium.data.Json\",\"version\":1,\"field\":\"payload\"},{\"type\":\"string\",\"optional\":true,\"field\":\"eventType\"},{\"type\":\"string\",\"optional\":true,\"field\":\"tenant\"},{\"type\":\"int32\",\"optional\":true,\"field\":\"attempt\"},{\"type\":\"boolean\",\"optional\":true,\"field\":\"urgent\"},{\"type\":\"bytes\",\"optional\":true,\"name\":\"org.apache.kafka.connect.data.Decimal\",\"version\":1,\"parameters\":{\"scale\":\"2\",\"connect.decimal.precision\":\"10\"},\"field\":\"amount\"},{\"type\":\"string\",\"optional\":true,\"name\":\"io.debezium.time.ZonedTimestamp\",\"version\":1,\"field\":\"at\"},{\"type\":\"int32\",\"optional\":true,\"name\":\"io.debezium.time.Date\",\"version\":1,\"field\":\"day\"},{\"type\":\"string\",\"optional\":true,\"name\":\"io.debezium.data.Uuid\",\"version\":1,\"field\":\"ref\"},{\"type\":\"string\",\"optional\":true,\"name\":\"io.debezium.data.Json\",\"version\":1,\"field\":\"doc\"},{\"type\":\"bytes\",\"optional\":true,\"field\":\"raw\"},{\"type\":\"int64\",\"optional\":true,\"name\":\"io.debezium.time.MicroTimestamp\",\"version\":1,\"field\":\"occurredAt\"},{\"type\":\"string\",\"optional\":false,\"name\":\"io.debezium.time.ZonedTimestamp\",\"version\":1,\"default\":\"1970-01-01T00:00:00.000000Z\",\"field\":\"createdAt\"},{\"type\":\"int32\",\"optional\":false,\"default\":5,\"field\":\"prio\"},{\"type\":\"string\",\"optional\":true,\"default\":\"none\",\"field\":\"label\"}],\"optional\":false,\"name\":\"dbserver1.public.outbox.Order.Value\"},\"payload\":{\"payload\":\"{\\\"id\\\": 1, \\\"lineItems\\\": [{\\\"id\\\": 1, \\\"item\\\": \\\"Debezium in Action\\\", \\\"status\\\": \\\"ENTERED\\\", \\\"quantity\\\": 2, \\\"totalPrice\\\": 39.98}], \\\"orderDate\\\": \\\"2019-01-31T12:13:01\\\", \\\"customerId\\\": 123}\",\"eventType\":\"OrderCreated\",\"tenant\":\"acme\",\"attempt\":1,\"urgent\":false,\"amount\":null,\"at\":null,\"day\":null,\"ref\":null,\"doc\":null,\"raw\":null,\"occurredAt\":1772600767123456,\"createdAt\":\"2026-12-01T20:52:24.016454Z\",\"prio\":5,\"label\":\"none\"}}"

// setupDRow is the row "object" with the types the PostgreSQL source gives the comparison's
// table (defaults as source/postgres columnDefault makes them).
func setupDRow(label any) *source.Row {
	opt := func(k source.Kind) source.Type { return source.Type{Kind: k, Optional: true} }
	return trow(
		typed("id", source.KindUUID, uid), str("aggregatetype", "Order"), str("aggregateid", "order-object"),
		str("type", "OrderCreated"), typed("payload", source.KindJSON, orderPayload),
		str("tenant", "acme"), typed("attempt", source.KindInt32, "1"), typed("urgent", source.KindBool, "f"),
		col{"amount", source.Type{Kind: source.KindDecimal, Optional: true, Scale: 2, Precision: 10}, nil},
		col{"at", source.Type{Kind: source.KindZonedTimestamp, Optional: true, Scale: 6}, nil},
		col{"day", opt(source.KindDate), nil}, col{"ref", opt(source.KindUUID), nil}, col{"doc", opt(source.KindJSON), nil},
		col{"raw", opt(source.KindBytes), nil}, typed("occurred", source.KindMicroTimestamp, "2026-03-04 05:06:07.123456"),
		col{"created_at", source.Type{Kind: source.KindZonedTimestamp, Scale: 6, HasDefault: true, Default: "1970-01-01 00:00:00+00"},
			"2026-12-01 20:52:24.016454+00"},
		col{"prio", source.Type{Kind: source.KindInt32, HasDefault: true, Default: "5"}, "5"},
		col{"label", source.Type{Kind: source.KindString, Optional: true, HasDefault: true, Default: "none"}, label},
	)
}

func setupDConfig(enc string) Config {
	return cfgWith(func(c *Config) {
		c.Encoding, c.SchemaNamePrefix = enc, "dbserver1"
		for _, f := range [][2]string{{"type", "eventType"}, {"tenant", ""}, {"attempt", ""}, {"urgent", ""}, {"amount", ""},
			{"at", ""}, {"day", ""}, {"ref", ""}, {"doc", ""}, {"raw", ""}, {"occurred", "occurredAt"}, {"created_at", "createdAt"},
			{"prio", ""}, {"label", ""}} {
			alias := f[1]
			if alias == "" {
				alias = f[0]
			}
			c.Fields = append(c.Fields, Field{Column: f[0], Placement: PlacementEnvelope, Alias: alias})
		}
	})
}

// TestEncodingDefaultsGolden: the column defaults in the envelope field schemas are real
// Debezium's bytes (golden setup D, row "object").
func TestEncodingDefaultsGolden(t *testing.T) {
	key, value := mustRoute(t, setupDConfig(EncodingJSONSchema), setupDRow("none"))
	checkBytes(t, "key", key, p(`{"schema":{"type":"string","optional":true},"payload":"order-object"}`))
	checkBytes(t, "value", value, p(goldenDObject))
}

// TestEncodingDefaults: JsonConverter writes a field's default in its schema and, with
// replace.null.with.default (its default), in place of a NULL value, schemas on or off; in the
// key and the payload schema too (ERD copies the column's field schema into both).
func TestEncodingDefaults(t *testing.T) {
	env := func(enc string) Config {
		return cfgWith(func(c *Config) {
			c.Encoding = enc
			c.Fields = []Field{{Column: "label", Placement: PlacementEnvelope, Alias: "label"}}
		})
	}
	label := func(v any) *source.Row {
		return trow(typed("id", source.KindUUID, uid), str("aggregatetype", "Order"), str("aggregateid", "k"),
			typed("payload", source.KindJSON, "{}"),
			col{"label", source.Type{Kind: source.KindString, Optional: true, HasDefault: true, Default: "none"}, v})
	}
	defaulted := func(aid, payload any) *source.Row {
		return trow(typed("id", source.KindUUID, uid), str("aggregatetype", "Order"),
			col{"aggregateid", source.Type{Kind: source.KindInt64, HasDefault: true, Default: "-7"}, aid},
			col{"payload", source.Type{Kind: source.KindJSON, Optional: true, HasDefault: true, Default: "{}"}, payload})
	}
	cases := []struct {
		name       string
		cfg        Config
		row        *source.Row
		key, value string
	}{
		{"json_schema: the default in the field schema, the value as it is", env(EncodingJSONSchema), label("x"),
			`{"schema":{"type":"string","optional":true},"payload":"k"}`,
			`{"schema":{"type":"struct","fields":[{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"field":"payload"},` +
				`{"type":"string","optional":true,"default":"none","field":"label"}],"optional":false,"name":"public.outbox.Order.Value"},` +
				`"payload":{"payload":"{}","label":"x"}}`},
		{"json_schema: a NULL value is written as the default", env(EncodingJSONSchema), label(nil),
			`{"schema":{"type":"string","optional":true},"payload":"k"}`,
			`{"schema":{"type":"struct","fields":[{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"field":"payload"},` +
				`{"type":"string","optional":true,"default":"none","field":"label"}],"optional":false,"name":"public.outbox.Order.Value"},` +
				`"payload":{"payload":"{}","label":"none"}}`},
		{"json (schemas off): a NULL value is written as the default too", env(EncodingJSON), label(nil),
			`"k"`, `{"payload":"{}","label":"none"}`},
		{"json: an empty string is not NULL", env(EncodingJSON), label(""), `"k"`, `{"payload":"{}","label":""}`},
		{"json_schema: key and payload schemas carry their defaults", cfgWith(func(c *Config) { c.Encoding = EncodingJSONSchema }),
			defaulted("42", `{"a": 1}`),
			`{"schema":{"type":"int64","optional":false,"default":-7},"payload":42}`,
			`{"schema":{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"default":"{}"},"payload":"{\"a\": 1}"}`},
		{"json: a NULL payload with a default is written as the default, not null", cfgWith(func(c *Config) { c.Encoding = EncodingJSON }),
			defaulted("42", nil), `42`, `"{}"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key, value := mustRoute(t, c.cfg, c.row)
			checkBytes(t, "key", key, &c.key)
			checkBytes(t, "value", value, &c.value)
		})
	}
}

// TestColumnSchemaDefaultKinds: each Kind's default text (as the sources give it) becomes
// JsonConverter's "default"; one that is not valid for its Kind is left out.
func TestColumnSchemaDefaultKinds(t *testing.T) {
	cases := []struct {
		t    source.Type
		want string
	}{
		{source.Type{Kind: source.KindBool, HasDefault: true, Default: "false"}, `{"type":"boolean","optional":false,"default":false}`},
		{source.Type{Kind: source.KindInt16, HasDefault: true, Default: "-3"}, `{"type":"int16","optional":false,"default":-3}`},
		{source.Type{Kind: source.KindFloat64, HasDefault: true, Default: "1.5"}, `{"type":"double","optional":false,"default":1.5}`},
		{source.Type{Kind: source.KindFloat32, HasDefault: true, Default: "0"}, `{"type":"float","optional":false,"default":0.0}`},
		{source.Type{Kind: source.KindDecimal, Scale: 2, Precision: 10, HasDefault: true, Default: "5"},
			`{"type":"bytes","optional":false,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{"scale":"2","connect.decimal.precision":"10"},"default":"AfQ="}`},
		{source.Type{Kind: source.KindUUID, HasDefault: true, Default: "00000000-0000-0000-0000-000000000000"},
			`{"type":"string","optional":false,"name":"io.debezium.data.Uuid","version":1,"default":"00000000-0000-0000-0000-000000000000"}`},
		{source.Type{Kind: source.KindDate, HasDefault: true, Default: "1970-01-01"},
			`{"type":"int32","optional":false,"name":"io.debezium.time.Date","version":1,"default":0}`},
		{source.Type{Kind: source.KindMicroTimestamp, Optional: true, HasDefault: true, Default: "2026-01-02 03:04:05.5"},
			`{"type":"int64","optional":true,"name":"io.debezium.time.MicroTimestamp","version":1,"default":1767323045500000}`},
		{source.Type{Kind: source.KindTimestamp, HasDefault: true, Default: "1970-01-01 00:00:00"},
			`{"type":"int64","optional":false,"name":"io.debezium.time.Timestamp","version":1,"default":0}`},
		{source.Type{Kind: source.KindZonedTimestamp, Scale: 3, HasDefault: true, Default: "1970-01-01 00:00:00+00"},
			`{"type":"string","optional":false,"name":"io.debezium.time.ZonedTimestamp","version":1,"default":"1970-01-01T00:00:00.000Z"}`},
		{source.Type{Kind: source.KindString, HasDefault: true, Default: ""}, `{"type":"string","optional":false,"default":""}`},
		{source.Type{Kind: source.KindInt32, HasDefault: true, Default: "x"}, `{"type":"int32","optional":false}`},
		{source.Type{Kind: source.KindInt32, Default: "5"}, `{"type":"int32","optional":false}`},
	}
	for _, c := range cases {
		got, err := connectjsonSchema(columnSchema(c.t))
		if err != nil || got != c.want {
			t.Errorf("%+v: schema %s (%v)\nwant       %s", c.t, got, err, c.want)
		}
	}
}

func connectjsonSchema(s *connectjson.Schema) (string, error) {
	b, err := connectjson.AppendSchema(nil, s)
	return string(b), err
}
