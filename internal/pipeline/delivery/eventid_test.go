package delivery

import (
	"testing"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
)

// TestEventID: the id logs and stop errors name is the record's "id" header when the transform
// built one (a tableless-outbox message has no id column), else the configured id column.
func TestEventID(t *testing.T) {
	row := &source.Row{Table: "public.outbox", Columns: []string{"id", "event_id"},
		Values: []source.Value{{Bytes: []byte("col-id")}, {Bytes: []byte("evt-1")}}}
	msg := &source.Row{Table: "pg_logical_emit_message:outboxd.event", Message: true, Columns: []string{"content"},
		Values: []source.Value{{Bytes: []byte(`{"id":"m-1"}`)}}}
	withHeader := &sink.Record{Headers: []sink.Header{{Key: "eventType", Value: []byte("x")}, {Key: "id", Value: []byte("hdr-1")}}}
	for _, tc := range []struct {
		name string
		col  string
		row  *source.Row
		rec  *sink.Record
		want string
	}{
		{"default column", "", row, &sink.Record{}, "col-id"},
		{"configured column", "event_id", row, &sink.Record{}, "evt-1"},
		{"header wins", "event_id", row, withHeader, "hdr-1"},
		{"message with its record", "id", msg, withHeader, "hdr-1"},
		{"message refused by the transform", "id", msg, &sink.Record{}, ""},
		{"no row", "id", nil, &sink.Record{}, ""},
	} {
		c := &Core{cfg: Config{IDColumn: tc.col}}
		if got := c.eventID(tc.row, tc.rec); got != tc.want {
			t.Errorf("%s: eventID = %q, want %q", tc.name, got, tc.want)
		}
	}
}
