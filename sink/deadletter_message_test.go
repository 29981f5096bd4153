package sink

import (
	"testing"
	"time"

	"github.com/outboxd/outboxd/source"
)

// TestDeadLetterMessageRow: a message row's transform-stage dead letter carries the raw content
// as its value (not the row as JSON), byte for byte, also when it is not UTF-8 or empty; the
// table header names the message pseudo-table; a produce-stage one keeps the record's bytes.
func TestDeadLetterMessageRow(t *testing.T) {
	for _, content := range [][]byte{[]byte(`{"id": 1, "payload": "x"`), []byte("\xff\x00 not json"), {}} {
		row := &source.Row{Table: source.MessageTablePrefix + "outboxd.event", Columns: []string{source.MessageColumn},
			Values: []source.Value{{Bytes: content}}, Types: []source.Type{{Kind: source.KindJSON}}, Message: true}
		dl := DeadLetter(Record{}, row, "transform", "invalid_message", "m", "0/1", time.Unix(0, 0))
		if dl.Value == nil || string(dl.Value) != string(content) {
			t.Errorf("value %q, want the raw content %q", dl.Value, content)
		}
		var table string
		for _, h := range dl.Headers {
			if h.Key == HeaderSourceTable {
				table = string(h.Value)
			}
		}
		if table != "pg_logical_emit_message:outboxd.event" {
			t.Errorf("table header %q", table)
		}
		dl = DeadLetter(Record{Value: []byte("built")}, row, "produce", "record_too_large", "m", "0/1", time.Unix(0, 0))
		if string(dl.Value) != "built" {
			t.Errorf("produce-stage value %q", dl.Value)
		}
	}
}
