package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
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
	w    *waker

	from pglogrepl.LSN // Open's position: transactions ending at or before it are skipped
	// lastHanded is the position of the last Tx queued for Next (initially from): handed out as
	// far as the loop's order checks and idle progress go (stream_queue.go, enqueue).
	lastHanded pglogrepl.LSN
	out        source.Tx     // with hasOut: a finished chunk waiting to be cleared and queued; nothing is read meanwhile
	outLSN     pglogrepl.LSN // out.Position, parsed; for a More chunk its transaction's commit LSN
	hasOut     bool
	q          *txBatch // cleared chunks queued for Next, handed over together (stream_queue.go); nil: none

	// The transaction whose chunks are being delivered (deliver): midTx after a More chunk;
	// skipTx when it ends at or before from (decided at its first chunk); txRows its rows so far.
	midTx, skipTx bool
	txRows        int

	sent      pglogrepl.LSN // flush LSN of the last status update
	statusAt  time.Time     // its send time + StandbyTimeout: the next periodic update is due (zero: none sent yet, due now)
	confirmAt time.Time     // its send time + confirmGap: a confirmation may go out from then
	replyNow  bool          // the server asked for a reply

	// clockStale: the loop reads the clock again before its next decisions (see loop); set when
	// time may have passed: a read that went to the socket, a wait, a lookup.
	clockStale bool
	now        time.Time // the loop's clock reading for this turn

	idleCand pglogrepl.LSN // highest WAL end a keepalive reported
	lastIdle time.Time     // when idle progress was last handed out

	// Coverage (coveragewatch.go): relSeen is set by a Relation message and cleared by the next
	// finished transaction, whose position then becomes relLSN (initially beyond any position:
	// no data fast path before the first Relation message).
	relSeen bool
	relLSN  pglogrepl.LSN
	skipped int // transactions skipped because they end at or before from

	readDeadline time.Time   // read deadline last set on the connection (zero: unknown, set it)
	timer        *time.Timer // bounds a blocked hand-off to Next; stopped when not in use
}

func newStream(s *Source, conn *pgconn.PgConn, from pglogrepl.LSN) *stream {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &stream{relLSN: ^pglogrepl.LSN(0), s: s, conn: conn, dec: s.newDecoder(), w: s.waker.Load(),
		from: from, lastHanded: from, timer: t}
}

// waker interrupts the stream loop's wait from another goroutine (Confirm, Close).
//
// The loop does not give pgconn a context per read (a context, its timer and pgconn's watch of
// it cost more than the read itself): it reads with context.Background() and bounds each wait
// with the connection's read deadline. A read that hits the deadline fails with a timeout, which
// leaves the connection usable: pgconn closes the connection on every read error except a
// timeout, and a message that was partially read is completed by the next read (pgproto3 keeps
// the partial message). pgconn's own context cancellation works the same way.
type waker struct {
	conn net.Conn      // the replication connection's net.Conn
	ch   chan struct{} // interrupts a blocked hand-off to Next; capacity 1
}

func newWaker(c *pgconn.PgConn) *waker {
	return &waker{conn: c.Conn(), ch: make(chan struct{}, 1)}
}

// pastDeadline is a read deadline in the past: the current or next read returns a timeout.
var pastDeadline = time.Unix(1, 0)

// wake ends the loop's current wait, or the next one if it is not waiting: a token in ch ends a
// hand-off, a past read deadline ends a read (the loop sets its own deadline again after a
// timeout). The caller changed the state the loop re-checks after arming its wait (confirmed
// position, run context) before calling wake, so no wake is lost: either the loop's re-check
// sees the change, or the deadline set here is the last one set before the read.
func (w *waker) wake() {
	select {
	case w.ch <- struct{}{}:
	default:
	}
	_ = w.conn.SetReadDeadline(pastDeadline)
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
	done := ctx.Done()
	reused := clockReuse // read the clock first
	for {
		// A clock read costs two vDSO calls (~80 ns on this project's VM, 17% of the loop's CPU
		// when read per message). Messages served from the connection's read buffer take
		// microseconds, so the loop reuses now while nothing could have waited, at most
		// clockReuse times in a row: a status update, idle progress or a wake-up is then late by
		// that much buffered work at most, and every deadline stays absolute.
		if st.clockStale || reused >= clockReuse {
			st.now, reused, st.clockStale = time.Now(), 0, false
		}
		reused++
		now := st.now
		if st.statusDue(now) {
			if err := st.sendStatus(now); err != nil {
				return err
			}
		}
		if st.idle() && st.idleReady() && !now.Before(st.lastIdle.Add(idle)) {
			st.setOut(source.Tx{Position: lsnPosition(st.idleCand)}, st.idleCand, false)
			st.lastIdle = now
		}
		if st.hasOut && !st.queueFull() && st.cleared() {
			st.enqueue() // no wait: Next gets it with the queue (stream_queue.go)
		}

		deadline := st.nextWake(now, idle)
		// Arm the wait: a Confirm advancing the position must wake it only when it would end
		// later than the confirmation's status update is due.
		confirmWake := deadline.After(st.confirmAt)
		if st.s.confirmWake.Load() != confirmWake {
			st.s.confirmWake.Store(confirmWake)
		}

		var err error
		switch {
		case st.mustHandOff(): // queue full, next chunk not cleared, or a read would wait
			st.handOff(done, now, deadline, confirmWake)
			st.clockStale = true
		case st.hasOut: // nothing queued: wait for the coverage watch to clear out
			st.awaitCoverage(done, now, deadline, confirmWake)
			st.clockStale = true
		default:
			err = st.receive(done, deadline, confirmWake)
		}
		select {
		case <-done:
			return ctx.Err()
		default:
		}
		if err != nil {
			return err
		}
	}
}

