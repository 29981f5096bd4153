package postgres

// Heartbeats (Config.HeartbeatInterval, source.postgres.heartbeat_interval).
//
// When no outbox change has been handed out for the interval, a background goroutine runs
//
//	SELECT pg_logical_emit_message(false, 'outboxd.heartbeat', '<json>')
//
// on a normal connection to the same database. The message is WAL-logged in this database
// (non-transactional, needs no table), so the slot's walsender decodes it and — with the
// pgoutput option messages 'true', PostgreSQL 14+ — sends it as a Message ('M') outside any
// transaction. The stream loop turns it into an empty Tx whose position is the message's LSN
// (idle progress in stream order); nothing reaches Kafka. The pipeline stores and confirms that
// position like any other, so the slot advances even when the only other writes of the cluster
// are in other databases.
//
// Keepalive-based idle progress (see Source) usually covers that case too: the walsender's
// keepalives carry the position it has decoded up to, other databases' WAL included. Heartbeats
// do not depend on keepalives: they put a decodable record in this database's stream, so the slot
// moves on servers or proxies whose keepalives do not advance, and a stuck decoder shows up as
// heartbeats sent but not seen (Heartbeats).
//
// Safety of the heartbeat position: the walsender emits transactions at their commit record, in
// WAL order, so every transaction whose commit record starts before the message's LSN has been
// sent before the message; one that commits later ends after that LSN and is streamed again
// after a restart from it.
// Like every position without rows, a heartbeat's is handed out only once a publication
// coverage check that started after it arrived has passed (coveragewatch.go).

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/source"
)

// HeartbeatPrefix is the logical decoding message prefix of outboxd's heartbeats.
const HeartbeatPrefix = "outboxd.heartbeat"

// heartbeatWarnEvery bounds how often a failing heartbeat is logged.
const heartbeatWarnEvery = 5 * time.Minute

// extras is the state of the background helpers (heartbeats, slot watch) and of the fatal
// error they may raise. It lives in Source; its zero value is ready except fatal (New makes it).
type extras struct {
	wg sync.WaitGroup // heartbeat and slot watch goroutines; Close waits for them

	fatal     chan struct{} // closed by fail; Next then returns fatalErr
	fatalOnce sync.Once
	fatalErr  error

	lastChange     atomic.Int64 // unix nanos: last Tx with rows handed out (or Open)
	lastBeat       atomic.Int64 // unix nanos: last heartbeat emitted
	heartbeatsSent atomic.Uint64
	heartbeatsSeen atomic.Uint64
	messages       atomic.Bool // the stream was started with messages 'true'

	slot atomic.Pointer[SlotStatus] // last slot watch result

	cov covState // publication coverage watch (coveragewatch.go)

	// noKeepaliveProgress disables keepalive-based idle progress (tests: shows that heartbeats
	// alone keep the slot moving).
	noKeepaliveProgress bool
}

// fail makes Next return err (once); the stream loop is left to Close.
func (s *Source) fail(err error) {
	s.ext.fatalOnce.Do(func() {
		s.ext.fatalErr = err
		close(s.ext.fatal)
	})
}

// Heartbeats reports how many heartbeat messages this source emitted and how many it saw come
// back on the replication stream.
func (s *Source) Heartbeats() (sent, seen uint64) {
	return s.ext.heartbeatsSent.Load(), s.ext.heartbeatsSeen.Load()
}

// startBackground starts the heartbeat, coverage watch and slot watch goroutines of an opened source; they end
// with ctx (Close).
func (s *Source) startBackground(ctx context.Context) {
	s.ext.lastChange.Store(time.Now().UnixNano())
	if s.cfg.HeartbeatInterval > 0 && s.ext.messages.Load() {
		s.ext.wg.Add(1)
		go func() {
			defer s.ext.wg.Done()
			s.heartbeatLoop(ctx)
		}()
	}
	s.ext.wg.Add(1)
	go func() {
		defer s.ext.wg.Done()
		s.watchCoverage(ctx)
	}()
	if s.cfg.SlotCheckInterval > 0 {
		s.ext.wg.Add(1)
		go func() {
			defer s.ext.wg.Done()
			s.watchSlot(ctx)
		}()
	}
}

