package postgres

import "github.com/outboxd/outboxd/source/postgres/pgoutputtest"

// The decoder tests' short names for the pgoutput byte builders of package pgoutputtest
// (hand-built protocol-version-1 messages, byte for byte as the server sends them in XLogData
// WALData; checked against pglogrepl's parser by TestFixturesMatchPglogrepl).

// col is a Relation column, written unkeyed in the tests ({"id", oidUUID}).
type col struct {
	name string
	oid  uint32
}

type tv = pgoutputtest.Value

func relMsg(id uint32, ns, name string, cols ...col) []byte {
	pc := make([]pgoutputtest.Column, len(cols))
	for i, c := range cols {
		pc[i] = pgoutputtest.Column{Name: c.name, OID: c.oid}
	}
	return pgoutputtest.Relation(id, ns, name, pc...)
}

// The outbox relation as testenv.OutboxDDL creates it (pgoutputtest.OutboxColumns).
var outboxCols = func() []col {
	var cs []col
	for _, c := range pgoutputtest.OutboxColumns {
		cs = append(cs, col{c.Name, c.OID})
	}
	return cs
}()

var (
	txt  = pgoutputtest.Text
	null = pgoutputtest.Null

	beginMsg    = pgoutputtest.Begin
	commitMsg   = pgoutputtest.Commit
	insertMsg   = pgoutputtest.Insert
	updateMsg   = pgoutputtest.Update
	deleteMsg   = pgoutputtest.Delete
	truncateMsg = pgoutputtest.Truncate
	typeMsg     = pgoutputtest.Type
	originMsg   = pgoutputtest.Origin
)

// logicalMsg is a transactional logical decoding message.
func logicalMsg(lsn uint64, prefix, content string) []byte {
	return pgoutputtest.Message(true, lsn, prefix, content)
}

// OIDs the decoder itself names (oidBool, oidInt8, ... in types.go) are the same numbers as
// pgoutputtest's (TestTypeOIDsMatchFixtures).
const (
	oidText    = pgoutputtest.OIDText
	oidInet    = pgoutputtest.OIDInet
	oidVarchar = pgoutputtest.OIDVarchar
	oidEnum    = pgoutputtest.OIDEnum
)

func outboxRow(id, agg, payload string) []tv {
	return pgoutputtest.Texts(id, "order", agg, "created", payload, "2024-05-06 07:08:09.123456+00")
}
