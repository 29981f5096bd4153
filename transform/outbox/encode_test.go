package outbox

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
)

// col is one column of a typed test row: its name, Connect type and value (nil = NULL).
type col struct {
	name string
	t    source.Type
	v    any // nil, string or []byte
}

func str(name string, v any) col {
	return col{name, source.Type{Kind: source.KindString, Optional: true}, v}
}
func strNN(name string, v any) col {
	return col{name, source.Type{Kind: source.KindString, Optional: false}, v}
}
func typed(name string, k source.Kind, v any) col {
	return col{name, source.Type{Kind: k, Optional: true}, v}
}

// trow is a row with column types, as the PostgreSQL source gives it.
func trow(cols ...col) *source.Row {
	r := &source.Row{Table: "public.outbox"}
	for _, c := range cols {
		r.Columns = append(r.Columns, c.name)
		r.Types = append(r.Types, c.t)
		r.Values = append(r.Values, testValue(c.v))
	}
	return r
}

// The order of shared/spec/debezium-outbox.md §2 (AERT's jsonb row "object").
const orderPayload = `{"id": 1, "lineItems": [{"id": 1, "item": "Debezium in Action", "status": "ENTERED", "quantity": 2, "totalPrice": 39.98}], "orderDate": "2019-01-31T12:13:01", "customerId": 123}`

// orderRow is AERT's outbox table: id uuid, aggregatetype/aggregateid/type varchar(255)
// (nullable), payload jsonb.
func orderRow(aggID, payload any) *source.Row {
	return trow(typed("id", source.KindUUID, uid), str("aggregatetype", "Order"), str("aggregateid", aggID),
		str("type", "OrderCreated"), typed("payload", source.KindJSON, payload))
}

func cfgWith(f func(*Config)) Config {
	c := DefaultConfig()
	f(&c)
	return c
}

func mustRoute(t *testing.T, cfg Config, rw *source.Row) (key, value []byte) {
	t.Helper()
	r, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	rec, err := r.Route(rw, time.Time{})
	if err != nil {
		t.Fatalf("Route: %v", err)
	}
	return rec.Key, rec.Value
}

func checkBytes(t *testing.T, what string, got []byte, want *string) {
	t.Helper()
	if want == nil {
		if got != nil {
			t.Errorf("%s = %q, want null (nil)", what, got)
		}
		return
	}
	if got == nil || string(got) != *want {
		t.Errorf("%s = %q (nil %v)\nwant  %q", what, got, got == nil, *want)
	}
}

func p(s string) *string { return &s }

const jsonSchemaOpt = `{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1}`

// jsonString is the payload as a JSON string (Jackson's escaping of the quotes).
var orderJSONString = `"` + strings.ReplaceAll(orderPayload, `"`, `\"`) + `"`