// heartbeatLoop emits a heartbeat whenever neither an outbox change nor a heartbeat happened
// for HeartbeatInterval.
func (s *Source) heartbeatLoop(ctx context.Context) {
	iv := s.cfg.HeartbeatInterval
	tick := time.NewTicker(min(max(iv/4, 50*time.Millisecond), 5*time.Second))
	defer tick.Stop()
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	var lastWarn time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		last := max(s.ext.lastChange.Load(), s.ext.lastBeat.Load())
		if time.Since(time.Unix(0, last)) < iv {
			continue
		}
		err := s.emitHeartbeat(ctx, &conn)
		if ctx.Err() != nil {
			return
		}
		s.ext.lastBeat.Store(time.Now().UnixNano()) // also after a failure: retry at the next interval
		if err != nil {
			if conn != nil {
				conn.Close(context.Background())
				conn = nil
			}
			if time.Since(lastWarn) >= heartbeatWarnEvery {
				lastWarn = time.Now()
				s.log.Warn("heartbeat failed (source.postgres.heartbeat_interval); retrying every interval", "err", err,
					"fix", "the role needs EXECUTE on pg_logical_emit_message(boolean, text, text) in the source database; or set heartbeat_interval: 0")
			}
			continue
		}
		s.ext.heartbeatsSent.Add(1)
	}
}

func (s *Source) emitHeartbeat(ctx context.Context, conn **pgx.Conn) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if *conn == nil {
		c, err := pgx.Connect(cctx, s.cfg.DSN)
		if err != nil {
			return fmt.Errorf("connect (source.dsn): %w", err)
		}
		*conn = c
	}
	body, _ := json.Marshal(struct {
		Slot string    `json:"slot"`
		Time time.Time `json:"time"`
	}{s.cfg.Slot, time.Now().UTC()})
	var lsn string
	err := (*conn).QueryRow(cctx, `SELECT pg_logical_emit_message(false, $1::text, $2::text)::text`, HeartbeatPrefix, string(body)).Scan(&lsn)
	if err != nil {
		return fmt.Errorf("pg_logical_emit_message: %w", err)
	}
	s.log.Debug("heartbeat emitted", "lsn", lsn)
	return nil
}

// noteChange records that a transaction with outbox rows was handed out.
func (s *Source) noteChange() { s.noteChangeAt(time.Now()) }

// noteChangeAt is noteChange with the caller's clock reading (the stream loop's).
func (s *Source) noteChangeAt(now time.Time) { s.ext.lastChange.Store(now.UnixNano()) }

// pgMessage is a decoded pgoutput Message ('M', protocol version 1, not streamed).
type pgMessage struct {
	transactional bool
	lsn           pglogrepl.LSN
	prefix        string
	content       []byte
}

// parseMessage decodes a pgoutput Message:
//
//	Byte1('M') Int8 flags (1 = transactional) Int64 lsn String prefix Int32 n Byte(n) content
func parseMessage(b []byte) (pgMessage, error) {
	if len(b) == 0 || b[0] != msgMessage {
		return pgMessage{}, fmt.Errorf("pgoutput: not a Message")
	}
	r := reader{b: b, off: 1}
	var m pgMessage
	m.transactional = r.u8()&1 == 1
	m.lsn = pglogrepl.LSN(r.u64())
	m.prefix = r.cstring()
	n := r.u32()
	m.content = r.bytes(int(n))
	if r.err != nil {
		return pgMessage{}, fmt.Errorf("pgoutput: Message: %w", r.err)
	}
	return m, nil
}

// message handles a Message received outside a transaction. An outboxd heartbeat becomes idle
// progress at the message's LSN (see the package comment above); other messages are ignored.
func (st *stream) message(data []byte) error {
	m, err := parseMessage(data)
	if err != nil {
		return fmt.Errorf("replication stream on slot %q: %w", st.s.cfg.Slot, err)
	}
	if m.transactional || m.prefix != HeartbeatPrefix {
		return nil
	}
	st.s.ext.heartbeatsSeen.Add(1)
	if m.lsn <= st.from || m.lsn <= st.lastHanded {
		return nil // nothing new: a transaction or keepalive already got this far
	}
	st.setOut(source.Tx{Position: lsnPosition(m.lsn)}, m.lsn, false)
	return nil
}
