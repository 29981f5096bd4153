package mysql

import (
	"fmt"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outboxd/outboxd/source"
)

// The assembler's memory: transaction chunks (cut, see assembler) and the carving of rows and
// values from shared allocations (carve, roomRows).

// cut queues the pending rows as a chunk with More set (see assembler).
func (a *assembler) cut(h *replication.EventHeader) {
	ct := a.commitTime
	if ct.IsZero() {
		ct = time.Unix(int64(h.Timestamp), 0)
	}
	a.ready = append(a.ready, source.Tx{CommitTime: ct, Rows: a.rows, More: true, Bytes: a.rowBytes})
	a.txRows += len(a.rows)
	a.rows, a.rowBytes = nil, 0
}

// chunkNote is added to the errors that end a transaction after some of its rows were handed
// out in earlier chunks.
func (a *assembler) chunkNote() string {
	if a.txRows == 0 {
		return ""
	}
	return fmt.Sprintf(" (a big transaction: %d of its outbox rows were already handed out in earlier chunks; under kafka.delivery at_least_once they may already be in Kafka, exactly_once aborts them)", a.txRows)
}

// Rows and values of small rows events are carved from chunks shared by many transactions: one
// allocation per chunk instead of two per rows event. Carved memory is never reused (the
// pipeline keeps a Tx's rows until it is acked; see source.Value). Values alias their event's
// buffer, so a chunk keeps every event it was carved for alive while any of its rows is: the
// chunks are retired after chunkEventBytes of rows events, which bounds that extra retention,
// and rows events larger than chunkEventBytes/8 get allocations of their own.
const (
	chunkRows       = 256
	chunkValues     = 2048
	chunkEventBytes = 256 << 10
)

// carve returns zeroed values for k rows of n columns of the rows event h. Small events take
// them from the current chunk (see chunkRows); roomRows then gives a.rows room for the rows.
func (a *assembler) carve(h *replication.EventHeader, k, n int) []source.Value {
	size := int(h.EventSize)
	if size > chunkEventBytes/8 || k > chunkRows/4 || k*n > chunkValues/4 {
		a.bigEvent = true
		return make([]source.Value, k*n)
	}
	a.bigEvent = false
	if a.chunkBytes += size; a.chunkBytes > chunkEventBytes {
		a.rowChunk, a.valChunk, a.chunkBytes = nil, nil, size
	}
	if len(a.valChunk) < k*n {
		a.valChunk = make([]source.Value, chunkValues)
	}
	vals := a.valChunk[: k*n : k*n]
	a.valChunk = a.valChunk[k*n:]
	return vals
}

// roomRows makes sure a.rows has room for k more rows. The first rows event of a chunk (a.rows
// nil: a transaction's first, or the first after a cut) takes its rows from the current row
// chunk when the event was small (carve); later ones grow a.rows by append. A chunk's row slice
// is never shared with another chunk's.
func (a *assembler) roomRows(k int) {
	if a.rows != nil || a.bigEvent || k > chunkRows/4 {
		return
	}
	if len(a.rowChunk) < k {
		a.rowChunk = make([]source.Row, chunkRows)
	}
	a.rows = a.rowChunk[:0:k]
	a.rowChunk = a.rowChunk[k:]
}
