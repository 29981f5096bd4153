package mysql

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/client"
)

// This file holds the server checks that Open and `outboxd check` share beyond the binlog
// settings of serverInfo: how the server compares table names (lower_case_table_names), binlog
// filters that keep an outbox database out of the binlog (binlog-do-db / binlog-ignore-db),
// binlog_row_metadata, and the charsets of the outbox tables' text columns. readPreflight does
// the I/O; problems decides, as a pure function, and Open refuses what it returns while check
// reports each as a FAIL with its fix.

// Problem is one reason outboxd refuses a server: what is wrong, and what the operator must do.
type Problem struct {
	Check  string // what was checked ("binlog filters", "table app.outbox", ...)
	Reason string
	Fix    string
}

func (p Problem) Error() string { return p.Check + ": " + p.Reason + "; fix: " + p.Fix }

// foundTable is a configured table as information_schema spells it.
type foundTable struct {
	DB, Table string
	Charsets  map[string]string // text column -> CHARACTER_SET_NAME
	Columns   []string          // in table order
}

// preflight is what readPreflight learns.
type preflight struct {
	LowerCaseNames int      // @@lower_case_table_names (0: names compare case-sensitively)
	DoDB, IgnoreDB []string // the binary log status's Binlog_Do_DB and Binlog_Ignore_DB
	// Found maps each configured table to the tables information_schema has under that name
	// compared case-insensitively (none: it does not exist; several: lower_case_table_names=0
	// and names that differ only in case).
	Found      map[tableKey][]foundTable
	Collations map[uint64]string // collation id -> charset name (nil when it could not be read)
}

func (p preflight) fold() bool { return p.LowerCaseNames != 0 }

// readPreflight reads what problems decides on.
func readPreflight(c *client.Conn, captured map[tableKey]string) (preflight, error) {
	var p preflight
	rows, err := query(c, "SELECT @@lower_case_table_names")
	if err != nil {
		return p, fmt.Errorf("read lower_case_table_names: %w", err)
	}
	if p.LowerCaseNames, err = strconv.Atoi(strings.TrimSpace(rows[0][0])); err != nil {
		return p, fmt.Errorf("lower_case_table_names %q: %w", rows[0][0], err)
	}
	if rows, err = query(c, "SHOW BINARY LOG STATUS"); err != nil { // MySQL 8.2+ (MariaDB: SHOW MASTER STATUS)
		if rows, err = query(c, "SHOW MASTER STATUS"); err != nil {
			return p, fmt.Errorf("read the binary log status (SHOW MASTER STATUS, for binlog filters; needs REPLICATION CLIENT / BINLOG MONITOR): %w", err)
		}
	}
	if len(rows) > 0 && len(rows[0]) >= 4 {
		p.DoDB, p.IgnoreDB = splitList(rows[0][2]), splitList(rows[0][3])
	}
	p.Found = map[tableKey][]foundTable{}
	for k := range captured {
		rows, err := query(c, "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "+
			"WHERE LOWER(TABLE_SCHEMA) = LOWER(?) AND LOWER(TABLE_NAME) = LOWER(?)", k.DB, k.Table)
		if err != nil {
			return p, fmt.Errorf("look up table %s in information_schema: %w", k, err)
		}
		for _, r := range rows {
			f := foundTable{DB: r[0], Table: r[1], Charsets: map[string]string{}}
			cols, err := query(c, "SELECT COLUMN_NAME, IFNULL(CHARACTER_SET_NAME, '') FROM information_schema.COLUMNS "+
				"WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION", f.DB, f.Table)
			if err != nil {
				return p, fmt.Errorf("read the columns of %s.%s: %w", f.DB, f.Table, err)
			}
			for _, col := range cols {
				f.Columns = append(f.Columns, col[0])
				if col[1] != "" {
					f.Charsets[col[0]] = strings.ToLower(col[1])
				}
			}
			p.Found[k] = append(p.Found[k], f)
		}
	}
	if rows, err := query(c, "SELECT ID, CHARACTER_SET_NAME FROM information_schema.COLLATIONS WHERE ID IS NOT NULL"); err == nil && len(rows) > 0 {
		p.Collations = make(map[uint64]string, len(rows))
		for _, r := range rows {
			if id, err := strconv.ParseUint(r[0], 10, 64); err == nil {
				p.Collations[id] = strings.ToLower(r[1])
			}
		}
	}
	return p, nil
}

