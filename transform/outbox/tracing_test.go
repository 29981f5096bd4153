package outbox

import (
	"bytes"
	"log/slog"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
)

const testTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" // ActivateTracingSpanTest's (W3C's example)

// propsJava holds Properties.load's result for each text as testdata/javaoracle printed it
// (OpenJDK 17): the keys sorted, "[key]=[value]" each, or "error".
var propsJava = []struct{ in, want string }{
	{"traceparent=" + testTraceparent + "\nbaggage=testprop=testvalue\n", "[baggage]=[testprop=testvalue][traceparent]=[" + testTraceparent + "]"},
	{"#Tue Dec 01 20:00:00 UTC 2026\ntraceparent=" + testTraceparent + "\ntracestate=rojo\\=00f067aa0ba902b7,congo\\=t61rcWkgMzE\n",
		"[traceparent]=[" + testTraceparent + "][tracestate]=[rojo=00f067aa0ba902b7,congo=t61rcWkgMzE]"},
	{"  traceparent : " + testTraceparent + "  ", "[traceparent]=[" + testTraceparent + "  ]"},
	{"traceparent 00-4bf92f3577b34da6a3ce929d0e0e4736-\\\n    00f067aa0ba902b7-01", "[traceparent]=[" + testTraceparent + "]"},
	{"! comment\r\n traceparent=a\\\r\n  b\rtracestate=x\\ty\\u0041\\z", "[traceparent]=[ab][tracestate]=[x\tyAz]"},
	{"a=1\na=2\n\\#x=\\u00e9\\uD83D\\uDE00\\uD800", "[#x]=[é😀?][a]=[2]"},
	{"k\\ ey\\=x=v\\\n", "[k ey=x]=[v]"},
	{"\\\n#not a comment?\nq=1", "[q]=[1]"},
	{"bad=\\u12G4", "error"},
	{"short=\\u12", "error"},
	{"key", "[key]=[]"},
	{"=v", "[]=[v]"},
	{"a:b=c", "[a]=[b=c]"},
	{"x=\\\n\ny=2", "[x]=[][y]=[2]"},
}

func fmtProps(p properties) string {
	m := map[string]string{}
	for _, kv := range p {
		m[kv.key] = kv.value
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString("[" + k + "]=[" + m[k] + "]")
	}
	return b.String()
}

func TestLoadPropertiesAsJava(t *testing.T) {
	for _, c := range propsJava {
		p, err := loadProperties([]byte(c.in))
		got := fmtProps(p)
		if err != nil {
			got = "error"
		}
		if got != c.want {
			t.Errorf("loadProperties(%q) = %q (%v), want Java's %q", c.in, got, err, c.want)
		}
	}
}

func tracingRow(ctx any) *source.Row {
	str := source.Type{Kind: source.KindString, Optional: true}
	return typedRow("id", str, uid, "aggregatetype", str, "order", "aggregateid", str, "42", "payload", str, "x", "tracingspancontext", str, ctx)
}

