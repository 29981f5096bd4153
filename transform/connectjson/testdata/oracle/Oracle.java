// Oracle prints what Kafka Connect's JsonConverter and Debezium's EventRouter (expand.json.payload)
// write for the inputs on stdin, one request per line, one answer per line (hex of the bytes, or
// "ERR <exception>"). It generated testdata/*.golden; see gen.sh. Not part of the Go build.
//
//   S <hex utf8>            JsonConverter (schemas off) of a STRING value new String(bytes, UTF_8)
//   D <hex 16 long bits>    JsonConverter (schemas off) of a FLOAT64 value
//   F <hex 8 int bits>      JsonConverter (schemas off) of a FLOAT32 value
//   DT <hex 16 long bits>   Double.toString
//   E <null> <empty> <hex>  EventRouter with table.expand.json.payload=true on a record whose
//                           string payload is the bytes; answers "<hex schemas off> <hex schemas on>"
//   X <scale> <hex text>    JsonConverter (schemas on) of Decimal.schema(scale), new BigDecimal(text)
import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.io.*;
import java.time.Instant;
import java.util.*;

import org.apache.kafka.connect.data.*;
import org.apache.kafka.connect.json.JsonConverter;
import org.apache.kafka.connect.source.SourceRecord;

import io.debezium.data.Envelope;
import io.debezium.transforms.outbox.EventRouter;

public class Oracle {
    static JsonConverter conv(boolean schemas) {
        JsonConverter c = new JsonConverter();
        c.configure(Map.of("schemas.enable", String.valueOf(schemas)), false);
        return c;
    }

    static String hex(byte[] b) {
        if (b == null) return "NULL";
        StringBuilder sb = new StringBuilder();
        for (byte x : b) sb.append(String.format("%02x", x & 0xff));
        return sb.length() == 0 ? "-" : sb.toString();
    }

    static byte[] unhex(String s) {
        if (s.equals("-")) return new byte[0];
        byte[] b = new byte[s.length() / 2];
        for (int i = 0; i < b.length; i++) b[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
        return b;
    }

    static final Map<String, EventRouter<SourceRecord>> routers = new HashMap<>();

    static EventRouter<SourceRecord> router(String nul, String empty) {
        return routers.computeIfAbsent(nul + "/" + empty, k -> {
            EventRouter<SourceRecord> r = new EventRouter<>();
            Map<String, String> cfg = new HashMap<>();
            cfg.put("table.expand.json.payload", "true");
            cfg.put("table.json.payload.null.behavior", nul);
            cfg.put("table.json.payload.empty.array.behavior", empty);
            r.configure(cfg);
            return r;
        });
    }

    static SourceRecord record(String payload) {
        Schema rs = SchemaBuilder.struct()
                .field("id", SchemaBuilder.string())
                .field("aggregatetype", SchemaBuilder.string())
                .field("aggregateid", SchemaBuilder.string())
                .field("type", SchemaBuilder.string())
                .field("payload", SchemaBuilder.string().optional())
                .build();
        Envelope env = Envelope.defineSchema().withName("event.Envelope").withRecord(rs)
                .withSource(SchemaBuilder.struct().build()).build();
        Struct after = new Struct(rs);
        after.put("id", "da8d6de6-3b77-45ff-8f44-57db55a7a06c");
        after.put("aggregatetype", "User");
        after.put("aggregateid", "10711fa5");
        after.put("type", "UserCreated");
        after.put("payload", payload);
        Struct body = env.create(after, null, Instant.now());
        return new SourceRecord(new HashMap<>(), new HashMap<>(), "db.outbox", env.schema(), body);
    }

    public static void main(String[] args) throws Exception {
        JsonConverter off = conv(false), on = conv(true);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(new FileOutputStream(FileDescriptor.out), false, "UTF-8");
        String line;
        while ((line = in.readLine()) != null) {
            String[] f = line.split(" ");
            try {
                switch (f[0]) {
                    case "S":
                        out.println(hex(off.fromConnectData("t", Schema.STRING_SCHEMA, new String(unhex(f[1]), StandardCharsets.UTF_8))));
                        break;
                    case "D":
                        out.println(hex(off.fromConnectData("t", Schema.FLOAT64_SCHEMA, Double.longBitsToDouble(Long.parseUnsignedLong(f[1], 16)))));
                        break;
                    case "F":
                        out.println(hex(off.fromConnectData("t", Schema.FLOAT32_SCHEMA, Float.intBitsToFloat(Integer.parseUnsignedInt(f[1], 16)))));
                        break;
                    case "DT":
                        out.println(hex(Double.toString(Double.longBitsToDouble(Long.parseUnsignedLong(f[1], 16))).getBytes(StandardCharsets.UTF_8)));
                        break;
                    case "E": {
                        SourceRecord r = router(f[1], f[2]).apply(record(new String(unhex(f[3]), StandardCharsets.UTF_8)));
                        String a, b;
                        try { a = hex(off.fromConnectData("t", r.valueSchema(), r.value())); } catch (Exception e) { a = "ERR"; }
                        try { b = hex(on.fromConnectData("t", r.valueSchema(), r.value())); } catch (Exception e) { b = "ERR"; }
                        out.println(a + " " + b);
                        break;
                    }
                    case "X": {
                        Schema s = Decimal.schema(Integer.parseInt(f[1]));
                        out.println(hex(on.fromConnectData("t", s, new BigDecimal(new String(unhex(f[2]), StandardCharsets.UTF_8)))));
                        break;
                    }
                    default:
                        out.println("ERR unknown request");
                }
            } catch (Throwable e) {
                out.println("ERR " + e.getClass().getName());
            }
            out.flush();
        }
    }
}
