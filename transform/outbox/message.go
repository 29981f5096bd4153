package outbox

// Message rows (source.Row.Message): outbox events a source received as a message in the
// transaction's log rather than as an INSERT (PostgreSQL's pg_logical_emit_message, the
// tableless outbox). The source hands the content over unparsed; the transform owns its
// meaning, as it owns the meaning of an outbox table's columns.
//
// The content is one JSON object whose members stand for the columns of an outbox row, named as
// outbox.columns (and outbox.headers, outbox.fields, outbox.timestamp, outbox.tracing_column)
// say. parseMessage turns it into that column view — a source.Row with one column per member,
// in the object's order — and Route routes the view exactly like a row of a table, so topics,
// keys, encodings (raw, json, json_schema, expand_json_payload), headers and fields behave the
// same. Each member's JSON value becomes the column value a table would hold for it:
//
//   - a string: its text (KindString); in the outbox.timestamp column a timestamp text
//     ("2026-12-01T10:00:00.123456", as json_build_object prints a timestamp) is
//     KindMicroTimestamp, as a timestamp column would be;
//   - a number: its literal (an integer within int64: KindInt64, int32 in the partition
//     column of outbox.fields, as Debezium's getInt32 needs; a larger integer: an unconstrained
//     decimal; any other number: float64);
//   - true/false: KindBool; null: SQL NULL;
//   - an object or array: its JSON text as written (KindJSON, like a json column).
//
// So a payload may be any JSON value: an object or array is the payload's JSON text as written
// (a jsonb column's text would be normalised, a json column's is as written), a string is that
// string's text (e.g. a payload that is not JSON at all). The event id, aggregate type,
// aggregate id and type members are typed like Debezium's example table's NOT NULL columns
// (not optional when present and not null); every other member is optional.
//
// A content that is not UTF-8, not a JSON object, has a member twice, or lacks a member the
// router needs (or has it null where a table's column would have to be non-NULL) is a
// permanent failure with reason invalid_message: the pipeline dead-letters it, and the dead
// letter's value is the raw content (sink.DeadLetter), so it can be corrected and re-emitted.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
)

// ReasonInvalidMessage is the dead-letter reason of a message row whose content is not an outbox
// event (see parseMessage).
const ReasonInvalidMessage = "invalid_message"

// messageShape is what parseMessage needs of the router's config: which members get the
// not-optional type of an outbox table's NOT NULL columns, the timestamp column and the
// partition column.
type messageShape struct {
	required  []string // event id, aggregate type, aggregate id, type
	timestamp string   // outbox.timestamp column:<name>; "" none
	partition string   // outbox.fields' partition placement; "" none
	names     []string // the columns the router reads (Router.Columns): member names without an allocation
}

// newMessageShape is called once by New, after the headers and fields are prepared.
func (r *Router) newMessageShape() messageShape {
	s := messageShape{required: []string{r.cfg.IDColumn, r.cfg.AggregateTypeColumn, r.cfg.AggregateIDColumn, r.cfg.TypeColumn},
		partition: r.partitionCol, names: append(r.Columns(), r.cfg.TypeColumn)}
	if r.hs.ts == tsColumn {
		s.timestamp = r.hs.tsColumn
	}
	return s
}

// routeMessage routes a message row: its content parsed into the column view, routed as a row.
func (r *Router) routeMessage(row *source.Row, commit time.Time) (sink.Record, error) {
	content, ok := row.Get(source.MessageColumn)
	if !ok || content.Null {
		return sink.Record{}, &Error{Reason: ReasonInvalidMessage, Column: source.MessageColumn,
			Msg: fmt.Sprintf("message row of %s has no content (a source bug: message rows carry their content in column %q)", row.Table, source.MessageColumn)}
	}
	view, err := parseMessage(row.Table, content.Bytes, r.msg)
	if err != nil {
		return sink.Record{}, err
	}
	rec, err := r.Route(&view, commit)
	var e *Error
	if errors.As(err, &e) && e.Reason == "missing_column" {
		// A member the event needs is absent or null: the message is malformed, not the
		// table (there is none).
		what := "has no member"
		if v, ok := view.Get(e.Column); ok && v.Null {
			what = "has null in member"
		}
		return rec, &Error{Reason: ReasonInvalidMessage, Column: e.Column,
			Msg: fmt.Sprintf("outbox message of %s %s %q, which the event needs (outbox.columns, outbox.headers, outbox.fields name the members; %s): correct the writer and emit the event again",
				row.Table, what, e.Column, e.Msg)}
	}
	return rec, err
}

