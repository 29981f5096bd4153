package delivery

import (
	"fmt"
	"testing"
	"time"

	"github.com/outboxd/outboxd/source"
)

// BenchmarkALOCore: one op is one single-row transaction through the at_least_once core alone
// (CanAccept, Accept, Ready/Advance, Outcome, a Tick and a save every 100 transactions): the
// core's own cost per event, without goroutines or channels.
func BenchmarkALOCore(b *testing.B) {
	c := New(Config{Mode: AtLeastOnce, Route: testRoute, Classify: testClassify, DeadLetter: testDeadLetter}, "")
	c.Open()
	rs := rows(1, 1, 300)
	pos := make([]source.Position, 100)
	for i := range pos {
		pos[i] = source.Position(fmt.Sprintf("p%03d", i))
	}
	now := time.Unix(1e9, 0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tx := source.Tx{Rows: rs, Position: pos[i%100], CommitTime: now}
		if !c.CanAccept(1, 400) {
			b.Fatal("full")
		}
		if err := c.Accept(now, &tx); err != nil {
			b.Fatal(err)
		}
		rd := c.Ready()
		id := rd.Sends[0].ID
		c.Advance()
		c.Outcome(now, id, nil)
		rd = c.Ready()
		c.Advance()
		if i%100 == 99 {
			c.Tick(now)
			if rd = c.Ready(); rd.Save != "" {
				c.Advance()
				c.SaveResult(rd.Save, nil, false)
			}
			c.Ready()
			c.Advance()
		}
	}
}
