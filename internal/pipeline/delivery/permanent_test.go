package delivery

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/source"
)

// A halt on a record of a transaction still arriving in chunks: the error locates it by the
// transaction before it (its end is unknown), the position stored is that transaction's end, a
// transient failure of another record during the halt's drain and a source failure meanwhile
// do not replace the halt's error, the drain waits for every record in flight, and the
// records waiting for room are never sent.
func TestALOHaltInChunkedTransaction(t *testing.T) {
	c := New(Config{Mode: AtLeastOnce, Route: testRoute, Classify: testClassify, DeadLetter: testDeadLetter, DLQTopic: "dlq",
		StopOnPermanent: true, StopTimeout: time.Minute, MaxInflight: 4}, "p000")
	now := time.Unix(1e9, 0)
	c.Open()
	var sends []Send
	var err error
	var step func()
	step = func() {
		t.Helper()
		rd := c.Ready()
		if rd.Err != nil {
			err = rd.Err
			return
		}
		sends = append(sends, rd.Sends...)
		if rd.Save != "" {
			c.Advance()
			c.SaveResult(rd.Save, nil, false)
			step()
			return
		}
		c.Advance()
		if e := c.Check(); e != nil {
			t.Fatalf("Check: %v", e)
		}
	}
	accept := func(ch source.Tx) {
		t.Helper()
		if e := c.Accept(now, &ch); e != nil {
			t.Fatal(e)
		}
		step()
	}
	accept(source.Tx{Rows: rows(1, 2, 10), Position: "p001"})
	c.Outcome(now, sends[0].ID, nil)
	step()
	c.Outcome(now, sends[1].ID, nil) // p001 acked whole
	step()
	accept(source.Tx{Rows: rows(2, 6, 10), More: true}) // alone: 4 sent (MaxInflight), 2 waiting for room
	if len(sends) != 6 {
		t.Fatalf("%d sends, want 6", len(sends))
	}
	c.Outcome(now, sends[2].ID, errPerm) // row 2.0: refused for good → halt
	step()
	c.SourceEnded(now, now.Add(time.Hour)) // the reader failed meanwhile: tolerated
	step()
	c.Outcome(now, sends[3].ID, errTrans) // row 2.1: transient, during the halt
	step()
	c.Outcome(now, sends[4].ID, nil)
	step()
	if err != nil {
		t.Fatalf("the halt ended with a record still in flight: %v", err)
	}
	c.Outcome(now, sends[5].ID, nil) // the last one in flight: the drain ends
	step()
	var pe *PermanentError
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v, want a PermanentError", err)
	}
	if len(sends) != 6 {
		t.Fatalf("%d sends: the records waiting for room were sent after the halt", len(sends))
	}
	if pe.RowID != "2.0" || pe.Where.Position != "" || pe.Where.After != "p001" || pe.Stored != "p001" || c.Stored() != "p001" ||
		pe.Stage != "produce" || pe.Reason != "record_too_large" || !errors.Is(err, errPerm) {
		t.Fatalf("PermanentError %+v (stored %s)", pe, c.Stored())
	}
	for _, want := range []string{"in the source transaction after position p001", "its end is not known yet", "also failed", "stored position p001"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}

// Without StopOnPermanent nothing changes: the same refusal is dead-lettered and no halt happens.
func TestALONoHaltWithoutStop(t *testing.T) {
	c := New(Config{Mode: AtLeastOnce, Route: testRoute, Classify: testClassify, DeadLetter: testDeadLetter, DLQTopic: "dlq"}, "")
	now := time.Unix(1e9, 0)
	c.Open()
	ch := source.Tx{Rows: rows(1, 1, 10), Position: "p001"}
	if err := c.Accept(now, &ch); err != nil {
		t.Fatal(err)
	}
	rd := c.Ready()
	id := rd.Sends[0].ID
	c.Advance()
	c.Outcome(now, id, errPerm)
	rd = c.Ready()
	if rd.Err != nil || len(rd.Sends) != 1 || rd.Sends[0].Rec.Topic != "dlq" {
		t.Fatalf("want the dead letter, got err %v sends %d", rd.Err, len(rd.Sends))
	}
	c.Advance()
}
