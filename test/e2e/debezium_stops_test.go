package e2e

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
)

// Rows on which Debezium's task fails and stops (Kafka Connect's errors.tolerance=none; Connect
// has no DLQ for source connectors) while outboxd dead-letters the row and goes on: inserted after
// the event-by-event comparison (each stops some connectors for good), in this order.

// taskStopper is one such row.
type taskStopper struct {
	row    cmpRow
	fails  func(dbzSetup) bool // the setups whose Debezium task fails on it
	reason string              // outboxd's outboxd.error.reason there
	trace  string              // in the failed task's trace
}

func taskStoppers() []taskStopper {
	expands := func(s dbzSetup) bool { return s.connector["transforms.outbox.table.expand.json.payload"] == "true" }
	return []taskStopper{
		// table.expand.json.payload on an integer beyond int64: Debezium's conversion of the
		// expanded payload fails (a BigDecimal for a float64 schema); without expansion it is a
		// jsonb text like any other, delivered by both.
		{row: cmpRow{label: "numbers-bigint", aggType: "Order", aggID: sp("order-numbers-big"), typ: sp("Numbers"),
			payload: sp(`{"big": 12345678901234567890, "huge": 1.5e300}`)}, fails: expands, reason: "invalid_value", trace: "DataException"},
		// a topic name Kafka refuses (a space): the producer fails (InvalidTopicException)
		{row: cmpRow{label: "invalid-topic", aggType: "order lines", aggID: sp("o-bad"), typ: sp("Bad"), payload: sp(`{}`)},
			fails: func(dbzSetup) bool { return true }, reason: "invalid_topic", trace: "InvalidTopicException"},
	}
}

// checkTaskStopper inserts st's row into public.outbox and checks every setup on that table:
// where st fails, Debezium's task (when still running) goes FAILED and outboxd dead-letters the
// row with st.reason; elsewhere both deliver it (not to outboxd's DLQ).
func checkTaskStopper(t *testing.T, c *testenv.Connect, pg *testenv.Postgres, addr string, conn *pgx.Conn, setups []dbzSetup, st taskStopper) {
	t.Helper()
	r := st.row
	if _, err := conn.Exec(context.Background(), `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ($1, $2, $3, $4, $5::jsonb)`,
		r.id(), r.aggType, r.aggID, r.typ, r.payload); err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	for _, s := range setups {
		if s.table != "public.outbox" {
			continue
		}
		name := s.connectorConfig(pg.Conn("app"))["name"]
		_, task, trace, _ := c.StatusOf(name)
		dlq := "obx" + s.name + ".dlq"
		if !st.fails(s) {
			if task == "FAILED" {
				t.Fatalf("setup %s: Debezium's task failed before row %s: %s", s.name, r.label, firstLine(trace))
			}
			harness.WaitFor(t, time.Minute, "setup "+s.name+": both tools delivered row "+r.label, func() bool {
				var dbz, obx bool
				for _, rec := range readTopics(t, addr, "^(dbz|obx)"+s.name+`\..*`, 0, 0) {
					if id, _ := rec.header("id"); id == r.id() {
						dbz = dbz || strings.HasPrefix(rec.Topic, "dbz")
						obx = obx || (strings.HasPrefix(rec.Topic, "obx") && rec.Topic != dlq)
					}
				}
				return dbz && obx
			})
			continue
		}
		if task == "FAILED" && !strings.Contains(trace, st.trace) {
			t.Logf("setup %s: Debezium's task had failed before row %s", s.name, r.label)
		} else {
			harness.WaitFor(t, 2*time.Minute, "Debezium's task "+name+" FAILED on row "+r.label, func() bool {
				_, task, trace, _ = c.StatusOf(name)
				return task == "FAILED"
			})
			if !strings.Contains(trace, st.trace) {
				t.Errorf("setup %s: Debezium's task failed on row %s without %q in its trace: %s", s.name, r.label, st.trace, trace)
			}
			t.Logf("setup %s: Debezium on row %s: task %s within %v: %s", s.name, r.label, task, time.Since(at).Round(time.Millisecond), firstLine(trace))
		}
		var dl *cmpRecord
		for _, rec := range readTopics(t, addr, "^"+regexp.QuoteMeta(dlq)+"$", 1, time.Minute) {
			if id, _ := rec.header("id"); id == r.id() {
				dl = &rec
			}
		}
		if dl == nil {
			t.Fatalf("setup %s: outboxd did not dead-letter row %s (%s) to %s", s.name, r.label, r.id(), dlq)
		}
		if reason, _ := dl.header("outboxd.error.reason"); reason != st.reason {
			t.Errorf("setup %s: outboxd dead-lettered row %s with reason %q, want %s", s.name, r.label, reason, st.reason)
		}
	}
}