// interrupted reports whether the wait just armed must not start: a Confirm advanced the
// position before the loop asked to be woken for it (it found confirmWake false and left the
// loop alone), or Close was called.
func (st *stream) interrupted(done <-chan struct{}, confirmWake bool) bool {
	if confirmWake && pglogrepl.LSN(st.s.confirmed.Load()) > st.sent {
		return true
	}
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// handOff passes the queue to Next, waiting at most until deadline, a wake or Close. When out
// waits for the coverage watch, it asks for a check first: the watcher's wake when one passes
// ends the wait, and the loop queues out.
func (st *stream) handOff(done <-chan struct{}, now, deadline time.Time, confirmWake bool) {
	if st.hasOut && !st.queueFull() {
		cov := &st.s.ext.cov
		cov.want.Store(true)
		cov.request()
		if st.cleared() { // a check passed in between (see awaitCoverage): queue out first
			return
		}
	}
	select {
	case st.s.txCh <- st.q: // Next is waiting: no timer needed
		st.handed()
		return
	default:
	}
	if !deadline.After(now) || st.interrupted(done, confirmWake) {
		return
	}
	st.timer.Reset(deadline.Sub(now))
	select {
	case st.s.txCh <- st.q:
		st.handed()
	case <-st.timer.C:
	case <-st.w.ch:
	case <-done:
	}
	st.timer.Stop()
}

// setOut queues tx for Next; l is its position parsed, or for a More chunk its transaction's
// commit LSN (a coverage reading at or past it vouches for every transaction before this one,
// which is what a chunk needs: it stores no position). hadRows: tx closes a transaction that
// has rows, in this chunk or earlier ones. Only a last chunk moves the relation bookkeeping.
func (st *stream) setOut(tx source.Tx, l pglogrepl.LSN, hadRows bool) {
	st.out, st.outLSN, st.hasOut = tx, l, true
	if !tx.More && st.relSeen && hadRows {
		st.relLSN, st.relSeen = l, false
	}
}

// idle reports whether the loop holds no chunk: neither out nor a queue.
func (st *stream) idle() bool { return !st.hasOut && !st.queued() }

// cleared reports whether out may be handed out without passing a possibly missed row (see
// coveragewatch.go): a coverage check that read the server's WAL flush position at or past
// out's position before taking its snapshot has passed, or out has rows of the only streamed
// relation and such a check covers the last transaction that came with a Relation message.
func (st *stream) cleared() bool {
	passed := pglogrepl.LSN(st.s.ext.cov.passed.Load())
	if passed >= st.outLSN || st.s.ext.cov.none { // none: no table, nothing the publication can lose
		return true
	}
	return len(st.out.Rows) > 0 && st.s.ext.cov.single && !st.relSeen && passed >= st.relLSN
}

// awaitCoverage asks the coverage watch for a check and waits for it (the watcher wakes the
// loop when one passes), at most until deadline or Close.
func (st *stream) awaitCoverage(done <-chan struct{}, now, deadline time.Time, confirmWake bool) {
	cov := &st.s.ext.cov
	cov.want.Store(true)
	cov.request()
	// Re-check after arming: a check that passed in between stored passed before looking at want.
	if st.cleared() || !deadline.After(now) || st.interrupted(done, confirmWake) {
		return
	}
	st.timer.Reset(deadline.Sub(now))
	select {
	case <-st.timer.C:
	case <-st.w.ch:
	case <-done:
	}
	st.timer.Stop()
}

// receive reads and handles one message, waiting at most until deadline, a wake or Close. A
// wait that ended that way is not an error.
func (st *stream) receive(done <-chan struct{}, deadline time.Time, confirmWake bool) error {
	if !deadline.Equal(st.readDeadline) {
		_ = st.w.conn.SetReadDeadline(deadline) // a broken connection fails the read below
		st.readDeadline = deadline
	}
	if st.interrupted(done, confirmWake) {
		return nil
	}
	buffered := st.conn.Frontend().ReadBufferLen()
	msg, err := st.conn.ReceiveMessage(context.Background()) // no context to watch: see waker
	if err != nil {
		st.clockStale = true
		if pgconn.Timeout(err) { // the deadline or a wake (only the loop and waker set deadlines)
			st.readDeadline = time.Time{} // a wake moved it: set it again
			return nil
		}
		return fmt.Errorf("replication stream on slot %q: receive: %w: outboxd stops; on restart it resumes from the stored position", st.s.cfg.Slot, err)
	}
	switch m := msg.(type) {
	case *pgproto3.CopyData:
		// The message came from the read buffer alone iff the buffer held all of it (type byte,
		// length, body): pgproto3 reads from the socket only for bytes it does not hold.
		if buffered < 5+len(m.Data) {
			st.clockStale = true
		}
		if isRelationMessage(m.Data) {
			st.relSeen = true
		}
		return st.handleCopyData(m.Data)
	case *pgproto3.ErrorResponse:
		if perr := st.s.publicationMissing(pgconn.ErrorResponseToPgError(m)); perr != nil {
			return perr
		}
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
			if err := st.dec.message(xld.WALData); err != nil { // reports messages that are not outboxd's
				return fmt.Errorf("replication stream on slot %q: %w", st.s.cfg.Slot, err)
			}
			return st.message(xld.WALData) // a heartbeat (heartbeat.go)
		}
		tx, done, err := st.dec.Decode(xld.WALData)
		if err != nil { // a relation to look up (relations.go), or a stop
			tx, done, err = st.retryDecode(xld.WALData, err)
			st.clockStale = true // it may have queried the server
		}
		if err != nil {
			return fmt.Errorf("decode WAL at %s on slot %q: %w", xld.WALStart, st.s.cfg.Slot, err)
		}
		if done {
			return st.deliver(tx)
		}
	}
	return nil
}