// splitList splits a comma-separated list of database names (binlog filter columns).
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// problems returns every reason to refuse the server for the configured tables (captured:
// key as configured -> name in source.tables), in a stable order.
func (p preflight) problems(info serverInfo, cfg Config, captured map[tableKey]string) []Problem {
	var out []Problem
	if info.rowMetadata != "FULL" && !cfg.AllowMinimalRowMetadata {
		out = append(out, Problem{Check: "binlog_row_metadata",
			Reason: fmt.Sprintf("is %s: the binlog then carries no column names, so outboxd takes them from information_schema; "+
				"rows written before an ALTER TABLE that ran while outboxd was stopped would be decoded with the new column order "+
				"(values under the wrong column names)", orNone(info.rowMetadata)),
			Fix: "SET GLOBAL binlog_row_metadata = FULL (and binlog_row_metadata=FULL in my.cnf), or accept that risk with " +
				"source.mysql.allow_minimal_row_metadata: true"})
	}
	keys := make([]tableKey, 0, len(captured))
	for k := range captured {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b tableKey) int { return strings.Compare(a.String(), b.String()) })
	dbs := map[string]bool{}
	for _, k := range keys {
		name := captured[k]
		found := p.Found[k]
		if !p.fold() && len(found) > 0 && !slices.ContainsFunc(found, func(f foundTable) bool { return f.DB == k.DB && f.Table == k.Table }) {
			out = append(out, Problem{Check: "table " + name,
				Reason: fmt.Sprintf("the server compares table names case-sensitively (lower_case_table_names=0) and the table is named %s.%s; "+
					"the binlog carries that spelling, so rows of %s would never match", found[0].DB, found[0].Table, name),
				Fix: fmt.Sprintf("write source.tables as %s.%s", found[0].DB, found[0].Table)})
		}
		for _, f := range found {
			if !p.fold() && (f.DB != k.DB || f.Table != k.Table) {
				continue // another table that differs only in case
			}
			for _, col := range f.Columns {
				if cs, ok := f.Charsets[col]; ok && !supportedCharset(cs) {
					err := unsupportedCharsetError(name, col, cs)
					out = append(out, Problem{Check: "table " + name + " column " + col, Reason: err.Error(),
						Fix: fmt.Sprintf("ALTER TABLE %s MODIFY %s ... CHARACTER SET utf8mb4", name, col)})
				}
			}
		}
		db := k.DB
		if p.fold() {
			db = strings.ToLower(db)
		}
		if dbs[db] {
			continue
		}
		dbs[db] = true
		if why := filterExcludes(db, p.DoDB, p.IgnoreDB, p.fold()); why != "" {
			out = append(out, Problem{Check: "binlog filters",
				Reason: fmt.Sprintf("the server does not log changes to database %s (%s), so rows of %s never reach the binlog", k.DB, why, name),
				Fix:    "remove that binlog-do-db / binlog-ignore-db option from the server configuration (my.cnf) and restart the server"})
		}
	}
	return out
}

// filterExcludes reports why the binlog filters keep changes to database db out of the binlog
// ("" when they do not): it is in Binlog_Ignore_DB, or Binlog_Do_DB is set and lacks it. With
// row-based logging the server applies both to the database of the changed table. (Replication
// filters, replicate-*-db, act on a replica's applier, not on this server's binlog.)
func filterExcludes(db string, doDB, ignoreDB []string, fold bool) string {
	eq := func(a string) bool {
		if fold {
			return strings.EqualFold(a, db)
		}
		return a == db
	}
	if slices.ContainsFunc(ignoreDB, eq) {
		return "binlog-ignore-db=" + db
	}
	if len(doDB) > 0 && !slices.ContainsFunc(doDB, eq) {
		return "binlog-do-db=" + strings.Join(doDB, ",") + " does not list it"
	}
	return ""
}

// preflightError turns problems into Open's refusal.
func preflightError(probs []Problem) error {
	errs := make([]error, len(probs))
	for i, p := range probs {
		errs[i] = p
	}
	return fmt.Errorf("the server is not set up for loss-free capture: %w", errors.Join(errs...))
}

// preflight runs the checks of this file at Open: it refuses the problems found and records
// how to compare names and resolve collations.
func (s *Source) preflight(c *client.Conn) error {
	p, err := readPreflight(c, s.captured)
	if err != nil {
		return fmt.Errorf("read server settings from %s: %w", s.dsn.Redacted(), err)
	}
	if probs := p.problems(s.info, s.cfg, s.captured); len(probs) > 0 {
		return preflightError(probs)
	}
	s.pre = p
	if p.fold() {
		s.captured = foldKeys(s.captured)
		s.byDB = map[string]map[string]bool{}
		for k := range s.captured {
			if s.byDB[k.DB] == nil {
				s.byDB[k.DB] = map[string]bool{}
			}
			s.byDB[k.DB][k.Table] = true
		}
	}
	return nil
}

// foldKeys lower-cases the keys of captured (names keep their configured spelling).
func foldKeys(captured map[tableKey]string) map[tableKey]string {
	out := make(map[tableKey]string, len(captured))
	for k, n := range captured {
		out[tableKey{strings.ToLower(k.DB), strings.ToLower(k.Table)}] = n
	}
	return out
}

// configure hands the preflight's findings to the assembler and the schema tracker.
func (s *Source) configure(a *assembler, t *schemaTracker) {
	a.fold, a.collations = s.pre.fold(), s.pre.Collations
	if t != nil {
		t.fold = s.pre.fold()
	}
}

// capturedTable reports whether db.table is a captured table, comparing names the way the
// server does.
func (s *Source) capturedTable(db, table []byte) bool {
	if s.pre.fold() {
		return s.byDB[strings.ToLower(string(db))][strings.ToLower(string(table))]
	}
	return s.byDB[string(db)][string(table)]
}
