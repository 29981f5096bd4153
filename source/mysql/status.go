package mysql

import (
	"context"
	"fmt"
	"strings"

	"github.com/outboxd/outboxd/source"
)

// ServerStatus is what Inspect learns about a server, for preflight checks (`outboxd check`)
// and `outboxd offsets show`.
type ServerStatus struct {
	Version string // SELECT VERSION()
	Flavor  string // "mysql" or "mariadb"

	LogBin            string // "ON" when the binary log is on
	BinlogFormat      string // must be ROW
	BinlogRowImage    string // must be FULL
	BinlogRowMetadata string // FULL: column names in the binlog; else information_schema is used
	GTIDMode          string // MySQL only ("ON" gives GTID positions)

	// Prerequisites is nil when the binlog settings allow capture, else what is wrong and how
	// to fix it (the same error Open returns).
	Prerequisites error
	// ColumnNames is "binlog" (binlog_row_metadata=FULL) or "information_schema".
	ColumnNames string
	// Position is the server's current binlog end, in the form a source with this Config and
	// no stored position would use (GTID or file:pos).
	Position source.Position
	// ReplicationGrant reports whether the user's grants include REPLICATION SLAVE (or ALL
	// PRIVILEGES); Grants are the SHOW GRANTS lines it was read from.
	ReplicationGrant bool
	Grants           []string
	// MissingTables are the configured tables that do not exist; MissingColumns maps a table to
	// the wanted columns (see Inspect) it lacks.
	MissingTables  []string
	MissingColumns map[string][]string

	// LowerCaseTableNames is @@lower_case_table_names: 0 compares table names case-sensitively
	// (source.tables must match the spelling exactly), 1 and 2 case-insensitively.
	LowerCaseTableNames int
	// BinlogDoDB and BinlogIgnoreDB are the binlog filters of the binary log status.
	BinlogDoDB, BinlogIgnoreDB []string
	// Problems are the reasons Open refuses this server beyond Prerequisites (see preflight.go):
	// binlog_row_metadata, table name case, binlog filters, unsupported charsets.
	Problems []Problem
}

// Inspect connects with cfg and reports the server's binlog settings, current position,
// replication grant and whether the configured tables exist with the given columns. It fails
// only when the server cannot be reached or queried; unmet prerequisites are reported in the
// status.
func Inspect(ctx context.Context, cfg Config, columns ...string) (ServerStatus, error) {
	s := New(cfg, nil)
	if s.cfgErr != nil {
		return ServerStatus{}, s.cfgErr
	}
	c, err := connect(ctx, s.dsn)
	if err != nil {
		return ServerStatus{}, err
	}
	defer c.Close()
	info, err := readServerInfo(c)
	if err != nil {
		return ServerStatus{}, fmt.Errorf("read server settings from %s: %w", s.dsn.Redacted(), err)
	}
	st := ServerStatus{Version: info.version, Flavor: info.flavor(), LogBin: info.logBin, BinlogFormat: info.format,
		BinlogRowImage: info.rowImage, BinlogRowMetadata: info.rowMetadata, GTIDMode: info.gtidMode,
		Prerequisites: info.checkPrerequisites(), ColumnNames: "binlog", MissingColumns: map[string][]string{}}
	if info.rowMetadata != "FULL" {
		st.ColumnNames = "information_schema"
	}
	s.info = info
	if kind, err := s.positionKind(position{}); err == nil && st.Prerequisites == nil {
		if p, err := currentPosition(c, kind); err == nil {
			st.Position = source.Position(p.String())
		}
	}
	if rows, err := query(c, "SHOW GRANTS"); err == nil {
		for _, r := range rows {
			g := strings.ToUpper(r[0])
			st.Grants = append(st.Grants, r[0])
			if strings.Contains(g, "REPLICATION SLAVE") || strings.Contains(g, "GRANT ALL PRIVILEGES ON *.*") {
				st.ReplicationGrant = true
			}
		}
	}
	if pre, err := readPreflight(c, s.captured); err != nil {
		// Open fails the same way: report it as a refusal, not as an unreachable server.
		st.Problems = append(st.Problems, Problem{Check: "server settings", Reason: err.Error(),
			Fix: "GRANT REPLICATION CLIENT (MariaDB: BINLOG MONITOR) and SELECT on information_schema to the user, then check again"})
	} else {
		st.LowerCaseTableNames, st.BinlogDoDB, st.BinlogIgnoreDB = pre.LowerCaseNames, pre.DoDB, pre.IgnoreDB
		st.Problems = pre.problems(info, s.cfg, s.captured)
	}
	for k, name := range s.captured {
		rows, err := query(c, loadSchemaQuery, k.DB, k.Table)
		if err != nil {
			return st, err
		}
		sch := schemaFromRows(rows)
		if sch == nil {
			st.MissingTables = append(st.MissingTables, name)
			continue
		}
		for _, col := range columns {
			if sch.index(col) < 0 {
				st.MissingColumns[name] = append(st.MissingColumns[name], col)
			}
		}
	}
	return st, nil
}

// CheckPosition reports whether the server can still serve a source started at p: nil when it
// can, else the error Open would return (purged binlog, unknown file, wrong flavor), without
// starting a binlog stream. It does not catch every case the server itself refuses (see Open).
func CheckPosition(ctx context.Context, cfg Config, p source.Position) error {
	s := New(cfg, nil)
	if s.cfgErr != nil {
		return s.cfgErr
	}
	start, err := parsePosition(p)
	if err != nil {
		return err
	}
	c, err := connect(ctx, s.dsn)
	if err != nil {
		return err
	}
	defer c.Close()
	if s.info, err = readServerInfo(c); err != nil {
		return err
	}
	if _, err := s.positionKind(start); err != nil {
		return err
	}
	if start.kind == kindNone {
		return nil
	}
	return checkStart(c, s.info, start) // identity.go
}
