package outbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/outboxd/outboxd/source"
)

// FuzzMessage checks parseMessage against encoding/json as the oracle: content parses iff it is
// UTF-8, one JSON object, with no member twice (keys compared decoded); then the view has the
// object's members in order, and each value is what encoding/json reads: a string's text, a
// number's literal, null as NULL, true/false, an object's or array's JSON text as written.
// Route on the message never panics, and fails only with an *Error.
func FuzzMessage(f *testing.F) {
	for _, s := range []string{
		`{"id":"e1","aggregatetype":"order","aggregateid":"42","type":"created","payload":{"a":[1,2,{"b":"]}"}]}}`,
		` { "id" : 1 , "payload" : "x\"y\\u00e9" , "n" : null , "t" : true , "f" : -1.5e-3 } `,
		`{"id":"a","id":"b"}`, `{"id":"a","\u0069d":"b"}`, `[]`, `"s"`, `{}`, ``, `{"a":`, `{"a":1}x`,
		"{\"id\":\"\xff\"}", `{"":""}`, `{"payload":[[[[]]]],"x":{"y":{}}}`, `{"big":123456789012345678901234567890}`,
		`{"a":01}`, `{"a":-}`, `{"a":1.}`, `{"a":.5}`, `{"a":1e}`, `{"a":1E+2,"b":-0.0e-0}`, `{"a":tru}`, `{"a":nul}`, `{"a":[1,]}`,
		`{"a":1,}`, `{,"a":1}`, `{"a" 1}`, `{"a":"\x"}`, `{"a":"\u12G4"}`, "{\"a\":\"\t\"}", `{"a":"\ud800"}`, `{"a":{"b":1,"b":2}}`,
		`{"a":1} x`, ` {} `, `{"a":[{"b":[{"c":"]}"}]}]}`, `{"id":"a","id":"b","c":`,
		"{\"a\":" + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + "}",
		"{\"a\":" + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + "}",
	} {
		f.Add([]byte(s))
	}
	shape := messageShape{required: []string{"id", "aggregatetype", "aggregateid", "type"}}
	router, err := New(DefaultConfig())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, content []byte) {
		in := bytes.Clone(content)
		view, perr := parseMessage(testMsgTable, content, shape)
		if !bytes.Equal(in, content) {
			t.Fatal("parseMessage modified its input")
		}
		keys, raws, ok := oracleObject(content)
		if ok != (perr == nil) {
			t.Fatalf("parseMessage(%q) error %v, but the oracle says valid=%v", content, perr, ok)
		}
		if perr != nil {
			var e *Error
			if !errors.As(perr, &e) || e.Reason != ReasonInvalidMessage {
				t.Fatalf("parseMessage(%q): %v is not an invalid_message *Error", content, perr)
			}
		} else {
			if len(view.Columns) != len(keys) {
				t.Fatalf("parseMessage(%q): columns %q, oracle %q", content, view.Columns, keys)
			}
			for i, k := range keys {
				if view.Columns[i] != k {
					t.Fatalf("parseMessage(%q): column %d is %q, oracle %q", content, i, view.Columns[i], k)
				}
				checkValue(t, content, k, view.Values[i], view.Types[i], raws[i])
			}
		}
		row := source.Row{Table: testMsgTable, Columns: []string{source.MessageColumn}, Values: []source.Value{{Bytes: content}}, Message: true}
		if _, err := router.Route(&row, time.Time{}); err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Route(%q): %v is not an *Error", content, err)
			}
		}
	})
}

// oracleObject reads content with encoding/json: its members' decoded keys and raw values in
// order, ok false unless it is valid UTF-8, one object, no key twice.
func oracleObject(content []byte) (keys []string, raws []json.RawMessage, ok bool) {
	if !utf8.Valid(content) || !json.Valid(content) {
		return nil, nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(content))
	tok, err := dec.Token()
	if d, isDelim := tok.(json.Delim); err != nil || !isDelim || d != '{' {
		return nil, nil, false
	}
	seen := map[string]bool{}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, nil, false
		}
		k := kt.(string)
		if seen[k] {
			return nil, nil, false
		}
		seen[k] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, nil, false
		}
		keys, raws = append(keys, k), append(raws, raw)
	}
	return keys, raws, true
}

func checkValue(t *testing.T, content []byte, key string, v source.Value, typ source.Type, raw json.RawMessage) {
	t.Helper()
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil || v.Null || string(v.Bytes) != s || typ.Kind != source.KindString {
			t.Fatalf("parseMessage(%q): member %q = %q (%v), oracle string %q", content, key, v.Bytes, typ.Kind, s)
		}
	case 'n':
		if !v.Null || !typ.Optional {
			t.Fatalf("parseMessage(%q): member %q = %+v, oracle null", content, key, v)
		}
	case 't', 'f':
		if v.Null || string(v.Bytes) != string(raw) || typ.Kind != source.KindBool {
			t.Fatalf("parseMessage(%q): member %q = %q (%v), oracle %s", content, key, v.Bytes, typ.Kind, raw)
		}
	case '{', '[':
		if v.Null || !bytes.Equal(v.Bytes, raw) || typ.Kind != source.KindJSON || !json.Valid(v.Bytes) {
			t.Fatalf("parseMessage(%q): member %q = %q (%v), oracle %s", content, key, v.Bytes, typ.Kind, raw)
		}
	default:
		var n json.Number
		if err := json.Unmarshal(raw, &n); err != nil || v.Null || string(v.Bytes) != string(raw) {
			t.Fatalf("parseMessage(%q): member %q = %q, oracle number %s", content, key, v.Bytes, raw)
		}
		switch typ.Kind {
		case source.KindInt64, source.KindFloat64, source.KindDecimal:
		default:
			t.Fatalf("parseMessage(%q): member %q, a number, has kind %v", content, key, typ.Kind)
		}
	}
}