// deliver queues a chunk the decoder finished for Next, skipping the transactions that end at
// or before Open's position. Whether to skip is decided at a transaction's first chunk, before
// its end is known: from its commit LSN (Begin's), skipped iff it is before from. Commit records
// do not overlap, so for a from that is a transaction's end or a WAL location between records
// (a keepalive's) that is the same as "ends at or before from"; the last chunk checks it, and a
// from inside the commit record (a position outboxd never hands out) is a loud stop.
func (st *stream) deliver(tx source.Tx) error {
	d := st.dec
	if !st.midTx {
		st.skipTx, st.txRows = d.commitLSN < st.from, 0
	}
	st.midTx = tx.More
	st.txRows += len(tx.Rows)
	if tx.More {
		if !st.skipTx {
			st.setOut(tx, d.commitLSN, true)
			st.s.noteChangeAt(st.now)
		}
		return nil
	}
	pos := d.end
	if skip := pos <= st.from; skip != st.skipTx {
		return stopf("replication stream on slot %q: the transaction committing at %s ends at %s, but the start position %s lies between the two (inside its commit record), "+
			"so outboxd cannot tell whether it was delivered: outboxd never stores such a position. outboxd stops; fix the stored position with "+
			"`outboxd offsets set -c FILE --position %s` (delivers that transaction again: consumers deduplicate) or `--position %s` (skips it), and restart",
			st.s.cfg.Slot, d.commitLSN, pos, st.from, d.commitLSN, pos)
	}
	if st.skipTx {
		st.skipped++
		if st.skipped == 1 {
			st.s.log.Debug("skipping transactions at or before the stored position", "position", st.from, "tx_end", pos)
		}
		return nil
	}
	if pos <= st.lastHanded {
		return fmt.Errorf("replication stream on slot %q sent a transaction ending at %s, not after the last position handed out (%s): refusing to go backwards", st.s.cfg.Slot, pos, st.lastHanded)
	}
	st.setOut(tx, pos, st.txRows > 0)
	if len(tx.Rows) > 0 {
		st.s.noteChangeAt(st.now)
	}
	return nil
}

// isRelationMessage reports whether a CopyData payload is XLogData carrying a pgoutput Relation
// message ('w', three 8-byte LSNs/times, then the message).
func isRelationMessage(data []byte) bool {
	const hdr = 1 + 8 + 8 + 8
	return len(data) > hdr && data[0] == pglogrepl.XLogDataByteID && data[hdr] == msgRelation
}

func (st *stream) noteWALEnd(l pglogrepl.LSN) {
	if uint64(l) > st.s.walEnd.Load() {
		st.s.walEnd.Store(uint64(l))
	}
}

// idleReady reports whether idle progress to idleCand may be handed out now (ignoring pacing):
// nothing partially received, everything handed out (queued) confirmed, and the keepalive is
// news. The loop also requires that it holds no chunk (idle).
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
	if st.replyNow || !now.Before(st.statusAt) {
		return true
	}
	return pglogrepl.LSN(st.s.confirmed.Load()) > st.sent && !now.Before(st.confirmAt)
}

// nextWake is when the loop must wake up by itself: the next periodic status update, a delayed
// confirmation, or paced idle progress.
func (st *stream) nextWake(now time.Time, idle time.Duration) time.Time {
	wake := st.statusAt
	if pglogrepl.LSN(st.s.confirmed.Load()) > st.sent {
		wake = earliest(wake, st.confirmAt)
	}
	if st.idle() && st.idleReady() {
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
	st.sent, st.replyNow = c, false
	st.statusAt, st.confirmAt = now.Add(st.s.cfg.StandbyTimeout), now.Add(confirmGap)
	return nil
}