func tracingRouter(t *testing.T, mod func(*Config)) *Router {
	t.Helper()
	cfg := DefaultConfig()
	cfg.TracingColumn = "tracingspancontext" // as config.OutboxConfig sets the default
	cfg.Headers = []Header{{Column: "type", Name: "eventType"}}
	cfg.MissingField = MissingFieldIgnore
	if mod != nil {
		mod(&cfg)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestTracing: Debezium's ActivateTracingSpanTest as the EventRouter runs it
// (tracing.with.context.field.only true).
func TestTracing(t *testing.T) {
	id := sink.Header{Key: "id", Value: []byte(uid)}
	// whenPropagationContextIsProvidedATraceIsCreated: traceparent (and baggage) headers. Debezium's
	// traceparent carries its new db-log-write span's id; outboxd's is the writer's, unchanged.
	r := tracingRouter(t, nil)
	rec, err := r.Route(tracingRow("traceparent="+testTraceparent+"\nbaggage=testprop=testvalue\n"), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	assertHeaders(t, "context provided", rec.Headers, []sink.Header{{Key: "traceparent", Value: []byte(testTraceparent)}, {Key: "baggage", Value: []byte("testprop=testvalue")}, id})

	// Properties.store's escaping; tracestate when present, in W3C order.
	rec, _ = r.Route(tracingRow("#Tue Dec 01 20:00:00 UTC 2026\ntraceparent="+testTraceparent+"\ntracestate=rojo\\=00f067aa0ba902b7,congo\\=t61rcWkgMzE\n"), time.Time{})
	assertHeaders(t, "stored with tracestate", rec.Headers, []sink.Header{{Key: "traceparent", Value: []byte(testTraceparent)},
		{Key: "tracestate", Value: []byte("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")}, id})

	// whenPropagationContextIsNotProvidedAndContextIsRequiredNoTraceIsCreated: a NULL column, or a
	// table without it (the default column applies only where it exists).
	rec, _ = r.Route(tracingRow(nil), time.Time{})
	assertHeaders(t, "NULL context", rec.Headers, []sink.Header{id})
	rec, _ = r.Route(row("id", uid, "aggregatetype", "order", "aggregateid", "42", "payload", "x"), time.Time{})
	assertHeaders(t, "no column", rec.Headers, []sink.Header{id})

	// Tracing headers stay in front of id with header columns after it.
	rw := tracingRow("traceparent=" + testTraceparent)
	rw.Columns, rw.Values, rw.Types = append(rw.Columns, "type"), append(rw.Values, source.Value{Bytes: []byte("created")}), append(rw.Types, source.Type{Kind: source.KindString})
	rec, _ = r.Route(rw, time.Time{})
	assertHeaders(t, "with a header column", rec.Headers, []sink.Header{{Key: "traceparent", Value: []byte(testTraceparent)}, id, {Key: "eventType", Value: []byte("created")}})

	// Configured explicitly: a table without the column follows outbox.missing_field.
	r = tracingRouter(t, func(c *Config) { c.TracingColumnSet, c.MissingField = true, MissingFieldError; c.Headers = nil })
	if _, err := r.Route(row("id", uid, "aggregatetype", "order", "aggregateid", "42", "payload", "x"), time.Time{}); err == nil || err.(*Error).Reason != "missing_column" {
		t.Errorf("explicit tracing column missing: %v, want a missing_column *Error", err)
	}
	r = tracingRouter(t, func(c *Config) { c.TracingColumn, c.TracingColumnSet = "", true })
	rec, _ = r.Route(tracingRow("traceparent="+testTraceparent), time.Time{})
	assertHeaders(t, "tracing off", rec.Headers, []sink.Header{id})
}

// TestTracingMalformed: a malformed context is logged once per Router and its record goes out
// without tracing headers.
func TestTracingMalformed(t *testing.T) {
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	defer slog.SetDefault(old)
	r := tracingRouter(t, nil)
	for _, ctx := range []string{"traceparent=00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "bad=\\u12G4", "nothing=here"} {
		rec, err := r.Route(tracingRow(ctx), time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		assertHeaders(t, ctx, rec.Headers, []sink.Header{{Key: "id", Value: []byte(uid)}})
	}
	if n := strings.Count(buf.String(), "level=WARN"); n != 1 || !strings.Contains(buf.String(), "column=tracingspancontext") || !strings.Contains(buf.String(), "not lower-case hex") {
		t.Errorf("log: %d warnings, want 1 naming the column and why:\n%s", n, buf.String())
	}
}

func TestValidTraceparent(t *testing.T) {
	for tp, want := range map[string]string{
		testTraceparent: "",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00":     "",
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":     "version",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01":     "trace id is all zero",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01":     "span id is all zero",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g":     "flags",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz": "not 00-",
		"00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01":     "not 00-",
		"": "not 00-",
	} {
		err := validTraceparent(tp)
		if (want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), want) {
			t.Errorf("validTraceparent(%q) = %v, want %q", tp, err, want)
		}
	}
}
