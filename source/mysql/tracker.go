package mysql

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
)

// schemaTracker follows the schema of the captured tables along the binlog stream, for servers
// whose TableMapEvents carry no column names (binlog_row_metadata MINIMAL or NO_LOG).
//
// The schema of a table is read from information_schema when it is first needed (at Open in
// information_schema mode, so it is the schema current at that moment). From then on every DDL statement in the stream that
// touches a captured table is applied at its place in the stream: CREATE, ALTER (columns added,
// dropped, changed, renamed or moved), DROP and RENAME TABLE. A row is therefore decoded with
// the schema that was current when it was written, even when the reader lags behind several
// ALTERs. A DDL this package cannot follow makes the tracker re-read information_schema at that
// point (logged as a warning); every TableMapEvent is checked against the tracked schema
// (column count and types), so a schema that does not fit fails loudly instead of decoding
// values under the wrong names.
//
// Limitation: a stored position older than the last ALTER of a table starts with the current
// schema, which does not describe the older rows; the layout check turns that into an error
// (unless the ALTER kept the column count and types, e.g. a pure column rename).
type schemaTracker struct {
	captured map[tableKey]string
	tables   map[tableKey]*tableSchema // a nil value: the table is known not to exist
	version  int                       // bumped on every change, invalidates table descriptions
	load     func(tableKey) (*tableSchema, error)
	mariadb  bool
	log      *slog.Logger
	lowNames []string // lower-case captured table names, to skip unrelated statements fast
	fold     bool     // lower_case_table_names != 0: captured keys are lower case; statement names are folded
}

func newSchemaTracker(captured map[tableKey]string, load func(tableKey) (*tableSchema, error), mariadb bool, log *slog.Logger) *schemaTracker {
	t := &schemaTracker{captured: captured, tables: map[tableKey]*tableSchema{}, load: load, mariadb: mariadb, log: log}
	for k := range captured {
		t.lowNames = append(t.lowNames, strings.ToLower(k.Table))
	}
	return t
}

// schema returns the tracked schema of k, reading information_schema the first time. nil
// means the table does not exist.
func (t *schemaTracker) schema(k tableKey) (*tableSchema, error) {
	if s, ok := t.tables[k]; ok {
		return s, nil
	}
	return t.reload(k)
}

func (t *schemaTracker) reload(k tableKey) (*tableSchema, error) {
	s, err := t.load(k)
	if err != nil {
		return nil, fmt.Errorf("read the schema of %s from information_schema: %w", k, err)
	}
	t.tables[k] = s
	t.version++
	return s, nil
}

