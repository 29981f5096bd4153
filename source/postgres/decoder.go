package postgres

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outboxd/outboxd/source"
)

// Type OIDs the decoder treats specially. Every other type (uuid, text, varchar, bpchar, json,
// jsonb, int2/4/8, numeric, bool, timestamp(tz), enums, inet, ...) is passed through in the text
// form the server printed.
const oidBytea = 17

// pgoutput (protocol version 1) message type bytes.
const (
	msgBegin    = 'B'
	msgCommit   = 'C'
	msgOrigin   = 'O'
	msgRelation = 'R'
	msgType     = 'Y'
	msgInsert   = 'I'
	msgUpdate   = 'U'
	msgDelete   = 'D'
	msgTruncate = 'T'
	msgMessage  = 'M'
)

// Decoder turns a stream of pgoutput protocol-version-1 messages (the WALData of successive
// XLogData messages) into source.Tx chunks: each transaction as one or more chunks of bounded
// size (SetChunkCaps; without caps, one chunk per transaction). It does no I/O and is not safe
// for concurrent use.
//
// Contract:
//   - Relation messages fill a cache (relation id → qualified "schema.table", column names,
//     type OIDs and each column's source.Type, types.go: one Types slice per Relation message,
//     shared by its rows; Optional from the catalog's NOT NULL, see Relations.NotNull). A later Relation message for the same id (after ALTER TABLE) replaces the entry;
//     rows already decoded keep the column slice they were built with (slices are never mutated).
//   - Every relation is attributed (see relations.go and attribution.go) to a configured table
//     when it is that table (the OID and schema.table loaded at startup) or a partition or
//     inheritance child of one; rows then report the configured table's name. A Relation
//     message for an OID the decoder cannot place yet returns *UnknownRelationError (the caller
//     resolves it and decodes the message again). A configured table's OID arriving under
//     another name (renamed), or a configured name arriving with another OID (dropped and
//     re-created, or replaced), is an error, before any later row and before the end of that
//     transaction is returned (rows of earlier chunks of a chunked transaction may be out).
//   - Begin opens a transaction, Commit closes it and Decode then returns its last chunk:
//     Position is the commit's end LSN in PostgreSQL's text form ("0/16B3748"), CommitTime the
//     commit time.
//   - Chunks: an Insert that would push the open transaction's pending rows past the row cap or
//     the byte cap (source.RowBytes per row) first makes Decode return the pending rows as a chunk
//     with More set, no Position and Begin's commit time; the Insert's row starts the next chunk.
//     So a chunk never exceeds the caps, except a single row larger than the byte cap, which is
//     a chunk alone; a transaction within the caps is one chunk; the last chunk (at Commit) has
//     at least one row when earlier chunks went out. Every chunk's Bytes is set. Each chunk's row
//     slice is freshly allocated (the caller keeps it).
//   - Insert into an attributed relation appends a source.Row; an Insert into a relation that
//     is not attributed is an error (outboxd never skips a row it cannot place). Update, Delete,
//     Truncate, Type and Origin are ignored (they are not outbox inserts).
//   - A transactional logical Message with the prefix of SetMessagePrefix is an outbox event:
//     it is added to the open transaction like an Insert's row (same chunk caps) as a
//     source.Row with Message set, Table MessageTable(prefix) and the content, unparsed, in its
//     one column (message.go). Every other Message is not outbox data: a non-transactional one
//     with that prefix is ignored (debug log); one that is not an outboxd heartbeat is reported
//     to onMessage.
//   - A transaction without any captured row is still returned (with no rows), so the position
//     can advance past it.
//   - Values: NULL → Value{Null: true}; bytea → its raw bytes (hex or escape text form
//     decoded); every other type → its text form, unchanged. An unchanged-TOAST marker or a
//     binary-format column in an INSERT is an error (we never request binary format).
//   - Value bytes are freshly allocated for every row (one allocation per row for all its
//     values): they never alias the message buffer, which the caller may reuse.
//   - Any malformed or out-of-order message is an error; after an error other than
//     *UnknownRelationError the stream must be restarted (the decoder's state is undefined).
type Decoder struct {
	tables   map[string]*outboxTable // "schema.table" as in the catalog → configured table
	byOID    map[uint32]attribution  // configured tables and their descendants
	foreign  map[uint32]string       // OIDs resolved as not attributed → why
	loadedAt pglogrepl.LSN           // Relations.LoadedAt
	rels     map[uint32]*relation
	notNull  map[uint32]map[string]bool   // relation OID → its NOT NULL columns (Relations.NotNull, Resolve)
	defaults map[uint32]map[string]string // relation OID → its columns' DEFAULTs (Relations.Defaults, Resolve)

	log       *slog.Logger    // notices about history replayed after a restart; nil: none
	onMessage func(pgMessage) // logical decoding messages that are not outboxd heartbeats; nil: none
	msgPrefix string          // SetMessagePrefix: transactional messages with it are rows; "": none
	msgTable  string          // MessageTable(msgPrefix), the rows' Table

	inTx      bool
	tx        source.Tx // the open transaction's pending chunk (rows not yet returned)
	xid       uint32
	commitLSN pglogrepl.LSN // the open (or last) transaction's commit LSN (Begin's final LSN)
	end       pglogrepl.LSN // end LSN of the last transaction Decode returned (its Position, parsed)

	// Chunking (SetChunkCaps): the caps of one chunk; 0 or less: no cap.
	chunkRows, chunkBytes int
	bytes                 int // source.RowBytes of the pending rows (d.tx.Rows)
	handedRows            int // rows of the open transaction returned in earlier chunks
}

