// HeadersOracle prints what Kafka Connect and Debezium make of the cases headers_test.go,
// timestamp_test.go and tracing_test.go assert, so that their expected bytes come from the real
// classes, not from reading them. Not part of any build; run by hand (see README.md here).
import java.io.StringReader;
import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.time.*;
import java.util.*;

import org.apache.kafka.connect.data.*;
import org.apache.kafka.connect.storage.SimpleHeaderConverter;

import io.debezium.data.SpecialValueDecimal;
import io.debezium.data.VariableScaleDecimal;
import io.debezium.time.MicroTimestamp;
import io.debezium.time.ZonedTimestamp;

public class HeadersOracle {
    static final SimpleHeaderConverter C = new SimpleHeaderConverter();

    static void h(String name, Schema s, Object v) {
        byte[] b = C.fromConnectHeader("t", "h", s, v);
        System.out.println(name + "\t" + (b == null ? "<null>" : new String(b, StandardCharsets.UTF_8)));
    }

    public static void main(String[] args) throws Exception {
        h("bool true", Schema.BOOLEAN_SCHEMA, true);
        h("bool false", Schema.BOOLEAN_SCHEMA, false);
        h("int16 -7", Schema.INT16_SCHEMA, (short) -7);
        h("int32 2147483647", Schema.INT32_SCHEMA, 2147483647);
        h("int64 18446744073709551615 as long", Schema.INT64_SCHEMA, Long.parseUnsignedLong("18446744073709551615"));
        for (String f : new String[]{"1.1", "100", "0.001", "1e-4", "12345678", "-0", "NaN", "Infinity", "-Infinity", "3.4028235e+38", "1e+07"}) {
            h("float32 " + f, Schema.FLOAT32_SCHEMA, Float.parseFloat(f));
        }
        for (String f : new String[]{"39.98", "100", "1e-05", "1.7976931348623157e+308", "0.1", "-2.5", "123456789012", "4.9e-324"}) {
            h("float64 " + f, Schema.FLOAT64_SCHEMA, Double.parseDouble(f));
        }
        for (String d : new String[]{"12.50", "-12.50", "0", "0.000001", "0.0000001", "0.00000010", "0.0000000", "-0.0000001234", "123456789.123456789", "0.000", "-3"}) {
            h("decimal " + d, Decimal.schema(new BigDecimal(d).scale()), new BigDecimal(d));
        }
        for (String d : new String[]{"12.50", "-12.50", "100", "0.00", "-1", "-128", "-129", "255", "1.5000"}) {
            BigDecimal x = new BigDecimal(d).stripTrailingZeros();
            if (x.scale() < 0) x = x.setScale(0);
            Struct s = VariableScaleDecimal.fromLogical(VariableScaleDecimal.schema(), new SpecialValueDecimal(x));
            h("vsd " + d, VariableScaleDecimal.schema(), s);
        }
        h("bytes", Schema.BYTES_SCHEMA, new byte[]{0, 1, 2, (byte) 0xfe, (byte) 0xff});
        h("bytes empty", Schema.BYTES_SCHEMA, new byte[]{});
        for (String t : new String[]{"2026-01-02T03:04:05.123456", "2026-01-02T03:04:05", "1969-12-31T23:59:59.999500", "0001-01-01T00:00:00", "-0043-03-15T10:00:00"}) {
            LocalDateTime l = LocalDateTime.parse(t);
            h("micro " + t, MicroTimestamp.schema(), MicroTimestamp.toEpochMicros(l, null));
            h("millis " + t, io.debezium.time.Timestamp.schema(), io.debezium.time.Timestamp.toEpochMillis(l, null));
        }
        for (String t : new String[]{"2026-01-02", "1969-12-31", "0001-01-01", "-0043-03-15"}) {
            h("date " + t, io.debezium.time.Date.schema(), io.debezium.time.Date.toEpochDay(LocalDate.parse(t), null));
        }
        for (String t : new String[]{"2026-01-02T03:04:05.123456+00:00", "2026-01-02T03:04:05.120000+05:30", "2026-01-02T03:04:05+00:00", "2026-01-02T03:04:05.5-00:19:32", "+10000-01-01T00:00:00Z", "-0043-03-15T10:00:00Z"}) {
            for (Integer w : new Integer[]{6, 3, 0}) {
                ZonedDateTime z = OffsetDateTime.parse(t).withOffsetSameInstant(ZoneOffset.UTC).toZonedDateTime();
                h("zoned " + t + " width " + w, ZonedTimestamp.schema(), ZonedTimestamp.toIsoString(z, null, w));
            }
        }
        // getEventTimestampMs: MicroTimestamp / 1_000 (AbstractEventRouterTest: 2019-03-24 20:52:59 -> 1553460779000)
        System.out.println("eventts micro 2019-03-24T20:52:59\t" + MicroTimestamp.toEpochMicros(LocalDateTime.parse("2019-03-24T20:52:59"), null) / 1_000);
        System.out.println("eventts micro 1969-12-31T23:59:59.999500\t" + MicroTimestamp.toEpochMicros(LocalDateTime.parse("1969-12-31T23:59:59.999500"), null) / 1_000);
        String[] props = {
            "traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\nbaggage=testprop=testvalue\n",
            "#Tue Dec 01 20:00:00 UTC 2026\ntraceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\ntracestate=rojo\\=00f067aa0ba902b7,congo\\=t61rcWkgMzE\n",
            "  traceparent : 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01  ",
            "traceparent 00-4bf92f3577b34da6a3ce929d0e0e4736-\\\n    00f067aa0ba902b7-01",
            "! comment\r\n traceparent=a\\\r\n  b\rtracestate=x\\ty\\u0041\\z",
            "a=1\na=2\n\\#x=\\u00e9\\uD83D\\uDE00\\uD800",
            "k\\ ey\\=x=v\\\n",
            "\\\n#not a comment?\nq=1",
            "bad=\\u12G4",
            "short=\\u12",
            "key",
            "=v",
            "a:b=c",
            "x=\\\n\ny=2",
        };
        for (String p : props) {
            Properties pr = new Properties();
            String out;
            try {
                pr.load(new StringReader(p));
                TreeMap<String, String> m = new TreeMap<>();
                for (String k : pr.stringPropertyNames()) m.put(k, pr.getProperty(k));
                StringBuilder sb = new StringBuilder();
                for (Map.Entry<String, String> e : m.entrySet()) sb.append('[').append(e.getKey()).append("]=[").append(e.getValue()).append(']');
                out = sb.toString();
            } catch (IllegalArgumentException e) {
                out = "error: " + e.getMessage();
            }
            System.out.println("props " + p.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t") + "\t" + new String(out.getBytes(StandardCharsets.UTF_8), StandardCharsets.UTF_8).replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t"));
        }
    }
}
