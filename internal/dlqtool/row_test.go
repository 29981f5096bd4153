package dlqtool

import (
	"bytes"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/pipeline"
	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
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
	dl := pipeline.DeadLetter(sink.Record{}, row, "transform", "missing_column", "m", "0/1", time.Unix(0, 0))
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
