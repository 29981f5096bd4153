package outbox

import (
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
)

// Tracing: outbox.tracing_column, Debezium's tracing.span.context.field (ActivateTracingSpan as
// the EventRouter runs it: tracing.with.context.field.only true, so only rows whose column is
// not NULL are traced).
//
// The column holds a java.util.Properties text written by the application's tracer
// ("traceparent=00-<trace id>-<span id>-<flags>", optionally tracestate=), read as
// Properties.load reads it (tracing_props.go). The record gets W3C headers from it, in front of
// id where Debezium's TracingSpanUtil injects them: traceparent, then tracestate when OpenTelemetry
// would inject one, each as OpenTelemetry's W3CTraceContextPropagator (the one Debezium's tracing
// uses) extracts and injects it: traceparent of any version but ff (written as version 00),
// tracestate re-serialised ("k=v ,  x=y" is "k=v,x=y") or dropped when OpenTelemetry finds it
// invalid. A baggage= entry gives no header: real Debezium 3.6.1 with the OpenTelemetry SDK sends
// none (seen by the compare helper's run against it).
//
// Unlike Debezium with OpenTelemetry, outboxd creates no spans: Debezium starts a db-log-write
// span (child of the row's context) and a debezium-read span, and the traceparent it injects
// carries the db-log-write span's id; outboxd propagates the writer's context (its trace id and
// span id) unchanged, so a consumer's span becomes a child of the span that wrote the outbox row.
// The flags are the new span's as Debezium sends them with OpenTelemetry's default sampler
// (parent-based): only the sampled bit of the writer's flags ("03" is sent as "01").
//
// A value Debezium would fail on (a bad \uXXXX escape) or that has no valid traceparent is
// logged once per Router (slog.Warn, naming the column and why) and the record goes out without
// tracing headers; Debezium would start a new trace for a row without a valid traceparent.

// maxTraceHeaders is traceparent and tracestate.
const maxTraceHeaders = 2

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
	return n, nil
}

// traceContext is the W3C context of a tracing column, as the headers carry it.
type traceContext struct{ traceparent, tracestate string }

// parseTraceContext loads the Properties text, validates its traceparent (validTraceparent) and
// normalises its tracestate (normalizeTraceState).
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
	sampled := "00"
	if f := tp[54]; f == '1' || f == '3' || f == '5' || f == '7' || f == '9' || f == 'b' || f == 'd' || f == 'f' {
		sampled = "01"
	}
	tc := traceContext{traceparent: "00" + tp[2:53] + sampled}
	if ts, ok := props.get("tracestate"); ok {
		tc.tracestate = normalizeTraceState(ts)
	}
	return tc, nil
}

// validTraceparent checks a W3C traceparent as OpenTelemetry's W3CTraceContextPropagator does:
// "<version>-<32 lower-case hex, not all zero>-<16 lower-case hex, not all zero>-<2 lower-case
// hex>", version two lower-case hex digits other than ff; version 00 exactly that long, a later
// version possibly followed by "-…".
func validTraceparent(tp string) error {
	if len(tp) < 55 || tp[2] != '-' || tp[35] != '-' || tp[52] != '-' || len(tp) > 55 && tp[55] != '-' {
		return fmt.Errorf("not <version>-<32 hex>-<16 hex>-<2 hex>")
	}
	if !lowerHex(tp[:2]) || tp[:2] == "ff" {
		return fmt.Errorf("version %q is not 2 lower-case hex digits other than ff", tp[:2])
	}
	if tp[:2] == "00" && len(tp) != 55 {
		return fmt.Errorf("version 00 has more after the flags")
	}
	for _, f := range []struct {
		name string
		s    string
		zero bool // all zero is invalid
	}{{"trace id", tp[3:35], true}, {"span id", tp[36:52], true}, {"flags", tp[53:55], false}} {
		if !lowerHex(f.s) {
			return fmt.Errorf("%s %q is not lower-case hex", f.name, f.s)
		}
		if f.zero && strings.Trim(f.s, "0") == "" {
			return fmt.Errorf("%s is all zero", f.name)
		}
	}
	return nil
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// normalizeTraceState is the tracestate OpenTelemetry injects after extracting ts ("" = none):
// list members split at commas with the blanks and tabs around them (Java's split: trailing
// empty members dropped), at most 32, each key=value with a valid key and value, no key twice,
// joined with ","; any invalid member drops the whole tracestate (OpenTelemetry:
// "Unparseable tracestate header").
func normalizeTraceState(ts string) string {
	if ts == "" {
		return ""
	}
	members := strings.Split(ts, ",")
	for i := range members {
		if i > 0 {
			members[i] = strings.TrimLeft(members[i], " \t")
		}
		if i < len(members)-1 {
			members[i] = strings.TrimRight(members[i], " \t")
		}
	}
	for len(members) > 0 && members[len(members)-1] == "" {
		members = members[:len(members)-1]
	}
	if len(members) > 32 {
		return ""
	}
	seen := make(map[string]bool, len(members))
	for _, m := range members {
		k, v, ok := strings.Cut(m, "=")
		if !ok || !validTraceStateKey(k) || !validTraceStateValue(v) || seen[k] {
			return ""
		}
		seen[k] = true
	}
	return strings.Join(members, ",")
}

// validTraceStateKey is OpenTelemetry's tracestate key rule: at most 256 characters of a-z 0-9 _
// - * / and one optional @; without @ it starts with a letter; with it, the tenant (before @)
// is 1-240 characters starting with a letter or digit and the vendor 1-13 characters.
func validTraceStateKey(k string) bool {
	if k == "" || len(k) > 256 {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '*' || c == '/' || c == '@') {
			return false
		}
	}
	tenant, vendor, multi := strings.Cut(k, "@")
	if !multi {
		return k[0] >= 'a' && k[0] <= 'z'
	}
	return tenant != "" && len(tenant) <= 240 && vendor != "" && len(vendor) <= 13 && !strings.Contains(vendor, "@") &&
		(tenant[0] >= 'a' && tenant[0] <= 'z' || tenant[0] >= '0' && tenant[0] <= '9')
}

// validTraceStateValue is OpenTelemetry's tracestate value rule: 1-256 printable ASCII characters
// (space to ~) other than , and =, not ending in a space.
func validTraceStateValue(v string) bool {
	if v == "" || len(v) > 256 || v[len(v)-1] == ' ' {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' || c > '~' || c == ',' || c == '=' {
			return false
		}
	}
	return true
}
