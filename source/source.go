// Package source defines what a change source hands to the pipeline: committed transactions, in
// commit order, each as one or more bounded chunks, the last of which carries the position that
// marks the transaction's end.
package source

import (
	"context"
	"errors"
	"time"
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
	// Types is parallel to Columns when the source knows its columns' types (shared like Columns,
	// read-only); nil when it does not (e.g. rows built by hand), and then every column is a
	// nullable string.
	Types []Type
	// Message is true when the row is not an INSERT but an outbox event the source received as
	// a message in the transaction's log (PostgreSQL: pg_logical_emit_message(true, prefix,
	// content), the tableless outbox). Table is then MessageTablePrefix + the prefix (no table
	// of that name exists), and the row has one column, MessageColumn, holding the message's
	// content as it was written (Type KindJSON): the source does not interpret it; the
	// transform parses it into the outbox fields. Sources hand message rows out in the order
	// they were written among the transaction's inserts, under the same chunk caps.
	Message bool
}

// MessageTablePrefix starts the Table of a message row (Row.Message): "pg_logical_emit_message:"
// followed by the message prefix, e.g. "pg_logical_emit_message:outboxd.event". It is what
// the dead-letter header outboxd.source.table shows for such a row.
const MessageTablePrefix = "pg_logical_emit_message:"

// MessageColumn is the one column of a message row: the message's content.
const MessageColumn = "content"

// Type describes a column as Debezium's connector for the database describes it (the Kafka
// Connect schema of its field), so that a router can render values as Debezium does. The source
// owns the mapping from its database's types to Kinds (each adapter knows its own types); the
// Value's Bytes stay the database's text form described on each Kind.
type Type struct {
	Kind Kind
	// Optional is true when the column is nullable (the Connect schema's "optional").
	Optional bool
	// Scale and Precision describe a KindDecimal column (Debezium's "scale" and
	// "connect.decimal.precision" schema parameters); Precision 0 means unconstrained (PostgreSQL
	// numeric without a typmod, Debezium's VariableScaleDecimal; Scale is then 0).
	Scale, Precision int
	// HasDefault is true when Debezium's connector gives the column's Connect schema a default
	// value (from the column's DEFAULT, by the connector's rules for its type: a function such as
	// now() gives a placeholder like the epoch); Default is that value in the text form of the
	// Kind's Value.Bytes (e.g. "5", "none", "1970-01-01 00:00:00+00"). JsonConverter writes it
	// as the schema's "default" and in place of a NULL value.
	HasDefault bool
	Default    string
}

// Kind is a column's Kafka Connect type as Debezium maps it, with the text form a source puts in
// Value.Bytes for it.
type Kind uint8

const (
	// KindString is Connect string: UTF-8 text. Also every type without a more specific Kind
	// (rendered as the database's text).
	KindString Kind = iota
	// KindJSON is io.debezium.data.Json (json, jsonb, MySQL JSON): the JSON text.
	KindJSON
	// KindUUID is io.debezium.data.Uuid: the uuid text.
	KindUUID
	// KindBool is Connect boolean: "t"/"f" (PostgreSQL) or "1"/"0" (MySQL), "true"/"false" too.
	KindBool
	// KindInt16, KindInt32, KindInt64 are Connect int16/int32/int64: decimal text.
	KindInt16
	KindInt32
	KindInt64
	// KindFloat32, KindFloat64 are Connect float32/float64: the database's number text
	// (PostgreSQL also prints NaN, Infinity, -Infinity; MySQL's is Go's shortest round-trip form,
	// e.g. "1.5", "1e+20").
	KindFloat32
	KindFloat64
	// KindDecimal is org.apache.kafka.connect.data.Decimal (decimal.handling.mode=precise): the
	// exact decimal text ("12.50"); Type.Scale is the column's scale.
	KindDecimal
	// KindBytes is Connect bytes: the raw bytes.
	KindBytes
	// KindTimestamp is io.debezium.time.Timestamp (epoch milliseconds; a timestamp without time
	// zone of precision ≤ 3): text "YYYY-MM-DD HH:MM:SS[.fff]", read as UTC.
	KindTimestamp
	// KindMicroTimestamp is io.debezium.time.MicroTimestamp (epoch microseconds; precision 4–6,
	// PostgreSQL's default): text "YYYY-MM-DD HH:MM:SS[.ffffff]", read as UTC.
	KindMicroTimestamp
	// KindZonedTimestamp is io.debezium.time.ZonedTimestamp (an ISO-8601 string in UTC): text
	// "YYYY-MM-DD HH:MM:SS[.ffffff]±HH[:MM[:SS]]" (PostgreSQL timestamptz), or a MySQL TIMESTAMP's
	// text, which is UTC. Type.Scale is Debezium's fractional width for it (PostgreSQL: the
	// column's precision, 6 without one); 0 means ISO_OFFSET_DATE_TIME's (trailing zeros trimmed).
	KindZonedTimestamp
	// KindDate is io.debezium.time.Date (days since 1970-01-01, int32): text "YYYY-MM-DD".
	KindDate
)

