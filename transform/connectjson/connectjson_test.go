package connectjson

import (
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
)

func TestAppendStringEscapes(t *testing.T) {
	short := map[byte]string{'\b': `\b`, '\t': `\t`, '\n': `\n`, '\f': `\f`, '\r': `\r`}
	for c := 0; c < 0x20; c++ {
		want := short[byte(c)]
		if want == "" {
			want = `\u00` + string("0123456789ABCDEF"[c>>4]) + string("0123456789ABCDEF"[c&15])
		}
		if got := string(AppendString(nil, []byte{byte(c)})); got != `"`+want+`"` {
			t.Errorf("control %#x: %s, want %q", c, got, want)
		}
	}
	for _, c := range []struct{ in, want string }{
		{`"`, `"\""`},
		{`\`, `"\\"`},
		{"/", `"/"`},                                         // Jackson does not escape '/'
		{"\x7f", "\"\x7f\""},                                 // DEL as is
		{"\u2028\u2029", "\"\u2028\u2029\""},                 // line/paragraph separators as is
		{"é日", "\"é日\""},                                     // BMP as UTF-8
		{"😀", `"\uD83D\uDE00"`},                              // astral: escaped surrogate pair, upper-case hex
		{"\U0010FFFF", `"\uDBFF\uDFFF"`},                     // last code point
		{"a\xffb", "\"a\uFFFDb\""},                           // invalid byte → U+FFFD
		{"\xed\xa0\x80", "\"\uFFFD\""},                       // encoded surrogate: one U+FFFD (Java), not three
		{"\xe2\x82x", "\"\uFFFDx\""},                         // truncated sequence: one U+FFFD
		{"\xf0\x80\x80\x80", "\"\uFFFD\uFFFD\uFFFD\uFFFD\""}, // overlong 4-byte: one per byte
		// debezium-outbox.md / golden setup C "escapes" row, as Debezium wrote it.
		{"quote \" backslash \\ slash / nl \n tab \t cr \r bs \b ff \f ctl \x01 \x1f",
			`"quote \" backslash \\ slash / nl \n tab \t cr \r bs \b ff \f ctl \u0001 \u001F"`},
	} {
		if got := string(AppendString([]byte("x"), []byte(c.in))); got != "x"+c.want {
			t.Errorf("AppendString(%q) = %s, want %s", c.in, got[1:], c.want)
		}
	}
}

func TestAppendDoubleJava(t *testing.T) {
	for _, c := range []struct {
		f    float64
		want string
	}{
		{0.1, "0.1"}, {39.98, "39.98"}, {100, "100.0"}, {1, "1.0"}, {-1.5, "-1.5"},
		{1e7, "1.0E7"}, {9999999, "9999999.0"}, {9999999.999999998, "9999999.999999998"},
		{1e-3, "0.001"}, {1e-4, "1.0E-4"}, {0.0009999999999999998, "9.999999999999998E-4"},
		{1e-5, "1.0E-5"}, {1e10, "1.0E10"}, {1.5e300, "1.5E300"}, {1e23, "1.0E23"},
		{0, "0.0"}, {math.Copysign(0, -1), "-0.0"},
		{math.MaxFloat64, "1.7976931348623157E308"}, {math.SmallestNonzeroFloat64, "4.9E-324"},
		{2.2250738585072014e-308, "2.2250738585072014E-308"},
		{123456789012345678901234567890.123456789, "1.2345678901234568E29"}, // Jackson parses it as this double
		{math.NaN(), "NaN"}, {math.Inf(1), "Infinity"}, {math.Inf(-1), "-Infinity"},
	} {
		if got := string(AppendDouble(nil, c.f)); got != c.want {
			t.Errorf("AppendDouble(%v) = %s, want %s", c.f, got, c.want)
		}
	}
	if got := string(AppendJSONDouble(nil, math.NaN())); got != `"NaN"` {
		t.Errorf("AppendJSONDouble(NaN) = %s, want the string \"NaN\"", got)
	}
	for _, c := range []struct {
		f    float32
		want string
	}{
		{12.34, "12.34"}, {0.1, "0.1"}, {1e10, "1.0E10"}, {1e7, "1.0E7"}, {9999999, "9999999.0"},
		{math.SmallestNonzeroFloat32, "1.4E-45"}, {math.MaxFloat32, "3.4028235E38"}, {16777216, "1.6777216E7"},
	} {
		if got := string(AppendFloat(nil, c.f)); got != c.want {
			t.Errorf("AppendFloat(%v) = %s, want %s", c.f, got, c.want)
		}
	}
}

func mustValue(t *testing.T, v Value, s *Schema) string {
	t.Helper()
	b, err := AppendEnvelope(nil, v, s)
	if err != nil {
		t.Fatalf("AppendEnvelope: %v", err)
	}
	return string(b)
}

// TestJsonConverterTestCases: Kafka's JsonConverterTest (connect/json), whose assertions compare
// parsed trees; the bytes here are in asJsonSchema's key order, as real JsonConverter writes them.
func TestJsonConverterTestCases(t *testing.T) {
	str := &Schema{Type: TypeString}
	i32 := &Schema{Type: TypeInt32}
	boolean := &Schema{Type: TypeBoolean}
	for _, c := range []struct {
		test string
		v    Value
		s    *Schema
		want string
	}{
		{"booleanToJson", Bool(true), boolean, `{"schema":{"type":"boolean","optional":false},"payload":true}`},
		{"testJsonSchemaMetadataTranslation (optional null)", Null(), &Schema{Type: TypeBoolean, Optional: true},
			`{"schema":{"type":"boolean","optional":true},"payload":null}`},
		{"testJsonSchemaMetadataTranslation (default)", Bool(true), &Schema{Type: TypeBoolean, Default: ptr(Bool(true))},
			`{"schema":{"type":"boolean","optional":false,"default":true},"payload":true}`},
		{"testJsonSchemaMetadataTranslation (metadata)", Bool(true), &Schema{Type: TypeBoolean, Name: "bool", Version: 3, VersionSet: true,
			Doc: "the documentation", Parameters: []Param{{"foo", "bar"}}},
			`{"schema":{"type":"boolean","optional":false,"name":"bool","version":3,"doc":"the documentation","parameters":{"foo":"bar"}},"payload":true}`},
		{"byteToJson", Int(12), &Schema{Type: TypeInt8}, `{"schema":{"type":"int8","optional":false},"payload":12}`},
		{"shortToJson", Int(12), &Schema{Type: TypeInt16}, `{"schema":{"type":"int16","optional":false},"payload":12}`},
		{"intToJson", Int(12), i32, `{"schema":{"type":"int32","optional":false},"payload":12}`},
		{"longToJson", Int(4398046511104), &Schema{Type: TypeInt64}, `{"schema":{"type":"int64","optional":false},"payload":4398046511104}`},
		{"floatToJson", Float32(12.34), &Schema{Type: TypeFloat32}, `{"schema":{"type":"float","optional":false},"payload":12.34}`},
		{"doubleToJson", Float64(12.34), &Schema{Type: TypeFloat64}, `{"schema":{"type":"double","optional":false},"payload":12.34}`},
		{"bytesToJson", Bytes([]byte("test-string")), &Schema{Type: TypeBytes}, `{"schema":{"type":"bytes","optional":false},"payload":"dGVzdC1zdHJpbmc="}`},
		{"stringToJson", String("test-string"), str, `{"schema":{"type":"string","optional":false},"payload":"test-string"}`},
		{"arrayToJson", Array([]Value{Int(1), Int(2), Int(3)}), &Schema{Type: TypeArray, Items: i32},
			`{"schema":{"type":"array","items":{"type":"int32","optional":false},"optional":false},"payload":[1,2,3]}`},
		{"mapToJsonStringKeys", Map([]Value{String("key1"), String("key2")}, []Value{Int(12), Int(15)}), &Schema{Type: TypeMap, Keys: str, Items: i32},
			`{"schema":{"type":"map","keys":{"type":"string","optional":false},"values":{"type":"int32","optional":false},"optional":false},"payload":{"key1":12,"key2":15}}`},
		{"mapToJsonNonStringKeys", Map([]Value{Int(1), Int(2)}, []Value{Int(12), Int(15)}), &Schema{Type: TypeMap, Keys: i32, Items: i32},
			`{"schema":{"type":"map","keys":{"type":"int32","optional":false},"values":{"type":"int32","optional":false},"optional":false},"payload":[[1,12],[2,15]]}`},
		{"structToJson", Struct([]Value{Bool(true), String("string2"), String("string3"), Bool(false)}),
			&Schema{Type: TypeStruct, Fields: []Field{{"field1", boolean}, {"field2", str}, {"field3", str}, {"field4", boolean}}},
			`{"schema":{"type":"struct","fields":[{"type":"boolean","optional":false,"field":"field1"},{"type":"string","optional":false,"field":"field2"},{"type":"string","optional":false,"field":"field3"},{"type":"boolean","optional":false,"field":"field4"}],"optional":false},"payload":{"field1":true,"field2":"string2","field3":"string3","field4":false}}`},
		{"decimalToJson", Bytes([]byte{0, 0x9C}), &Schema{Type: TypeBytes, Name: DecimalName, Version: 1, VersionSet: true, Parameters: []Param{{"scale", "2"}}},
			`{"schema":{"type":"bytes","optional":false,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{"scale":"2"}},"payload":"AJw="}`},
		{"dateToJson", Int(10000), &Schema{Type: TypeInt32, Name: DateName, Version: 1, VersionSet: true},
			`{"schema":{"type":"int32","optional":false,"name":"org.apache.kafka.connect.data.Date","version":1},"payload":10000}`},
		{"timeToJson", Int(14400000), &Schema{Type: TypeInt32, Name: TimeName, Version: 1, VersionSet: true},
			`{"schema":{"type":"int32","optional":false,"name":"org.apache.kafka.connect.data.Time","version":1},"payload":14400000}`},
		{"timestampToJson", Int(4000000000), &Schema{Type: TypeInt64, Name: TimestampName, Version: 1, VersionSet: true},
			`{"schema":{"type":"int64","optional":false,"name":"org.apache.kafka.connect.data.Timestamp","version":1},"payload":4000000000}`},
		{"serializeNullToDefault", Null(), &Schema{Type: TypeString, Optional: true, Default: ptr(String("default"))},
			`{"schema":{"type":"string","optional":true,"default":"default"},"payload":"default"}`},
		{"serializeFieldNullToDefault", Struct([]Value{Null()}), &Schema{Type: TypeStruct, Fields: []Field{{"field1", &Schema{Type: TypeString, Optional: true, Default: ptr(String("default"))}}}},
			`{"schema":{"type":"struct","fields":[{"type":"string","optional":true,"default":"default","field":"field1"}],"optional":false},"payload":{"field1":"default"}}`},
		{"testStringHeaderToJson", String("test-string"), str, `{"schema":{"type":"string","optional":false},"payload":"test-string"}`},
		{"nullSchemaAndPrimitiveToJson", Bool(true), nil, `{"schema":null,"payload":true}`},
		// Setup D of the compare helper (real Debezium 3.6.1): the envelope value schema.
		{"golden D object", Struct([]Value{String(`{"id": 1}`), String("OrderCreated")}),
			&Schema{Type: TypeStruct, Name: "dbserver1.public.outbox.Order.Value", Fields: []Field{
				{"payload", &Schema{Type: TypeString, Optional: true, Name: "io.debezium.data.Json", Version: 1, VersionSet: true}},
				{"eventType", &Schema{Type: TypeString, Optional: true}}}},
			`{"schema":{"type":"struct","fields":[{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"field":"payload"},{"type":"string","optional":true,"field":"eventType"}],"optional":false,"name":"dbserver1.public.outbox.Order.Value"},"payload":{"payload":"{\"id\": 1}","eventType":"OrderCreated"}}`},
	} {
		if got := mustValue(t, c.v, c.s); got != c.want {
			t.Errorf("%s:\n got  %s\n want %s", c.test, got, c.want)
		}
	}
	// nullValueToJson / "Conversion error: null value for field that is required".
	if _, err := AppendValue(nil, Null(), str); !errors.Is(err, ErrConversion) {
		t.Errorf("null for a required schema: err %v, want ErrConversion", err)
	}
	// mismatchSchemaJson: a value of the wrong type.
	if _, err := AppendValue(nil, Int(1), str); !errors.Is(err, ErrConversion) {
		t.Errorf("int for a string schema: err %v, want ErrConversion", err)
	}
}

func ptr(v Value) *Value { return &v }

// TestEventRouterExpandCases: Debezium's EventRouterTest expand tests (see eventRouterTestCases).
func TestEventRouterExpandCases(t *testing.T) {
	for _, c := range eventRouterTestCases {
		v, s, err := Expand([]byte(c.payload), ExpandOptions{Name: "payload"})
		if err != nil {
			t.Errorf("%s: Expand: %v", c.test, err)
			continue
		}
		off, err := AppendValue(nil, v, s)
		if err != nil || string(off) != c.off {
			t.Errorf("%s: AppendValue = %s, %v\n want %s", c.test, off, err, c.off)
		}
		if on := mustValue(t, v, s); on != c.on {
			t.Errorf("%s: AppendEnvelope =\n %s\n want %s", c.test, on, c.on)
		}
	}
}

func TestExpandOutcomes(t *testing.T) {
	for _, c := range []struct {
		payload string
		o       ExpandOptions
		err     error  // nil: expanded to want
		want    string // AppendValue of the expansion
	}{
		{`{"k": 1, "k": 2}`, ExpandOptions{}, nil, `{"k":2}`},                      // golden C object-duplicate-keys
		{`{"a":1,"b":2,"a":{"x":1}}`, ExpandOptions{}, nil, `{"a":{"x":1},"b":2}`}, // first position, last value
		{`{"a":1} trailing garbage`, ExpandOptions{}, nil, `{"a":1}`},              // readTree stops after the value
		{`{"a":null,"b":[]}`, ExpandOptions{}, nil, `{}`},
		{`{"a":null,"b":[]}`, ExpandOptions{NullBehavior: NullOptionalBytes}, nil, `{"a":null}`},
		// table.json.payload.empty.array.behavior=optional_string: Debezium main (dbz#921), not 3.6.1.
		{`{"a":null,"b":[]}`, ExpandOptions{EmptyArrayBehavior: EmptyArrayOptionalString}, nil, `{"b":[]}`},
		{`{"a":-0,"b":-0.0,"c":1E2,"d":1e400,"e":2147483648}`, ExpandOptions{}, nil, `{"a":0,"b":-0.0,"c":100.0,"d":"Infinity","e":2147483648}`},
		{`{"s":"\ud800x\udc00\ud83d\ude00"}`, ExpandOptions{}, nil, `{"s":"\uD800x\uDC00\uD83D\uDE00"}`}, // lone surrogates kept
		{` {"a":1}`, ExpandOptions{}, ErrNotExpanded, ""},                                                // no trimming
		{`"hello"`, ExpandOptions{}, ErrNotExpanded, ""},                                                 // golden C string
		{`{"a":1,}`, ExpandOptions{}, ErrNotExpanded, ""},                                                // Jackson: no trailing commas
		{`{"a":01}`, ExpandOptions{}, ErrNotExpanded, ""},                                                // no leading zeros
		{`{"a":[1, 2.5]}`, ExpandOptions{}, ErrNotExpanded, ""},                                          // mixed number kinds
		{`{"a":[null]}`, ExpandOptions{}, ErrNotExpanded, ""},                                            // unrecognized member schema
		{`{"":1}`, ExpandOptions{}, ErrNotExpanded, ""},                                                  // SchemaBuilder refuses an empty field name
		{`[1, "two", null, true, {"a": 1, "b": 2}, [[]]]`, ExpandOptions{}, ErrNotExpanded, ""},          // golden C array
		{`[]`, ExpandOptions{}, ErrSchemaless, ""},                                                       // golden C empty-array: "\"[]\"", schema null
		{`[1,2]`, ExpandOptions{}, ErrRecordFails, ""},                                                   // not a struct schema
		{`{"big":12345678901234567890}`, ExpandOptions{}, ErrRecordFails, ""},                            // BigDecimal in a float64 field
		{`{"a":[{"x":1},{"x":"s"}]}`, ExpandOptions{}, ErrRecordFails, ""},
		{`{"a":[null,{"x":1},{"y":2}]}`, ExpandOptions{}, ErrRecordFails, ""}, // merged struct is required
	} {
		v, s, err := Expand([]byte(c.payload), c.o)
		if c.err != nil {
			if !errors.Is(err, c.err) {
				t.Errorf("Expand(%s): err %v, want %v", c.payload, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("Expand(%s): %v", c.payload, err)
			continue
		}
		got, err := AppendValue(nil, v, s)
		if err != nil || string(got) != c.want {
			t.Errorf("Expand(%s) → %s, %v; want %s", c.payload, got, err, c.want)
		}
	}
}

// TestWriteDepthLimit: Jackson refuses to write a 1001st nested container; real JsonConverter
// wrote a 1000-deep expanded payload schemas off but failed schemas on (expand.golden).
func TestWriteDepthLimit(t *testing.T) {
	deep := func(n int) Value {
		v := Int(1)
		for i := 0; i < n; i++ {
			v = Array([]Value{v})
		}
		return v
	}
	if _, err := AppendValue(nil, deep(1000), nil); err != nil {
		t.Errorf("1000 nested arrays: %v", err)
	}
	if _, err := AppendValue(nil, deep(1001), nil); !errors.Is(err, ErrConversion) {
		t.Errorf("1001 nested arrays: err %v, want ErrConversion", err)
	}
	if _, err := AppendEnvelope(nil, deep(1000), nil); !errors.Is(err, ErrConversion) {
		t.Errorf("1000 nested arrays in an envelope: err %v, want ErrConversion", err)
	}
}

func TestDecimalUnscaled(t *testing.T) {
	for _, c := range []struct {
		text  string
		scale int
		want  []byte
	}{
		{"1.56", 2, []byte{0x00, 0x9C}}, // decimalToJson
		{"-1.56", 2, []byte{0xFF, 0x64}},
		{"0", 0, []byte{0}},
		{"-128", 0, []byte{0x80}},
		{"-129", 0, []byte{0xFF, 0x7F}},
		{"12.5", 2, []byte{0x04, 0xE2}}, // padded to the column's scale (1250)
	} {
		got, err := DecimalUnscaled([]byte(c.text), c.scale)
		if err != nil || string(got) != string(c.want) {
			t.Errorf("DecimalUnscaled(%s, %d) = %x, %v; want %x", c.text, c.scale, got, err, c.want)
		}
	}
	if _, err := DecimalUnscaled([]byte("1.567"), 2); !errors.Is(err, ErrDecimalScale) {
		t.Errorf("too many fraction digits: err %v", err)
	}
	if _, err := DecimalUnscaled([]byte("abc"), 2); err == nil {
		t.Error("not a number: no error")
	}
}

// FuzzConnectJSON (.ci/fuzz runs it with the others): AppendString output parses back with encoding/json to the
// string Java would hold; AppendDouble/AppendFloat parse back to the same number; Expand never
// panics and what it expands AppendValue writes as valid JSON.
func FuzzConnectJSON(f *testing.F) {
	for _, c := range eventRouterTestCases {
		f.Add([]byte(c.payload), uint64(0))
	}
	f.Add([]byte("a\xff\xed\xa0\x80😀\u2028\x00"), math.Float64bits(0.1))
	f.Add([]byte(`{"a":[{"x":1},{"y":[null,{"z":"\ud800"}]}],"b":1e400}`), math.Float64bits(1e-5))
	f.Fuzz(func(t *testing.T, b []byte, bits uint64) {
		lit := AppendString(nil, b)
		var back string
		if err := json.Unmarshal(lit, &back); err != nil {
			t.Fatalf("AppendString(%q) = %s: not JSON: %v", b, lit, err)
		}
		if want := string(JavaString(b)); back != want {
			t.Fatalf("AppendString(%q) = %s parses to %q, want %q", b, lit, back, want)
		}
		d := math.Float64frombits(bits)
		if !math.IsNaN(d) && !math.IsInf(d, 0) {
			txt := strings.Replace(string(AppendDouble(nil, d)), "E", "e", 1)
			var got float64
			if err := json.Unmarshal([]byte(txt), &got); err != nil || got != d {
				t.Fatalf("AppendDouble(%v) = %s parses to %v, %v", d, txt, got, err)
			}
			f32 := math.Float32frombits(uint32(bits))
			if !math.IsNaN(float64(f32)) && !math.IsInf(float64(f32), 0) {
				txt := strings.Replace(string(AppendFloat(nil, f32)), "E", "e", 1)
				var got float32
				if err := json.Unmarshal([]byte(txt), &got); err != nil || got != f32 {
					t.Fatalf("AppendFloat(%v) = %s parses to %v, %v", f32, txt, got, err)
				}
			}
		}
		for _, o := range []ExpandOptions{{Name: "payload"}, {Name: "p", NullBehavior: NullOptionalBytes, EmptyArrayBehavior: EmptyArrayOptionalString}} {
			v, s, err := Expand(b, o)
			if err != nil {
				if !errors.Is(err, ErrNotExpanded) && !errors.Is(err, ErrSchemaless) && !errors.Is(err, ErrRecordFails) {
					t.Fatalf("Expand(%q): unclassified error %v", b, err)
				}
				continue
			}
			for _, env := range []bool{false, true} {
				var out []byte
				if env {
					out, err = AppendEnvelope(nil, v, s)
				} else {
					out, err = AppendValue(nil, v, s)
				}
				if err != nil {
					if !errors.Is(err, ErrConversion) {
						t.Fatalf("Expand(%q) then write: %v", b, err)
					}
					continue
				}
				if !json.Valid(out) {
					t.Fatalf("Expand(%q) wrote invalid JSON %s", b, out)
				}
			}
		}
	})
}

// TestExpandNameCap: struct names are dotted key paths, so a deep payload with long keys makes
// quadratically long names; past 64 MiB in total the record fails instead of exhausting memory.
func TestExpandNameCap(t *testing.T) {
	key := `"` + strings.Repeat("k", 2000) + `":`
	p := []byte(strings.Repeat("{"+key, 900) + "1" + strings.Repeat("}", 900))
	if _, _, err := Expand(p, ExpandOptions{Name: "payload"}); !errors.Is(err, ErrRecordFails) {
		t.Errorf("900 levels of 2000-byte keys: err %v, want ErrRecordFails", err)
	}
	p = []byte(strings.Repeat("{"+key, 100) + "1" + strings.Repeat("}", 100)) // names total ~10 MB
	if _, _, err := Expand(p, ExpandOptions{Name: "payload"}); err != nil {
		t.Errorf("100 levels of 2000-byte keys: %v", err)
	}
}

// TestExpandSlotCap: 20000 objects with distinct keys would give every element all 20000 merged
// fields (400 million values); the record fails instead.
func TestExpandSlotCap(t *testing.T) {
	var sb strings.Builder
	sb.WriteString(`{"a":[`)
	for i := 0; i < 20000; i++ {
		if i > 0 {
			sb.WriteString(",")
		}
		sb.WriteString(`{"k` + strconv.Itoa(i) + `":1}`)
	}
	sb.WriteString(`]}`)
	if _, _, err := Expand([]byte(sb.String()), ExpandOptions{Name: "payload"}); !errors.Is(err, ErrRecordFails) {
		t.Errorf("err %v, want ErrRecordFails", err)
	}
	// 51 elements × 3 merged fields is well inside the cap.
	small := `{"a":[` + strings.Repeat(`{"x":1},{"y":2},`, 25) + `{"z":3}]}`
	if _, _, err := Expand([]byte(small), ExpandOptions{Name: "payload"}); err != nil {
		t.Errorf("small heterogeneous array: %v", err)
	}
}