// The key and value bytes per converter: shared/spec/debezium-outbox.md §2 (the AERT row
// "object", OutboxEventRouterIT shouldConsumeRecordsFromInsert / shouldRespectJsonFormatAsString),
// and the DBZ-2152 key and value types of ERT.
func TestEncoding(t *testing.T) {
	json := func(c *Config) { c.Encoding = EncodingJSON }
	schema := func(c *Config) { c.Encoding = EncodingJSONSchema }
	cases := []struct {
		name       string
		cfg        func(*Config)
		row        *source.Row
		key, value *string
	}{
		{"raw (StringConverter): today's bytes", func(*Config) {}, orderRow("order-1", orderPayload), p("order-1"), p(orderPayload)},
		{"raw, NULL payload", func(*Config) {}, orderRow("order-1", nil), p("order-1"), nil},
		{"json: key a JSON string, value the payload as a JSON string", json, orderRow("order-1", orderPayload),
			p(`"order-1"`), p(orderJSONString)},
		{"json: NULL payload is the 4 bytes null", json, orderRow("order-1", nil), p(`"order-1"`), p(`null`)},
		{"json_schema: Debezium's schemas, optional as the columns", schema, orderRow("order-1", orderPayload),
			p(`{"schema":{"type":"string","optional":true},"payload":"order-1"}`),
			p(`{"schema":` + jsonSchemaOpt + `,"payload":` + orderJSONString + `}`)},
		{"json_schema: NULL payload", schema, orderRow("order-1", nil),
			p(`{"schema":{"type":"string","optional":true},"payload":"order-1"}`),
			p(`{"schema":` + jsonSchemaOpt + `,"payload":null}`)},
		{"json_schema: a NOT NULL key column is optional:false", schema,
			trow(typed("id", source.KindUUID, uid), str("aggregatetype", "Order"), strNN("aggregateid", "order-1"),
				typed("payload", source.KindJSON, "{}")),
			p(`{"schema":{"type":"string","optional":false},"payload":"order-1"}`),
			p(`{"schema":` + jsonSchemaOpt + `,"payload":"{}"}`)},
		// ERT canPassIntKey: an int32 key column keeps its Connect type.
		{"json: int key (ERT canPassIntKey)", json,
			trow(typed("id", source.KindUUID, uid), str("aggregatetype", "User"),
				col{"aggregateid", source.Type{Kind: source.KindInt32}, "54321"}, typed("payload", source.KindJSON, "{}")),
			p(`54321`), p(`"{}"`)},
		{"json_schema: int key (ERT canPassIntKey)", schema,
			trow(typed("id", source.KindUUID, uid), str("aggregatetype", "User"),
				col{"aggregateid", source.Type{Kind: source.KindInt32}, "54321"}, typed("payload", source.KindJSON, "{}")),
			p(`{"schema":{"type":"int32","optional":false},"payload":54321}`), p(`{"schema":` + jsonSchemaOpt + `,"payload":"{}"}`)},
		// ERT canPassBinaryKey / canPassBinaryMessage: bytes are Base64.
		{"json: binary key and binary payload (ERT canPassBinaryKey, canPassBinaryMessage)", json,
			trow(typed("id", source.KindUUID, uid), str("aggregatetype", "User"),
				typed("aggregateid", source.KindBytes, []byte("a binary key")), typed("payload", source.KindBytes, []byte("a binary message"))),
			p(`"YSBiaW5hcnkga2V5"`), p(`"YSBiaW5hcnkgbWVzc2FnZQ=="`)},
		{"json_schema: binary payload", schema,
			trow(typed("id", source.KindUUID, uid), str("aggregatetype", "User"), str("aggregateid", "a key"),
				typed("payload", source.KindBytes, []byte("a binary message"))),
			p(`{"schema":{"type":"string","optional":true},"payload":"a key"}`),
			p(`{"schema":{"type":"bytes","optional":true},"payload":"YSBiaW5hcnkgbWVzc2FnZQ=="}`)},
		// A text payload is a plain Connect string (AERT shouldProduceTombstoneEventForEmptyPayload's varchar payload).
		{"json_schema: text payload is a plain string", schema, trow(typed("id", source.KindUUID, uid),
			str("aggregatetype", "User"), str("aggregateid", "k"), str("payload", "hello")),
			p(`{"schema":{"type":"string","optional":true},"payload":"k"}`), p(`{"schema":{"type":"string","optional":true},"payload":"hello"}`)},
		// Jackson's escaping (connectjson): control characters, quotes, and a surrogate pair.
		{"json: Jackson escaping", json, orderRow("k\"1", "{\"a\": \"\x01\t😀\"}"),
			p(`"k\"1"`), p(`"{\"a\": \"\u0001\t\uD83D\uDE00\"}"`)},
		// Rows without types (nil Types): every column a nullable string.
		{"json_schema: untyped row", schema, row("id", uid, "aggregatetype", "Order", "aggregateid", "7", "payload", "{}"),
			p(`{"schema":{"type":"string","optional":true},"payload":"7"}`), p(`{"schema":{"type":"string","optional":true},"payload":"{}"}`)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key, value := mustRoute(t, cfgWith(c.cfg), c.row)
			checkBytes(t, "key", key, c.key)
			checkBytes(t, "value", value, c.value)
		})
	}
}