// SetChunkCaps sets the caps of one chunk: at most rows rows and bytes bytes (source.RowBytes
// per row; a single bigger row is a chunk alone). 0 or less: no cap. Without any cap, every
// transaction is one chunk.
func (d *Decoder) SetChunkCaps(rows, bytes int) { d.chunkRows, d.chunkBytes = rows, bytes }

// relation is one cached Relation message.
type relation struct {
	table   string   // configured name when captured, else the qualified catalog name
	oid     uint32   // relation id
	capture bool     // an INSERT into it becomes a Row; else an INSERT is an error
	why     string   // when not captured: why it is not attributed
	columns []string // shared by all rows built from this entry: never mutated
	oids    []uint32
	types   []source.Type // parallel to columns, shared like it (types.go)
}

// NewDecoder returns a decoder capturing inserts into tables, each "schema.table" (a name without
// a schema means "public.<name>"). Rows report the table name exactly as given here. Without
// the catalog's OIDs, the first Relation message under a configured name fixes that table's
// OID; the Source always uses NewDecoderFor with the OIDs loaded at Open.
func NewDecoder(tables []string) *Decoder {
	r := Relations{}
	for _, t := range tables {
		schema, name := splitTable(t)
		r.Tables = append(r.Tables, TableRelation{Name: t, Schema: schema, Table: name})
	}
	return NewDecoderFor(r)
}

// splitTable splits "schema.table" at its first dot; a name without a dot is in "public".
func splitTable(t string) (schema, name string) {
	if i := strings.IndexByte(t, '.'); i >= 0 {
		return t[:i], t[i+1:]
	}
	return "public", t
}

// InTx reports whether a transaction has begun and not yet committed (a partially received
// transaction is buffered).
func (d *Decoder) InTx() bool { return d.inTx }

// Decode consumes one pgoutput message. When it completes a chunk, it returns it and done=true:
// the last chunk of a transaction at its Commit (More false, with the Position), an earlier one
// (More set) at the Insert that would overflow it; otherwise done is false. msg is not retained
// after Decode returns.
func (d *Decoder) Decode(msg []byte) (tx source.Tx, done bool, err error) {
	if len(msg) == 0 {
		return source.Tx{}, false, errors.New("pgoutput: empty message")
	}
	r := reader{b: msg, off: 1}
	switch msg[0] {
	case msgBegin:
		err = d.begin(&r)
	case msgCommit:
		return d.commit(&r)
	case msgRelation:
		err = d.relation(&r)
	case msgInsert:
		return d.insert(&r, len(msg))
	case msgMessage:
		return d.decodeMessage(msg) // message.go
	case msgUpdate, msgDelete, msgTruncate, msgType, msgOrigin:
		// Not outbox inserts. (Type and Origin carry nothing we need: type OIDs come with
		// Relation, and unknown types are passed through as text.)
	default:
		err = fmt.Errorf("pgoutput: unexpected message type %q (outboxd uses protocol version 1 without streaming)", msg[0])
	}
	return source.Tx{}, false, err
}

func (d *Decoder) begin(r *reader) error {
	final := pglogrepl.LSN(r.u64()) // the commit's LSN; the Commit carries the end LSN we need
	ts := r.u64()
	xid := r.u32()
	if r.err != nil {
		return fmt.Errorf("pgoutput: Begin: %w", r.err)
	}
	if d.inTx {
		return fmt.Errorf("pgoutput: Begin of xid %d inside open xid %d", xid, d.xid)
	}
	d.inTx, d.xid, d.commitLSN = true, xid, final
	d.tx = source.Tx{CommitTime: pgTime(ts)}
	d.bytes, d.handedRows = 0, 0
	return nil
}