// Lookup returns the value and type of the named column and whether the column exists.
func (r *Row) Lookup(name string) (Value, Type, bool) {
	for i, c := range r.Columns {
		if c == name {
			t := Type{Kind: KindString, Optional: true}
			if i < len(r.Types) {
				t = r.Types[i]
			}
			return r.Values[i], t, true
		}
	}
	return Value{}, Type{}, false
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

// Tx is one chunk of a committed source transaction, restricted to inserts into the configured
// tables. A transaction is handed over as one or more consecutive chunks (never interleaved with
// another transaction's): every chunk but the last has More set; the last has More false and the
// Position. A transaction that fits one chunk is a single Tx with More false, so the zero value of
// the chunk fields means "a whole transaction".
//
// Sources cut chunks at their configured caps (rows and bytes; a single row larger than the byte
// cap is a chunk alone — MySQL cuts between rows events, so there one rows event larger than a
// cap is), so memory held per chunk is bounded whatever the transaction's size. A source never
// hands out a row twice between Open and Close, also when it reconnects inside a transaction.
type Tx struct {
	// Position is the end of this transaction: storing it means "this transaction and all before
	// it are delivered". Positions handed out by one Source only ever move forward. It is set on
	// the last chunk only (More == false); a chunk with More set has an empty Position.
	Position Position
	// CommitTime is the source's commit timestamp (zero for idle-progress transactions). It is set
	// on every chunk of a transaction.
	CommitTime time.Time
	// Rows are the captured outbox inserts, in the order they were written. A Tx with no rows and
	// More false is either idle progress (a keepalive showed the log moved on, or a transaction
	// touched no outbox row) or the closing chunk of a chunked transaction whose rows all came in
	// earlier chunks. A chunk with More set always has rows.
	Rows []Row
	// More is true when more chunks of this source transaction follow. Only the source sets it,
	// because only it sees the commit.
	More bool
	// Bytes is the chunk's size as the source accounts it: the sum of len(Value.Bytes) over all
	// rows plus RowOverhead per row. Zero means "not computed"; consumers then use ChunkBytes.
	Bytes int
}

// RowOverhead is the per-row bookkeeping charge added to the column bytes when sizing a chunk.
const RowOverhead = 64

// ChunkBytes returns tx.Bytes, or computes it from the rows when the source left it zero.
func ChunkBytes(tx *Tx) int {
	if tx.Bytes > 0 || len(tx.Rows) == 0 {
		return tx.Bytes
	}
	n := 0
	for i := range tx.Rows {
		n += RowBytes(&tx.Rows[i])
	}
	return n
}

// RowBytes is one row's charge: its column bytes plus RowOverhead.
func RowBytes(r *Row) int {
	n := RowOverhead
	for _, v := range r.Values {
		n += len(v.Bytes)
	}
	return n
}

// Source reads committed transactions from a database log. sourcetest checks every clause below
// against each adapter, one subtest per clause.
//
// Contract:
//   - Open is called once, before anything else. It fails if `from` can no longer be served
//     (slot lost or dropped, binlog purged) with an error wrapping ErrPositionLost: that is a
//     loud error, never a silent skip. An empty `from` starts from wherever the source begins
//     (a newly created slot, the current binlog end).
//   - Next blocks until the next transaction is available or ctx is done (then it returns
//     ctx.Err()). It never returns a chunk of a transaction whose end is at or before `from`.
//     Transactions come in commit order, each as consecutive chunks (see Tx); the first chunk
//     after Open begins a transaction. A transaction that cannot be ended (a stop error after
//     some of its chunks) ends Next with the error, never with a position. Next is called
//     from one goroutine only.
//   - Confirm tells the database that everything up to p is durably delivered (PostgreSQL:
//     the slot's confirmed_flush_lsn). It may be called concurrently with Next, from one other
//     goroutine, with non-decreasing positions. It must not block for long.
//   - Close releases the connection; it may be called concurrently with a blocked Next, which
//     then returns an error (the adapter's ErrClosed). Close is idempotent, and Confirm after
//     Close returns without blocking. Once Close has returned, every goroutine the source
//     started has ended or ends promptly without further calls.
type Source interface {
	// Open connects and positions the source after `from`. It blocks until the source streams or
	// fails; it honours ctx for that wait only. After a failed Open only Close may be called.
	Open(ctx context.Context, from Position) error
	// Next returns the next chunk. It blocks until one is available, ctx is done (ctx.Err()) or
	// Close is called (an error). Called from one goroutine only.
	Next(ctx context.Context) (Tx, error)
	// Confirm records that everything up to p is delivered; the source passes it to the database
	// on its own schedule. May run concurrently with Next (from one other goroutine), with
	// non-decreasing positions; it must not block for long.
	Confirm(ctx context.Context, p Position) error
	// Close stops the source and releases its connection. Safe to call concurrently with a
	// blocked Next, and more than once.
	Close() error
}

// ErrPositionLost marks errors where the stored position can no longer be served (slot dropped
// or lost, binlog purged). The pipeline never retries such an error: it exits loudly.
var ErrPositionLost = errors.New("stored position can no longer be served by the source")
