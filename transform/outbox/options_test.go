package outbox

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/sink"
)

// sameRecord fails unless got equals want, telling a nil key/value/header from an empty one.
func sameRecord(t *testing.T, got, want sink.Record) {
	t.Helper()
	if got.Topic != want.Topic || string(got.Key) != string(want.Key) || (got.Key == nil) != (want.Key == nil) ||
		string(got.Value) != string(want.Value) || (got.Value == nil) != (want.Value == nil) || len(got.Headers) != len(want.Headers) {
		t.Fatalf("got  %q key %q (nil %v) value %q (nil %v) headers %d\nwant %q key %q (nil %v) value %q (nil %v) headers %d",
			got.Topic, got.Key, got.Key == nil, got.Value, got.Value == nil, len(got.Headers),
			want.Topic, want.Key, want.Key == nil, want.Value, want.Value == nil, len(want.Headers))
	}
	for i, h := range want.Headers {
		if got.Headers[i].Key != h.Key || string(got.Headers[i].Value) != string(h.Value) || (got.Headers[i].Value == nil) != (h.Value == nil) {
			t.Fatalf("header %d = %s=%q, want %s=%q", i, got.Headers[i].Key, got.Headers[i].Value, h.Key, h.Value)
		}
	}
}

// route.tombstone.on.empty.payload, as shared/spec/debezium-outbox.md §1 row 6:
// `payload == null || payload.toString().trim().isEmpty()` gives a record with a null value,
// key and headers kept (AERT shouldProduceTombstoneEventForNullPayload / ...ForEmptyPayload).
func TestTombstoneOnEmptyPayload(t *testing.T) {
	on := DefaultConfig()
	on.TombstoneOnEmptyPayload = true
	on.Headers = []Header{{Column: "type", Name: "eventType"}}
	off := DefaultConfig()
	off.Headers = on.Headers
	hdrs := []sink.Header{{Key: "id", Value: []byte(uid)}, {Key: "eventType", Value: []byte("created")}}
	for _, c := range []struct {
		name    string
		cfg     Config
		payload any
		want    []byte // nil: a tombstone
	}{
		{"on: NULL", on, nil, nil},
		{"on: empty text (varchar '')", on, "", nil},
		{"on: blanks only (Java trim strips them)", on, " \t\r\n ", nil},
		{"on: control bytes <= U+0020 only (Java trim strips them)", on, "\x00\x1f ", nil},
		{"on: text with blanks around", on, " x ", []byte(" x ")},
		{"on: NBSP is not trimmed by Java's trim", on, "\u00a0", []byte("\u00a0")},
		{"on: the jsonb empty string is 2 bytes, not empty", on, `""`, []byte(`""`)},
		{"on: jsonb object", on, `{"a": 1}`, []byte(`{"a": 1}`)},
		{"off: NULL stays a null value (today)", off, nil, nil},
		{"off: empty text stays an empty value (today)", off, "", []byte{}},
		{"off: blanks stay (today)", off, "  ", []byte("  ")},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := New(c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			got, err := r.Route(row("id", uid, "aggregatetype", "order", "aggregateid", "42", "type", "created", "payload", c.payload), time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			sameRecord(t, got, sink.Record{Topic: "outbox.event.order", Key: []byte("42"), Value: c.want, Headers: hdrs})
		})
	}
}