func (d *Decoder) commit(r *reader) (source.Tx, bool, error) {
	r.u8()  // flags, unused
	r.u64() // commit LSN (start of the commit record)
	end := pglogrepl.LSN(r.u64())
	ts := r.u64()
	if r.err != nil {
		return source.Tx{}, false, fmt.Errorf("pgoutput: Commit: %w", r.err)
	}
	if !d.inTx {
		return source.Tx{}, false, fmt.Errorf("pgoutput: Commit at %s without Begin", end)
	}
	tx := d.tx
	tx.Position = lsnPosition(end)
	tx.CommitTime = pgTime(ts)
	tx.Bytes = d.bytes
	d.inTx, d.tx, d.end = false, source.Tx{}, end
	d.bytes, d.handedRows = 0, 0
	return tx, true, nil
}

func (d *Decoder) relation(r *reader) error {
	id := r.u32()
	ns := r.cstring()
	name := r.cstring()
	r.u8() // replica identity
	n := int(r.u16())
	if r.err != nil {
		return fmt.Errorf("pgoutput: Relation: %w", r.err)
	}
	qualified := ns + "." + name
	rel := &relation{table: qualified, oid: id}
	rel.columns = make([]string, n)
	rel.oids = make([]uint32, n)
	rel.types = make([]source.Type, n)
	notNull := d.notNull[id] // nil: unknown, every column nullable
	defaults := d.defaults[id]
	for i := 0; i < n; i++ {
		r.u8() // flags (part of the key)
		rel.columns[i] = r.cstring()
		rel.oids[i] = r.u32()
		rel.types[i] = columnType(rel.oids[i], int32(r.u32()), notNull[rel.columns[i]])
		if expr, ok := defaults[rel.columns[i]]; ok {
			rel.types[i].Default, rel.types[i].HasDefault = columnDefault(rel.oids[i], rel.types[i], expr)
		}
	}
	if r.err != nil {
		return fmt.Errorf("pgoutput: Relation %s (id %d): %w", qualified, id, r.err)
	}
	if err := d.attribute(rel, ns, name); err != nil {
		return err
	}
	d.rels[id] = rel
	return nil
}

func (d *Decoder) insert(r *reader, size int) (source.Tx, bool, error) {
	id := r.u32()
	kind := r.u8()
	if r.err != nil {
		return source.Tx{}, false, fmt.Errorf("pgoutput: Insert: %w", r.err)
	}
	if !d.inTx {
		return source.Tx{}, false, fmt.Errorf("pgoutput: Insert into relation id %d outside a transaction", id)
	}
	rel, ok := d.rels[id]
	if !ok {
		return source.Tx{}, false, fmt.Errorf("pgoutput: Insert into relation id %d before its Relation message", id)
	}
	if !rel.capture {
		return source.Tx{}, false, d.notAttributed(rel)
	}
	if kind != 'N' {
		return source.Tx{}, false, fmt.Errorf("pgoutput: Insert into %s: tuple kind %q, want 'N'", rel.table, kind)
	}
	n := int(r.u16())
	if r.err != nil {
		return source.Tx{}, false, fmt.Errorf("pgoutput: Insert into %s: %w", rel.table, r.err)
	}
	if n != len(rel.columns) {
		return source.Tx{}, false, fmt.Errorf("pgoutput: Insert into %s has %d columns, its Relation message %d", rel.table, n, len(rel.columns))
	}
	// One buffer for all values of the row: the remaining message length bounds their total
	// size (bytea decodes shorter than its text form), so appends never reallocate and every
	// value may alias it safely.
	buf := make([]byte, 0, size-r.off)
	vals := make([]source.Value, n)
	for i := 0; i < n; i++ {
		switch k := r.u8(); k {
		case 'n':
			vals[i] = source.Value{Null: true}
		case 't':
			data := r.bytes(int(r.u32()))
			if r.err != nil {
				break
			}
			start := len(buf)
			if rel.oids[i] == oidBytea {
				var err error
				if buf, err = appendBytea(buf, data); err != nil {
					return source.Tx{}, false, fmt.Errorf("pgoutput: Insert into %s: column %s: %w", rel.table, rel.columns[i], err)
				}
			} else {
				buf = append(buf, data...)
			}
			vals[i] = source.Value{Bytes: buf[start:len(buf):len(buf)]}
		case 'u':
			return source.Tx{}, false, fmt.Errorf("pgoutput: Insert into %s: column %s is an unchanged-TOAST marker, which an INSERT cannot carry", rel.table, rel.columns[i])
		case 'b':
			return source.Tx{}, false, fmt.Errorf("pgoutput: Insert into %s: column %s is in binary format, which outboxd does not request", rel.table, rel.columns[i])
		default:
			if r.err == nil {
				return source.Tx{}, false, fmt.Errorf("pgoutput: Insert into %s: column %s has unknown tuple data kind %q", rel.table, rel.columns[i], k)
			}
		}
		if r.err != nil {
			return source.Tx{}, false, fmt.Errorf("pgoutput: Insert into %s: column %s: %w", rel.table, rel.columns[i], r.err)
		}
	}
	tx, cut := d.add(source.Row{Table: rel.table, Columns: rel.columns, Values: vals, Types: rel.types}, len(buf)+source.RowOverhead)
	return tx, cut, nil
}

