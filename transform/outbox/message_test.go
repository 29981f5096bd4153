package outbox

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
)

const testMsgTable = source.MessageTablePrefix + "outboxd.event"

// messageRow is a message row as the PostgreSQL source hands it out.
func messageRow(content string) *source.Row {
	return &source.Row{Table: testMsgTable, Columns: []string{source.MessageColumn},
		Values: []source.Value{{Bytes: []byte(content)}}, Types: []source.Type{{Kind: source.KindJSON}}, Message: true}
}

type mcol struct {
	name string
	val  any // nil: NULL, else its text
	kind source.Kind
	opt  bool
}

func TestParseMessage(t *testing.T) {
	shape := messageShape{required: []string{"id", "aggregatetype", "aggregateid", "type"}, timestamp: "ts", partition: "part"}
	cases := []struct {
		name    string
		content string
		want    []mcol
		inError string // "" when valid
	}{
		{name: "the outbox fields, payload an object kept as written",
			content: `{"id":"e1","aggregatetype":"order","aggregateid":"42","type":"created","payload":{"a": [1, 2],"b":"}"}}`,
			want: []mcol{{"id", "e1", source.KindString, false}, {"aggregatetype", "order", source.KindString, false},
				{"aggregateid", "42", source.KindString, false}, {"type", "created", source.KindString, false},
				{"payload", `{"a": [1, 2],"b":"}"}`, source.KindJSON, true}}},
		{name: "whitespace everywhere, payload a string with escapes, numbers, bools, null",
			content: " {\n \"id\" : 7 ,\t\"aggregateid\": -9223372036854775808, \"payload\" : \"caf\\u00e9 \\\"q\\\"\", \"ok\": true, \"no\":false, \"n\": null, \"f\": 1.5e3, \"big\": 123456789012345678901234 } \n",
			want: []mcol{{"id", "7", source.KindInt64, false}, {"aggregateid", "-9223372036854775808", source.KindInt64, false},
				{"payload", `café "q"`, source.KindString, true}, {"ok", "true", source.KindBool, true}, {"no", "false", source.KindBool, true},
				{"n", nil, source.KindString, true}, {"f", "1.5e3", source.KindFloat64, true}, {"big", "123456789012345678901234", source.KindDecimal, true}}},
		{name: "payload an array, a number, null; the timestamp and partition members typed",
			content: `{"id":"e","payload":[{"x":"]"},null],"ts":"2026-12-01T10:00:00.123456","part":3,"other":[]}`,
			want: []mcol{{"id", "e", source.KindString, false}, {"payload", `[{"x":"]"},null]`, source.KindJSON, true},
				{"ts", "2026-12-01T10:00:00.123456", source.KindMicroTimestamp, true}, {"part", "3", source.KindInt32, true},
				{"other", "[]", source.KindJSON, true}}},
		{name: "a required member null is NULL and optional", content: `{"id":null,"payload":12}`,
			want: []mcol{{"id", nil, source.KindString, true}, {"payload", "12", source.KindInt64, true}}},
		{name: "an empty object parses (the router then finds members missing)", content: `{}`, want: []mcol{}},
		{name: "empty content", content: ``, inError: "not JSON"},
		{name: "not JSON", content: `id=1`, inError: "not JSON"},
		{name: "truncated", content: `{"id":"e1","payload":{"a":1}`, inError: "not JSON"},
		{name: "trailing data", content: `{"id":"e1"} {}`, inError: "not JSON"},
		{name: "an array", content: `[{"id":"e1"}]`, inError: "not an object"},
		{name: "a string", content: `"{\"id\":1}"`, inError: "not an object"},
		{name: "a number", content: `42`, inError: "not an object"},
		{name: "null", content: `null`, inError: "not an object"},
		{name: "a member twice", content: `{"id":"a","id":"b"}`, inError: `member "id" appears twice`},
		{name: "a member twice, once escaped", content: `{"id":"a","\u0069d":"b"}`, inError: `member "id" appears twice`},
		{name: "not UTF-8", content: "{\"id\":\"\xff\"}", inError: "not valid UTF-8"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			view, err := parseMessage(testMsgTable, []byte(c.content), shape)
			if c.inError != "" {
				var e *Error
				if !errors.As(err, &e) || e.Reason != ReasonInvalidMessage || !strings.Contains(e.Msg, c.inError) || !strings.Contains(e.Msg, testMsgTable) {
					t.Fatalf("err = %v, want an invalid_message *Error with %q naming %s", err, c.inError, testMsgTable)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if view.Table != testMsgTable || view.Message {
				t.Errorf("view table %q message %v, want %q and a plain row", view.Table, view.Message, testMsgTable)
			}
			var got []mcol
			for i, name := range view.Columns {
				var v any
				if !view.Values[i].Null {
					v = string(view.Values[i].Bytes)
				}
				got = append(got, mcol{name, v, view.Types[i].Kind, view.Types[i].Optional})
			}
			if got == nil {
				got = []mcol{}
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("columns\n got %+v\nwant %+v", got, c.want)
			}
			if len(view.Values) != len(view.Columns) || len(view.Types) != len(view.Columns) || view.Types == nil {
				t.Errorf("values %d, types %d (nil %v) for %d columns", len(view.Values), len(view.Types), view.Types == nil, len(view.Columns))
			}
		})
	}
}

// TestRouteMessageLikeRow: a message is routed exactly like the table row with the same
// values and the types the message's JSON gives them, under every encoding and with headers,
// fields and the timestamp column.
func TestRouteMessageLikeRow(t *testing.T) {
	content := `{"id":"` + uid + `","aggregatetype":"order","aggregateid":42,"type":"created","payload":{"total": 12.5, "items": ["a"]},` +
		`"tenant":"acme","prio":3,"urgent":true,"ts":"2026-12-01 10:00:00.5","part":1}`
	tableRow := &source.Row{Table: testMsgTable,
		Columns: []string{"id", "aggregatetype", "aggregateid", "type", "payload", "tenant", "prio", "urgent", "ts", "part"},
		Values: []source.Value{testValue(uid), testValue("order"), testValue("42"), testValue("created"), testValue(`{"total": 12.5, "items": ["a"]}`),
			testValue("acme"), testValue("3"), testValue("true"), testValue("2026-12-01 10:00:00.5"), testValue("1")},
		Types: []source.Type{{Kind: source.KindString}, {Kind: source.KindString}, {Kind: source.KindInt64}, {Kind: source.KindString},
			{Kind: source.KindJSON, Optional: true}, {Kind: source.KindString, Optional: true}, {Kind: source.KindInt64, Optional: true},
			{Kind: source.KindBool, Optional: true}, {Kind: source.KindMicroTimestamp, Optional: true}, {Kind: source.KindInt32, Optional: true}}}
	base := DefaultConfig()
	base.Headers = []Header{{Column: "tenant", Name: "tenant"}, {Column: "prio", Name: "prio"}, {Column: "urgent", Name: "urgent"}}
	base.Timestamp = "column:ts"
	configs := map[string]func(*Config){
		"raw":         func(c *Config) {},
		"json":        func(c *Config) { c.Encoding = EncodingJSON },
		"json_schema": func(c *Config) { c.Encoding = EncodingJSONSchema },
		"expand": func(c *Config) {
			c.Encoding, c.ExpandJSONPayload = EncodingJSONSchema, true
			c.Fields = []Field{{Column: "type", Placement: PlacementEnvelope, Alias: "eventType"}, {Column: "part", Placement: PlacementPartition}}
		},
		"header text values": func(c *Config) { c.HeaderValues = HeaderValuesText },
	}
	commit := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	for name, mod := range configs {
		t.Run(name, func(t *testing.T) {
			cfg := base
			mod(&cfg)
			r, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			want, err := r.Route(tableRow, commit)
			if err != nil {
				t.Fatal(err)
			}
			got, err := r.Route(messageRow(content), commit)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("message routed as\n%+v\nthe row as\n%+v", got, want)
			}
			if got.Timestamp != time.Date(2026, 12, 1, 10, 0, 0, 500e6, time.UTC) {
				t.Errorf("timestamp %v, want the ts member", got.Timestamp)
			}
		})
	}
	// Spot-check the rendering so that a shared bug in both routes cannot pass.
	r, _ := New(base)
	rec, _ := r.Route(messageRow(content), commit)
	wantHeaders := []sink.Header{{Key: "id", Value: []byte(uid)}, {Key: "tenant", Value: []byte("acme")}, {Key: "prio", Value: []byte("3")}, {Key: "urgent", Value: []byte("true")}}
	if rec.Topic != "outbox.event.order" || string(rec.Key) != "42" || string(rec.Value) != `{"total": 12.5, "items": ["a"]}` || !reflect.DeepEqual(rec.Headers, wantHeaders) {
		t.Errorf("raw record %+v", rec)
	}
	j := base
	j.Encoding = EncodingJSON
	r, _ = New(j)
	rec, _ = r.Route(messageRow(content), commit)
	if string(rec.Key) != "42" || string(rec.Value) != `"{\"total\": 12.5, \"items\": [\"a\"]}"` {
		t.Errorf("json record key %s value %s", rec.Key, rec.Value)
	}
}