// outbox.null_key: produce with json: the key is the 4 bytes null (JsonConverter writes an
// optional schema's null), with json_schema the envelope with "payload":null — never a Kafka
// null key, so the partitioner hashes it (AERT: Debezium routes NULL keys the same way).
func TestEncodingNullKey(t *testing.T) {
	for enc, want := range map[string]string{
		EncodingJSON:       `null`,
		EncodingJSONSchema: `{"schema":{"type":"string","optional":true},"payload":null}`,
	} {
		key, _ := mustRoute(t, cfgWith(func(c *Config) { c.Encoding, c.NullKey = enc, NullKeyProduce }), orderRow(nil, "{}"))
		checkBytes(t, enc+" key", key, &want)
	}
	key, _ := mustRoute(t, cfgWith(func(c *Config) { c.NullKey = NullKeyProduce }), orderRow(nil, "{}"))
	checkBytes(t, "raw key", key, nil)
}

// route.tombstone.on.empty.payload with json encodings: a real tombstone (nil value) only with
// the option; without it a NULL payload is the bytes null (ERT noTombstoneIfNotConfigured,
// AERT shouldNotProduceTombstoneEventForNullPayload / shouldProduceTombstoneEventForNullPayload).
// A bytes payload is never empty to Debezium (byte[].toString()).
func TestEncodingTombstone(t *testing.T) {
	on := cfgWith(func(c *Config) { c.Encoding, c.TombstoneOnEmptyPayload = EncodingJSON, true })
	key, value := mustRoute(t, on, orderRow("k", nil))
	checkBytes(t, "key", key, p(`"k"`))
	checkBytes(t, "value", value, nil)
	_, value = mustRoute(t, on, trow(typed("id", source.KindUUID, uid), str("aggregatetype", "A"), str("aggregateid", "k"), str("payload", "  ")))
	checkBytes(t, "blank text payload", value, nil)
	_, value = mustRoute(t, on, trow(typed("id", source.KindUUID, uid), str("aggregatetype", "A"), str("aggregateid", "k"), typed("payload", source.KindBytes, []byte{})))
	checkBytes(t, "empty bytes payload", value, p(`""`))
	off := cfgWith(func(c *Config) { c.Encoding = EncodingJSONSchema })
	_, value = mustRoute(t, off, orderRow("k", nil))
	checkBytes(t, "option off", value, p(`{"schema":`+jsonSchemaOpt+`,"payload":null}`))
}

