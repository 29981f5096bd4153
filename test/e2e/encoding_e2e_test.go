package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/sink/kafka"
)

// encodingRow is one outbox row of TestEncodingE2E and what Debezium (JsonConverter, expand on,
// an envelope with two fields, a partition column) makes of it.
type encodingRow struct {
	aggID, typ, payload any // nil = NULL
	deleted             bool
	p                   any // the partition column: nil = NULL (the key's murmur2 partition)
	value               map[string]string
	partition           int32 // when p is set
}

// TestEncodingE2E runs the real binary with outbox.encoding json and json_schema, each with
// outbox.expand_json_payload, an envelope (type as eventType, the boolean deleted), a partition
// column (int4 p) and outbox.schema_name_prefix (Debezium's topic.prefix in the envelope's schema
// name), and reads back every record: exact key and value bytes (as JsonConverter writes
// Debezium's Outbox Event Router output, PostgreSQL connector types), the partition (the
// column's, or the Java partitioner's over the encoded key bytes), and the row whose partition
// the topic lacks dead-lettered with reason invalid_partition.
func TestEncodingE2E(t *testing.T) {
	const envSchema = `{"type":"struct","fields":[%s,` +
		`{"type":"string","optional":true,"field":"eventType"},` +
		`{"type":"boolean","optional":false,"default":false,"field":"deleted"}],"optional":false,"name":"dbserver1.public.outbox.Order.Value"}` // DEFAULT false: Debezium's schema default
	const jsonSchemaPayload = `{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"field":"payload"}`
	const expandedSchema = `{"type":"struct","fields":[{"type":"string","optional":true,"field":"a"},` +
		`{"type":"array","items":{"type":"int32","optional":true},"optional":true,"field":"b"}],"optional":true,"name":"payload","field":"payload"}`
	rows := []encodingRow{
		// jsonb prints {"a": "x", "b": [1, 2], "z": null}; expanded, the null field is dropped.
		{aggID: "o-1", typ: "OrderCreated", payload: `{"b": [1, 2], "a": "x", "z": null}`, p: 2, partition: 2, value: map[string]string{
			"json":        `{"payload":{"a":"x","b":[1,2]},"eventType":"OrderCreated","deleted":false}`,
			"json_schema": `{"schema":` + fmt.Sprintf(envSchema, expandedSchema) + `,"payload":{"payload":{"a":"x","b":[1,2]},"eventType":"OrderCreated","deleted":false}}`,
		}},
		// NULL payload (no tombstone option): the envelope with payload null; NULL p: the partitioner.
		{aggID: "o-2", typ: "OrderDeleted", payload: nil, deleted: true, p: nil, value: map[string]string{
			"json":        `{"payload":null,"eventType":"OrderDeleted","deleted":true}`,
			"json_schema": `{"schema":` + fmt.Sprintf(envSchema, jsonSchemaPayload) + `,"payload":{"payload":null,"eventType":"OrderDeleted","deleted":true}}`,
		}},
		// A JSON string is not expanded (only { or [): it stays the jsonb text as a string.
		{aggID: "o-3", typ: nil, payload: `"plain \u00e9 😀"`, p: 0, partition: 0, value: map[string]string{
			"json":        `{"payload":"\"plain é \uD83D\uDE00\"","eventType":null,"deleted":false}`,
			"json_schema": `{"schema":` + fmt.Sprintf(envSchema, jsonSchemaPayload) + `,"payload":{"payload":"\"plain é \uD83D\uDE00\"","eventType":null,"deleted":false}}`,
		}},
		// Partition 7 of a 3-partition topic: dead-lettered (invalid_partition).
		{aggID: "o-4", typ: "OrderCreated", payload: `{"a": "y"}`, p: 7},
	}
	for _, run := range []struct{ name, enc string }{{"json", "json"}, {"json_schema", "json_schema"},
		{"json_exactly_once", "json"}} { // the transactional producer: explicit partitions too
		enc := run.enc
		t.Run(run.name, func(t *testing.T) {
			e := newEnv(t, `outbox:
  encoding: `+enc+`
  schema_name_prefix: dbserver1
  expand_json_payload: true
  fields:
    - {column: type, placement: envelope, alias: eventType}
    - {column: deleted, placement: envelope}
    - {column: p, placement: partition}
`)
			eos := run.name == "json_exactly_once"
			if eos {
				e.editConfig("kafka:\n", "kafka:\n  delivery: exactly_once\n  transactional_id: encoding-e2e\n")
			}
			c := e.conn()
			ctx := context.Background()
			if _, err := c.Exec(ctx, "ALTER TABLE outbox ADD COLUMN deleted boolean NOT NULL DEFAULT false, ADD COLUMN p int4"); err != nil {
				t.Fatal(err)
			}
			e.start()
			ids := e.insertRows(c, len(rows), `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, deleted, p)
				VALUES (gen_random_uuid(), 'Order', $1, $2, $3::jsonb, $4, $5) RETURNING id::text`,
				func(i int) []any { r := rows[i]; return []any{r.aggID, r.typ, r.payload, r.deleted, r.p} }, nil)
			if eos { // offsets live in Kafka: wait for the committed output instead
				harness.WaitFor(t, 60*time.Second, "3 records and 1 dead letter committed", func() bool {
					return len(testenv.ConsumeAll(t, e.broker.Addr(), `^outbox\.event\.Order$`)) == 3 &&
						len(testenv.ConsumeAll(t, e.broker.Addr(), `outboxd\.dlq`)) == 1
				})
			} else {
				e.waitStored(e.walLSN(c), 60*time.Second)
			}

			got := testenv.ConsumeAll(t, e.broker.Addr(), `^outbox\.event\.Order$`)
			byID := map[string]testenv.Consumed{}
			for _, r := range got {
				byID[r.Header("id")] = r
			}
			if len(got) != 3 || len(byID) != 3 {
				t.Fatalf("read %d records (%d distinct ids), want 3: %+v", len(got), len(byID), got)
			}
			for i, w := range rows[:3] {
				r, ok := byID[ids[i]]
				if !ok {
					t.Fatalf("row %d (%s) not delivered", i, ids[i])
				}
				key := fmt.Sprintf(`"%s"`, w.aggID)
				if enc == "json_schema" {
					key = fmt.Sprintf(`{"schema":{"type":"string","optional":true},"payload":"%s"}`, w.aggID)
				}
				part := w.partition
				if w.p == nil {
					part = kafka.PartitionFor([]byte(key), 3) // murmur2 over the encoded key, as Kafka's producer
				}
				if string(r.Key) != key || string(r.Value) != w.value[enc] || r.Partition != part {
					t.Errorf("row %d: partition %d key %s\nvalue %s\nwant partition %d key %s\nvalue %s",
						i, r.Partition, r.Key, r.Value, part, key, w.value[enc])
				}
			}
			dlq := testenv.ConsumeAll(t, e.broker.Addr(), `outboxd\.dlq`)
			if len(dlq) != 1 || dlq[0].Header(sink.HeaderReason) != "invalid_partition" {
				t.Fatalf("dead letters %+v, want the row with p=7 (invalid_partition)", dlq)
			}
		})
	}
}
