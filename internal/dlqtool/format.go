package dlqtool

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Text writes r as one logfmt-style line: when, why, where from, which event; never the value
// (payloads may hold personal data and can be large: use --json for them).
//
//	time=... reason=... stage=... message="..." topic=... table=... position=... id=... key=... dlq=P@O
func Text(w io.Writer, r *Record, idColumn string) error {
	t := r.ErrorTime()
	if t == "" && !r.Timestamp.IsZero() {
		t = r.Timestamp.UTC().Format(time.RFC3339)
	}
	var b strings.Builder
	field := func(k, v string) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(quote(v))
	}
	field("time", t)
	field("reason", r.Reason())
	field("stage", r.Stage())
	field("message", r.Message())
	field("topic", r.OriginalTopic())
	field("table", r.SourceTable())
	field("position", r.SourcePosition())
	if after := r.SourceAfter(); after != "" {
		field("after", after) // a row of a transaction's non-last chunk: it lies after this position
	}
	field("id", r.EventID(idColumn))
	if r.Key == nil {
		b.WriteString(" key=<null>")
	} else {
		field("key", string(r.Key))
	}
	field("dlq", fmt.Sprintf("%d@%d", r.Partition, r.Offset))
	b.WriteByte('\n')
	_, err := io.WriteString(w, b.String())
	return err
}

// quote leaves plain values as they are and quotes (Go syntax) empty ones, ones with spaces,
// quotes, '=' or anything unprintable, and invalid UTF-8.
func quote(s string) string {
	if s == "" {
		return `""`
	}
	if !utf8.ValidString(s) {
		return strconv.Quote(s)
	}
	for _, c := range s {
		if c == '"' || c == '=' || c == '\\' || unicode.IsSpace(c) || !unicode.IsPrint(c) {
			return strconv.Quote(s)
		}
	}
	return s
}

// JSONRecord is the --json form of a dead letter: one object per line. Key and value are text
// when they are valid UTF-8 (key_encoding / value_encoding "text"), else base64 ("base64");
// null when the record's key or value is null. Header values are text; the names of headers
// whose value is not UTF-8 are listed in binary_headers and their values are base64.
type JSONRecord struct {
	Partition      int32             `json:"partition"`
	Offset         int64             `json:"offset"`
	Timestamp      time.Time         `json:"timestamp"`
	Time           string            `json:"time"`
	Reason         string            `json:"reason"`
	Stage          string            `json:"stage"`
	Message        string            `json:"message"`
	OriginalTopic  string            `json:"original_topic"`
	SourceTable    string            `json:"source_table"`
	SourcePosition string            `json:"source_position"`
	SourceAfter    string            `json:"source_after,omitempty"`
	ID             string            `json:"id"`
	Key            *string           `json:"key"`
	KeyEncoding    string            `json:"key_encoding,omitempty"`
	Value          *string           `json:"value"`
	ValueEncoding  string            `json:"value_encoding,omitempty"`
	Headers        map[string]string `json:"headers"`
	BinaryHeaders  []string          `json:"binary_headers,omitempty"`
}

func encodeBytes(b []byte) (*string, string) {
	if b == nil {
		return nil, ""
	}
	if utf8.Valid(b) {
		s := string(b)
		return &s, "text"
	}
	s := base64.StdEncoding.EncodeToString(b)
	return &s, "base64"
}

// ToJSON converts r to its --json form.
func ToJSON(r *Record, idColumn string) JSONRecord {
	j := JSONRecord{
		Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp.UTC(), Time: r.ErrorTime(),
		Reason: r.Reason(), Stage: r.Stage(), Message: r.Message(), OriginalTopic: r.OriginalTopic(),
		SourceTable: r.SourceTable(), SourcePosition: r.SourcePosition(), SourceAfter: r.SourceAfter(), ID: r.EventID(idColumn),
		Headers: make(map[string]string, len(r.Headers)),
	}
	j.Key, j.KeyEncoding = encodeBytes(r.Key)
	j.Value, j.ValueEncoding = encodeBytes(r.Value)
	for _, h := range r.Headers {
		if _, dup := j.Headers[h.Key]; dup {
			continue // the first one, as Record.Header
		}
		if utf8.Valid(h.Value) {
			j.Headers[h.Key] = string(h.Value)
		} else {
			j.Headers[h.Key] = base64.StdEncoding.EncodeToString(h.Value)
			j.BinaryHeaders = append(j.BinaryHeaders, h.Key)
		}
	}
	return j
}

// JSON writes r as one JSON object and a newline.
func JSON(w io.Writer, r *Record, idColumn string) error {
	b, err := json.Marshal(ToJSON(r, idColumn))
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// Tail prints the DLQ (see Read for follow) to w, one line per record, as text or JSON. It
// returns the number of records printed. A missing DLQ topic is not an error without follow:
// Tail returns 0 records and an error wrapping ErrNoTopic for the caller to report.
func Tail(ctx context.Context, c Conn, w io.Writer, follow, asJSON bool) (int, error) {
	n := 0
	err := Read(ctx, c, follow, func(r *Record) error {
		n++
		if asJSON {
			return JSON(w, r, c.IDColumn)
		}
		return Text(w, r, c.IDColumn)
	})
	if err != nil && !errors.Is(err, ErrNoTopic) {
		return n, fmt.Errorf("dlq tail: %w", err)
	}
	return n, err
}