// add appends row (rb bytes, as source.RowBytes counts it) to the open transaction. When the
// pending rows are at a cap, or row would push them past the byte cap, they are cut off first
// and returned as a chunk with More set; row then starts the next chunk (see Decoder).
func (d *Decoder) add(row source.Row, rb int) (chunk source.Tx, cut bool) {
	if n := len(d.tx.Rows); n > 0 && (d.chunkRows > 0 && n >= d.chunkRows || d.chunkBytes > 0 && d.bytes+rb > d.chunkBytes) {
		chunk = source.Tx{CommitTime: d.tx.CommitTime, Rows: d.tx.Rows, More: true, Bytes: d.bytes}
		d.handedRows += n
		// A fresh slice (the caller keeps the chunk's), sized like the last one: a transaction
		// that needed one cut is likely to need more.
		d.tx.Rows, d.bytes, cut = make([]source.Row, 0, n), 0, true
	}
	d.tx.Rows = append(d.tx.Rows, row)
	d.bytes += rb
	return chunk, cut
}

// appendBytea appends the bytes that bytea's text output form src denotes: the hex form
// ("\x4142") or the legacy escape form (octal "\101", "\\").
func appendBytea(dst, src []byte) ([]byte, error) {
	if len(src) >= 2 && src[0] == '\\' && src[1] == 'x' {
		h := src[2:]
		if len(h)%2 != 0 {
			return dst, errors.New("bytea hex form has an odd number of digits")
		}
		for i := 0; i < len(h); i += 2 {
			hi, ok1 := unhex(h[i])
			lo, ok2 := unhex(h[i+1])
			if !ok1 || !ok2 {
				return dst, fmt.Errorf("bytea hex form has an invalid digit near offset %d", i+2)
			}
			dst = append(dst, hi<<4|lo)
		}
		return dst, nil
	}
	for i := 0; i < len(src); i++ {
		c := src[i]
		if c != '\\' {
			dst = append(dst, c)
			continue
		}
		switch {
		case i+1 < len(src) && src[i+1] == '\\':
			dst = append(dst, '\\')
			i++
		case i+3 < len(src) && isOctal(src[i+1]) && isOctal(src[i+2]) && isOctal(src[i+3]) && src[i+1] <= '3':
			dst = append(dst, (src[i+1]-'0')<<6|(src[i+2]-'0')<<3|(src[i+3]-'0'))
			i += 3
		default:
			return dst, fmt.Errorf("bytea escape form has an invalid escape at offset %d", i)
		}
	}
	return dst, nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

func isOctal(c byte) bool { return '0' <= c && c <= '7' }

// pgEpoch is PostgreSQL's timestamp epoch, 2000-01-01 00:00:00 UTC.
var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// pgTime converts microseconds since the PostgreSQL epoch to a UTC time.
func pgTime(us uint64) time.Time {
	return pgEpoch.Add(time.Duration(int64(us)) * time.Microsecond)
}

// reader is a bounds-checked big-endian cursor over one message. After the first short read,
// err is set and every further read returns zero values.
type reader struct {
	b   []byte
	off int
	err error
}

var errShort = errors.New("message truncated")

func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || len(r.b)-r.off < n {
		r.err = errShort
		return nil
	}
	p := r.b[r.off : r.off+n]
	r.off += n
	return p
}

func (r *reader) u8() byte {
	if p := r.take(1); p != nil {
		return p[0]
	}
	return 0
}

func (r *reader) u16() uint16 {
	if p := r.take(2); p != nil {
		return binary.BigEndian.Uint16(p)
	}
	return 0
}

func (r *reader) u32() uint32 {
	if p := r.take(4); p != nil {
		return binary.BigEndian.Uint32(p)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if p := r.take(8); p != nil {
		return binary.BigEndian.Uint64(p)
	}
	return 0
}

// bytes returns the next n bytes (aliasing the message).
func (r *reader) bytes(n int) []byte {
	if n == 0 && r.err == nil {
		return []byte{}
	}
	return r.take(n)
}

// cstring reads a NUL-terminated string.
func (r *reader) cstring() string {
	if r.err != nil {
		return ""
	}
	for i := r.off; i < len(r.b); i++ {
		if r.b[i] == 0 {
			s := string(r.b[r.off:i])
			r.off = i + 1
			return s
		}
	}
	r.err = errShort
	return ""
}
