package outbox

import (
	"fmt"
	"slices"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
)

// headerState is what New prepares for the headers, the record timestamp and tracing
// (headers.go, timestamp.go, tracing.go); read-only after New but for the tracing warning flag.
type headerState struct {
	cols []Header // outbox.headers (in order), then outbox.fields' header placements (in order)
	text bool     // outbox.header_values: text

	ts       tsMode // outbox.timestamp
	tsColumn string // its column, for column:<name>

	tracing tracingState
}

// initHeaders checks and prepares the header options of r.cfg (called once by New).
func (r *Router) initHeaders() error {
	hs := &r.hs
	hs.cols = slices.Clone(r.cfg.Headers)
	for _, f := range r.cfg.Fields {
		if f.Placement != PlacementHeader {
			continue
		}
		name := f.Alias
		if name == "" {
			name = f.Column
		}
		hs.cols = append(hs.cols, Header{Column: f.Column, Name: name})
	}
	for i, h := range hs.cols {
		if h.Column == "" || h.Name == "" {
			return fmt.Errorf("outbox header %d (%q from column %q): the column and the header name must not be empty", i, h.Name, h.Column)
		}
	}
	hs.text = r.cfg.HeaderValues == HeaderValuesText
	if err := r.initTimestamp(); err != nil { // timestamp.go
		return err
	}
	r.initTracing() // tracing.go
	return nil
}

// appendHeaders adds the row's tracing headers (traceparent, tracestate, baggage) in front of
// rec.Headers (before id, where Debezium's tracing SMT puts them), then the configured header
// columns after it: outbox.headers in order, then outbox.fields' header placements in order
// (Debezium's table.fields.additional.placement ...:header:alias), each missing column as
// outbox.missing_field says.
//
// Values as Kafka Connect's SimpleHeaderConverter writes the column's Debezium value (see
// renderHeader), or with outbox.header_values: text the database's text form. Either way a NULL
// column is a header with a null value and an empty one a header with an empty value.
func (r *Router) appendHeaders(rec *sink.Record, row *source.Row) error {
	hs := &r.hs
	var trace [maxTraceHeaders]sink.Header
	nt := 0
	if hs.tracing.column != "" {
		var err error
		if nt, err = r.tracingHeaders(row, &trace); err != nil { // tracing.go
			return err
		}
	}
	if need := len(rec.Headers) + nt + len(hs.cols); cap(rec.Headers) < need {
		rec.Headers = slices.Grow(rec.Headers, need-len(rec.Headers))
	}
	if nt > 0 {
		rec.Headers = rec.Headers[:len(rec.Headers)+nt]
		copy(rec.Headers[nt:], rec.Headers[:len(rec.Headers)-nt])
		copy(rec.Headers, trace[:nt])
	}
	for _, h := range hs.cols {
		v, t, ok, err := r.field(row, h.Column)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		var val []byte
		switch {
		case v.Null:
		case hs.text:
			val = v.Bytes
		default:
			if val, err = renderHeader(v.Bytes, t); err != nil {
				return &Error{Reason: "invalid_value", Column: h.Column,
					Msg: fmt.Sprintf("table %s, column %q (header %q): %v (outbox.header_values: text sends the database's text as is)", row.Table, h.Column, h.Name, err)}
			}
		}
		if !v.Null && val == nil {
			val = []byte{}
		}
		rec.Headers = append(rec.Headers, sink.Header{Key: h.Name, Value: val})
	}
	return nil
}

// Static header values: shared, never written to.
var (
	textTrue  = []byte("true")
	textFalse = []byte("false")
)

// renderHeader is Kafka Connect's SimpleHeaderConverter.fromConnectHeader for a non-NULL column:
// Values.convertToString of the Connect value Debezium's connector makes of the column (its
// Kind), as UTF-8. b is the database's text (Value.Bytes, as each Kind's doc says); the result
// may alias b. Values.append: a Boolean is "true"/"false", a Number its Java toString
// (Short/Integer/Long decimal, Float/Double as Float.toString/Double.toString, BigDecimal as
// BigDecimal.toString), byte[] Base64, a String as is, a Struct {"field":value,...}.
func renderHeader(b []byte, t source.Type) ([]byte, error) {
	switch t.Kind {
	case source.KindBool:
		switch string(b) {
		case "t", "1", "true":
			return textTrue, nil
		case "f", "0", "false":
			return textFalse, nil
		}
		return nil, fmt.Errorf("%q is not a boolean", b)
	case source.KindInt16, source.KindInt32:
		return b, nil // decimal text, as Short/Integer.toString
	case source.KindInt64:
		return renderInt64(b), nil
	case source.KindFloat32:
		return renderFloat(b, 32)
	case source.KindFloat64:
		return renderFloat(b, 64)
	case source.KindDecimal:
		if t.Precision == 0 && t.Scale == 0 {
			return renderVariableScaleDecimal(b)
		}
		return renderBigDecimal(b)
	case source.KindBytes:
		return renderBase64(b), nil
	case source.KindTimestamp:
		return renderEpoch(b, t.Kind)
	case source.KindMicroTimestamp:
		return renderEpoch(b, t.Kind)
	case source.KindDate:
		return renderEpoch(b, t.Kind)
	case source.KindZonedTimestamp:
		return renderZoned(b, t.Scale)
	}
	return b, nil // KindString, KindJSON, KindUUID: a Connect string, as is
}
