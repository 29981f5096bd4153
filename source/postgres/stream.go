package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/outboxd/outboxd/source"
)

// stream is the state of the loop that owns the replication connection. Only the loop's
// goroutine touches it.
type stream struct {
	s    *Source
	conn *pgconn.PgConn
	dec  *Decoder

	from       pglogrepl.LSN // Open's position: transactions ending at or before it are skipped
	lastHanded pglogrepl.LSN // position of the last Tx Next returned (initially from)
	out        *source.Tx    // a finished Tx waiting for Next; nothing is read meanwhile

	sent       pglogrepl.LSN // flush LSN of the last status update
	lastStatus time.Time     // when it was sent (zero: none yet)
	replyNow   bool          // the server asked for a reply

	idleCand pglogrepl.LSN // highest WAL end a keepalive reported
	lastIdle time.Time     // when idle progress was last handed out
	skipped  int           // transactions skipped because they end at or before from
}

// run drives the loop until Close (ctx) or a failure, then publishes the outcome to Next.
func (s *Source) run(ctx context.Context, st *stream) {
	err := st.loop(ctx)
	if ctx.Err() != nil {
		// Closing: tell the server the last confirmed position before the connection goes.
		if serr := st.sendStatus(time.Now()); serr != nil {
			s.log.Warn("final status update failed; the next start confirms the stored position", "err", serr)
		}
		err = ErrClosed
	} else {
		s.log.Debug("replication stream ended", "err", err) // Next returns err: the caller reports it
	}
	s.err = err
	close(s.done)
}

func (st *stream) loop(ctx context.Context) error {
	idle := min(idleGap, st.s.cfg.StandbyTimeout)
	for {
		now := time.Now()
		if st.statusDue(now) {
			if err := st.sendStatus(now); err != nil {
				return err
			}
		}
		if st.out == nil && st.idleReady() && !now.Before(st.lastIdle.Add(idle)) {
			st.out = &source.Tx{Position: lsnPosition(st.idleCand)}
			st.lastIdle = now
		}

		deadline := st.nextWake(now, idle)
		wctx, cancel := context.WithDeadline(ctx, deadline)
		st.s.setWake(cancel)
		// A Confirm that landed before setWake found no wake to call: look at it now.
		if pglogrepl.LSN(st.s.confirmed.Load()) > st.sent && deadline.After(st.lastStatus.Add(confirmGap)) {
			cancel()
		}

		var err error
		if st.out != nil {
			select {
			case st.s.txCh <- *st.out:
				st.lastHanded = mustLSN(st.out.Position)
				st.out = nil
			case <-wctx.Done():
			}
		} else {
			err = st.receive(wctx)
		}
		st.s.setWake(nil)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			return err
		}
	}
}

// receive reads and handles one message. A wait that ended because wctx expired or was
// interrupted is not an error.
func (st *stream) receive(wctx context.Context) error {
	msg, err := st.conn.ReceiveMessage(wctx)
	if err != nil {
		if wctx.Err() != nil && (pgconn.Timeout(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
			return nil
		}
		return fmt.Errorf("replication stream on slot %q: receive: %w: outboxd stops; on restart it resumes from the stored position", st.s.cfg.Slot, err)
	}
	switch m := msg.(type) {
	case *pgproto3.CopyData:
		return st.handleCopyData(m.Data)
	case *pgproto3.ErrorResponse:
		return fmt.Errorf("replication stream on slot %q: server error: %w: outboxd stops; on restart it resumes from the stored position", st.s.cfg.Slot, pgconn.ErrorResponseToPgError(m))
	case *pgproto3.CopyDone:
		return fmt.Errorf("replication stream on slot %q: the server ended the stream (shutdown or failover?): outboxd stops; on restart it resumes from the stored position", st.s.cfg.Slot)
	default:
		return nil // NoticeResponse, ParameterStatus: nothing to do
	}
}

func (st *stream) handleCopyData(data []byte) error {
	if len(data) == 0 {
		return errors.New("replication stream: empty CopyData message")
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		pkm, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return fmt.Errorf("replication stream: %w", err)
		}
		st.noteWALEnd(pkm.ServerWALEnd)
		if pkm.ServerWALEnd > st.idleCand {
			st.idleCand = pkm.ServerWALEnd
		}
		if pkm.ReplyRequested {
			st.replyNow = true
		}
	case pglogrepl.XLogDataByteID:
		xld, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return fmt.Errorf("replication stream: %w", err)
		}
		st.noteWALEnd(xld.ServerWALEnd)
		if len(xld.WALData) > 0 && xld.WALData[0] == msgMessage && !st.dec.InTx() {
			return st.message(xld.WALData) // a heartbeat (heartbeat.go)
		}
		tx, done, err := st.dec.Decode(xld.WALData)
		if err != nil {
			return fmt.Errorf("decode WAL at %s on slot %q: %w", xld.WALStart, st.s.cfg.Slot, err)
		}
		if done {
			return st.deliver(tx)
		}
	}
	return nil
}