func TestRouteMessagePayloadForms(t *testing.T) {
	r, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for content, want := range map[string]any{
		`{"id":"e","aggregatetype":"a","aggregateid":"k","payload":"plain text, not JSON"}`: "plain text, not JSON",
		`{"id":"e","aggregatetype":"a","aggregateid":"k","payload":"{\"a\":1}"}`:            `{"a":1}`,
		`{"id":"e","aggregatetype":"a","aggregateid":"k","payload":[1,2]}`:                  `[1,2]`,
		`{"id":"e","aggregatetype":"a","aggregateid":"k","payload":17}`:                     `17`,
		`{"id":"e","aggregatetype":"a","aggregateid":"k","payload":""}`:                     "",
		`{"id":"e","aggregatetype":"a","aggregateid":"k","payload":null}`:                   nil,
	} {
		rec, err := r.Route(messageRow(content), time.Time{})
		if err != nil {
			t.Errorf("%s: %v", content, err)
			continue
		}
		if want == nil {
			if rec.Value != nil {
				t.Errorf("%s: value %q, want null", content, rec.Value)
			}
		} else if rec.Value == nil || string(rec.Value) != want.(string) {
			t.Errorf("%s: value %q, want %q", content, rec.Value, want)
		}
	}
}

func TestRouteMessageErrors(t *testing.T) {
	r, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		content, reason, inMsg, id string
	}{
		{`not json`, ReasonInvalidMessage, "not JSON", ""},
		{`["x"]`, ReasonInvalidMessage, "not an object", ""},
		{`{"aggregatetype":"a","aggregateid":"k","payload":{}}`, ReasonInvalidMessage, `has no member "id"`, ""},
		{`{"id":null,"aggregatetype":"a","aggregateid":"k","payload":{}}`, ReasonInvalidMessage, `has null in member "id"`, ""},
		{`{"id":"e1","aggregatetype":"a","payload":{}}`, ReasonInvalidMessage, `has no member "aggregateid"`, "e1"},
		{`{"id":"e1","aggregateid":"k","payload":{}}`, ReasonInvalidMessage, `has no member "aggregatetype"`, "e1"},
		{`{"id":"e1","aggregatetype":"a","aggregateid":"k"}`, ReasonInvalidMessage, `has no member "payload"`, "e1"},
		{`{"id":"e1","aggregatetype":"bad topic!","aggregateid":"k","payload":{}}`, "invalid_topic", "", "e1"},
	}
	for _, c := range cases {
		rec, err := r.Route(messageRow(c.content), time.Time{})
		var e *Error
		if !errors.As(err, &e) || e.Reason != c.reason || !strings.Contains(e.Msg, c.inMsg) {
			t.Errorf("%s: err %v, want reason %s with %q", c.content, err, c.reason, c.inMsg)
			continue
		}
		var id string
		for _, h := range rec.Headers {
			if h.Key == "id" {
				id = string(h.Value)
			}
		}
		if id != c.id {
			t.Errorf("%s: id header %q, want %q (a dead letter is found by its event id when it has one)", c.content, id, c.id)
		}
	}
	// Error messages go to logs and dead-letter headers, which never carry payload data.
	for _, secret := range []string{`{"id":"e1","payload":{"card":"TOPSECRET"}`, `["TOPSECRET"]`, `"TOPSECRET"`, `TOPSECRET`,
		`{"id":"e1","aggregatetype":"a","payload":"TOPSECRET"}`} {
		_, err := r.Route(messageRow(secret), time.Time{})
		if err == nil || strings.Contains(err.Error(), "TOPSECRET") {
			t.Errorf("%s: error %v quotes the content", secret, err)
		}
	}
	noContent := &source.Row{Table: testMsgTable, Message: true}
	if _, err := r.Route(noContent, time.Time{}); err == nil || !strings.Contains(err.Error(), "no content") {
		t.Errorf("a message row without content: %v", err)
	}
}

// TestMessageFixtures routes the byte fixtures in testdata/messages: each NAME.json is a
// message's content; NAME.want holds the raw record's "topic key value" on one line, or
// "error REASON".
func TestMessageFixtures(t *testing.T) {
	r, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("testdata/messages/*.json")
	if len(files) == 0 {
		t.Fatal("no fixtures in testdata/messages")
	}
	for _, f := range files {
		content, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		wantB, err := os.ReadFile(strings.TrimSuffix(f, ".json") + ".want")
		if err != nil {
			t.Fatal(err)
		}
		want := strings.TrimRight(string(wantB), "\n")
		rec, err := r.Route(messageRow(string(content)), time.Time{})
		var got string
		if err != nil {
			var e *Error
			errors.As(err, &e)
			got = "error " + e.Reason
		} else {
			got = rec.Topic + " " + string(rec.Key) + " " + string(rec.Value)
		}
		if got != want {
			t.Errorf("%s: got %q, want %q", f, got, want)
		}
	}
}