// Debezium's envelope (outbox.fields placement envelope): ERT canSetPayloadTypeIntoTheEnvelope,
// ...WithAlias, canSetMultipleFieldsIntoTheEnvelope, canMarkAnEventAsDeleted,
// noTombstoneIfNotConfigured, canSetFieldIntoTheEnvelopeWithMissingField, shouldFailOnMissingField.
func TestEnvelope(t *testing.T) {
	user := func(payload any, extra ...col) *source.Row {
		return trow(append([]col{typed("id", source.KindUUID, uid), str("aggregatetype", "User"), str("aggregateid", "10711fa5"),
			str("type", "UserCreated"), typed("payload", source.KindJSON, payload)}, extra...)...)
	}
	fields := func(enc string, fs ...Field) Config {
		return cfgWith(func(c *Config) { c.Encoding, c.Fields = enc, fs })
	}
	env := func(col, alias string) Field { return Field{Column: col, Placement: PlacementEnvelope, Alias: alias} }
	cases := []struct {
		name  string
		cfg   Config
		row   *source.Row
		value *string
	}{
		{"ERT canSetPayloadTypeIntoTheEnvelope", fields(EncodingJSON, env("type", "")), user("{}"),
			p(`{"payload":"{}","type":"UserCreated"}`)},
		{"ERT canSetPayloadTypeIntoTheEnvelopeWithAlias", fields(EncodingJSON, env("type", "aggregateType")), user("{}"),
			p(`{"payload":"{}","aggregateType":"UserCreated"}`)},
		{"ERT canSetMultipleFieldsIntoTheEnvelope", fields(EncodingJSON, env("type", "payloadType"), env("aggregateid", "payloadId"),
			Field{Column: "type", Placement: PlacementHeader, Alias: "payloadType"}), user("{}"),
			p(`{"payload":"{}","payloadType":"UserCreated","payloadId":"10711fa5"}`)},
		{"json_schema envelope: struct schema named <table>.<routedByValue>.Value", fields(EncodingJSONSchema, env("type", "")), user("{}"),
			p(`{"schema":{"type":"struct","fields":[{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"field":"payload"},` +
				`{"type":"string","optional":true,"field":"type"}],"optional":false,"name":"public.outbox.User.Value"},` +
				`"payload":{"payload":"{}","type":"UserCreated"}}`)},
		{"json_schema envelope with Debezium's topic.prefix", func() Config {
			c := fields(EncodingJSONSchema, env("type", ""))
			c.SchemaNamePrefix = "dbserver1"
			return c
		}(), user(nil),
			p(`{"schema":{"type":"struct","fields":[{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"field":"payload"},` +
				`{"type":"string","optional":true,"field":"type"}],"optional":false,"name":"dbserver1.public.outbox.User.Value"},` +
				`"payload":{"payload":null,"type":"UserCreated"}}`)},
		{"ERT canMarkAnEventAsDeleted: not empty", func() Config {
			c := fields(EncodingJSON, env("is_deleted", "deleted"))
			c.TombstoneOnEmptyPayload = true
			return c
		}(), user("{}", typed("is_deleted", source.KindBool, "t")), p(`{"payload":"{}","deleted":true}`)},
		{"ERT canMarkAnEventAsDeleted: NULL payload is a tombstone", func() Config {
			c := fields(EncodingJSON, env("is_deleted", "deleted"))
			c.TombstoneOnEmptyPayload = true
			return c
		}(), user(nil, typed("is_deleted", source.KindBool, "t")), nil},
		{"ERT noTombstoneIfNotConfigured: the envelope with payload null", fields(EncodingJSON, env("is_deleted", "deleted")),
			user(nil, typed("is_deleted", source.KindBool, "t")), p(`{"payload":null,"deleted":true}`)},
		{"ERT canSetFieldIntoTheEnvelopeWithMissingField (ignore)", func() Config {
			c := fields(EncodingJSON, env("type", ""), env("nope", ""))
			c.MissingField = MissingFieldIgnore
			return c
		}(), user("{}"), p(`{"payload":"{}","type":"UserCreated"}`)},
		{"Connect types in the envelope (Debezium's PostgreSQL value converters)", fields(EncodingJSONSchema,
			env("ts", ""), env("ts3", ""), env("tz", ""), env("amount", ""), env("n", ""), env("small", ""), env("big", ""), env("ok", ""),
			env("d", ""), env("f", ""), env("r", ""), env("bin", ""), env("u", "")),
			user("{}", typed("ts", source.KindMicroTimestamp, "2019-03-24 20:52:59"),
				typed("ts3", source.KindTimestamp, "2019-03-24 20:52:59.123"),
				col{"tz", source.Type{Kind: source.KindZonedTimestamp, Optional: true, Scale: 6}, "2026-01-02 04:04:05.12+01"},
				col{"amount", source.Type{Kind: source.KindDecimal, Optional: true, Scale: 2, Precision: 10}, "39.98"},
				col{"n", source.Type{Kind: source.KindDecimal, Optional: true}, "-1.5"},
				typed("small", source.KindInt16, "-7"), typed("big", source.KindInt64, "9007199254740993"), typed("ok", source.KindBool, "f"),
				typed("d", source.KindDate, "1969-12-31"), typed("f", source.KindFloat64, "39.98"), typed("r", source.KindFloat32, "NaN"),
				typed("bin", source.KindBytes, []byte{0xff, 0}), typed("u", source.KindUUID, uid)),
			p(`{"schema":{"type":"struct","fields":[{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"field":"payload"},` +
				`{"type":"int64","optional":true,"name":"io.debezium.time.MicroTimestamp","version":1,"field":"ts"},` +
				`{"type":"int64","optional":true,"name":"io.debezium.time.Timestamp","version":1,"field":"ts3"},` +
				`{"type":"string","optional":true,"name":"io.debezium.time.ZonedTimestamp","version":1,"field":"tz"},` +
				`{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{"scale":"2","connect.decimal.precision":"10"},"field":"amount"},` +
				`{"type":"struct","fields":[{"type":"int32","optional":false,"field":"scale"},{"type":"bytes","optional":false,"field":"value"}],"optional":true,"name":"io.debezium.data.VariableScaleDecimal","version":1,"doc":"Variable scaled decimal","field":"n"},` +
				`{"type":"int16","optional":true,"field":"small"},{"type":"int64","optional":true,"field":"big"},{"type":"boolean","optional":true,"field":"ok"},` +
				`{"type":"int32","optional":true,"name":"io.debezium.time.Date","version":1,"field":"d"},{"type":"double","optional":true,"field":"f"},` +
				`{"type":"float","optional":true,"field":"r"},{"type":"bytes","optional":true,"field":"bin"},` +
				`{"type":"string","optional":true,"name":"io.debezium.data.Uuid","version":1,"field":"u"}],"optional":false,"name":"public.outbox.User.Value"},` +
				`"payload":{"payload":"{}","ts":1553460779000000,"ts3":1553460779123,"tz":"2026-01-02T03:04:05.120000Z","amount":"D54=",` +
				`"n":{"scale":1,"value":"8Q=="},"small":-7,"big":9007199254740993,"ok":false,"d":-1,"f":39.98,"r":"NaN","bin":"/wA=","u":"` + uid + `"}}`)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, value := mustRoute(t, c.cfg, c.row)
			checkBytes(t, "value", value, c.value)
		})
	}

	t.Run("ERT shouldFailOnMissingField", func(t *testing.T) {
		r, err := New(fields(EncodingJSON, env("nope", "")))
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.Route(user("{}"), time.Time{})
		var oe *Error
		if !errors.As(err, &oe) || oe.Reason != "missing_column" || oe.Column != "nope" {
			t.Fatalf("err %v, want missing_column nope", err)
		}
	})
	t.Run("invalid value text is invalid_value", func(t *testing.T) {
		r, _ := New(fields(EncodingJSON, env("ok", "")))
		_, err := r.Route(user("{}", typed("ok", source.KindBool, "maybe")), time.Time{})
		var oe *Error
		if !errors.As(err, &oe) || oe.Reason != "invalid_value" || oe.Column != "ok" {
			t.Fatalf("err %v, want invalid_value ok", err)
		}
	})
}

