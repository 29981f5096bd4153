package outbox

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
)

func row(kv ...any) *source.Row {
	r := &source.Row{Table: "public.outbox"}
	for i := 0; i < len(kv); i += 2 {
		r.Columns = append(r.Columns, kv[i].(string))
		r.Values = append(r.Values, testValue(kv[i+1]))
	}
	return r
}

// testValue is a column value of a hand-built row: nil is SQL NULL, a string or []byte its bytes.
func testValue(v any) source.Value {
	switch v := v.(type) {
	case string:
		return source.Value{Bytes: []byte(v)}
	case []byte:
		return source.Value{Bytes: v}
	}
	return source.Value{Null: true}
}

const uid = "6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b"

func TestRoute(t *testing.T) {
	def := DefaultConfig()
	withHeaders := DefaultConfig()
	withHeaders.Headers = []Header{{Column: "type", Name: "eventType"}, {Column: "tenant", Name: "tenant"}}
	fixed := DefaultConfig()
	fixed.Topic = "events"
	raw16 := []byte{0x6f, 0x1c, 0x2a, 0x3b, 0x4d, 0x5e, 0x4f, 0x60, 0x8a, 0x7b, 0x9c, 0x0d, 0x1e, 0x2f, 0x3a, 0x4b}

	cases := []struct {
		name    string
		cfg     Config
		row     *source.Row
		want    sink.Record
		reason  string // expected *Error reason
		inError string
	}{
		{name: "debezium defaults", cfg: def,
			row:  row("id", uid, "aggregatetype", "order", "aggregateid", "42", "type", "created", "payload", `{"a": 1}`),
			want: sink.Record{Topic: "outbox.event.order", Key: []byte("42"), Value: []byte(`{"a": 1}`), Headers: []sink.Header{{Key: "id", Value: []byte(uid)}}}},
		{name: "extra headers, a NULL column is a header with a null value (as Debezium)", cfg: withHeaders,
			row:  row("id", uid, "aggregatetype", "order", "aggregateid", "42", "type", "created", "payload", "x", "tenant", nil),
			want: sink.Record{Topic: "outbox.event.order", Key: []byte("42"), Value: []byte("x"), Headers: []sink.Header{{Key: "id", Value: []byte(uid)}, {Key: "eventType", Value: []byte("created")}, {Key: "tenant", Value: nil}}}},
		{name: "extra headers, an empty column is a header with an empty value", cfg: withHeaders,
			row:  row("id", uid, "aggregatetype", "order", "aggregateid", "42", "type", nil, "payload", "x", "tenant", []byte(nil)),
			want: sink.Record{Topic: "outbox.event.order", Key: []byte("42"), Value: []byte("x"), Headers: []sink.Header{{Key: "id", Value: []byte(uid)}, {Key: "eventType", Value: nil}, {Key: "tenant", Value: []byte{}}}}},
		{name: "NULL payload gives a null value", cfg: def,
			row:  row("id", uid, "aggregatetype", "order", "aggregateid", "42", "payload", nil),
			want: sink.Record{Topic: "outbox.event.order", Key: []byte("42"), Value: nil, Headers: []sink.Header{{Key: "id", Value: []byte(uid)}}}},
		{name: "empty payload stays empty, not null", cfg: def,
			row:  row("id", uid, "aggregatetype", "order", "aggregateid", "42", "payload", ""),
			want: sink.Record{Topic: "outbox.event.order", Key: []byte("42"), Value: []byte{}, Headers: []sink.Header{{Key: "id", Value: []byte(uid)}}}},
		{name: "binary payload as is", cfg: def,
			row:  row("id", uid, "aggregatetype", "order", "aggregateid", "42", "payload", []byte{0, 1, 0xff}),
			want: sink.Record{Topic: "outbox.event.order", Key: []byte("42"), Value: []byte{0, 1, 0xff}, Headers: []sink.Header{{Key: "id", Value: []byte(uid)}}}},
		{name: "16-byte binary id rendered canonical", cfg: def,
			row:  row("id", raw16, "aggregatetype", "order", "aggregateid", "42", "payload", "p"),
			want: sink.Record{Topic: "outbox.event.order", Key: []byte("42"), Value: []byte("p"), Headers: []sink.Header{{Key: "id", Value: []byte(uid)}}}},
		{name: "upper-case uuid lowered", cfg: def,
			row:  row("id", strings.ToUpper(uid), "aggregatetype", "order", "aggregateid", "42", "payload", "p"),
			want: sink.Record{Topic: "outbox.event.order", Key: []byte("42"), Value: []byte("p"), Headers: []sink.Header{{Key: "id", Value: []byte(uid)}}}},
		{name: "non-uuid id passed through", cfg: def,
			row:  row("id", "evt-7", "aggregatetype", "order", "aggregateid", "42", "payload", "p"),
			want: sink.Record{Topic: "outbox.event.order", Key: []byte("42"), Value: []byte("p"), Headers: []sink.Header{{Key: "id", Value: []byte("evt-7")}}}},
		{name: "fixed topic", cfg: fixed,
			row:  row("id", uid, "aggregatetype", "bad name!", "aggregateid", "42", "payload", "p"),
			want: sink.Record{Topic: "events", Key: []byte("42"), Value: []byte("p"), Headers: []sink.Header{{Key: "id", Value: []byte(uid)}}}},
		{name: "NULL aggregatetype", cfg: def, row: row("id", uid, "aggregatetype", nil, "aggregateid", "42", "payload", "p"),
			reason: "missing_column", inError: "aggregatetype"},
		{name: "NULL aggregateid", cfg: def, row: row("id", uid, "aggregatetype", "order", "aggregateid", nil, "payload", "p"),
			reason: "missing_column", inError: "aggregateid"},
		{name: "NULL id", cfg: def, row: row("id", nil, "aggregatetype", "order", "aggregateid", "1", "payload", "p"),
			reason: "missing_column", inError: `"id"`},
		{name: "missing payload column", cfg: def, row: row("id", uid, "aggregatetype", "order", "aggregateid", "1"),
			reason: "missing_column", inError: "payload"},
		{name: "space in aggregatetype", cfg: def, row: row("id", uid, "aggregatetype", "my order", "aggregateid", "1", "payload", "p"),
			reason: "invalid_topic", inError: "illegal character"},
		{name: "bang in aggregatetype", cfg: def, row: row("id", uid, "aggregatetype", "order!", "aggregateid", "1", "payload", "p"),
			reason: "invalid_topic", inError: "illegal character"},
		{name: "topic too long", cfg: def, row: row("id", uid, "aggregatetype", strings.Repeat("a", 240), "aggregateid", "1", "payload", "p"),
			reason: "invalid_topic", inError: "249"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := New(c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			got, err := r.Route(c.row, time.Time{})
			if c.reason != "" {
				var te *Error
				if !errors.As(err, &te) || te.Reason != c.reason || !strings.Contains(te.Msg, c.inError) {
					t.Fatalf("err = %v, want reason %s mentioning %q", err, c.reason, c.inError)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Topic != c.want.Topic || string(got.Key) != string(c.want.Key) || string(got.Value) != string(c.want.Value) ||
				(got.Value == nil) != (c.want.Value == nil) || len(got.Headers) != len(c.want.Headers) {
				t.Fatalf("got %+v\nwant %+v", got, c.want)
			}
			for i, h := range c.want.Headers {
				if got.Headers[i].Key != h.Key || string(got.Headers[i].Value) != string(h.Value) || (got.Headers[i].Value == nil) != (h.Value == nil) {
					t.Fatalf("header %d = %s=%s, want %s=%s", i, got.Headers[i].Key, got.Headers[i].Value, h.Key, h.Value)
				}
			}
		})
	}
}

func TestNewValidates(t *testing.T) {
	for _, c := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.Topic = "" }, "outbox.topic"},
		{func(c *Config) { c.Topic = "a ${routedByValue} b" }, ""},
		{func(c *Config) { c.Topic = "x.${routedByValue}.${routedByValue}" }, "once"},
		{func(c *Config) { c.Topic = "bad topic" }, "outbox.topic"},
		{func(c *Config) { c.PayloadColumn = "" }, "outbox.columns.payload"},
	} {
		cfg := DefaultConfig()
		c.mod(&cfg)
		_, err := New(cfg)
		if c.want == "" {
			if err != nil {
				t.Errorf("%+v: %v", cfg, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("topic %q: err %v, want mention of %s", cfg.Topic, err, c.want)
		}
	}
}

func TestValidTopic(t *testing.T) {
	for name, ok := range map[string]bool{"a": true, "A.b_c-9": true, ".": false, "..": false, "...": true, "": false,
		"a b": false, "a/b": false, "ü": false, strings.Repeat("x", 249): true, strings.Repeat("x", 250): false} {
		if err := ValidTopic(name); (err == nil) != ok {
			t.Errorf("ValidTopic(%q) = %v, want ok=%v", name, err, ok)
		}
	}
}

func BenchmarkRoute(b *testing.B) {
	r, _ := New(DefaultConfig())
	rw := row("id", uid, "aggregatetype", "order", "aggregateid", "42", "type", "created", "payload", strings.Repeat("x", 300))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := r.Route(rw, time.Time{}); err != nil {
			b.Fatal(err)
		}
	}
}

