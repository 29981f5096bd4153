package mysql

import (
	"strings"
)

// This file reads the DDL statements of the binlog just far enough to track the column list of
// the captured tables (names, order, data types, signedness, charsets): CREATE TABLE, ALTER
// TABLE (ADD/DROP/CHANGE/MODIFY/RENAME COLUMN, RENAME TO, CONVERT TO CHARACTER SET, DEFAULT
// CHARSET), DROP TABLE and RENAME TABLE. Anything it does not understand is reported as
// ddlUnknown, and the tracker falls back to re-reading information_schema.

type ddlKind uint8

const (
	ddlNone       ddlKind = iota // not a statement that changes a table's columns
	ddlCreate                    // CREATE TABLE t (column definitions)
	ddlCreateLike                // CREATE TABLE t LIKE s
	ddlAlter                     // ALTER TABLE t specs
	ddlDrop                      // DROP TABLE a, b
	ddlRename                    // RENAME TABLE a TO b, ...
	ddlUnknown                   // a table DDL this parser cannot follow
)

type opKind uint8

const (
	opIgnore opKind = iota // no effect on columns (indexes, options, defaults)
	opAdd
	opDrop
	opChange // CHANGE old new-definition
	opModify
	opRenameColumn
	opRenameTable
	opConvert        // CONVERT TO CHARACTER SET cs
	opDefaultCharset // [DEFAULT] CHARACTER SET cs
	opUnknown
)

type alterOp struct {
	kind     opKind
	col      schemaCol // the new definition (add, change, modify)
	old      string    // column dropped, changed or renamed
	newName  string    // RENAME COLUMN old TO newName
	first    bool      // FIRST
	after    string    // AFTER column
	ifExists bool      // IF [NOT] EXISTS
	table    tableKey  // RENAME TO
	charset  string
}

type ddlStmt struct {
	kind    ddlKind
	table   tableKey
	like    tableKey
	create  *tableSchema
	ops     []alterOp
	tables  []tableKey    // DROP TABLE
	renames [][2]tableKey // RENAME TABLE
}

type ddlParser struct {
	ts      []tok
	i       int
	db      string
	mariadb bool
}

func (p *ddlParser) peek() tok {
	if p.i < len(p.ts) {
		return p.ts[p.i]
	}
	return tok{kind: tPunct, s: ";"}
}

// accept consumes the keywords kws if they come next, all of them, and reports whether it did.
func (p *ddlParser) accept(kws ...string) bool {
	for j, k := range kws {
		if p.i+j >= len(p.ts) || !p.ts[p.i+j].is(k) {
			return false
		}
	}
	p.i += len(kws)
	return true
}

func (p *ddlParser) name() (tableKey, bool) {
	t := p.peek()
	if !t.ident() {
		return tableKey{}, false
	}
	p.i++
	if p.peek().punct('.') {
		p.i++
		t2 := p.peek()
		if !t2.ident() {
			return tableKey{}, false
		}
		p.i++
		return tableKey{t.s, t2.s}, true
	}
	return tableKey{p.db, t.s}, true
}

// parseDDL classifies one query event's statement; defaultDB is the event's schema.
func parseDDL(defaultDB, query string, mariadb bool) ddlStmt {
	p := &ddlParser{ts: tokenize(query), db: defaultDB, mariadb: mariadb}
	switch {
	case p.accept("ALTER"):
		p.accept("ONLINE")
		p.accept("IGNORE")
		if !p.accept("TABLE") {
			return ddlStmt{}
		}
		p.accept("IF", "EXISTS")
		k, ok := p.name()
		if !ok {
			return ddlStmt{kind: ddlUnknown}
		}
		st := ddlStmt{kind: ddlAlter, table: k}
		if p.accept("WAIT") {
			p.i++
		}
		p.accept("NOWAIT")
		if p.i >= len(p.ts) {
			return st
		}
		for _, spec := range splitTop(p.ts[p.i:]) {
			st.ops = append(st.ops, p.alterSpec(spec)...)
		}
		return st
	case p.accept("CREATE"):
		p.accept("OR", "REPLACE")
		if p.accept("TEMPORARY") || !p.accept("TABLE") {
			return ddlStmt{}
		}
		p.accept("IF", "NOT", "EXISTS")
		k, ok := p.name()
		if !ok {
			return ddlStmt{kind: ddlUnknown}
		}
		return p.create(k)
	case p.accept("DROP"):
		if p.accept("TEMPORARY") || !(p.accept("TABLE") || p.accept("TABLES")) {
			return ddlStmt{}
		}
		p.accept("IF", "EXISTS")
		st := ddlStmt{kind: ddlDrop}
		for {
			k, ok := p.name()
			if !ok {
				return ddlStmt{kind: ddlUnknown}
			}
			st.tables = append(st.tables, k)
			if !p.peek().punct(',') {
				return st
			}
			p.i++
		}
	case p.accept("RENAME"):
		if !(p.accept("TABLE") || p.accept("TABLES")) {
			return ddlStmt{}
		}
		st := ddlStmt{kind: ddlRename}
		for {
			a, ok1 := p.name()
			p.accept("WAIT")
			ok2 := p.accept("TO")
			b, ok3 := p.name()
			if !ok1 || !ok2 || !ok3 {
				return ddlStmt{kind: ddlUnknown}
			}
			st.renames = append(st.renames, [2]tableKey{a, b})
			if !p.peek().punct(',') {
				return st
			}
			p.i++
		}
	}
	return ddlStmt{}
}

