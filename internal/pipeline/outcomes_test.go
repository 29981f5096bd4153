package pipeline

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/pipeline/delivery"
	"github.com/outboxd/outboxd/source"
	"github.com/outboxd/outboxd/transform/outbox"
)

// The done callbacks are pooled: each outcome carries its send's ID, a callback is reused only
// after the loop took its outcome, and a second call of one reaches the loop as the zero ID
// (which the core refuses) instead of as another send's outcome.
func TestDoneCallbacksPooled(t *testing.T) {
	q := newOutcomeQueue()
	ids := sendIDs(t, 3)
	d0, d1 := q.doneFor(ids[0]), q.doneFor(ids[1])
	boom := errors.New("boom")
	d1(boom)
	d0(nil)
	batch := q.take()
	if len(batch) != 2 || q.id(&batch[0]) != ids[1] || batch[0].err != boom || q.id(&batch[1]) != ids[0] || batch[1].err != nil {
		t.Fatalf("outcomes %+v", batch)
	}
	if len(q.free) != 2 {
		t.Fatalf("%d callbacks back in the pool, want 2", len(q.free))
	}
	d2 := q.doneFor(ids[2]) // reuses one of them
	if len(q.free) != 1 {
		t.Fatalf("pool not reused: %d free", len(q.free))
	}
	d2(nil)
	d2(nil) // a broken producer calls it again
	batch = q.take()
	if len(batch) != 2 || q.id(&batch[0]) != ids[2] || q.id(&batch[1]) != (delivery.ID{}) {
		t.Fatalf("outcomes after a second call %+v", batch)
	}
	if allocs := testing.AllocsPerRun(100, func() {
		q.doneFor(ids[0])(nil)
		b := q.take()
		q.id(&b[0])
	}); allocs != 0 {
		t.Fatalf("%.1f allocations per send and outcome, want 0", allocs)
	}
}

// sendIDs are the IDs of n sends of an at_least_once core.
func sendIDs(t *testing.T, n int) []delivery.ID {
	rt, _ := outbox.New(outbox.DefaultConfig())
	c := delivery.New(delivery.Config{Mode: delivery.AtLeastOnce, Route: rt.Route}, "")
	c.Open()
	rows := make([]source.Row, n)
	for i := range rows {
		rows[i] = row(fmt.Sprint(i), "x")
	}
	if err := c.Accept(time.Now(), &source.Tx{Position: "1", Rows: rows}); err != nil {
		t.Fatal(err)
	}
	var ids []delivery.ID
	for _, s := range c.Ready().Sends {
		ids = append(ids, s.ID)
	}
	if len(ids) != n || ids[0] == ids[1] {
		t.Fatalf("sends %v", ids)
	}
	return ids
}