// onQuery applies one statement of the binlog (a QueryEvent outside a transaction) with
// defaultDB as its current database. at names the stream position, for logs.
func (t *schemaTracker) onQuery(defaultDB, query, at string) error {
	low := strings.ToLower(query)
	hit := false
	for _, n := range t.lowNames {
		if strings.Contains(low, n) {
			hit = true
			break
		}
	}
	if !hit {
		return nil
	}
	st := parseDDL(defaultDB, query, t.mariadb)
	if t.fold {
		st.foldNames()
	}
	switch st.kind {
	case ddlNone:
		return nil
	case ddlCreate:
		if t.isCaptured(st.table) {
			for i := range st.create.Cols {
				if st.create.Cols[i].Charset == "" && isTextType(st.create.Cols[i].DataType) {
					st.create.Cols[i].Charset = st.create.DefaultCharset
				}
			}
			t.set(st.table, st.create, at, "CREATE TABLE")
		}
	case ddlCreateLike:
		if t.isCaptured(st.table) {
			if src, ok := t.tables[st.like]; ok && src != nil {
				t.set(st.table, src.clone(), at, "CREATE TABLE LIKE")
			} else {
				return t.fallback(st.table, at, query)
			}
		}
	case ddlDrop:
		for _, k := range st.tables {
			if t.isCaptured(k) {
				t.set(k, nil, at, "DROP TABLE")
			}
		}
	case ddlRename:
		work := map[tableKey]*tableSchema{}
		for k, v := range t.tables {
			work[k] = v
		}
		for _, r := range st.renames {
			s, known := work[r[0]]
			delete(work, r[0])
			if known {
				work[r[1]] = s
			} else {
				work[r[1]] = nil
				if t.isCaptured(r[1]) {
					if err := t.fallback(r[1], at, query); err != nil {
						return err
					}
					work[r[1]] = t.tables[r[1]]
				}
			}
		}
		for k := range t.captured {
			if s, ok := work[k]; ok {
				t.set(k, s, at, "RENAME TABLE")
			} else if _, had := t.tables[k]; had {
				t.set(k, nil, at, "RENAME TABLE")
			}
		}
		// Keep the schemas of tables renamed away, so renaming them back needs no re-read.
		for k, s := range work {
			if !t.isCaptured(k) {
				t.tables[k] = s
			}
		}
	case ddlAlter:
		return t.alter(st, at, query)
	default:
		for k := range t.captured {
			if strings.Contains(low, strings.ToLower(k.Table)) {
				if err := t.fallback(k, at, query); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (t *schemaTracker) isCaptured(k tableKey) bool { _, ok := t.captured[k]; return ok }

func (t *schemaTracker) set(k tableKey, s *tableSchema, at, what string) {
	t.tables[k] = s
	t.version++
	if s == nil {
		t.log.Info("captured table dropped in the binlog", "table", k.String(), "at", at, "ddl", what)
		return
	}
	t.log.Info("captured table schema changed in the binlog", "table", k.String(), "at", at, "ddl", what,
		"columns", strings.Join(s.names(), ","))
}

// fallback re-reads information_schema for k at this point of the stream.
func (t *schemaTracker) fallback(k tableKey, at, query string) error {
	t.log.Warn("the schema of a captured table cannot be derived from this DDL; re-reading it from information_schema "+
		"(later rows are checked against it; binlog_row_metadata=FULL avoids this)",
		"table", k.String(), "at", at, "query", truncate(query, 200))
	_, err := t.reload(k)
	return err
}

func (t *schemaTracker) alter(st ddlStmt, at, query string) error {
	target := st.table
	for _, op := range st.ops {
		if op.kind == opRenameTable {
			target = op.table
		}
	}
	if !t.isCaptured(st.table) && !t.isCaptured(target) {
		return nil
	}
	cur, known := t.tables[st.table]
	if !known {
		if target != st.table && t.isCaptured(target) {
			return t.fallback(target, at, query) // an untracked table renamed to a captured one
		}
		return nil // not tracked yet: read from information_schema when first needed
	}
	if cur == nil {
		if t.isCaptured(target) {
			return t.fallback(target, at, query)
		}
		return nil
	}
	s := cur.clone()
	for _, op := range st.ops {
		if !applyOp(s, op) {
			if t.isCaptured(st.table) && st.table != target {
				t.set(st.table, nil, at, "ALTER TABLE RENAME")
			}
			if t.isCaptured(target) {
				return t.fallback(target, at, query)
			}
			return nil
		}
	}
	if st.table != target {
		if t.isCaptured(st.table) {
			t.set(st.table, nil, at, "ALTER TABLE RENAME")
		}
		if !t.isCaptured(target) {
			t.tables[target] = s
			return nil
		}
	}
	t.set(target, s, at, "ALTER TABLE")
	return nil
}

// applyOp applies one ALTER specification to s; false when it cannot be followed.
func applyOp(s *tableSchema, op alterOp) bool {
	place := func(c schemaCol, first bool, after string) bool {
		switch {
		case first:
			s.Cols = slices.Insert(s.Cols, 0, c)
		case after != "":
			i := s.index(after)
			if i < 0 {
				return false
			}
			s.Cols = slices.Insert(s.Cols, i+1, c)
		default:
			s.Cols = append(s.Cols, c)
		}
		return true
	}
	fill := func(c *schemaCol, prev *schemaCol) {
		if c.Charset == "" && isTextType(c.DataType) {
			if prev != nil && prev.Charset != "" && prev.Charset != "binary" {
				c.Charset = prev.Charset
			} else {
				c.Charset = s.DefaultCharset
			}
		}
	}
	switch op.kind {
	case opIgnore:
		return true
	case opAdd:
		if s.index(op.col.Name) >= 0 {
			return op.ifExists // ADD COLUMN IF NOT EXISTS on an existing column: no-op
		}
		fill(&op.col, nil)
		return place(op.col, op.first, op.after)
	case opDrop:
		i := s.index(op.old)
		if i < 0 {
			return op.ifExists
		}
		s.Cols = slices.Delete(s.Cols, i, i+1)
		return true
	case opChange, opModify:
		i := s.index(op.old)
		if i < 0 {
			return op.ifExists
		}
		prev := s.Cols[i]
		fill(&op.col, &prev)
		if !op.first && op.after == "" {
			s.Cols[i] = op.col
			return true
		}
		s.Cols = slices.Delete(s.Cols, i, i+1)
		return place(op.col, op.first, op.after)
	case opRenameColumn:
		i := s.index(op.old)
		if i < 0 {
			return op.ifExists
		}
		s.Cols[i].Name = op.newName
		return true
	case opRenameTable:
		return true
	case opConvert:
		for i := range s.Cols {
			if isTextType(s.Cols[i].DataType) {
				s.Cols[i].Charset = op.charset
			}
		}
		s.DefaultCharset = op.charset
		return true
	case opDefaultCharset:
		s.DefaultCharset = op.charset
		return true
	}
	return false
}

func isTextType(dt string) bool {
	switch dt {
	case "char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set":
		return true
	}
	return false
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// foldNames lower-cases every table name of st (lower_case_table_names 1 or 2: the server
// compares them case-insensitively).
func (st *ddlStmt) foldNames() {
	low := func(k tableKey) tableKey { return tableKey{strings.ToLower(k.DB), strings.ToLower(k.Table)} }
	st.table, st.like = low(st.table), low(st.like)
	for i := range st.tables {
		st.tables[i] = low(st.tables[i])
	}
	for i := range st.renames {
		st.renames[i] = [2]tableKey{low(st.renames[i][0]), low(st.renames[i][1])}
	}
	for i := range st.ops {
		st.ops[i].table = low(st.ops[i].table)
	}
}
