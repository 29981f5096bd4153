package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/outboxd/outboxd/offsets"
)

// Backend is one source database under test. The drain scenario (drain.go) is written against
// it: PostgreSQL implements it in postgres.go (reference reader: pg_recvlogical); the MariaDB
// drain needs a second implementation (reference reader: a bare go-mysql BinlogSyncer reading
// the same binlog range and discarding the events; readers = independent start positions, that
// is the binlog GTID set / file:pos captured before the backlog, shared by all readers), and an
// entry in Run (see drainMariaDB).
type Backend interface {
	// Name is the database's name in the report ("PostgreSQL").
	Name() string
	// References names the reference readers, the first one being the ratio's denominator
	// ("pg_recvlogical", then a bare Go reader of the same stream).
	References() []string
	// PrepareDrain creates the outbox table (once), `readers` independent read positions that
	// all start before the backlog (PostgreSQL: logical slots at one LSN), then loads rows
	// outbox rows in transactions of rowsPerTx rows (the last row committed alone) whose
	// aggregate types make topics under topicTag.
	PrepareDrain(ctx context.Context, tag string, rows, rowsPerTx, readers int) (*Backlog, error)
	// RunReference drains reader i with reference reader ref (an index into References) and
	// returns its wall time.
	RunReference(ctx context.Context, b *Backlog, ref, i int) (time.Duration, error)
	// SourceYAML is the outboxd config `source:` section (indented by two spaces) reading with
	// reader i.
	SourceYAML(b *Backlog, i int) string
	// Covers reports whether a stored outboxd position means the whole backlog is delivered.
	Covers(b *Backlog, p offsets.Position) (bool, error)
	// Cleanup releases the read positions of b (drops the slots: they retain WAL).
	Cleanup(ctx context.Context, b *Backlog)
}

// Backlog is a loaded backlog and its readers.
type Backlog struct {
	Tag       string   // unique name of this backlog (slot and topic names derive from it)
	Rows      int      // outbox rows (events)
	RowsPerTx int      // transaction size
	Readers   []string // reader names (PostgreSQL: slot names)
	LoadTime  time.Duration

	// PostgreSQL
	beforeLast string // WAL LSN after every row but the last was committed
	endLSN     string // WAL LSN after the last row was committed (pg_recvlogical --endpos)
}

// drainMariaDB is the hook for the MariaDB drain scenario. To build it: implement Backend for
// MariaDB (testenv.StartMariaDB with RowMetadata, testenv.MariaDBOutboxDDL, a stored procedure
// or multi-connection loader; reference = go-mysql replication.BinlogSyncer from the captured
// start position until the last row's GTID; SourceYAML = type mysql with a distinct server_id
// per reader; Covers = GTID set contains the last transaction's GTID), then replace this body
// with `return drain(ctx, e, mariadb, "drain-mariadb", 1)`.
func drainMariaDB(ctx context.Context, e *env) ([]Result, error) {
	return []Result{{Scenario: "drain-mariadb", Name: "outboxd / BinlogSyncer",
		Detail: "hook only (internal/bench/backend.go: drainMariaDB)",
		Error:  fmt.Sprintf("%v: the MariaDB backend is not implemented yet", errSkipped)}}, nil
}
