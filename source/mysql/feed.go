package mysql

import (
	"bytes"
	"context"
	"errors"
	"sync"

	"github.com/go-mysql-org/go-mysql/replication"
)

// eventFeed carries the binlog events of one stream from go-mysql's reading goroutine to Next.
// It is the syncer's SynchronousEventHandler: the reading goroutine collects events and hands
// them over in batches that end at a transaction boundary (or after feedBatch events or
// feedBatchBytes, inside a large transaction). Next takes everything queued at once and is
// woken only when it waits, at most once per transaction, instead of one channel operation per
// event (a single-row transaction is about five events: GTID, annotate rows, table map, rows,
// XID).
//
// Backpressure: while feedQueue events or feedQueueBytes wait for Next, the reading goroutine
// stops reading, so the server's stream waits. Next takes the whole queue at once, so at most
// about twice that is buffered (go-mysql's own event channel held 1024 events of any size).
//
// The end of the stream (a connection error, a server error, an undecodable event, Close) is
// reported by take once every event handed over before it has been taken.
type eventFeed struct {
	live     *liveness
	stop     chan struct{} // closed by abandon: the reading goroutine must not wait for Next any more
	stopOnce sync.Once
	batch    []*replication.BinlogEvent // the reading goroutine's events not yet handed over
	batchLen int                        // their size in bytes
	meta     *metaCache                 // MariaDB: the table map events' optional metadata (tablemeta.go)

	mu        sync.Mutex
	queue     []*replication.BinlogEvent // handed over, not yet taken
	queueLen  int                        // their size in bytes
	end       error                      // why the stream ended (nil: still running)
	takerWait bool                       // take waits for ready
	readWait  bool                       // the reading goroutine waits for space
	ready     chan struct{}              // capacity 1: events or the end arrived (for take)
	space     chan struct{}              // capacity 1: take emptied the queue (for the reader)
}

const (
	feedBatch      = 128       // events collected before a hand-off inside a large transaction
	feedBatchBytes = 256 << 10 // or bytes
	feedQueue      = 512       // events waiting for Next before the reading goroutine stops
	feedQueueBytes = 1 << 20   // or bytes
)

// errAbandoned ends a stream whose reading goroutine was told to stop (Close, reconnect,
// watchdog) while it waited for Next.
var errAbandoned = errors.New("binlog stream abandoned")

func newFeed(live *liveness) *eventFeed {
	return &eventFeed{live: live, stop: make(chan struct{}), ready: make(chan struct{}, 1), space: make(chan struct{}, 1)}
}

// HandleEvent implements replication.EventHandler; it runs on the syncer's reading goroutine.
func (f *eventFeed) HandleEvent(ev *replication.BinlogEvent) error {
	f.live.events.Add(1)
	if tm, ok := ev.Event.(*replication.TableMapEvent); ok && f.meta != nil {
		if err := f.meta.fill(tm); err != nil {
			return &replication.EventError{Header: ev.Header, Err: err.Error(), Data: ev.RawData}
		}
	}
	f.batch = append(f.batch, ev)
	f.batchLen += int(ev.Header.EventSize)
	if len(f.batch) < feedBatch && f.batchLen < feedBatchBytes && !endsBatch(ev) {
		return nil
	}
	return f.flush()
}

// endsBatch reports whether ev may end a transaction or otherwise matter to Next now: every
// event except those known to come inside a transaction, before its end.
func endsBatch(ev *replication.BinlogEvent) bool {
	switch e := ev.Event.(type) {
	case *replication.RowsEvent, *replication.TableMapEvent, *replication.MariadbGTIDEvent,
		*replication.MariadbAnnotateRowsEvent, *replication.GTIDEvent, *replication.GtidTaggedLogEvent,
		*replication.RowsQueryEvent, *replication.IntVarEvent:
		return false
	case *replication.QueryEvent:
		return !isBegin(e.Query)
	}
	return true
}

// isBegin reports whether a Query event's statement is BEGIN.
func isBegin(q []byte) bool {
	return bytes.EqualFold(bytes.TrimRight(bytes.TrimSpace(q), ";"), qBegin)
}

// flush hands the collected events to take, then waits while the queue is full.
func (f *eventFeed) flush() error {
	f.mu.Lock()
	f.queue = append(f.queue, f.batch...)
	f.queueLen += f.batchLen
	wake := f.takerWait
	f.takerWait = false
	full := f.full()
	f.readWait = full
	f.mu.Unlock()
	clear(f.batch)
	f.batch, f.batchLen = f.batch[:0], 0
	if wake {
		signal(f.ready)
	}
	for full {
		select {
		case <-f.space:
		case <-f.stop:
			return errAbandoned
		}
		f.mu.Lock()
		full = f.full()
		f.readWait = full
		f.mu.Unlock()
	}
	return nil
}

// full reports whether the reading goroutine must wait for take; f.mu must be held.
func (f *eventFeed) full() bool {
	return len(f.queue) >= feedQueue || f.queueLen >= feedQueueBytes
}

// take returns the events handed over so far, in stream order, and takes buf (the slice an
// earlier take returned, fully handled) back for reuse. With none queued it waits for some,
// for the end of the stream (then it returns the stream's error), or for ctx.
func (f *eventFeed) take(ctx context.Context, buf []*replication.BinlogEvent) ([]*replication.BinlogEvent, error) {
	clear(buf)
	buf = buf[:0]
	for {
		f.mu.Lock()
		if len(f.queue) > 0 {
			evs := f.queue
			f.queue, f.queueLen = buf, 0
			wake := f.readWait
			f.readWait = false
			f.mu.Unlock()
			if wake {
				signal(f.space)
			}
			return evs, nil
		}
		if f.end != nil {
			err := f.end
			f.mu.Unlock()
			return nil, err
		}
		f.takerWait = true
		f.mu.Unlock()
		select {
		case <-f.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// watch waits for the end of stream (the syncer reports it on the streamer, which carries no
// events with a SynchronousEventHandler) and records it for take.
func (f *eventFeed) watch(stream *replication.BinlogStreamer) {
	_, err := stream.GetEvent(context.Background())
	if err == nil {
		err = replication.ErrSyncClosed
	}
	f.mu.Lock()
	f.end = err
	wake := f.takerWait
	f.takerWait = false
	f.mu.Unlock()
	if wake {
		signal(f.ready)
	}
}

// abandon makes a reading goroutine that waits for Next give up; call it before closing the
// syncer (which waits for that goroutine).
func (f *eventFeed) abandon() {
	f.stopOnce.Do(func() { close(f.stop) })
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
