package sink

import (
	"encoding/base64"
	"encoding/json"
	"unicode/utf8"

	"github.com/outboxd/outboxd/source"
)

// RowBase64Key is the one key of the marker object that stands for a column value that is not
// valid UTF-8 in a row-as-JSON dead letter: {"payload": {"base64": "3q2+7w=="}}.
const RowBase64Key = "base64"

// rowBytes is a column value that is not valid UTF-8 (bytea, blob, binary, text in another
// encoding): a JSON string would replace its invalid bytes by U+FFFD, so it is written as
// {"base64": "<standard base64, with padding>"} and the bytes can be read back exactly.
type rowBytes struct {
	Base64 string `json:"base64"`
}

// RowJSON renders a row as the value of a transform-stage dead letter: one JSON object of
// column name to value, keys sorted. A NULL is null; a value whose bytes are valid UTF-8 is a
// JSON string of exactly those bytes; any other value is the marker object
// {"base64": "..."} holding its bytes in standard base64. (Before the marker, invalid UTF-8 was
// written as a string with U+FFFD in place of the bytes; valid UTF-8 is written as it was.)
func RowJSON(row *source.Row) []byte {
	obj := make(map[string]any, len(row.Columns))
	for i, c := range row.Columns {
		v := row.Values[i]
		switch {
		case v.Null:
			obj[c] = nil
		case utf8.Valid(v.Bytes):
			obj[c] = string(v.Bytes)
		default:
			obj[c] = rowBytes{Base64: base64.StdEncoding.EncodeToString(v.Bytes)}
		}
	}
	b, _ := json.Marshal(obj) // strings and marker objects only: cannot fail
	return b
}