func (p *ddlParser) create(k tableKey) ddlStmt {
	if p.accept("LIKE") {
		if src, ok := p.name(); ok {
			return ddlStmt{kind: ddlCreateLike, table: k, like: src}
		}
		return ddlStmt{kind: ddlUnknown, table: k}
	}
	if !p.peek().punct('(') {
		return ddlStmt{kind: ddlUnknown, table: k} // CREATE TABLE t SELECT ...
	}
	end := closeParen(p.ts, p.i)
	if end < 0 {
		return ddlStmt{kind: ddlUnknown, table: k}
	}
	body := p.ts[p.i+1 : end]
	if len(body) > 0 && body[0].is("LIKE") {
		sub := &ddlParser{ts: body[1:], db: p.db}
		if src, ok := sub.name(); ok {
			return ddlStmt{kind: ddlCreateLike, table: k, like: src}
		}
		return ddlStmt{kind: ddlUnknown, table: k}
	}
	sch := &tableSchema{}
	for _, ts := range p.ts[end+1:] {
		if ts.is("SELECT") || ts.is("AS") {
			return ddlStmt{kind: ddlUnknown, table: k} // CREATE TABLE t (...) SELECT ...
		}
	}
	sch.DefaultCharset = tableCharset(p.ts[end+1:])
	for _, def := range splitTop(body) {
		if len(def) == 0 || anyIs(def[0], "PRIMARY", "KEY", "INDEX", "UNIQUE", "FULLTEXT", "SPATIAL",
			"CONSTRAINT", "FOREIGN", "CHECK", "PERIOD", "VECTOR") {
			continue
		}
		col, _, _, ok := p.columnDef(def)
		if !ok {
			return ddlStmt{kind: ddlUnknown, table: k}
		}
		sch.Cols = append(sch.Cols, col)
	}
	return ddlStmt{kind: ddlCreate, table: k, create: sch}
}

// tableCharset finds [DEFAULT] CHARACTER SET / CHARSET / COLLATE in table options.
func tableCharset(ts []tok) string {
	cs := ""
	for i := 0; i < len(ts); i++ {
		next := func() string {
			j := i + 1
			if j < len(ts) && ts[j].punct('=') {
				j++
			}
			if j < len(ts) {
				i = j
				return strings.ToLower(ts[j].s)
			}
			return ""
		}
		switch {
		case ts[i].is("CHARACTER") && i+1 < len(ts) && ts[i+1].is("SET"):
			i++
			cs = next()
		case ts[i].is("CHARSET"):
			cs = next()
		case ts[i].is("COLLATE"):
			if c := collationCharset(next()); cs == "" {
				cs = c
			}
		}
	}
	return cs
}

