package postgres

import (
	"encoding/binary"
	"time"
)

// Hand-built pgoutput protocol-version-1 messages, byte for byte as the server sends them in
// XLogData WALData (see PostgreSQL's "Logical Replication Message Formats").

type col struct {
	name string
	oid  uint32
}

// tv is one TupleData column: kind 't' (text), 'n' (NULL), 'u' (unchanged TOAST), 'b' (binary).
type tv struct {
	kind byte
	data string
}

func txt(s string) tv { return tv{kind: 't', data: s} }

var null = tv{kind: 'n'}

const (
	oidBool        = 16
	oidInt8        = 20
	oidInt4        = 23
	oidText        = 25
	oidJSON        = 114
	oidInet        = 869
	oidVarchar     = 1043
	oidTimestamptz = 1184
	oidUUID        = 2950
	oidJSONB       = 3802
	oidEnum        = 16390 // a user-defined enum: unknown to the decoder
)

type msgBuf []byte

func (b msgBuf) u8(v byte) msgBuf      { return append(b, v) }
func (b msgBuf) u16(v uint16) msgBuf   { return binary.BigEndian.AppendUint16(b, v) }
func (b msgBuf) u32(v uint32) msgBuf   { return binary.BigEndian.AppendUint32(b, v) }
func (b msgBuf) u64(v uint64) msgBuf   { return binary.BigEndian.AppendUint64(b, v) }
func (b msgBuf) str(s string) msgBuf   { return append(append(b, s...), 0) }
func (b msgBuf) ts(t time.Time) msgBuf { return b.u64(uint64(t.Sub(pgEpoch) / time.Microsecond)) }

func relMsg(id uint32, ns, name string, cols ...col) []byte {
	b := msgBuf{'R'}.u32(id).str(ns).str(name).u8('d').u16(uint16(len(cols)))
	for i, c := range cols {
		flags := byte(0)
		if i == 0 {
			flags = 1 // part of the key
		}
		b = b.u8(flags).str(c.name).u32(c.oid).u32(0xFFFFFFFF) // typmod -1
	}
	return b
}

func beginMsg(finalLSN uint64, t time.Time, xid uint32) []byte {
	return msgBuf{'B'}.u64(finalLSN).ts(t).u32(xid)
}

func commitMsg(commitLSN, endLSN uint64, t time.Time) []byte {
	return msgBuf{'C'}.u8(0).u64(commitLSN).u64(endLSN).ts(t)
}

func tuple(b msgBuf, vals []tv) msgBuf {
	b = b.u16(uint16(len(vals)))
	for _, v := range vals {
		b = b.u8(v.kind)
		if v.kind == 't' || v.kind == 'b' {
			b = append(b.u32(uint32(len(v.data))), v.data...)
		}
	}
	return b
}

func insertMsg(rel uint32, vals ...tv) []byte {
	return tuple(msgBuf{'I'}.u32(rel).u8('N'), vals)
}

func updateMsg(rel uint32, vals ...tv) []byte {
	return tuple(msgBuf{'U'}.u32(rel).u8('N'), vals)
}

func deleteMsg(rel uint32, key ...tv) []byte {
	return tuple(msgBuf{'D'}.u32(rel).u8('K'), key)
}

func truncateMsg(rels ...uint32) []byte {
	b := msgBuf{'T'}.u32(uint32(len(rels))).u8(0)
	for _, r := range rels {
		b = b.u32(r)
	}
	return b
}

func typeMsg(oid uint32, ns, name string) []byte { return msgBuf{'Y'}.u32(oid).str(ns).str(name) }

func originMsg(lsn uint64, name string) []byte { return msgBuf{'O'}.u64(lsn).str(name) }

func logicalMsg(lsn uint64, prefix, content string) []byte {
	b := msgBuf{'M'}.u8(1).u64(lsn).str(prefix).u32(uint32(len(content)))
	return append(b, content...)
}

// The outbox relation as testenv.OutboxDDL creates it.
var outboxCols = []col{{"id", oidUUID}, {"aggregatetype", oidText}, {"aggregateid", oidText},
	{"type", oidText}, {"payload", oidJSONB}, {"created_at", oidTimestamptz}}

func outboxRow(id, agg, payload string) []tv {
	return []tv{txt(id), txt("order"), txt(agg), txt("created"), txt(payload), txt("2024-05-06 07:08:09.123456+00")}
}
