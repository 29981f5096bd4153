package outbox

import (
	"bytes"
	"log/slog"
	"sort"
	"strconv"
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
	// whenPropagationContextIsProvidedATraceIsCreated: a traceparent header. Debezium's traceparent
	// carries its new db-log-write span's id; outboxd's is the writer's, unchanged. That test
	// (OpenTelemetry's java agent) also sees a baggage header; real Debezium 3.6.1 with the SDK
	// sends none (the compare helper's run), and neither does outboxd.
	r := tracingRouter(t, nil)
	rec, err := r.Route(tracingRow("traceparent="+testTraceparent+"\nbaggage=testprop=testvalue\n"), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	assertHeaders(t, "context provided", rec.Headers, []sink.Header{{Key: "traceparent", Value: []byte(testTraceparent)}, id})

	// A later version is written as 00; only the sampled bit of the flags is kept (Debezium's new
	// span under OpenTelemetry's default parent-based sampler).
	rec, _ = r.Route(tracingRow("traceparent=01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03-more"), time.Time{})
	assertHeaders(t, "version 01, flags 03", rec.Headers, []sink.Header{{Key: "traceparent", Value: []byte(testTraceparent)}, id})

	// tracestate as OpenTelemetry re-serialises it (compare's golden setup T: "k=v ,  x=y" -> "k=v,x=y").
	rec, _ = r.Route(tracingRow("traceparent="+testTraceparent+"\ntracestate=k\\=v ,  x\\=y"), time.Time{})
	assertHeaders(t, "spaced tracestate", rec.Headers, []sink.Header{{Key: "traceparent", Value: []byte(testTraceparent)}, {Key: "tracestate", Value: []byte("k=v,x=y")}, id})

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

// TestValidTraceparent: OpenTelemetry's W3CTraceContextPropagator's verdicts
// (testdata/javaoracle/TraceOracle.java).
func TestValidTraceparent(t *testing.T) {
	for tp, want := range map[string]string{
		testTraceparent: "",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00":       "",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03":       "",
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":       "",
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra": "",
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":       "version",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01":       "not lower-case hex",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-":      "version 00 has more",
		" 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":      "not <version>",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01  ":     "not <version>",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01":       "trace id is all zero",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01":       "span id is all zero",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g":       "flags",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz":   "version 00 has more",
		"00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01":       "not <version>",
		"": "not <version>",
	} {
		err := validTraceparent(tp)
		if (want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), want) {
			t.Errorf("validTraceparent(%q) = %v, want %q", tp, err, want)
		}
	}
}

// TestNormalizeTraceState: the tracestate OpenTelemetry 1.49.0's W3CTraceContextPropagator
// injects after extracting each value ("" = none), as testdata/javaoracle/TraceOracle.java printed.
func TestNormalizeTraceState(t *testing.T) {
	var k32, k33 []string
	for i := 0; i < 33; i++ {
		k33 = append(k33, "k"+strconv.Itoa(i)+"=v")
	}
	k32 = k33[:32]
	for _, c := range []struct{ in, want string }{
		{"rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"},
		{"k=v ,  x=y", "k=v,x=y"}, {"k=v,\tx=y", "k=v,x=y"}, {"k=v ,x=y\t,z=w", "k=v,x=y,z=w"},
		{" k=v", ""}, {"k=v ", ""}, {"k=v\t", ""}, {"k=v,", "k=v"}, {",k=v", ""}, {"k=v,,x=y", ""}, {",", ""},
		{"K=v", ""}, {"k=v=w", ""}, {"k=", ""}, {"=v", ""}, {"k=v,k=w", ""}, {"", ""}, {"  ", ""},
		{"a@b=1", "a@b=1"}, {"a@=1", ""}, {"1a=x", ""}, {"1@v=x", "1@v=x"}, {"a@1=x", "a@1=x"}, {"a1=x", "a1=x"},
		{"a@b@c=x", ""}, {"t@" + strings.Repeat("v", 13) + "=x", "t@" + strings.Repeat("v", 13) + "=x"},
		{"t@" + strings.Repeat("v", 14) + "=x", ""}, {strings.Repeat("t", 240) + "@v=x", strings.Repeat("t", 240) + "@v=x"},
		{strings.Repeat("t", 241) + "@v=x", ""}, {strings.Repeat("k", 256) + "=x", strings.Repeat("k", 256) + "=x"},
		{strings.Repeat("k", 257) + "=x", ""}, {"a.b=x", ""}, {"a+b=x", ""}, {"@v=x", ""}, {"a@v_-*/=x", "a@v_-*/=x"},
		{"a_b-c*d/e=x y", "a_b-c*d/e=x y"}, {"k=v~", "k=v~"}, {"k=é", ""}, {"k= v", "k= v"},
		{"k=!\"#$%&'()*+-./:;<>?@[]^_`{|}", "k=!\"#$%&'()*+-./:;<>?@[]^_`{|}"},
		{"k=" + strings.Repeat("v", 256), "k=" + strings.Repeat("v", 256)}, {"k=" + strings.Repeat("v", 257), ""},
		{strings.Join(k32, ","), strings.Join(k32, ",")}, {strings.Join(k33, ","), ""},
	} {
		if got := normalizeTraceState(c.in); got != c.want {
			t.Errorf("normalizeTraceState(%q) = %q, want OpenTelemetry's %q", c.in, got, c.want)
		}
	}
}