func (p *ddlParser) alterSpec(ts []tok) []alterOp {
	if len(ts) == 0 {
		return nil
	}
	q := &ddlParser{ts: ts, db: p.db, mariadb: p.mariadb}
	unknown := []alterOp{{kind: opUnknown}}
	switch {
	case q.accept("ADD"):
		col := q.accept("COLUMN")
		if !col && anyIs(q.peek(), "INDEX", "KEY", "UNIQUE", "PRIMARY", "FULLTEXT", "SPATIAL", "CONSTRAINT",
			"FOREIGN", "CHECK", "PERIOD", "SYSTEM", "PARTITION", "VECTOR") {
			return []alterOp{{kind: opIgnore}}
		}
		ifne := q.accept("IF", "NOT", "EXISTS")
		rest := q.ts[q.i:]
		if len(rest) > 0 && rest[0].punct('(') {
			end := closeParen(rest, 0)
			if end < 0 {
				return unknown
			}
			var ops []alterOp
			for _, def := range splitTop(rest[1:end]) {
				c, _, _, ok := p.columnDef(def)
				if !ok {
					return unknown
				}
				ops = append(ops, alterOp{kind: opAdd, col: c, ifExists: ifne})
			}
			return ops
		}
		c, first, after, ok := p.columnDef(rest)
		if !ok {
			return unknown
		}
		return []alterOp{{kind: opAdd, col: c, first: first, after: after, ifExists: ifne}}
	case q.accept("DROP"):
		col := q.accept("COLUMN")
		if !col && anyIs(q.peek(), "INDEX", "KEY", "PRIMARY", "FOREIGN", "CONSTRAINT", "CHECK", "PARTITION",
			"SYSTEM", "PERIOD", "DEFAULT") {
			return []alterOp{{kind: opIgnore}}
		}
		ife := q.accept("IF", "EXISTS")
		if !q.peek().ident() {
			return unknown
		}
		return []alterOp{{kind: opDrop, old: q.peek().s, ifExists: ife}}
	case q.accept("CHANGE"):
		q.accept("COLUMN")
		ife := q.accept("IF", "EXISTS")
		if !q.peek().ident() {
			return unknown
		}
		old := q.peek().s
		c, first, after, ok := p.columnDef(q.ts[q.i+1:])
		if !ok {
			return unknown
		}
		return []alterOp{{kind: opChange, old: old, col: c, first: first, after: after, ifExists: ife}}
	case q.accept("MODIFY"):
		q.accept("COLUMN")
		ife := q.accept("IF", "EXISTS")
		c, first, after, ok := p.columnDef(q.ts[q.i:])
		if !ok {
			return unknown
		}
		return []alterOp{{kind: opModify, old: c.Name, col: c, first: first, after: after, ifExists: ife}}
	case q.accept("RENAME"):
		if q.accept("COLUMN") {
			ife := q.accept("IF", "EXISTS")
			if len(q.ts) != q.i+3 || !q.ts[q.i].ident() || !q.ts[q.i+1].is("TO") || !q.ts[q.i+2].ident() {
				return unknown
			}
			return []alterOp{{kind: opRenameColumn, old: q.ts[q.i].s, newName: q.ts[q.i+2].s, ifExists: ife}}
		}
		if anyIs(q.peek(), "INDEX", "KEY") {
			return []alterOp{{kind: opIgnore}}
		}
		if !q.accept("TO") && !q.accept("AS") && q.peek().punct('=') {
			q.i++
		}
		k, ok := q.name()
		if !ok {
			return unknown
		}
		return []alterOp{{kind: opRenameTable, table: k}}
	case q.accept("ALTER"):
		return []alterOp{{kind: opIgnore}} // ALTER [COLUMN] c SET/DROP DEFAULT, ALTER INDEX ...
	case q.accept("CONVERT", "TO"):
		cs := tableCharset(q.ts[q.i:])
		if cs == "" {
			return unknown
		}
		return []alterOp{{kind: opConvert, charset: cs}}
	case anyIs(q.peek(), "DEFAULT", "CHARACTER", "CHARSET", "COLLATE"):
		if cs := tableCharset(q.ts); cs != "" {
			return []alterOp{{kind: opDefaultCharset, charset: cs}}
		}
		return unknown
	case anyIs(q.peek(), "ENGINE", "ALGORITHM", "LOCK", "AUTO_INCREMENT", "COMMENT", "ROW_FORMAT",
		"KEY_BLOCK_SIZE", "FORCE", "ORDER", "STATS_PERSISTENT", "STATS_AUTO_RECALC", "STATS_SAMPLE_PAGES",
		"PACK_KEYS", "CHECKSUM", "DELAY_KEY_WRITE", "AVG_ROW_LENGTH", "MAX_ROWS", "MIN_ROWS", "ENCRYPTED",
		"ENCRYPTION", "ENCRYPTION_KEY_ID", "PAGE_COMPRESSED", "PAGE_COMPRESSION_LEVEL", "TRANSACTIONAL",
		"ENABLE", "DISABLE", "DISCARD", "IMPORT", "VALIDATION", "WITH", "WITHOUT", "ANALYZE", "CHECK",
		"OPTIMIZE", "REBUILD", "REPAIR", "TRUNCATE", "COALESCE", "REORGANIZE", "EXCHANGE", "REMOVE",
		"PARTITION", "STORAGE", "TABLESPACE", "UNION", "INSERT_METHOD", "CONNECTION", "COMPRESSION",
		"SECONDARY_ENGINE", "SECONDARY_LOAD", "SECONDARY_UNLOAD", "AUTOEXTEND_SIZE"):
		return []alterOp{{kind: opIgnore}}
	}
	return unknown
}

