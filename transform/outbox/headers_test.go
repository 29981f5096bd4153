package outbox

import (
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
)

// Every expected value below was printed by the real classes (testdata/javaoracle:
// SimpleHeaderConverter.fromConnectHeader of the Connect value Debezium 3.6.1 makes:
// Values.convertToString, i.e. Values.append: numbers via toString, booleans "true"/"false",
// bytes Base64, a Struct as {"field":value}); Kafka's SimpleHeaderConverterTest
// shouldConvertSimpleString / shouldConvertEmptyString (strings as they are) and
// shouldConvertNullValue (null stays null, TestAppendHeaders) are the Kafka tests of it.
func TestRenderHeaderDebezium(t *testing.T) {
	ty := func(k source.Kind) source.Type { return source.Type{Kind: k, Optional: true} }
	dec := source.Type{Kind: source.KindDecimal, Precision: 20, Scale: 2}
	vsd := source.Type{Kind: source.KindDecimal} // PostgreSQL numeric without precision
	zoned := func(w int) source.Type { return source.Type{Kind: source.KindZonedTimestamp, Scale: w} }
	cases := []struct {
		name string
		t    source.Type
		in   string
		want string // "" with err set: an error
		err  string
	}{
		// Booleans: PostgreSQL t/f, MySQL 1/0 (AbstractEventRouterTest shouldSupportAllFeatures: "true").
		{"bool t", ty(source.KindBool), "t", "true", ""},
		{"bool f", ty(source.KindBool), "f", "false", ""},
		{"bool mysql 1", ty(source.KindBool), "1", "true", ""},
		{"bool mysql 0", ty(source.KindBool), "0", "false", ""},
		{"bool junk", ty(source.KindBool), "yes", "", "not a boolean"},
		// Integers: Short/Integer/Long.toString; an unsigned BIGINT wraps as Debezium's long mode.
		{"int16", ty(source.KindInt16), "-7", "-7", ""},
		{"int32", ty(source.KindInt32), "2147483647", "2147483647", ""},
		{"int64", ty(source.KindInt64), "9223372036854775807", "9223372036854775807", ""},
		{"int64 unsigned max", ty(source.KindInt64), "18446744073709551615", "-1", ""},
		// Float.toString / Double.toString of PostgreSQL's float4/float8 text.
		{"float32 1.1", ty(source.KindFloat32), "1.1", "1.1", ""},
		{"float32 100", ty(source.KindFloat32), "100", "100.0", ""},
		{"float32 0.001", ty(source.KindFloat32), "0.001", "0.001", ""},
		{"float32 1e-4", ty(source.KindFloat32), "0.0001", "1.0E-4", ""},
		{"float32 12345678", ty(source.KindFloat32), "1.2345678e+07", "1.2345678E7", ""},
		{"float32 -0", ty(source.KindFloat32), "-0", "-0.0", ""},
		{"float32 NaN", ty(source.KindFloat32), "NaN", "NaN", ""},
		{"float32 Infinity", ty(source.KindFloat32), "Infinity", "Infinity", ""},
		{"float32 -Infinity", ty(source.KindFloat32), "-Infinity", "-Infinity", ""},
		{"float32 max", ty(source.KindFloat32), "3.4028235e+38", "3.4028235E38", ""},
		{"float32 1e7", ty(source.KindFloat32), "1e+07", "1.0E7", ""},
		{"float64 39.98", ty(source.KindFloat64), "39.98", "39.98", ""},
		{"float64 100", ty(source.KindFloat64), "100", "100.0", ""},
		{"float64 1e-05", ty(source.KindFloat64), "1e-05", "1.0E-5", ""},
		{"float64 max", ty(source.KindFloat64), "1.7976931348623157e+308", "1.7976931348623157E308", ""},
		{"float64 0.1", ty(source.KindFloat64), "0.1", "0.1", ""},
		{"float64 -2.5", ty(source.KindFloat64), "-2.5", "-2.5", ""},
		{"float64 123456789012", ty(source.KindFloat64), "123456789012", "1.23456789012E11", ""},
		{"float64 min", ty(source.KindFloat64), "4.9e-324", "4.9E-324", ""},
		{"float64 junk", ty(source.KindFloat64), "1,5", "", "not a float64"},
		// BigDecimal.toString: scientific when the adjusted exponent is below -6.
		{"decimal 12.50", dec, "12.50", "12.50", ""},
		{"decimal -12.50", dec, "-12.50", "-12.50", ""},
		{"decimal 0", dec, "0", "0", ""},
		{"decimal 0.000001", dec, "0.000001", "0.000001", ""},
		{"decimal 0.0000001", dec, "0.0000001", "1E-7", ""},
		{"decimal 0.00000010", dec, "0.00000010", "1.0E-7", ""},
		{"decimal 0.0000000", dec, "0.0000000", "0E-7", ""},
		{"decimal -0.0000001234", dec, "-0.0000001234", "-1.234E-7", ""},
		{"decimal long", dec, "123456789.123456789", "123456789.123456789", ""},
		{"decimal 0.000", dec, "0.000", "0.000", ""},
		{"decimal -3", dec, "-3", "-3", ""},
		{"decimal NaN", dec, "NaN", "", "cannot be a Debezium precise decimal"},
		{"decimal junk", dec, "1e5", "", "not a decimal"},
		// io.debezium.data.VariableScaleDecimal: Values.append of the Struct.
		{"vsd 12.50", vsd, "12.50", `{"scale":1,"value":"fQ=="}`, ""},
		{"vsd -12.50", vsd, "-12.50", `{"scale":1,"value":"gw=="}`, ""},
		{"vsd 100", vsd, "100", `{"scale":0,"value":"ZA=="}`, ""},
		{"vsd 0.00", vsd, "0.00", `{"scale":0,"value":"AA=="}`, ""},
		{"vsd -1", vsd, "-1", `{"scale":0,"value":"/w=="}`, ""},
		{"vsd -128", vsd, "-128", `{"scale":0,"value":"gA=="}`, ""},
		{"vsd -129", vsd, "-129", `{"scale":0,"value":"/38="}`, ""},
		{"vsd 255", vsd, "255", `{"scale":0,"value":"AP8="}`, ""},
		{"vsd 1.5000", vsd, "1.5000", `{"scale":1,"value":"Dw=="}`, ""},
		// byte[]: Base64.
		{"bytes", ty(source.KindBytes), "\x00\x01\x02\xfe\xff", "AAEC/v8=", ""},
		// io.debezium.time.MicroTimestamp / Timestamp (epoch µs / ms, UTC), Date (epoch days).
		{"micro", ty(source.KindMicroTimestamp), "2026-01-02 03:04:05.123456", "1767323045123456", ""},
		{"micro whole", ty(source.KindMicroTimestamp), "2026-01-02 03:04:05", "1767323045000000", ""},
		{"micro before 1970", ty(source.KindMicroTimestamp), "1969-12-31 23:59:59.9995", "-500", ""},
		{"micro year 1", ty(source.KindMicroTimestamp), "0001-01-01 00:00:00", "-62135596800000000", ""},
		{"micro BC", ty(source.KindMicroTimestamp), "0044-03-15 10:00:00 BC", "-63517788000000000", ""},
		{"millis", ty(source.KindTimestamp), "2026-01-02 03:04:05.123", "1767323045123", ""},
		{"millis before 1970", ty(source.KindTimestamp), "1969-12-31 23:59:59.9995", "-1", ""},
		{"millis BC", ty(source.KindTimestamp), "0044-03-15 10:00:00 BC", "-63517788000000", ""},
		{"micro infinity", ty(source.KindMicroTimestamp), "infinity", "", "not a date-time"},
		{"date", ty(source.KindDate), "2026-01-02", "20455", ""},
		{"date before 1970", ty(source.KindDate), "1969-12-31", "-1", ""},
		{"date year 1", ty(source.KindDate), "0001-01-01", "-719162", ""},
		{"date BC", ty(source.KindDate), "0044-03-15 BC", "-735160", ""},
		{"date with time", ty(source.KindDate), "2026-01-02 00:00:00", "", "not a date-time"},
		// io.debezium.time.ZonedTimestamp.toIsoString in UTC, fraction width = the column's.
		{"zoned w6", zoned(6), "2026-01-02 03:04:05.123456+00", "2026-01-02T03:04:05.123456Z", ""},
		{"zoned w3", zoned(3), "2026-01-02 03:04:05.123456+00", "2026-01-02T03:04:05.123Z", ""},
		{"zoned w0", zoned(0), "2026-01-02 03:04:05.123456+00", "2026-01-02T03:04:05.123456Z", ""},
		{"zoned offset w6", zoned(6), "2026-01-02 03:04:05.12+05:30", "2026-01-01T21:34:05.120000Z", ""},
		{"zoned offset w0", zoned(0), "2026-01-02 03:04:05.12+05:30", "2026-01-01T21:34:05.12Z", ""},
		{"zoned whole w6", zoned(6), "2026-01-02 03:04:05+00", "2026-01-02T03:04:05.000000Z", ""},
		{"zoned whole w0", zoned(0), "2026-01-02 03:04:05+00", "2026-01-02T03:04:05Z", ""},
		{"zoned LMT offset", zoned(3), "2026-01-02 03:04:05.5-00:19:32", "2026-01-02T03:23:37.500Z", ""},
		{"zoned year 10000", zoned(6), "10000-01-01 00:00:00+00", "+10000-01-01T00:00:00.000000Z", ""},
		{"zoned BC", zoned(0), "0044-03-15 10:00:00+00 BC", "-0043-03-15T10:00:00Z", ""},
		{"zoned mysql utc text", zoned(0), "2026-01-02 03:04:05", "2026-01-02T03:04:05Z", ""},
		{"zoned infinity", zoned(6), "infinity", "infinity", ""},
		// Strings as they are.
		{"string", ty(source.KindString), "héllo", "héllo", ""},
		{"json", ty(source.KindJSON), `{"a": 1}`, `{"a": 1}`, ""},
		{"uuid", ty(source.KindUUID), uid, uid, ""},
	}
	for _, c := range cases {
		got, err := renderHeader([]byte(c.in), c.t)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: renderHeader(%q) = %q, %v; want an error with %q", c.name, c.in, got, err, c.err)
			}
			continue
		}
		if err != nil || string(got) != c.want {
			t.Errorf("%s: renderHeader(%q) = %q, %v; want %q", c.name, c.in, got, err, c.want)
		}
	}
}

