// Package pgoutputtest builds pgoutput protocol-version-1 messages byte for byte as the
// PostgreSQL walsender sends them (see PostgreSQL's "Logical Replication Message Formats" and
// "Streaming Replication Protocol"), for tests and benchmarks that feed the decoder without a
// server: the source/postgres decoder tests, their fuzz seeds and internal/bench's hot path.
//
// Every builder returns a fresh slice. The messages are checked against pglogrepl's own parser
// by source/postgres's TestFixturesMatchPglogrepl, so a test built on them exercises the real
// wire format. The package imports only the standard library.
package pgoutputtest

import (
	"encoding/binary"
	"time"
)

// Epoch is PostgreSQL's timestamp epoch, 2000-01-01 00:00:00 UTC: wire timestamps are
// microseconds since it.
var Epoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// Type OIDs of the built-in types the tests use (pg_type.oid).
const (
	OIDBool        = 16
	OIDBytea       = 17
	OIDName        = 19
	OIDInt8        = 20
	OIDInt2        = 21
	OIDInt4        = 23
	OIDText        = 25
	OIDOID         = 26
	OIDJSON        = 114
	OIDXML         = 142
	OIDFloat4      = 700
	OIDFloat8      = 701
	OIDMoney       = 790
	OIDInet        = 869
	OIDBpchar      = 1042
	OIDVarchar     = 1043
	OIDDate        = 1082
	OIDTime        = 1083
	OIDTimestamp   = 1114
	OIDTimestamptz = 1184
	OIDInterval    = 1186
	OIDNumeric     = 1700
	OIDUUID        = 2950
	OIDJSONB       = 3802
	OIDEnum        = 16390 // a user-defined enum's OID: unknown to the decoder
)

// Column is one column of a Relation message.
type Column struct {
	Name string
	OID  uint32 // the column's type OID
	// Typmod is the column's type modifier (atttypmod) when TypmodSet; otherwise the message
	// carries -1 (no modifier), as for most columns.
	Typmod    int32
	TypmodSet bool
}

// NumericTypmod is numeric(precision, scale)'s type modifier.
func NumericTypmod(precision, scale int) int32 {
	return int32(precision<<16|scale&0x7ff) + 4
}

// OutboxColumns is the outbox table as testenv.OutboxDDL creates it.
var OutboxColumns = []Column{{Name: "id", OID: OIDUUID}, {Name: "aggregatetype", OID: OIDText},
	{Name: "aggregateid", OID: OIDText}, {Name: "type", OID: OIDText}, {Name: "payload", OID: OIDJSONB},
	{Name: "created_at", OID: OIDTimestamptz}}

// Value is one TupleData column: Kind 't' (text), 'n' (NULL), 'u' (unchanged TOASTed value) or
// 'b' (binary); Data is the value of a 't' or 'b' column.
type Value struct {
	Kind byte
	Data string
}

// Null is a NULL column value.
var Null = Value{Kind: 'n'}

// Text is a column value in text form.
func Text(s string) Value { return Value{Kind: 't', Data: s} }

// Texts is Text of each of vals.
func Texts(vals ...string) []Value {
	out := make([]Value, len(vals))
	for i, v := range vals {
		out[i] = Text(v)
	}
	return out
}

// Buf appends big-endian wire fields; each method returns the extended buffer.
type Buf []byte

func (b Buf) U8(v byte) Buf        { return append(b, v) }
func (b Buf) U16(v uint16) Buf     { return binary.BigEndian.AppendUint16(b, v) }
func (b Buf) U32(v uint32) Buf     { return binary.BigEndian.AppendUint32(b, v) }
func (b Buf) U64(v uint64) Buf     { return binary.BigEndian.AppendUint64(b, v) }
func (b Buf) Str(s string) Buf     { return append(append(b, s...), 0) } // a NUL-terminated string
func (b Buf) Time(t time.Time) Buf { return b.U64(uint64(t.Sub(Epoch) / time.Microsecond)) }

// Relation is a Relation message ('R') for table ns.name with relation OID id, replica
// identity default, and the first column flagged as part of the key; typmods are -1 unless a
// Column sets one.
func Relation(id uint32, ns, name string, cols ...Column) []byte {
	b := Buf{'R'}.U32(id).Str(ns).Str(name).U8('d').U16(uint16(len(cols)))
	for i, c := range cols {
		flags := byte(0)
		if i == 0 {
			flags = 1 // part of the key
		}
		mod := uint32(0xFFFFFFFF)
		if c.TypmodSet {
			mod = uint32(c.Typmod)
		}
		b = b.U8(flags).Str(c.Name).U32(c.OID).U32(mod)
	}
	return b
}

// Begin is a Begin message ('B') of transaction xid whose commit record is at finalLSN.
func Begin(finalLSN uint64, commitTime time.Time, xid uint32) []byte {
	return AppendBegin(make([]byte, 0, 21), finalLSN, commitTime, xid)
}

