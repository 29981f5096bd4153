package delivery

import (
	"errors"
	"fmt"
	"time"

	"github.com/outboxd/outboxd/source"
)

// canAccept: a chunk fits when its records fit the tracker (records, transactions) and its bytes
// fit MaxInflightBytes, or when nothing is in flight: an oversized chunk then goes alone. When it
// does not fit, the loop waits for room: the resolved prefix goes to the save queue at once, as
// on a commit tick (the room itself is freed without waiting for the store).
func (a *alo) canAccept(rows, bytes int) bool {
	if a.phase != phaseRunning {
		return false
	}
	if a.tracker.CanAdd(rows) && (a.live == 0 || a.bytes+bytes <= a.c.cfg.MaxInflightBytes) {
		return true
	}
	a.scheduleSave()
	return false
}

// accept tracks one chunk and queues its records (or, for rows the transform refuses, their
// dead letters). Its flights come from a block shared with the chunks around it (flights).
func (a *alo) accept(now time.Time, ch *source.Tx) error {
	if a.phase != phaseRunning || !a.tracker.CanAdd(len(ch.Rows)) || a.live > 0 && a.bytes+source.ChunkBytes(ch) > a.c.cfg.MaxInflightBytes {
		return fmt.Errorf("delivery: Accept of a chunk of %d rows that CanAccept refuses (phase %d, %d records and %d bytes in flight)",
			len(ch.Rows), a.phase, a.live, a.bytes)
	}
	seq, err := a.tracker.Add(len(ch.Rows), ch.More, ch.Position)
	if err != nil {
		return fmt.Errorf("delivery: track chunk: %w", err)
	}
	where := Where{Position: ch.Position}
	if ch.More {
		where = Where{After: a.after}
	} else {
		a.after = ch.Position
	}
	if len(ch.Rows) > 0 {
		fs := a.blocks.flights(len(ch.Rows))
		a.live += len(fs)
		for i := range fs {
			f := &fs[i]
			f.seq, f.row, f.commitTime, f.where, f.ord = seq, &ch.Rows[i], ch.CommitTime, where, a.nrec
			a.nrec++
			f.bytes = source.RowBytes(f.row)
			a.bytes += f.bytes
			if a.halted != nil { // halted on an earlier row of this chunk: the rest is withheld
				a.stickAt(f)
				continue
			}
			rec, err := a.c.cfg.Route(f.row, f.commitTime)
			f.rec = rec
			if err != nil {
				a.deadLetter(now, f, "transform", ReasonOf(err), err)
				continue
			}
			a.send(f)
		}
	}
	a.commitPrefix() // a 0-row chunk may close a resolved transaction
	if a.halted != nil {
		a.maybeFinish()
	}
	return nil
}

// send hands f's record (or dead letter) to the loop, or queues it while MaxInflight sends are
// outstanding.
func (a *alo) send(f *flight) {
	s := Send{ID: ID{f: f}, Rec: &f.rec}
	if a.outstanding < a.c.cfg.MaxInflight && a.bhead == len(a.backlog) {
		a.outstanding++
		a.c.rd.Sends = append(a.c.rd.Sends, s)
		return
	}
	a.backlog = append(a.backlog, s)
}

// release hands queued sends to the loop as far as outcomes made room.
func (a *alo) release() {
	for a.outstanding < a.c.cfg.MaxInflight && a.bhead < len(a.backlog) {
		a.outstanding++
		a.c.rd.Sends = append(a.c.rd.Sends, a.backlog[a.bhead])
		a.backlog[a.bhead] = Send{}
		a.bhead++
	}
	if a.bhead == len(a.backlog) {
		a.backlog, a.bhead = a.backlog[:0], 0
	}
}

// ReasonOf is the dead-letter reason of a transform error: its ReasonCode, else "invalid_value".
func ReasonOf(err error) string {
	var re interface{ ReasonCode() string }
	if errors.As(err, &re) {
		return re.ReasonCode()
	}
	return "invalid_value"
}