func typedRow(kv ...any) *source.Row {
	r := &source.Row{Table: "public.outbox"}
	for i := 0; i < len(kv); i += 3 {
		r.Columns = append(r.Columns, kv[i].(string))
		r.Types = append(r.Types, kv[i+1].(source.Type))
		if kv[i+2] == nil {
			r.Values = append(r.Values, source.Value{Null: true})
		} else {
			r.Values = append(r.Values, source.Value{Bytes: []byte(kv[i+2].(string))})
		}
	}
	return r
}

// TestAppendHeaders: outbox.headers in order, then outbox.fields header placements in list order
// under their alias (EventRouterTest canSetMultipleFieldsIntoTheEnvelope: the same column as an
// envelope field and a header), after id; NULL as a header with a null value; missing columns
// as outbox.missing_field says (shouldFailOnMissingField / canSetFieldIntoTheEnvelopeWithMissingField);
// outbox.header_values: text as the database's bytes.
func TestAppendHeaders(t *testing.T) {
	str := source.Type{Kind: source.KindString}
	rw := typedRow("id", source.Type{Kind: source.KindUUID}, uid, "aggregatetype", str, "order", "aggregateid", str, "42",
		"payload", source.Type{Kind: source.KindJSON}, "{}", "type", str, "created",
		"flag", source.Type{Kind: source.KindBool}, "t", "n", source.Type{Kind: source.KindInt32}, "7",
		"at", source.Type{Kind: source.KindMicroTimestamp}, "2019-03-24 20:52:59", "gone", str, nil)
	cfg := DefaultConfig()
	cfg.Encoding = EncodingJSON // an envelope placement needs it
	cfg.Headers = []Header{{Column: "flag", Name: "flag"}, {Column: "gone", Name: "gone"}}
	cfg.Fields = []Field{{Column: "type", Placement: PlacementEnvelope, Alias: "eventType"},
		{Column: "type", Placement: PlacementHeader, Alias: "eventType"}, {Column: "at", Placement: PlacementHeader},
		{Column: "n", Placement: PlacementPartition}}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := r.Route(rw, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	want := []sink.Header{{Key: "id", Value: []byte(uid)}, {Key: "flag", Value: []byte("true")}, {Key: "gone", Value: nil},
		{Key: "eventType", Value: []byte("created")}, {Key: "at", Value: []byte("1553460779000000")}}
	assertHeaders(t, "debezium", rec.Headers, want)

	cfg.HeaderValues = HeaderValuesText
	r, _ = New(cfg)
	rec, _ = r.Route(rw, time.Time{})
	want[1].Value, want[4].Value = []byte("t"), []byte("2019-03-24 20:52:59")
	assertHeaders(t, "text", rec.Headers, want)

	cfg.Headers = append(cfg.Headers, Header{Column: "absent", Name: "absent"})
	r, _ = New(cfg)
	if _, err := r.Route(rw, time.Time{}); err == nil || err.(*Error).Reason != "missing_column" || err.(*Error).Column != "absent" {
		t.Errorf("missing_field error: a missing header column gave %v, want a missing_column *Error for absent", err)
	}
	cfg.MissingField = MissingFieldIgnore
	r, _ = New(cfg)
	rec, err = r.Route(rw, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	assertHeaders(t, "missing ignored", rec.Headers, want)

	cfg = DefaultConfig()
	cfg.Headers = []Header{{Column: "flag", Name: "flag"}}
	r, _ = New(cfg)
	bad := typedRow("id", str, uid, "aggregatetype", str, "order", "aggregateid", str, "42", "payload", str, "x",
		"flag", source.Type{Kind: source.KindBool}, "maybe")
	if _, err := r.Route(bad, time.Time{}); err == nil || err.(*Error).Reason != "invalid_value" || err.(*Error).Column != "flag" {
		t.Errorf("an unreadable boolean gave %v, want an invalid_value *Error for flag", err)
	}
}

func assertHeaders(t *testing.T, what string, got, want []sink.Header) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: headers %s, want %s", what, fmtHeaders(got), fmtHeaders(want))
	}
	for i := range want {
		if got[i].Key != want[i].Key || string(got[i].Value) != string(want[i].Value) || (got[i].Value == nil) != (want[i].Value == nil) {
			t.Fatalf("%s: headers %s, want %s", what, fmtHeaders(got), fmtHeaders(want))
		}
	}
}

