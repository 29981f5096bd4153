package mysql

import (
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"
)

// liveness lets the watchdog see whether binlog events still arrive while Next waits for one.
type liveness struct {
	events  atomic.Uint64 // events received from the server (counted by the feed)
	waiting atomic.Bool   // Next is blocked waiting for an event
}

// watch closes syncer when Next has been waiting without receiving anything (not even the
// heartbeat the server sends every HeartbeatPeriod when idle) for about limit: the connection
// is silently dead (a network partition, a frozen server). Next then sees the stream end and
// reconnects. A consumer that is merely slow never trips it: Next is not waiting then.
func (s *Source) watch(syncer *replication.BinlogSyncer, f *eventFeed, stop <-chan struct{}, limit time.Duration) {
	tick := time.NewTicker(limit / 2)
	defer tick.Stop()
	last, stale := s.live.events.Load(), 0
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		n := s.live.events.Load()
		if s.live.waiting.Load() && n == last {
			stale++
		} else {
			stale = 0
		}
		last = n
		if stale >= 2 {
			s.log.Warn("no binlog event or heartbeat received; closing the connection to reconnect", "silent_for", limit)
			f.abandon()
			syncer.Close()
			return
		}
	}
}

// stopWatch stops the current stream's watchdog; s.mu must be held.
func (s *Source) stopWatch() {
	if s.stop != nil {
		close(s.stop)
		s.stop = nil
	}
}
