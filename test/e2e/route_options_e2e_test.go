package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
)

// TestRouteOptionsE2E runs the real binary with Debezium's route options switched on —
// outbox.topic_regex (route.topic.regex), outbox.tombstone_on_empty_payload
// (route.tombstone.on.empty.payload) and outbox.null_key: produce — and reads back every record:
// topics from the regex's group or the raw aggregate type when it does not match, tombstones for
// NULL and blank payloads, a null key for a NULL aggregate id, and nothing dead-lettered.
func TestRouteOptionsE2E(t *testing.T) {
	e := newEnv(t, `outbox:
  topic: '${routedByValue}.events'
  topic_regex: '(?<routedByValue>[a-z]+)_v[0-9]+'
  tombstone_on_empty_payload: true
  null_key: produce
  headers:
    type: eventType
`)
	c := e.conn()
	ctx := context.Background()
	// A text payload, as Debezium's AERT shouldProduceTombstoneEventForEmptyPayload (varchar ''):
	// jsonb text is never empty.
	if _, err := c.Exec(ctx, "ALTER TABLE outbox ALTER COLUMN payload TYPE text"); err != nil {
		t.Fatal(err)
	}
	e.start()

	type want struct {
		topic        string
		key, value   *string
		eventType    string
		aggType      string
		aggID, paylo any
	}
	s := func(v string) *string { return &v }
	rows := []want{
		{topic: "order.events", key: s("o-1"), value: s(`{"a": 1}`), eventType: "created", aggType: "order_v2", aggID: "o-1", paylo: `{"a": 1}`},
		{topic: "order.events", key: s("o-2"), value: nil, eventType: "deleted", aggType: "order_v3", aggID: "o-2", paylo: nil},
		{topic: "order.events", key: s("o-3"), value: nil, eventType: "blank", aggType: "order_v2", aggID: "o-3", paylo: " \t\n"},
		{topic: "order.events", key: nil, value: s("p"), eventType: "nokey", aggType: "order_v2", aggID: nil, paylo: "p"},
		{topic: "Audit", key: s("a-1"), value: s("q"), eventType: "logged", aggType: "Audit", aggID: "a-1", paylo: "q"},
		{topic: "order.events", key: s("o-4"), value: s(" x "), eventType: "padded", aggType: "order_v2", aggID: "o-4", paylo: " x "},
	}
	ids := e.insertRows(c, len(rows), `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
			VALUES (gen_random_uuid(), $1, $2, $3, $4) RETURNING id::text`,
		func(i int) []any { return []any{rows[i].aggType, rows[i].aggID, rows[i].eventType, rows[i].paylo} }, nil)
	e.waitStored(e.walLSN(c), 60*time.Second)

	got := testenv.ConsumeAll(t, e.broker.Addr(), `^(order\.events|Audit)$`)
	byID := map[string]testenv.Consumed{}
	for _, r := range got {
		byID[r.Header("id")] = r
	}
	if len(got) != len(rows) || len(byID) != len(rows) {
		t.Fatalf("read %d records (%d distinct ids), want %d: %+v", len(got), len(byID), len(rows), got)
	}
	show := func(b []byte) string {
		if b == nil {
			return "<null>"
		}
		return fmt.Sprintf("%q", b)
	}
	wantBytes := func(p *string) string {
		if p == nil {
			return "<null>"
		}
		return fmt.Sprintf("%q", *p)
	}
	for i, w := range rows {
		r, ok := byID[ids[i]]
		if !ok {
			t.Fatalf("row %d (%s) not delivered", i, ids[i])
		}
		if r.Topic != w.topic || show(r.Key) != wantBytes(w.key) || show(r.Value) != wantBytes(w.value) ||
			r.Header("eventType") != w.eventType || len(r.Headers) != 2 {
			t.Errorf("row %d: topic %q key %s value %s headers %v\nwant  topic %q key %s value %s eventType %q",
				i, r.Topic, show(r.Key), show(r.Value), r.Headers, w.topic, wantBytes(w.key), wantBytes(w.value), w.eventType)
		}
	}
	if n := len(testenv.ConsumeAll(t, e.broker.Addr(), `outboxd\.dlq`)); n != 0 {
		t.Errorf("%d records dead-lettered, want 0", n)
	}
}