func TestErrorReasonCode(t *testing.T) {
	var rc interface{ ReasonCode() string }
	r, _ := New(DefaultConfig())
	_, err := r.Route(row("id", uid, "aggregatetype", "a b", "aggregateid", "1", "payload", "p"), time.Time{})
	if !errors.As(err, &rc) || rc.ReasonCode() != "invalid_topic" {
		t.Fatalf("err %v has no ReasonCode invalid_topic", err)
	}
}

// The topic memo must give the same answers as building the name every time: for repeated and
// new aggregate types, past its bound, and never for an invalid name (which must keep failing).
func TestRouteTopicMemo(t *testing.T) {
	r, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	route := func(at string) (string, error) {
		buf := []byte(at) // the source reuses row memory: the memo must not keep this slice
		rec, err := r.Route(row("id", uid, "aggregatetype", buf, "aggregateid", "k", "payload", "{}"), time.Time{})
		for i := range buf {
			buf[i] = 'X'
		}
		return rec.Topic, err
	}
	for round := 0; round < 2; round++ {
		for i := 0; i < maxTopics+50; i++ {
			at := "type" + strings.Repeat("a", i%7) + string(rune('a'+i%26)) + strings.Repeat("b", i/26)
			got, err := route(at)
			if err != nil || got != "outbox.event."+at {
				t.Fatalf("round %d, aggregate type %q: topic %q, %v", round, at, got, err)
			}
		}
		for _, bad := range []string{"has space", "bang!", strings.Repeat("x", 250)} {
			if _, err := route(bad); err == nil {
				t.Fatalf("round %d: aggregate type %q routed, want invalid_topic", round, bad)
			}
		}
	}
	if n := len(*r.topics.Load()); n != maxTopics {
		t.Fatalf("memo holds %d topics, want the bound %d", n, maxTopics)
	}
}