// The partition placement (ERT canSetPartitionWithAdditionalFields: int32 column p = 123).
func TestPartitionField(t *testing.T) {
	cfg := cfgWith(func(c *Config) { c.Fields = []Field{{Column: "p", Placement: PlacementPartition, Alias: "ignored"}} })
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	base := []col{typed("id", source.KindUUID, uid), str("aggregatetype", "routename"), str("aggregateid", "1232"), typed("payload", source.KindBytes, []byte("{}"))}
	int32Col := func(v any) col { return col{"p", source.Type{Kind: source.KindInt32, Optional: true}, v} }
	for _, c := range []struct {
		name   string
		row    *source.Row
		part   int32
		set    bool
		reason string
	}{
		{"ERT canSetPartitionWithAdditionalFields", trow(append(base, int32Col("123"))...), 123, true, ""},
		{"NULL: the partitioner", trow(append(base, int32Col(nil))...), 0, false, ""},
		{"untyped row, int text", row("id", uid, "aggregatetype", "a", "aggregateid", "1", "payload", "{}", "p", "7"), 7, true, ""},
		{"int64 column (Debezium: DataException from getInt32)", trow(append(base, typed("p", source.KindInt64, "1"))...), 0, false, "invalid_partition"},
		{"string column", trow(append(base, str("p", "1"))...), 0, false, "invalid_partition"},
		{"negative", trow(append(base, int32Col("-1"))...), 0, false, "invalid_partition"},
		{"missing column", trow(base...), 0, false, "missing_column"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec, err := r.Route(c.row, time.Time{})
			if c.reason != "" {
				var oe *Error
				if !errors.As(err, &oe) || oe.Reason != c.reason || oe.Column != "p" {
					t.Fatalf("err %v, want %s on p", err, c.reason)
				}
				return
			}
			if err != nil || rec.Partition != c.part || rec.PartitionSet != c.set {
				t.Fatalf("partition %d set %v err %v, want %d %v", rec.Partition, rec.PartitionSet, err, c.part, c.set)
			}
		})
	}
	ig := cfg
	ig.MissingField = MissingFieldIgnore
	rec, _ := mustRouteRec(t, ig, trow(base...))
	if rec.PartitionSet {
		t.Fatal("missing_field ignore: a missing partition column must leave the partition to the partitioner")
	}
}