// invalidMessage is the *Error for malformed content.
func invalidMessage(table, format string, args ...any) error {
	return &Error{Reason: ReasonInvalidMessage,
		Msg: fmt.Sprintf("outbox message of %s: ", table) + fmt.Sprintf(format, args...) +
			": the content must be one JSON object with the outbox fields (e.g. {\"id\": …, \"aggregatetype\": …, \"aggregateid\": …, \"type\": …, \"payload\": …}); correct the writer and emit the event again"}
}

// parseMessage parses content into the column view of a message row of table (see the file
// comment). Pure. The view's values alias content where a member's text is a slice of it.
func parseMessage(table string, content []byte, shape messageShape) (source.Row, error) {
	view := source.Row{Table: table}
	if !utf8.Valid(content) {
		return view, invalidMessage(table, "the content is not valid UTF-8")
	}
	notJSON := func() (source.Row, error) {
		return view, invalidMessage(table, "the content (%d bytes) is not JSON (%s)", len(content), syntaxError(content))
	}
	p := jsonScan{b: content}
	p.space()
	if !p.is('{') {
		if !json.Valid(content) {
			return notJSON()
		}
		return view, invalidMessage(table, "the content is JSON but not an object (it starts with %q)", p.b[p.i:p.i+1])
	}
	p.i++
	// The outbox fields and a few headers: one allocation per slice for the usual event.
	const members = 8
	view.Columns, view.Values, view.Types = make([]string, 0, members), make([]source.Value, 0, members), make([]source.Type, 0, members)
	twice, dup := "", false // a member name seen twice: reported once the whole content is known to be JSON
	p.space()
	for !p.is('}') {
		if !p.is('"') {
			return notJSON()
		}
		key, ok := p.key(shape.names)
		if !ok {
			return notJSON()
		}
		p.space()
		if !p.is(':') {
			return notJSON()
		}
		p.i++
		p.space()
		v, t, ok := p.value(key, shape)
		if !ok {
			return notJSON()
		}
		for _, c := range view.Columns {
			if c == key && !dup {
				twice, dup = key, true
			}
		}
		view.Columns = append(view.Columns, key)
		view.Values = append(view.Values, v)
		view.Types = append(view.Types, t)
		p.space()
		if p.is(',') {
			p.i++
			p.space()
			if p.is('}') {
				return notJSON() // a trailing comma
			}
		} else if !p.is('}') {
			return notJSON()
		}
	}
	p.i++
	p.space()
	if p.i != len(p.b) {
		return notJSON()
	}
	if dup {
		return view, invalidMessage(table, "member %q appears twice, so its value is ambiguous", twice)
	}
	return view, nil // Types never nil: typed, not the "no types" of a hand-built row
}

// syntaxError says where content stops being JSON, without quoting it: error messages end up
// in logs and dead-letter headers, which never carry payload data (README, "What goes to the
// DLQ"); the dead letter's value has the content.
func syntaxError(content []byte) string {
	var v any
	err := json.Unmarshal(content, &v)
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("at byte %d: %v", se.Offset, se)
	case err != nil:
		return err.Error()
	}
	return "encoding/json refuses it"
}

// numberKind is the Kind of a JSON number literal: an integer within int64 is KindInt64 (int32
// as the partition column, when it fits), a larger integer an unconstrained decimal, any other
// number float64.
func numberKind(num []byte, partition bool) source.Kind {
	if bytes.ContainsAny(num, ".eE") {
		return source.KindFloat64
	}
	n, err := strconv.ParseInt(string(num), 10, 64)
	switch {
	case err != nil:
		return source.KindDecimal // Precision 0, Scale 0: VariableScaleDecimal
	case partition && n >= -1<<31 && n < 1<<31:
		return source.KindInt32
	}
	return source.KindInt64
}
