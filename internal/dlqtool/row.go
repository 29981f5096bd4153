package dlqtool

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
)

// DecodeRow reads back the value of a row-as-JSON dead letter (sink.RowJSON): column name
// to the column's original bytes. null is a NULL; a JSON string is its UTF-8 bytes; the marker
// object {"base64": "..."} is the bytes it encodes (a value that was not valid UTF-8). Anything
// else is an error: the value was not written by outboxd's transform stage.
func DecodeRow(value []byte) (map[string]source.Value, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(value, &raw); err != nil {
		return nil, fmt.Errorf("the dead letter's value is not a row as a JSON object: %w", err)
	}
	if raw == nil {
		return nil, fmt.Errorf("the dead letter's value is not a row as a JSON object: it is null")
	}
	out := make(map[string]source.Value, len(raw))
	for col, m := range raw {
		v, err := decodeColumn(m)
		if err != nil {
			return nil, fmt.Errorf("column %q: %w", col, err)
		}
		out[col] = v
	}
	return out, nil
}

func decodeColumn(m json.RawMessage) (source.Value, error) {
	m = bytes.TrimSpace(m)
	switch {
	case string(m) == "null":
		return source.Value{Null: true}, nil
	case len(m) > 0 && m[0] == '"':
		var s string
		if err := json.Unmarshal(m, &s); err != nil {
			return source.Value{}, err
		}
		return source.Value{Bytes: []byte(s)}, nil
	case len(m) > 0 && m[0] == '{':
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(m, &obj); err != nil {
			return source.Value{}, err
		}
		enc, ok := obj[sink.RowBase64Key]
		if len(obj) != 1 || !ok {
			return source.Value{}, fmt.Errorf("an object value must be {%q: \"...\"} (bytes that are not UTF-8), got %s", sink.RowBase64Key, m)
		}
		var s string
		if err := json.Unmarshal(enc, &s); err != nil {
			return source.Value{}, fmt.Errorf("%s: %w", sink.RowBase64Key, err)
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return source.Value{}, fmt.Errorf("%s: %w", sink.RowBase64Key, err)
		}
		if b == nil {
			b = []byte{}
		}
		return source.Value{Bytes: b}, nil
	}
	return source.Value{}, fmt.Errorf("want a string, null or {%q: \"...\"}, got %s", sink.RowBase64Key, m)
}
