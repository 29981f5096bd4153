// TraceOracle prints what OpenTelemetry's W3CTraceContextPropagator (the one Debezium's tracing
// uses) extracts from a traceparent/tracestate pair and injects again: tracing_test.go's expected
// tracestate and traceparent validity. Run by hand (see README.md here).
import java.util.*;

import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanContext;
import io.opentelemetry.api.trace.propagation.W3CTraceContextPropagator;
import io.opentelemetry.context.Context;
import io.opentelemetry.context.propagation.TextMapGetter;

public class TraceOracle {
    static final TextMapGetter<Map<String, String>> GET = new TextMapGetter<>() {
        public Iterable<String> keys(Map<String, String> m) { return m.keySet(); }
        public String get(Map<String, String> m, String k) { return m == null ? null : m.get(k); }
    };

    static String q(String s) { return s == null ? "<none>" : "[" + s + "]"; }

    public static void main(String[] args) {
        String tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        String[][] cases = {
            {tp, "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"},
            {tp, "k=v ,  x=y"},
            {tp, "k=v,\tx=y"},
            {tp, " k=v"},
            {tp, "k=v "},
            {tp, "k=v,"},
            {tp, ",k=v"},
            {tp, "k=v,,x=y"},
            {tp, "K=v"},
            {tp, "k=v=w"},
            {tp, "k="},
            {tp, "=v"},
            {tp, "k=v,k=w"},
            {tp, "a@b=1"},
            {tp, "a@=1"},
            {tp, "1a=x"},
            {tp, "a_b-c*d/e=x y"},
            {tp, "k=v~"},
            {tp, "k=é"},
            {tp, ""},
            {tp, "  "},
            {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03", null},
            {"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", null},
            {"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", null},
            {"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", null},
            {"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", null},
            {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-", null},
            {" 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", null},
        };
        StringBuilder many = new StringBuilder();
        for (int i = 0; i < 33; i++) { if (i > 0) many.append(','); many.append("k").append(i).append("=v"); }
        List<String[]> all = new ArrayList<>(Arrays.asList(cases));
        all.add(new String[]{tp, many.toString()});
        all.add(new String[]{tp, many.substring(0, many.lastIndexOf(","))}); // 32 members
        for (String k : new String[]{"1@v", "a@1", "a1", "a@b@c", "t@" + "v".repeat(13), "t@" + "v".repeat(14), "t".repeat(240) + "@v", "t".repeat(241) + "@v",
                "k".repeat(256), "k".repeat(257), "a.b", "a+b", "@v", "a@v_-*/"}) {
            all.add(new String[]{tp, k + "=x"});
        }
        all.add(new String[]{tp, "k=" + "v".repeat(256)});
        all.add(new String[]{tp, "k=" + "v".repeat(257)});
        all.add(new String[]{tp, "k= v"});
        all.add(new String[]{tp, "k=!\"#$%&'()*+-./:;<>?@[]^_`{|}"});
        all.add(new String[]{tp, "k=v ,x=y\t,z=w"});
        all.add(new String[]{tp, "k=v\t"});
        all.add(new String[]{tp, ","});
        for (String[] c : all) {
            Map<String, String> carrier = new HashMap<>();
            carrier.put("traceparent", c[0]);
            if (c[1] != null) carrier.put("tracestate", c[1]);
            Context ctx = W3CTraceContextPropagator.getInstance().extract(Context.root(), carrier, GET);
            SpanContext sc = Span.fromContext(ctx).getSpanContext();
            Map<String, String> out = new TreeMap<>();
            W3CTraceContextPropagator.getInstance().inject(ctx, out, (m, k, v) -> m.put(k, v));
            System.out.println(q(c[0]) + " " + q(c[1]) + "\tvalid=" + sc.isValid() + " traceparent=" + q(out.get("traceparent")) + " tracestate=" + q(out.get("tracestate")));
        }
    }
}