// columnDef parses "name type[(args)] [attributes] [FIRST | AFTER col]".
func (p *ddlParser) columnDef(ts []tok) (c schemaCol, first bool, after string, ok bool) {
	if len(ts) < 2 || !ts[0].ident() || ts[1].kind != tWord {
		return c, false, "", false
	}
	c.Name = ts[0].s
	n := len(ts)
	if ts[n-1].is("FIRST") {
		first, n = true, n-1
	} else if n >= 4 && ts[n-2].is("AFTER") && ts[n-1].ident() {
		after, n = ts[n-1].s, n-2
	}
	ts = ts[1:n]
	word := func(i int) string {
		if i < len(ts) && ts[i].kind == tWord {
			return strings.ToLower(ts[i].s)
		}
		return ""
	}
	dt, i := word(0), 1
	switch {
	case dt == "double" && word(1) == "precision":
		i++
	case dt == "national" || dt == "nchar" || dt == "nvarchar":
		if dt == "national" {
			dt, i = word(1), 2
		}
		if dt == "nchar" || dt == "character" {
			dt = "char"
		}
		if dt == "nvarchar" {
			dt = "varchar"
		}
		if word(i) == "varying" {
			dt, i = "varchar", i+1
		}
		c.Charset = "utf8mb3"
	case dt == "character" && word(1) == "varying":
		dt, i = "varchar", 2
	case dt == "long" && (word(1) == "varchar" || word(1) == "varbinary"):
		if word(1) == "varbinary" {
			dt = "mediumblob"
		} else {
			dt = "mediumtext"
		}
		i = 2
	}
	if alias, found := typeAliases[dt]; found {
		dt = alias
	}
	if dt == "serial" {
		dt, c.Unsigned = "bigint", true
	}
	if dt == "json" && p.mariadb {
		dt, c.Charset = "longtext", "utf8mb4"
	}
	c.DataType = dt
	if i < len(ts) && ts[i].punct('(') {
		end := closeParen(ts, i)
		if end < 0 {
			return c, false, "", false
		}
		if dt == "enum" || dt == "set" {
			for _, t := range ts[i+1 : end] {
				if t.kind == tString {
					c.Values = append(c.Values, t.s)
				}
			}
		}
		i = end + 1
	}
	for ; i < len(ts); i++ {
		switch {
		case ts[i].punct('('):
			if end := closeParen(ts, i); end > 0 {
				i = end
			}
		case ts[i].is("UNSIGNED"), ts[i].is("ZEROFILL"):
			c.Unsigned = true
		case ts[i].is("CHARSET"), ts[i].is("CHARACTER") && i+1 < len(ts) && ts[i+1].is("SET"),
			ts[i].is("COLLATE"):
			if cs := tableCharset(ts[i : i+min(4, len(ts)-i)]); cs != "" {
				c.Charset = cs
			}
		}
	}
	if isBinaryType(dt) {
		c.Charset = "binary"
	}
	return c, first, after, true
}

var typeAliases = map[string]string{
	"integer": "int", "int4": "int", "int1": "tinyint", "bool": "tinyint", "boolean": "tinyint",
	"int2": "smallint", "int3": "mediumint", "middleint": "mediumint", "int8": "bigint",
	"dec": "decimal", "numeric": "decimal", "fixed": "decimal", "real": "double", "float8": "double",
	"float4": "float", "character": "char", "varcharacter": "varchar", "long": "mediumtext",
}
