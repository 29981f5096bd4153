package delivery

// exactly_once: sending a batch's records into the open Kafka transaction, and their outcomes
// (poison isolation: records that failed together are sent again one at a time).

import (
	"fmt"
	"time"

	"github.com/outboxd/outboxd/sink"
)

// sendQueued hands queued records (and, when due, the position record) to the Ready. A record
// to be sent alone waits until nothing is outstanding and is followed by a Flush. It returns
// false when it asked for a Flush (or the batch failed).
func (e *eosCore) sendQueued(now time.Time, due bool) bool {
	c, b := e.core, e.b
	if e.aloneOut > 0 { // a record sent alone: nothing else until its outcome
		if e.phase == phIdle {
			e.phase, c.rd.Flush = phFlush, true
		}
		return false
	}
	for b.queued() > 0 {
		it := b.queue[b.qi]
		f := b.finding(it.ord)
		alone := f != nil && (f.dead && f.dlqSuspect || !f.dead && f.suspect)
		if alone && (len(e.sends) > 0 || len(c.rd.Sends) > 0) {
			if e.phase == phIdle {
				e.phase, c.rd.Flush = phFlush, true
			}
			return false
		}
		b.pop()
		s := &it.snd
		*s = sent{it: it, alone: alone}
		if f != nil && f.dead {
			s.dlq = true
			dl := e.cfg.DeadLetter(it.rec, it.row, f.stage, f.reason, f.cause.Error(), it.where, now)
			s.rec = &dl
			if !f.logged {
				f.logged = true
				e.deadLetterEvent(it, f)
			}
		}
		e.emit(s)
		if alone {
			if e.phase == phIdle {
				e.phase, c.rd.Flush = phFlush, true
			}
			return false
		}
	}
	if due && !b.posSent && !e.inTx {
		if b.posSusp && (len(e.sends) > 0 || len(c.rd.Sends) > 0) {
			if e.phase == phIdle {
				e.phase, c.rd.Flush = phFlush, true
			}
			return false
		}
		b.posSent = true
		b.posRec = e.cfg.PositionRecord(b.end)
		b.posSnd = sent{alone: b.posSusp, rec: &b.posRec}
		e.emit(&b.posSnd)
		if b.posSusp {
			if e.phase == phIdle {
				e.phase, c.rd.Flush = phFlush, true
			}
			return false
		}
	}
	return true
}

func (e *eosCore) emit(s *sent) {
	e.seq++
	id := uint64(e.attempt)<<32 | uint64(e.seq)
	e.sends[id] = s
	if s.alone {
		e.aloneOut++
	}
	rec := s.record()
	e.core.rd.Sends = append(e.core.rd.Sends, Send{ID: ID{n: id}, Rec: rec, Alone: s.alone})
}

// resolve applies one send's outcome.
func (e *eosCore) resolve(now time.Time, s *sent, err error) {
	b := e.b
	if s.alone {
		e.aloneOut--
	}
	if err == nil {
		if s.it != nil {
			b.pendRecs--
			b.pendBytes -= s.it.bytes
			if b.spilled && !s.dlq {
				b.count(s.it)
			}
			if e.core.rd.CrashPoint == "" && !b.midFired && !e.isDue(now, b) {
				b.midFired = true
				e.core.rd.CrashPoint = "mid_batch"
			}
		}
		return
	}
	b.failed = true
	if b.fatalErr != nil {
		return
	}
	if fatal, why := e.cfg.Fatal(err); fatal {
		b.fatalErr = e.fatalErr(err, why)
		return
	}
	perm, reason := e.cfg.Classify(err)
	if !perm {
		return
	}
	switch {
	case s.it == nil:
		if s.alone {
			b.fatalErr = fmt.Errorf("the position record for offsets.topic %s cannot be written: %w", s.rec.Topic, err)
		} else if !b.posSusp {
			b.posSusp, b.newFind = true, true
		}
	case s.dlq:
		f := b.find(s.it.ord)
		if s.alone {
			b.fatalErr = e.dlqUnwritable(err)
		} else if !f.dlqSuspect {
			f.dlqSuspect, b.newFind = true, true
		}
	case s.alone && e.cfg.StopOnPermanent:
		e.halt(now, s.it, "produce", reason, err)
	case s.alone:
		f := b.find(s.it.ord)
		f.dead, f.stage, f.reason, f.cause, f.suspect = true, "produce", reason, err, false
		b.newFind = true
	default:
		if f := b.find(s.it.ord); !f.suspect {
			f.suspect, b.newFind = true, true
		}
	}
}

// refusal handles Produce refusing s synchronously (s is back at the head of the queue).
func (e *eosCore) refusal(now time.Time, s *sent, err error) {
	b := e.b
	perm, reason := e.cfg.Classify(err)
	switch {
	case !perm:
		e.log(time.Time{}, "cannot queue a record in the Kafka transaction", "topic", s.record().Topic, "err", err)
		b.failed = true // abort, back off, produce the batch again
	case s.it == nil:
		b.failed, b.fatalErr = true, fmt.Errorf("the position record for offsets.topic %s cannot be written: %w", s.rec.Topic, err)
	case s.dlq:
		b.failed, b.fatalErr = true, e.dlqUnwritable(err)
	case e.cfg.StopOnPermanent:
		e.halt(now, s.it, "produce", reason, err)
	default:
		f := b.find(s.it.ord)
		f.dead, f.stage, f.reason, f.cause, f.suspect = true, "produce", reason, err, false
	}
}

// record is what s sends.
func (s *sent) record() *sink.Record {
	if s.rec == nil {
		return &s.it.rec
	}
	return s.rec
}
