package sink

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/source"
)

// oldRowJSON is the row-as-JSON form before the base64 marker (column → text, null for NULL).
func oldRowJSON(row *source.Row) []byte {
	obj := make(map[string]*string, len(row.Columns))
	for i, c := range row.Columns {
		if row.Values[i].Null {
			obj[c] = nil
		} else {
			s := string(row.Values[i].Bytes)
			obj[c] = &s
		}
	}
	b, _ := json.Marshal(obj)
	return b
}

// TestRowJSONKeepsTheTextForm: rows whose values are all valid UTF-8 are written byte for byte
// as before (consumers of the DLQ keep working); NULL stays null.
func TestRowJSONKeepsTheTextForm(t *testing.T) {
	row := &source.Row{Table: "public.outbox",
		Columns: []string{"id", "aggregatetype", "aggregateid", "payload", "type", "empty", "note"},
		Values: []source.Value{{Bytes: []byte("e1")}, {Null: true}, {Bytes: []byte("k<&>\"\\")},
			{Bytes: []byte(`{"a": "ü€😀", "b": [1, 2]}`)}, {Bytes: []byte("line\nbreak\ttab\u2028")}, {Bytes: []byte{}}, {Bytes: nil}}}
	got, want := RowJSON(row), oldRowJSON(row)
	if string(got) != string(want) {
		t.Fatalf("RowJSON = %s\nwant      %s", got, want)
	}
	dl := DeadLetter(Record{}, row, "transform", "missing_column", "m", "0/1", time.Unix(0, 0))
	if string(dl.Value) != string(want) {
		t.Fatalf("DeadLetter value = %s, want %s", dl.Value, want)
	}
}

// TestRowJSONMarksBytes: a value that is not valid UTF-8 becomes {"base64": ...} with its exact
// bytes; no U+FFFD anywhere; the other columns stay strings.
func TestRowJSONMarksBytes(t *testing.T) {
	blob := []byte{0xde, 0xad, 0xbe, 0xef, 0x00, 0xff, 'a'}
	latin1 := []byte("caf\xe9")
	row := &source.Row{Table: "public.outbox", Columns: []string{"id", "payload", "note"},
		Values: []source.Value{{Bytes: []byte("e1")}, {Bytes: blob}, {Bytes: latin1}}}
	v := RowJSON(row)
	if strings.Contains(string(v), "\ufffd") || strings.Contains(string(v), `\ufffd`) {
		t.Fatalf("replacement character in %s", v)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(v, &obj); err != nil {
		t.Fatal(err)
	}
	if string(obj["id"]) != `"e1"` || string(obj["payload"]) != `{"base64":"3q2+7wD/YQ=="}` || string(obj["note"]) != `{"base64":"Y2Fm6Q=="}` {
		t.Fatalf("RowJSON = %s", v)
	}
	// The produce stage keeps the original record's bytes untouched.
	dl := DeadLetter(Record{Key: []byte("k"), Value: blob}, row, "produce", "record_too_large", "m", "0/1", time.Unix(0, 0))
	if string(dl.Value) != string(blob) {
		t.Fatalf("produce-stage value %q", dl.Value)
	}
}
