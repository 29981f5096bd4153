package pipeline

import (
	"log/slog"
	"time"
)

// Kafka ack stalls. The producer retries a failing broker internally (sarama: up to its retry
// limit, with backoff) and the pipeline hears of an error only when it gives up, so a broker
// outage would otherwise pass without a log line: records sit in flight and nothing is acked.
// stallWatch turns that silence into a WARN line after stallWarnAfter without any outcome while
// records are in flight, repeated every stallWarnEvery while it lasts, and an INFO line when
// outcomes resume.
const (
	stallWarnAfter = 10 * time.Second
	stallWarnEvery = 30 * time.Second
)

// stallWatch is pure: the loop feeds it the time of each outcome batch and each tick.
type stallWatch struct {
	lastProgress time.Time // last outcome, or when records went in flight after being idle
	lastWarn     time.Time // zero: not warned during this stall
	idle         bool      // nothing in flight at the last tick
}

// stallEvent is what a tick asks the loop to log.
type stallEvent int

const (
	stallNone stallEvent = iota
	stallWarn
	stallResolved
)

// progress records that outcomes (acks, failures, dead letters) arrived at now. It reports
// stallResolved when this ends a stall that was warned about, with the stall's length.
func (s *stallWatch) progress(now time.Time) (stallEvent, time.Duration) {
	ev, d := stallNone, time.Duration(0)
	if !s.lastWarn.IsZero() {
		ev, d = stallResolved, now.Sub(s.lastProgress)
	}
	s.lastProgress, s.lastWarn = now, time.Time{}
	return ev, d
}

// tick is called periodically with the number of records in flight. It reports stallWarn, with
// how long nothing was acked, when a warning is due.
func (s *stallWatch) tick(now time.Time, inflight int) (stallEvent, time.Duration) {
	if inflight == 0 {
		s.idle, s.lastWarn = true, time.Time{}
		return stallNone, 0
	}
	if s.idle || s.lastProgress.IsZero() {
		// Records just went in flight: the wait starts now, not at the last ack hours ago.
		s.idle, s.lastProgress = false, now
		return stallNone, 0
	}
	since := now.Sub(s.lastProgress)
	if since < stallWarnAfter {
		return stallNone, 0
	}
	if !s.lastWarn.IsZero() && now.Sub(s.lastWarn) < stallWarnEvery {
		return stallNone, 0
	}
	s.lastWarn = now
	return stallWarn, since
}

// logStall writes the line for ev.
func logStall(log *slog.Logger, ev stallEvent, d time.Duration, inflight int) {
	switch ev {
	case stallWarn:
		log.Warn("no acknowledgement from Kafka: records are in flight and the producer keeps retrying (brokers down, no leader, fewer in-sync replicas than min.insync.replicas, or a topic that does not exist while the cluster does not auto-create topics?); nothing is stored past them, delivery resumes when Kafka answers",
			"waiting", d.Round(time.Second), "inflight", inflight)
	case stallResolved:
		log.Info("Kafka acknowledges again", "stalled", d.Round(time.Millisecond))
	}
}