// deliver queues a finished transaction for Next, skipping those at or before Open's position.
func (st *stream) deliver(tx source.Tx) error {
	pos := mustLSN(tx.Position)
	if pos <= st.from {
		st.skipped++
		if st.skipped == 1 {
			st.s.log.Debug("skipping transactions at or before the stored position", "position", st.from, "tx_end", pos)
		}
		return nil
	}
	if pos <= st.lastHanded {
		return fmt.Errorf("replication stream on slot %q sent a transaction ending at %s, not after the last position handed out (%s): refusing to go backwards", st.s.cfg.Slot, pos, st.lastHanded)
	}
	st.out = &tx
	if len(tx.Rows) > 0 {
		st.s.noteChange()
	}
	return nil
}

func (st *stream) noteWALEnd(l pglogrepl.LSN) {
	if uint64(l) > st.s.walEnd.Load() {
		st.s.walEnd.Store(uint64(l))
	}
}

// idleReady reports whether idle progress to idleCand may be handed out now (ignoring pacing):
// nothing partially received, everything handed out confirmed, and the keepalive is news.
func (st *stream) idleReady() bool {
	if st.s.ext.noKeepaliveProgress {
		return false
	}
	return st.idleCand > st.lastHanded && st.idleCand > st.from && !st.dec.InTx() &&
		pglogrepl.LSN(st.s.confirmed.Load()) >= st.lastHanded
}

// statusDue reports whether a status update must go out now: the server asked, the standby
// interval passed, or a Confirm advanced the position and confirmGap passed since the last one.
func (st *stream) statusDue(now time.Time) bool {
	if st.replyNow || !now.Before(st.lastStatus.Add(st.s.cfg.StandbyTimeout)) {
		return true
	}
	return pglogrepl.LSN(st.s.confirmed.Load()) > st.sent && !now.Before(st.lastStatus.Add(confirmGap))
}

// nextWake is when the loop must wake up by itself: the next periodic status update, a delayed
// confirmation, or paced idle progress.
func (st *stream) nextWake(now time.Time, idle time.Duration) time.Time {
	wake := st.lastStatus.Add(st.s.cfg.StandbyTimeout)
	if pglogrepl.LSN(st.s.confirmed.Load()) > st.sent {
		wake = earliest(wake, st.lastStatus.Add(confirmGap))
	}
	if st.out == nil && st.idleReady() {
		wake = earliest(wake, st.lastIdle.Add(idle))
	}
	if wake.Before(now) {
		wake = now
	}
	return wake
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// sendStatus sends a standby status update with write = flush = apply = the confirmed LSN.
func (st *stream) sendStatus(now time.Time) error {
	c := pglogrepl.LSN(st.s.confirmed.Load())
	nc := st.conn.Conn()
	_ = nc.SetWriteDeadline(now.Add(10 * time.Second))
	err := pglogrepl.SendStandbyStatusUpdate(context.Background(), st.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: c, WALFlushPosition: c, WALApplyPosition: c, ClientTime: now,
	})
	_ = nc.SetWriteDeadline(time.Time{})
	if err != nil {
		return fmt.Errorf("send standby status update on slot %q: %w", st.s.cfg.Slot, err)
	}
	if c != st.sent {
		st.s.log.Debug("status update", "confirmed", c)
	}
	st.sent, st.lastStatus, st.replyNow = c, now, false
	return nil
}