func fmtHeaders(hs []sink.Header) string {
	var b strings.Builder
	for _, h := range hs {
		if h.Value == nil {
			b.WriteString(h.Key + "=<null> ")
		} else {
			b.WriteString(h.Key + "=" + string(h.Value) + " ")
		}
	}
	return b.String()
}

// BenchmarkRouteHeaders: the default path with typed header columns (a bool, an int, a string,
// a MicroTimestamp): what one record's headers cost.
func BenchmarkRouteHeaders(b *testing.B) {
	str := source.Type{Kind: source.KindString}
	rw := typedRow("id", source.Type{Kind: source.KindUUID}, uid, "aggregatetype", str, "order", "aggregateid", str, "42",
		"payload", source.Type{Kind: source.KindJSON}, strings.Repeat("x", 300), "type", str, "created",
		"flag", source.Type{Kind: source.KindBool}, "t", "n", source.Type{Kind: source.KindInt32}, "7",
		"at", source.Type{Kind: source.KindMicroTimestamp}, "2019-03-24 20:52:59.123456")
	cfg := DefaultConfig()
	cfg.Headers = []Header{{Column: "type", Name: "eventType"}, {Column: "flag", Name: "flag"}, {Column: "n", Name: "n"}, {Column: "at", Name: "at"}}
	r, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := r.Route(rw, time.Time{}); err != nil {
			b.Fatal(err)
		}
	}
}
