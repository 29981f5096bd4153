package bench

import (
	"context"
	"time"

	"github.com/outboxd/outboxd/source"
)

// Backend is one source database under test. The drain scenario (drain.go) is written against
// it: PostgreSQL implements it in postgres.go (reference readers: pg_recvlogical and a bare
// pglogrepl reader; readers are logical slots at one LSN), MariaDB in mariadb.go (reference
// reader: a bare go-mysql BinlogSyncer decoding the same binlog range; readers are unique replica
// server_ids that all start at the GTID position captured before the backlog).
type Backend interface {
	// Name is the database's name in the report ("PostgreSQL").
	Name() string
	// References names the reference readers, the first one being the ratio's denominator
	// ("pg_recvlogical", then a bare Go reader of the same stream).
	References() []string
	// RatioTarget is issue 7's target for outboxd / the first reference reader with transactions of
	// rowsPerTx rows; 0 = none.
	RatioTarget(rowsPerTx int) float64
	// PrepareDrain creates the outbox table (once), `readers` independent read positions that
	// all start before the backlog (PostgreSQL: logical slots at one LSN), then loads rows
	// outbox rows in transactions of rowsPerTx rows whose aggregate types make topics under
	// topicTag.
	PrepareDrain(ctx context.Context, tag string, rows, rowsPerTx, readers int) (*Backlog, error)
	// RunReference drains reader i with reference reader ref (an index into References) and
	// returns its wall time.
	RunReference(ctx context.Context, b *Backlog, ref, i int) (time.Duration, error)
	// SourceYAML is the outboxd config `source:` section (indented by two spaces) reading with
	// reader i.
	SourceYAML(b *Backlog, i int) string
	// StartPosition is the position outboxd's offsets file is seeded with before reader i's
	// run ("" = none: the server keeps the reader's start, as a PostgreSQL slot does).
	StartPosition(b *Backlog, i int) source.Position
	// Covers reports whether a stored outboxd position means the whole backlog is delivered.
	Covers(b *Backlog, p source.Position) (bool, error)
	// Cleanup releases the read positions of b (drops the slots: they retain WAL).
	Cleanup(ctx context.Context, b *Backlog)
}

// Backlog is a loaded backlog and its readers.
type Backlog struct {
	Tag       string   // unique name of this backlog (slot and topic names derive from it)
	Rows      int      // outbox rows (events)
	RowsPerTx int      // transaction size
	Readers   []string // reader names (PostgreSQL: slot names; MariaDB: "server_id N")
	LoadTime  time.Duration

	// PostgreSQL
	beforeLast string // WAL LSN after every row but the last was committed
	endLSN     string // WAL LSN after the last row was committed (pg_recvlogical --endpos)

	// MariaDB
	serverIDs []uint32        // reader i's replica server_id
	start     source.Position // @@gtid_binlog_pos before the backlog
	end       source.Position // @@gtid_binlog_pos after it
}
