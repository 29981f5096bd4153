package delivery

import (
	"fmt"
	"testing"
	"time"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
)

// BenchmarkEOSCore: one op is one single-row source transaction through the exactly_once core
// alone (Accept, Ready/Advance, the producer steps answered at once, Outcome, commit): the
// core's own cost per event, without the loop's goroutines and channels.
func BenchmarkEOSCore(b *testing.B) {
	cfg := Config{Mode: ExactlyOnce,
		Route: func(r *source.Row, _ time.Time) (sink.Record, error) {
			return sink.Record{Topic: "t", Key: r.Values[0].Bytes, Value: r.Values[1].Bytes}, nil
		},
		PositionRecord: func(p source.Position) sink.Record { return sink.Record{Topic: "offsets", Value: []byte(p)} },
		DeadLetter: func(rec sink.Record, _ *source.Row, _, _, _ string, _ Where, _ time.Time) sink.Record {
			return rec
		}}
	c := New(cfg, "")
	c.Open()
	row := source.Row{Columns: []string{"id", "payload"}, Values: []source.Value{{Bytes: []byte("id")}, {Bytes: make([]byte, 300)}}}
	pos := make([]source.Position, b.N)
	for i := range pos {
		pos[i] = source.Position(fmt.Sprintf("%012d", i+1))
	}
	now := time.Unix(1e6, 0)
	var pending []ID
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tx := source.Tx{Position: pos[i], Rows: []source.Row{row}}
		for !c.CanAccept(1, 400) {
			drain(b, c, &pending, now)
			now = now.Add(time.Millisecond)
			c.Tick(now)
		}
		if err := c.Accept(now, &tx); err != nil {
			b.Fatal(err)
		}
		drain(b, c, &pending, now)
	}
}

// drain executes Readies until none asks for a step: sends are acked at the Flush.
func drain(b *testing.B, c *Core, pending *[]ID, now time.Time) {
	for {
		rd := c.Ready()
		if rd.Err != nil {
			b.Fatal(rd.Err)
		}
		for _, s := range rd.Sends {
			*pending = append(*pending, s.ID)
		}
		step := rd.Flush || rd.Commit || rd.Begin || rd.Abort || rd.NewProducer || rd.ReadBack
		c.Advance()
		switch {
		case rd.Begin:
			c.Began(now, nil)
		case rd.Flush:
			for _, id := range *pending {
				c.Outcome(now, id, nil)
			}
			*pending = (*pending)[:0]
			c.Flushed(now, nil)
		case rd.Commit:
			c.CommitResult(now, nil)
		case step:
			b.Fatalf("unexpected step %+v", rd)
		}
		if !step {
			return
		}
	}
}
