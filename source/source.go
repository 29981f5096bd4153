// Package source defines what a change source hands to the pipeline: whole committed
// transactions, in commit order, each with the position that marks its end.
package source

import (
	"context"
	"errors"
	"time"

	"github.com/outboxd/outboxd/offsets"
)

// Value is one column value of a captured row.
//
// Bytes holds the value in the form the transform publishes: for text-like types (text, varchar,
// json, jsonb, uuid, numbers, timestamps) their text form as the database prints it; for binary
// types (bytea, blob, binary) the raw bytes. Null is true for SQL NULL (Bytes is then nil).
// The slice may alias a buffer owned by the source that stays valid until the Tx is released
// by the pipeline (i.e. never reused: sources must allocate per transaction).
type Value struct {
	Bytes []byte
	Null  bool
}

// Row is one captured INSERT into an outbox table.
type Row struct {
	// Table is the qualified table name as configured: "schema.table" (postgres) or "db.table" (mysql).
	Table string
	// Columns are the column names in table order; Values is parallel to it.
	// Columns may be shared between rows of the same table: treat it as read-only.
	Columns []string
	Values  []Value
}

// Get returns the value of the named column and whether the column exists.
func (r *Row) Get(name string) (Value, bool) {
	for i, c := range r.Columns {
		if c == name {
			return r.Values[i], true
		}
	}
	return Value{}, false
}

// Tx is one committed source transaction, restricted to inserts into the configured tables.
type Tx struct {
	// Position is the end of this transaction: storing it means "this transaction and all before
	// it are delivered". Positions handed out by one Source only ever move forward.
	Position offsets.Position
	// CommitTime is the source's commit timestamp (zero for idle-progress transactions).
	CommitTime time.Time
	// Rows are the captured outbox inserts, in the order they were written. A Tx with no rows is
	// idle progress (a keepalive showed the log moved on, or a transaction touched no outbox row)
	// and exists only so the position can advance.
	Rows []Row
}

// Source reads committed transactions from a database log.
//
// Contract:
//   - Open is called once, before anything else. It fails if `from` can no longer be served
//     (slot lost, binlog purged): that is a loud error, never a silent skip. An empty `from`
//     starts from wherever the source begins (a newly created slot, the current binlog end).
//   - Next blocks until the next transaction is available or ctx is done (then it returns
//     ctx.Err()). It never returns a transaction whose end is at or before `from`. Transactions
//     come whole and in commit order. Next is called from one goroutine only.
//   - Confirm tells the database that everything up to p is durably delivered (PostgreSQL:
//     the slot's confirmed_flush_lsn). It may be called concurrently with Next, from one other
//     goroutine, with non-decreasing positions. It must not block for long.
//   - Close releases the connection; it may be called concurrently with a blocked Next, which
//     then returns an error.
type Source interface {
	Open(ctx context.Context, from offsets.Position) error
	Next(ctx context.Context) (Tx, error)
	Confirm(ctx context.Context, p offsets.Position) error
	Close() error
}

// ErrPositionLost marks errors where the stored position can no longer be served (slot dropped
// or lost, binlog purged). The pipeline never retries such an error: it exits loudly.
var ErrPositionLost = errors.New("stored position can no longer be served by the source")
