package dlqtool

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
	"github.com/outboxd/outboxd/transform/outbox"
)

// TestDecodeRowRoundTrip: every column of a transform-stage dead letter reads back as its exact
// bytes (binary, invalid UTF-8, text, empty) or NULL.
func TestDecodeRowRoundTrip(t *testing.T) {
	vals := map[string]source.Value{
		"id":      {Bytes: []byte("5c4a3e6d-62d9-421d-b02c-06e076fde76e")},
		"payload": {Bytes: []byte{0xde, 0xad, 0xbe, 0xef, 0x00, 0xff, 0x80}},
		"latin1":  {Bytes: []byte("caf\xe9")},
		"text":    {Bytes: []byte(`{"a": "ü"} <&>`)},
		"empty":   {Bytes: []byte{}},
		"null":    {Null: true},
		// A text value that looks like the marker stays text.
		"marker": {Bytes: []byte(`{"base64": "AAAA"}`)},
	}
	row := &source.Row{Table: "public.outbox"}
	for c, v := range vals {
		row.Columns = append(row.Columns, c)
		row.Values = append(row.Values, v)
	}
	dl := sink.DeadLetter(sink.Record{}, row, "transform", "missing_column", "m", "0/1", time.Unix(0, 0))
	got, err := DecodeRow(dl.Value)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(vals) {
		t.Fatalf("decoded %d columns, want %d: %v", len(got), len(vals), got)
	}
	for c, want := range vals {
		g, ok := got[c]
		if !ok || g.Null != want.Null || !bytes.Equal(g.Bytes, want.Bytes) {
			t.Errorf("column %s: got %+v (%v), want %+v", c, g, ok, want)
		}
	}
	rec := toRecord(dl, 0, 0)
	if id := rec.EventID("id"); id != "5c4a3e6d-62d9-421d-b02c-06e076fde76e" {
		t.Errorf("EventID = %q", id)
	}
}

// TestDecodeRowRefusesOtherShapes: values outboxd never writes are errors, not guesses.
func TestDecodeRowRefusesOtherShapes(t *testing.T) {
	for _, v := range []string{`null`, `[1]`, `{"a": 1}`, `{"a": {"hex": "00"}}`, `{"a": {"base64": "!!"}}`,
		`{"a": {"base64": "AA==", "x": 1}}`, `{"a": true}`, `not json`} {
		if got, err := DecodeRow([]byte(v)); err == nil {
			t.Errorf("DecodeRow(%s) = %v, want an error", v, got)
		}
	}
}

// TestReplayRoutesRowsAgain: a row-as-JSON dead letter is routed again with the current outbox
// config; when that succeeds the record carries the row's original bytes; when it still fails
// the dead letter is not replayable and the reason is the current one.
func TestReplayRoutesRowsAgain(t *testing.T) {
	blob := []byte{0xde, 0xad, 0xbe, 0xef, 0x00, 0xff}
	r := &source.Row{Table: "public.outbox", Columns: []string{"id", "aggregatetype", "aggregateid", "payload"},
		Values: []source.Value{{Bytes: []byte("e7")}, {Null: true}, {Bytes: []byte{'k', 0xff}}, {Bytes: blob}}}
	dl := sink.DeadLetter(sink.Record{}, r, "transform", "missing_column", `column "aggregatetype" is NULL`, "0/1", now)
	rec := toRecord(dl, 0, 3)

	fixed, err := outbox.New(outbox.Config{IDColumn: "id", AggregateTypeColumn: "aggregatetype", AggregateIDColumn: "aggregateid",
		PayloadColumn: "payload", Topic: "outbox.fixed"})
	if err != nil {
		t.Fatal(err)
	}
	p := newPlanner([]string{"e7"}, false, "id")
	p.route = fixed.Route
	pl := p.plan(rec)
	if !pl.Replay || pl.Out.Topic != "outbox.fixed" || !bytes.Equal(pl.Out.Value, blob) || !bytes.Equal(pl.Out.Key, []byte{'k', 0xff}) {
		t.Fatalf("with a fixed config: %+v", pl)
	}
	if h := pl.Out.Headers; len(h) != 1 || h[0].Key != "id" || string(h[0].Value) != "e7" {
		t.Errorf("headers %v", h)
	}

	routed, err := outbox.New(outbox.Config{IDColumn: "id", AggregateTypeColumn: "aggregatetype", AggregateIDColumn: "aggregateid",
		PayloadColumn: "payload", Topic: "outbox.event.${routedByValue}"})
	if err != nil {
		t.Fatal(err)
	}
	p = newPlanner([]string{"e7"}, false, "id")
	p.route = routed.Route
	if pl := p.plan(rec); pl.Replay || !pl.Explicit || !strings.Contains(pl.Why, "still fails") || !strings.Contains(pl.Why, "is NULL") {
		t.Fatalf("with the same config: %+v", pl)
	}
	// Without a router: as before, not replayable.
	if pl := newPlanner(nil, true, "id").plan(rec); pl.Replay || !strings.Contains(pl.Why, "not replayable") {
		t.Fatalf("without a router: %+v", pl)
	}
}