// AppendBegin appends Begin's message to b (no allocation when b has room for its 21 bytes).
func AppendBegin(b []byte, finalLSN uint64, commitTime time.Time, xid uint32) []byte {
	return Buf(append(b, 'B')).U64(finalLSN).Time(commitTime).U32(xid)
}

// Commit is a Commit message ('C'): the commit record at commitLSN, the transaction's end at
// endLSN (the position a consumer confirms).
func Commit(commitLSN, endLSN uint64, commitTime time.Time) []byte {
	return AppendCommit(make([]byte, 0, 26), commitLSN, endLSN, commitTime)
}

// AppendCommit appends Commit's message to b (no allocation when b has room for its 26 bytes).
func AppendCommit(b []byte, commitLSN, endLSN uint64, commitTime time.Time) []byte {
	return Buf(append(b, 'C')).U8(0).U64(commitLSN).U64(endLSN).Time(commitTime)
}

// AppendTuple appends a TupleData: the column count, then each column.
func AppendTuple(b []byte, vals []Value) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(vals)))
	for _, v := range vals {
		b = append(b, v.Kind)
		if v.Kind == 't' || v.Kind == 'b' {
			b = append(binary.BigEndian.AppendUint32(b, uint32(len(v.Data))), v.Data...)
		}
	}
	return b
}

// Insert is an Insert message ('I') of a new tuple into relation rel.
func Insert(rel uint32, vals ...Value) []byte { return AppendTuple(Buf{'I'}.U32(rel).U8('N'), vals) }

// Update is an Update message ('U') carrying only the new tuple.
func Update(rel uint32, vals ...Value) []byte { return AppendTuple(Buf{'U'}.U32(rel).U8('N'), vals) }

// Delete is a Delete message ('D') carrying the old key.
func Delete(rel uint32, key ...Value) []byte { return AppendTuple(Buf{'D'}.U32(rel).U8('K'), key) }

// Truncate is a Truncate message ('T') of rels, without options.
func Truncate(rels ...uint32) []byte {
	b := Buf{'T'}.U32(uint32(len(rels))).U8(0)
	for _, r := range rels {
		b = b.U32(r)
	}
	return b
}

// Type is a Type message ('Y') naming the type oid as ns.name.
func Type(oid uint32, ns, name string) []byte { return Buf{'Y'}.U32(oid).Str(ns).Str(name) }

// Origin is an Origin message ('O').
func Origin(lsn uint64, name string) []byte { return Buf{'O'}.U64(lsn).Str(name) }

// Message is a logical decoding message ('M', pg_logical_emit_message) at lsn; a transactional
// one comes inside its transaction's Begin/Commit, a non-transactional one on its own.
func Message(transactional bool, lsn uint64, prefix, content string) []byte {
	flags := byte(0)
	if transactional {
		flags = 1
	}
	b := Buf{'M'}.U8(flags).U64(lsn).Str(prefix).U32(uint32(len(content)))
	return append(b, content...)
}

// The streaming replication protocol's messages, inside CopyData.

// AppendXLogData appends an XLogData message ('w') carrying walData (one pgoutput message):
// the CopyData payload, what pglogrepl.ParseXLogData reads after the 'w'. The server's send
// time is 0.
func AppendXLogData(b []byte, walStart, serverWALEnd uint64, walData []byte) []byte {
	b = append(b, 'w')
	b = binary.BigEndian.AppendUint64(b, walStart)
	b = binary.BigEndian.AppendUint64(b, serverWALEnd)
	b = binary.BigEndian.AppendUint64(b, 0) // send time
	return append(b, walData...)
}

// XLogData is AppendXLogData into a fresh slice.
func XLogData(walStart, serverWALEnd uint64, walData []byte) []byte {
	return AppendXLogData(make([]byte, 0, XLogDataHeaderLen+len(walData)), walStart, serverWALEnd, walData)
}

// XLogDataHeaderLen is the length of an XLogData message without its WAL data.
const XLogDataHeaderLen = 1 + 8 + 8 + 8

// AppendKeepalive appends a primary keepalive message ('k'), asking for an immediate reply
// when reply is set: the CopyData payload.
func AppendKeepalive(b []byte, serverWALEnd uint64, reply bool) []byte {
	b = append(b, 'k')
	b = binary.BigEndian.AppendUint64(b, serverWALEnd)
	b = binary.BigEndian.AppendUint64(b, 0) // send time
	if reply {
		return append(b, 1)
	}
	return append(b, 0)
}

// KeepaliveLen is the length of a primary keepalive message.
const KeepaliveLen = 1 + 8 + 8 + 1

// AppendCopyDataHeader appends the header of a backend CopyData message ('d', then its length)
// whose payload of n bytes the caller appends next.
func AppendCopyDataHeader(b []byte, n int) []byte {
	return binary.BigEndian.AppendUint32(append(b, 'd'), uint32(4+n))
}