// Config errors name the key (New's error; app exits 2 with it).
func TestEncodingConfigErrors(t *testing.T) {
	env := Field{Column: "type", Placement: PlacementEnvelope}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{cfgWith(func(c *Config) { c.ExpandJSONPayload = true }), "outbox.expand_json_payload"},
		{cfgWith(func(c *Config) { c.Fields = []Field{env} }), "outbox.fields"},
		{cfgWith(func(c *Config) {
			c.Encoding = EncodingJSON
			c.Fields = []Field{{Column: "a", Placement: PlacementPartition}, {Column: "b", Placement: PlacementPartition}}
		}), "outbox.fields[1]: a second partition placement"},
		{cfgWith(func(c *Config) {
			c.Encoding = EncodingJSON
			c.Fields = []Field{env, {Column: "x", Placement: PlacementEnvelope, Alias: "type"}}
		}), "outbox.fields[1]"},
		{cfgWith(func(c *Config) {
			c.Encoding = EncodingJSON
			c.Fields = []Field{{Column: "x", Placement: PlacementEnvelope, Alias: "payload"}}
		}), "outbox.fields[0]"},
		{cfgWith(func(c *Config) { c.Encoding = "avro" }), "outbox.encoding"},
	} {
		if _, err := New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v): %v, want an error naming %s", c.cfg.Fields, err, c.want)
		}
	}
	for _, enc := range []string{EncodingJSON, EncodingJSONSchema} {
		if _, err := New(cfgWith(func(c *Config) { c.Encoding, c.ExpandJSONPayload, c.Fields = enc, true, []Field{env} })); err != nil {
			t.Errorf("%s with expand and an envelope: %v", enc, err)
		}
	}
}

func mustRouteRec(t *testing.T, cfg Config, rw *source.Row) (rec sink.Record, err error) {
	t.Helper()
	r, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return r.Route(rw, time.Time{})
}

// table.expand.json.payload (outbox.expand_json_payload) through connectjson.Expand: ERT
// canExpandJsonPayloadIfConfigured, shouldNotExpandJSONPayloadIfNotConfigured,
// canExpandJsonPayloadWithAdditionalFieldInEnvelope, spec §2's last row.
func TestExpandJSONPayload(t *testing.T) {
	const ertPayload = `{"fullName": "John Doe", "enabled": true, "rating": 4.9, "age": 42, "pets": ["dog", "cat"], "petObjects": [{"type": "dog"}, {"type": "cat"}]}`
	user := func(payload any) *source.Row {
		return trow(typed("id", source.KindUUID, uid), str("aggregatetype", "User"), str("aggregateid", "10711fa5"),
			str("type", "UserCreated"), typed("payload", source.KindJSON, payload))
	}
	expand := func(enc string, fs ...Field) Config {
		return cfgWith(func(c *Config) { c.Encoding, c.ExpandJSONPayload, c.Fields = enc, true, fs })
	}
	cases := []struct {
		name       string
		cfg        Config
		row        *source.Row
		key, value *string
	}{
		{"spec §2: JsonConverter + expand", expand(EncodingJSON), orderRow("order-1", orderPayload), p(`"order-1"`),
			p(`{"id":1,"lineItems":[{"id":1,"item":"Debezium in Action","status":"ENTERED","quantity":2,"totalPrice":39.98}],"orderDate":"2019-01-31T12:13:01","customerId":123}`)},
		{"ERT canExpandJsonPayloadIfConfigured", expand(EncodingJSON), user(ertPayload), p(`"10711fa5"`),
			p(`{"fullName":"John Doe","enabled":true,"rating":4.9,"age":42,"pets":["dog","cat"],"petObjects":[{"type":"dog"},{"type":"cat"}]}`)},
		{"ERT shouldNotExpandJSONPayloadIfNotConfigured", cfgWith(func(c *Config) { c.Encoding = EncodingJSON }), user(`{"a": 1}`), p(`"10711fa5"`),
			p(`"{\"a\": 1}"`)},
		{"not an object or array: kept as the string", expand(EncodingJSON), user(`"just a string"`), p(`"10711fa5"`), p(`"\"just a string\""`)},
		{"NULL payload: null (ERT shouldNotWarnOnNullPayloadWhenExpandJsonPayloadEnabled)", expand(EncodingJSON), user(nil), p(`"10711fa5"`), p(`null`)},
		{"null fields dropped (table.json.payload.null.behavior=ignore)", expand(EncodingJSON), user(`{"a": null, "b": 2}`), p(`"10711fa5"`), p(`{"b":2}`)},
		{"json_schema: the inferred struct schema named after the payload column", expand(EncodingJSONSchema), user(`{"a": "x", "n": 5000000000}`),
			p(`{"schema":{"type":"string","optional":true},"payload":"10711fa5"}`),
			p(`{"schema":{"type":"struct","fields":[{"type":"string","optional":true,"field":"a"},{"type":"int64","optional":true,"field":"n"}],"optional":true,"name":"payload"},"payload":{"a":"x","n":5000000000}}`)},
		{"ERT canExpandJsonPayloadWithAdditionalFieldInEnvelope", expand(EncodingJSON, Field{Column: "type", Placement: PlacementEnvelope, Alias: "eventType"}),
			user(`{"a": 1}`), p(`"10711fa5"`), p(`{"payload":{"a":1},"eventType":"UserCreated"}`)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key, value := mustRoute(t, c.cfg, c.row)
			checkBytes(t, "key", key, c.key)
			checkBytes(t, "value", value, c.value)
		})
	}
}

