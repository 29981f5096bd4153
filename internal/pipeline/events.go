package pipeline

// What both runners do with the core's outputs that is not delivery I/O: dead letters as the
// core's Config.DeadLetter, and Ready.Events as metrics and log lines.

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/outboxd/outboxd/internal/pipeline/delivery"
	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
)

// deadLetterFunc is the core's Config.DeadLetter: the dead letter of sink.DeadLetter, on topic,
// with the value dropped (sink.HeaderValueDropped) when the dead letter would exceed maxRecordBytes
// itself, and, for a row of a chunk whose transaction has not ended yet (no position),
// sink.HeaderSourceAfter.
func deadLetterFunc(topic string, maxRecordBytes int) func(sink.Record, *source.Row, string, string, string, delivery.Where, time.Time) sink.Record {
	return func(rec sink.Record, row *source.Row, stage, reason, msg string, at delivery.Where, now time.Time) sink.Record {
		dl := sink.DeadLetter(rec, row, stage, reason, msg, at.Position, now)
		dl.Topic = topic
		if at.Position == "" && at.After != "" {
			dl.Headers = append(dl.Headers, sink.Header{Key: sink.HeaderSourceAfter, Value: []byte(at.After)})
		}
		if size := dl.Size(); size > maxRecordBytes {
			// The dead letter would be refused too (a payload over the size limit): keep the
			// headers, drop the value; the row is still in the outbox table under its id.
			dl.Value = nil
			dl.Headers = append(dl.Headers, sink.Header{Key: sink.HeaderValueDropped, Value: []byte(strconv.Itoa(size))})
		}
		return dl
	}
}

// handleEvents turns a Ready's core events into metrics and log lines. The acks of one Ready
// arrived together: one clock reading stamps them all (read per record it showed in profiles).
func handleEvents(log *slog.Logger, m Metrics, events []delivery.Event) {
	var now time.Time
	for i := range events {
		e := &events[i]
		switch e.Kind {
		case delivery.EventProduced:
			if now.IsZero() {
				now = time.Now()
			}
			for n := max(e.Count, 1); n > 0; n-- {
				m.Produced(e.Topic, e.Time, now)
			}
		case delivery.EventDeadLetter:
			m.DeadLettered(e.Reason)
			args := []any{"reason", e.Reason, "stage", e.Stage, "error", e.Msg, "topic", e.Topic, "table", e.Table, "position", string(e.Position), "id", e.RowID}
			if e.After != "" {
				args = append(args, "after", string(e.After))
			}
			log.Warn("dead-lettering record", args...)
		case delivery.EventLog:
			log.Log(context.Background(), e.Level, e.Msg, e.Args...)
		}
	}
}

// confirmLog is the "committed position" info line, at most every commitLogEvery.
type confirmLog struct{ last time.Time }

func (c *confirmLog) committed(log *slog.Logger, pos source.Position, inflight int) {
	if now := time.Now(); now.Sub(c.last) >= commitLogEvery {
		log.Info("committed position", "position", string(pos), "inflight", inflight)
		c.last = now
	}
}
