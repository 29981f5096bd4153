package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
)

// TestReplayKeepsColumnTypes: a row-as-JSON dead letter holds the row's text values, not their
// types; `dlq replay` reads the table's column types from the source, so the replayed record is
// what the pipeline would have sent under outbox.encoding json and Debezium's header values: an
// int4 key as the JSON number 42 (hashed to the partition of 42, not of "42"), a boolean header
// as true, not t.
func TestReplayKeepsColumnTypes(t *testing.T) {
	e := newEnv(t, `outbox:
  encoding: json
  columns: {aggregate_id: n}
  headers: {flag: flag}
`)
	c := e.conn()
	ctx := context.Background()
	if _, err := c.Exec(ctx, "ALTER TABLE outbox ADD COLUMN n int, ADD COLUMN flag boolean"); err != nil {
		t.Fatal(err)
	}
	p := e.start()
	// "has space" is no topic name: the row is dead-lettered at the transform (invalid_topic).
	ids := e.insertRows(c, 1, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, n, flag)
			VALUES (gen_random_uuid(), 'has space', 'unused', 'created', '{"a": 1}', 42, true) RETURNING id::text`,
		func(int) []any { return nil }, nil)
	e.waitStored(e.walLSN(c), 60*time.Second)
	dlq := testenv.Consume(t, e.broker.Addr(), `outboxd\.dlq`, 1, 20*time.Second)
	if len(dlq) != 1 || dlq[0].Header("outboxd.error.reason") != "invalid_topic" || dlq[0].Header("id") != ids[0] {
		t.Fatalf("dead letters %+v\noutput:\n%s", dlq, p.Out.String())
	}
	// The fix: a fixed topic. Replay routes the row again with the current config.
	e.editConfig("encoding: json\n", "encoding: json\n  topic: fixed.orders\n")
	stdout, stderr, code := e.dlqRun("replay", "--all")
	if code != 0 || !strings.Contains(stdout, "1 replayed, 0 failed") {
		t.Fatalf("replay: exit %d\n%s\n%s", code, stdout, stderr)
	}
	got := testenv.Consume(t, e.broker.Addr(), `^fixed\.orders$`, 1, 20*time.Second)
	if len(got) != 1 {
		t.Fatalf("replayed %d records to fixed.orders, want 1", len(got))
	}
	r := got[0]
	if string(r.Key) != "42" || string(r.Value) != `"{\"a\": 1}"` || r.Header("flag") != "true" || r.Header("id") != ids[0] {
		t.Errorf("replayed key %q value %q flag %q id %q; want key 42, value \"{\\\"a\\\": 1}\", flag true, id %s",
			r.Key, r.Value, r.Header("flag"), r.Header("id"), ids[0])
	}
}