// BenchmarkRouteEncoded: the json and json_schema paths (the raw path is BenchmarkRoute).
func BenchmarkRouteEncoded(b *testing.B) {
	for _, enc := range []string{EncodingJSON, EncodingJSONSchema} {
		b.Run(enc, func(b *testing.B) {
			r, err := New(cfgWith(func(c *Config) { c.Encoding = enc }))
			if err != nil {
				b.Fatal(err)
			}
			rw := orderRow("order-1", orderPayload)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := r.Route(rw, time.Time{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Debezium caches the envelope schema per payload schema (ERD payloadSchemaCache), so the name
// is the first record's route value for every later record with the same payload schema
// (real Debezium 3.6.1, dbz-golden setup D: dbzD.Customer records carry
// dbserver1.public.outbox.Order.Value). A payload of another schema (expanded) gets its own.
func TestEnvelopeSchemaNameCache(t *testing.T) {
	cfg := cfgWith(func(c *Config) {
		c.Encoding, c.SchemaNamePrefix, c.ExpandJSONPayload = EncodingJSONSchema, "dbserver1", true
		c.Fields = []Field{{Column: "type", Placement: PlacementEnvelope}}
	})
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	at := func(aggType, payload string) string {
		rec, err := r.Route(trow(typed("id", source.KindUUID, uid), str("aggregatetype", aggType), str("aggregateid", "k"),
			str("type", "T"), typed("payload", source.KindJSON, payload)), time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		i := strings.Index(string(rec.Value), `"name":"dbserver1.`)
		j := strings.Index(string(rec.Value), `.Value"`)
		if i < 0 || j < i {
			t.Fatalf("no envelope name in %s", rec.Value)
		}
		return string(rec.Value[i+len(`"name":"`) : j+len(".Value")])
	}
	for _, c := range []struct{ aggType, payload, want string }{
		{"Order", `"s"`, "dbserver1.public.outbox.Order.Value"},
		{"Customer", `"t"`, "dbserver1.public.outbox.Order.Value"}, // same (string) payload schema: Order's
		{"Customer", `{"a": 1}`, "dbserver1.public.outbox.Customer.Value"},
		{"Order", `{"a": 2}`, "dbserver1.public.outbox.Customer.Value"},
		{"Order", `{"b": 2}`, "dbserver1.public.outbox.Order.Value"},
	} {
		if got := at(c.aggType, c.payload); got != c.want {
			t.Errorf("%s %s: name %s, want %s", c.aggType, c.payload, got, c.want)
		}
	}
}
