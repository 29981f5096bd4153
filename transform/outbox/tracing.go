package outbox

import (
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
)

// Tracing: outbox.tracing_column, Debezium's tracing.span.context.field (ActivateTracingSpan as
// the EventRouter runs it: tracing.with.context.field.only true, so only rows whose column is
// not NULL are traced).
//
// The column holds a java.util.Properties text written by the application's tracer
// ("traceparent=00-<trace id>-<span id>-<flags>", optionally tracestate= and baggage=), read as
// Properties.load reads it (tracing_props.go). The record gets W3C headers from it, in front of
// id where Debezium's TracingSpanUtil injects them: traceparent, then tracestate and baggage when
// present and not empty (OpenTelemetry's W3C trace-context and baggage propagators, the default
// OTEL_PROPAGATORS, inject these three).
//
// Unlike Debezium with OpenTelemetry, outboxd creates no spans: Debezium starts a db-log-write
// span (child of the row's context) and a debezium-read span, and the traceparent it injects
// carries the db-log-write span's id; outboxd propagates the writer's context unchanged, so a
// consumer's span becomes a child of the span that wrote the outbox row. Values are passed as
// written: OpenTelemetry re-serialises tracestate and baggage (drops blanks around commas and
// entries it finds invalid); outboxd does not.
//
// A value Debezium would fail on (a bad \uXXXX escape) or that has no valid traceparent is
// logged once per Router (slog.Warn, naming the column and why) and the record goes out without
// tracing headers; Debezium would start a new trace for a row without a valid traceparent.

// maxTraceHeaders is traceparent, tracestate and baggage.
const maxTraceHeaders = 3

type tracingState struct {
	column   string      // "" = tracing off
	explicit bool        // configured (outbox.tracing_column): a table without it follows outbox.missing_field
	warned   atomic.Bool // a malformed value has been logged
}

// initTracing prepares outbox.tracing_column.
func (r *Router) initTracing() {
	r.hs.tracing.column = r.cfg.TracingColumn
	r.hs.tracing.explicit = r.cfg.TracingColumnSet
}

// tracingHeaders puts the row's tracing headers into out and returns how many there are. With
// the default column (not configured), a table without it is not traced; a configured column
// the table lacks is a missing_column *Error unless outbox.missing_field is ignore.
func (r *Router) tracingHeaders(row *source.Row, out *[maxTraceHeaders]sink.Header) (int, error) {
	tr := &r.hs.tracing
	v, _, ok := row.Lookup(tr.column)
	if !ok {
		if tr.explicit && r.cfg.MissingField != MissingFieldIgnore {
			return 0, &Error{Reason: "missing_column", Column: tr.column,
				Msg: fmt.Sprintf("table %s has no column %q (outbox.tracing_column; or set outbox.missing_field: ignore)", row.Table, tr.column)}
		}
		return 0, nil
	}
	if v.Null {
		return 0, nil
	}
	tc, err := parseTraceContext(v.Bytes)
	if err != nil {
		if tr.warned.CompareAndSwap(false, true) {
			slog.Warn("outbox.tracing_column: a malformed trace context; its records go out without tracing headers (logged once)",
				"table", row.Table, "column", tr.column, "why", err.Error())
		}
		return 0, nil
	}
	n := 0
	out[n] = sink.Header{Key: "traceparent", Value: []byte(tc.traceparent)}
	n++
	if tc.tracestate != "" {
		out[n] = sink.Header{Key: "tracestate", Value: []byte(tc.tracestate)}
		n++
	}
	if tc.baggage != "" {
		out[n] = sink.Header{Key: "baggage", Value: []byte(tc.baggage)}
		n++
	}
	return n, nil
}

// traceContext is the W3C context of a tracing column.
type traceContext struct{ traceparent, tracestate, baggage string }

// parseTraceContext loads the Properties text and validates its traceparent as OpenTelemetry's
// W3CTraceContextPropagator extracts it, restricted to version 00: exactly
// "00-<32 lower-case hex, not all zero>-<16 lower-case hex, not all zero>-<2 lower-case hex>".
func parseTraceContext(b []byte) (traceContext, error) {
	props, err := loadProperties(b)
	if err != nil {
		return traceContext{}, fmt.Errorf("not a java.util.Properties text: %v", err)
	}
	tp, ok := props.get("traceparent")
	if !ok {
		return traceContext{}, fmt.Errorf("no traceparent key")
	}
	if err := validTraceparent(tp); err != nil {
		return traceContext{}, fmt.Errorf("traceparent %q: %v", tp, err)
	}
	tc := traceContext{traceparent: tp}
	tc.tracestate, _ = props.get("tracestate")
	tc.baggage, _ = props.get("baggage")
	return tc, nil
}

// validTraceparent checks a version-00 W3C traceparent.
func validTraceparent(tp string) error {
	if len(tp) != 55 || tp[2] != '-' || tp[35] != '-' || tp[52] != '-' {
		return fmt.Errorf("not 00-<32 hex>-<16 hex>-<2 hex>")
	}
	if tp[:2] != "00" {
		return fmt.Errorf("version %q is not 00", tp[:2])
	}
	for _, f := range []struct {
		name string
		s    string
		zero bool // all zero is invalid
	}{{"trace id", tp[3:35], true}, {"span id", tp[36:52], true}, {"flags", tp[53:], false}} {
		nonzero := false
		for i := 0; i < len(f.s); i++ {
			c := f.s[i]
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return fmt.Errorf("%s %q is not lower-case hex", f.name, f.s)
			}
			nonzero = nonzero || c != '0'
		}
		if f.zero && !nonzero {
			return fmt.Errorf("%s is all zero", f.name)
		}
	}
	return nil
}