// route.topic.regex, as shared/spec/debezium-outbox.md §1 row 1: the regex must match the whole
// routed-by value (Java matches()); on a match ${routedByValue} is the group's value; otherwise
// Kafka's RegexRouter leaves the topic alone, i.e. the raw aggregate type.
func TestTopicRegex(t *testing.T) {
	cfg := func(topic, re string) Config {
		c := DefaultConfig()
		c.Topic, c.TopicRegex = topic, re
		return c
	}
	for _, c := range []struct {
		name, topic, re, at, want string
	}{
		{"Debezium's default regex, default replacement (ERT canRouteBasedOnField)", "outbox.event.${routedByValue}", "(?<routedByValue>.*)", "User", "outbox.event.User"},
		{"debezium-examples: ${routedByValue}.events", "${routedByValue}.events", "(?<routedByValue>.*)", "order", "order.events"},
		{"Go's (?P<name>) spelling too", "${routedByValue}.events", "(?P<routedByValue>.*)", "order", "order.events"},
		{"group is part of the value", "outbox.event.${routedByValue}", "(?<routedByValue>[a-z]+)_v[0-9]+", "order_v2", "outbox.event.order"},
		{"no match keeps the raw value", "outbox.event.${routedByValue}", "(?<routedByValue>[a-z]+)_v[0-9]+", "Order_v2", "Order_v2"},
		{"a partial match is no match (matches(), not find())", "outbox.event.${routedByValue}", "(?<routedByValue>order)", "orders", "orders"},
		// Java: "ab".matches() via the branch ab; replaceFirst's find() then matches "a" (first
		// branch, group "a") and keeps the rest: "outbox.event.a" + "b".
		{"whole match via a later branch, replaceFirst's find takes the first", "outbox.event.${routedByValue}", "(?<routedByValue>a)|ab", "ab", "outbox.event.ab"},
		// Java: matches() with .+? = "order"; find() stops at .+? = "o": "outbox.event.o" + "rder_v2".
		{"lazy group: replaceFirst keeps the tail after find's match", "outbox.event.${routedByValue}", "(?<routedByValue>.+?)(_v[0-9]+)?", "order_v2", "outbox.event.order_v2"},
		{"lazy group, fixed topic: the tail is kept", "events", "(?<routedByValue>.+?)(_v[0-9]+)?", "order_v2", "eventsrder_v2"},
		{"group took no part in the match", "x.${routedByValue}", "(?<routedByValue>a)|b", "b", "x."},
		{"alternation, first branch", "outbox.event.${routedByValue}", "(?<routedByValue>a)|ab", "a", "outbox.event.a"},
		{"empty value matches .*", "outbox.event.${routedByValue}", "(?<routedByValue>.*)", "", "outbox.event."},
		{"fixed topic, match", "events", "(?<routedByValue>order.*)", "orders", "events"},
		{"fixed topic, no match keeps the raw value", "events", "(?<routedByValue>order.*)", "payment", "payment"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := New(cfg(c.topic, c.re))
			if err != nil {
				t.Fatal(err)
			}
			for round := 0; round < 2; round++ { // the second round is served by the topic memo
				got, err := r.Route(row("id", uid, "aggregatetype", []byte(c.at), "aggregateid", "42", "payload", "p"), time.Time{})
				if err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				sameRecord(t, got, sink.Record{Topic: c.want, Key: []byte("42"), Value: []byte("p"), Headers: []sink.Header{{Key: "id", Value: []byte(uid)}}})
			}
		})
	}

	t.Run("memo keeps match and no-match apart", func(t *testing.T) {
		r, err := New(cfg("x.${routedByValue}", "(?<routedByValue>[a-z]+)-[0-9]+"))
		if err != nil {
			t.Fatal(err)
		}
		for round := 0; round < 3; round++ {
			for at, want := range map[string]string{"order-1": "x.order", "order-2": "x.order", "Order-1": "Order-1", "pay-9": "x.pay", "pay": "pay"} {
				buf := []byte(at)
				rec, err := r.Route(row("id", uid, "aggregatetype", buf, "aggregateid", "k", "payload", "p"), time.Time{})
				copy(buf, strings.Repeat("Z", len(buf))) // the memo must not keep the row's bytes
				if err != nil || rec.Topic != want {
					t.Fatalf("round %d, %q: topic %q, %v; want %q", round, at, rec.Topic, err, want)
				}
			}
		}
		if n := len(*r.topics.Load()); n != 5 {
			t.Fatalf("memo holds %d topics, want 5", n)
		}
	})

	t.Run("an unmatched value that is no topic name is dead-lettered", func(t *testing.T) {
		r, err := New(cfg("x.${routedByValue}", "(?<routedByValue>[a-z]+)"))
		if err != nil {
			t.Fatal(err)
		}
		for round := 0; round < 2; round++ {
			_, err = r.Route(row("id", uid, "aggregatetype", "my order", "aggregateid", "k", "payload", "p"), time.Time{})
			var te *Error
			if !errors.As(err, &te) || te.Reason != "invalid_topic" {
				t.Fatalf("round %d: err %v, want invalid_topic", round, err)
			}
		}
	})
}

func TestTopicRegexConfigErrors(t *testing.T) {
	for re, want := range map[string]string{
		"(.*)":                      "no named group",
		"(?<other>.*)":              "no named group",
		"(?<routedByValue>(?=a).*)": "does not compile",
		"(?<routedByValue>a)\\1":    "does not compile",
		"(?<routedByValue>a++)":     "does not compile",
		"(?<routedByValue>[a-z]":    "does not compile",
	} {
		c := DefaultConfig()
		c.TopicRegex = re
		_, err := New(c)
		if err == nil || !strings.Contains(err.Error(), "outbox.topic_regex") || !strings.Contains(err.Error(), want) {
			t.Errorf("regex %q: err %v, want outbox.topic_regex ... %s", re, err, want)
		}
		if err := CheckTopicRegex(re); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckTopicRegex(%q) = %v, want %s", re, err, want)
		}
	}
	if err := CheckTopicRegex(""); err != nil {
		t.Errorf("CheckTopicRegex(\"\") = %v", err)
	}
}

// outbox.null_key: produce gives a NULL aggregate id a null Kafka key, as Debezium
// (shared/spec/debezium-outbox.md §1 row 4: "NULL column -> null key (record still produced)").
func TestNullKey(t *testing.T) {
	produce := DefaultConfig()
	produce.NullKey = NullKeyProduce
	r, err := New(produce)
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Route(row("id", uid, "aggregatetype", "order", "aggregateid", nil, "payload", "p"), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	sameRecord(t, got, sink.Record{Topic: "outbox.event.order", Key: nil, Value: []byte("p"), Headers: []sink.Header{{Key: "id", Value: []byte(uid)}}})
	got, err = r.Route(row("id", uid, "aggregatetype", "order", "aggregateid", []byte(nil), "payload", "p"), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	sameRecord(t, got, sink.Record{Topic: "outbox.event.order", Key: []byte{}, Value: []byte("p"), Headers: []sink.Header{{Key: "id", Value: []byte(uid)}}})
	if _, err := r.Route(row("id", uid, "aggregatetype", "order", "payload", "p"), time.Time{}); err == nil {
		t.Fatal("a missing aggregate id column routed under null_key produce; want missing_column")
	}

	for _, nk := range []string{"", NullKeyDLQ} {
		c := DefaultConfig()
		c.NullKey = nk
		r, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.Route(row("id", uid, "aggregatetype", "order", "aggregateid", nil, "payload", "p"), time.Time{})
		var te *Error
		if !errors.As(err, &te) || te.Reason != "missing_column" || te.Column != "aggregateid" {
			t.Fatalf("null_key %q: err %v, want missing_column aggregateid", nk, err)
		}
	}
	bad := DefaultConfig()
	bad.NullKey = "drop"
	if _, err := New(bad); err == nil || !strings.Contains(err.Error(), "outbox.null_key") {
		t.Fatalf("null_key drop: err %v", err)
	}
}
