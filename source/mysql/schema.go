package mysql

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outboxd/outboxd/source"
)

// schemaCol is one column as information_schema, or a DDL statement read from the binlog,
// describes it.
type schemaCol struct {
	Name     string
	DataType string // information_schema DATA_TYPE, lower case ("varchar", "int", "longtext", ...)
	Unsigned bool
	Charset  string   // CHARACTER_SET_NAME for text columns, "binary" for binary ones, "" unknown
	Values   []string // ENUM/SET members
}

// tableSchema is the schema of one captured table at some point of the binlog stream.
type tableSchema struct {
	Cols           []schemaCol
	DefaultCharset string // the table's default charset, for columns added without one
}

func (s *tableSchema) clone() *tableSchema {
	c := &tableSchema{Cols: slices.Clone(s.Cols), DefaultCharset: s.DefaultCharset}
	return c
}

func (s *tableSchema) index(name string) int {
	for i, c := range s.Cols {
		if strings.EqualFold(c.Name, name) {
			return i
		}
	}
	return -1
}

func (s *tableSchema) names() []string {
	out := make([]string, len(s.Cols))
	for i, c := range s.Cols {
		out[i] = c.Name
	}
	return out
}

// loadSchemaQuery reads a table's columns in table order from information_schema.
const loadSchemaQuery = `SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IFNULL(CHARACTER_SET_NAME, ''),
	(SELECT IFNULL(t.TABLE_COLLATION, '') FROM information_schema.TABLES t
	 WHERE t.TABLE_SCHEMA = c.TABLE_SCHEMA AND t.TABLE_NAME = c.TABLE_NAME)
FROM information_schema.COLUMNS c WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION`

// schemaFromRows builds a tableSchema from loadSchemaQuery's result; nil when the table does
// not exist.
func schemaFromRows(rows [][]string) *tableSchema {
	if len(rows) == 0 {
		return nil
	}
	s := &tableSchema{DefaultCharset: collationCharset(rows[0][4])}
	for _, r := range rows {
		dt := strings.ToLower(r[1])
		ct := strings.ToLower(r[2])
		c := schemaCol{Name: r[0], DataType: dt, Charset: strings.ToLower(r[3]),
			Unsigned: strings.Contains(ct, "unsigned") || strings.Contains(ct, "zerofill")}
		if isBinaryType(dt) {
			c.Charset = "binary"
		}
		if dt == "enum" || dt == "set" {
			if open := strings.IndexByte(r[2], '('); open >= 0 {
				for _, t := range tokenize(r[2][open:]) {
					if t.kind == tString {
						c.Values = append(c.Values, t.s)
					}
				}
			}
		}
		s.Cols = append(s.Cols, c)
	}
	return s
}

// collationCharset returns the charset of a collation name ("latin1_swedish_ci" -> "latin1").
func collationCharset(coll string) string {
	coll = strings.ToLower(coll)
	if coll == "binary" {
		return "binary"
	}
	if i := strings.IndexByte(coll, '_'); i > 0 {
		return coll[:i]
	}
	return ""
}

func isBinaryType(dt string) bool {
	switch dt {
	case "binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob":
		return true
	}
	return false
}

// tableDesc is everything needed to decode the rows of one captured table as described by one
// TableMapEvent layout (and, without binlog column names, one tracked schema version).
type tableDesc struct {
	name  string   // the table as configured, for Row.Table
	names []string // shared by every Row decoded with this description
	cols  []column
	kinds []source.Type // parallel to names, shared like it (types.go)

	// The TableMapEvent layout this description was built from.
	types    []byte
	meta     []uint16
	colNames [][]byte
	signed   []byte
	defCs    []uint64
	colCs    []uint64
	version  int
}

// matches reports whether tm has the layout d was built from (TableMapEvents are re-sent for
// every transaction; rebuilding the description each time would be wasteful).
func (d *tableDesc) matches(tm *replication.TableMapEvent, version int) bool {
	if d.version != version || !bytes.Equal(d.types, tm.ColumnType) || !slices.Equal(d.meta, tm.ColumnMeta) ||
		!bytes.Equal(d.signed, tm.SignednessBitmap) || !slices.Equal(d.defCs, tm.DefaultCharset) ||
		!slices.Equal(d.colCs, tm.ColumnCharset) || len(d.colNames) != len(tm.ColumnName) {
		return false
	}
	for i, n := range tm.ColumnName {
		if !bytes.Equal(n, d.colNames[i]) {
			return false
		}
	}
	return true
}

// buildDesc describes a captured table from its TableMapEvent and, when the event carries no
// column names (binlog_row_metadata is not FULL), from the tracked schema sch, which must then
// agree with the event on column count and types. Signedness, charsets and ENUM/SET members
// come from the event's metadata when present, else from sch.
//
// Text columns are converted to UTF-8 from their charset (collation ids resolved with colls,
// the server's collation table, when given); a charset outboxd cannot convert is an error that
// names the column and the fix.
func buildDesc(name string, tm *replication.TableMapEvent, sch *tableSchema, version int, mariadb bool, colls map[uint64]string) (*tableDesc, error) {
	n := int(tm.ColumnCount)
	d := &tableDesc{name: name, types: bytes.Clone(tm.ColumnType), meta: slices.Clone(tm.ColumnMeta),
		signed: bytes.Clone(tm.SignednessBitmap), defCs: slices.Clone(tm.DefaultCharset),
		colCs: slices.Clone(tm.ColumnCharset), version: version, cols: make([]column, n), kinds: make([]source.Type, n)}
	for _, cn := range tm.ColumnName {
		d.colNames = append(d.colNames, bytes.Clone(cn))
	}
	if len(tm.ColumnName) == n {
		d.names = slices.Clone(tm.ColumnNameString())
	} else {
		if sch == nil {
			return nil, stop(fmt.Errorf("table %s: the binlog carries no column names (binlog_row_metadata is not FULL) and the table's schema is unknown (it is not in information_schema): set binlog_row_metadata=FULL", name))
		}
		if err := checkLayout(name, tm, sch, mariadb); err != nil {
			return nil, err
		}
		d.names = sch.names()
	}
	md, err := readTableMapMeta(tm)
	if err != nil {
		return nil, stop(fmt.Errorf("table %s: %w", name, err))
	}
	unsigned, collIDs, enums, sets := md.unsigned, md.collIDs, md.enums, md.sets
	for i := range d.cols {
		c := &d.cols[i]
		c.name = d.names[i]
		c.typ, c.length = realType(tm.ColumnType[i], tm.ColumnMeta[i])
		var sc *schemaCol
		if sch != nil && len(sch.Cols) == n {
			sc = &sch.Cols[i]
		}
		if u, ok := unsigned[i]; ok {
			c.unsigned = u
		} else if sc != nil {
			c.unsigned = sc.Unsigned
		}
		csName := ""
		if id, ok := collIDs[i]; ok {
			c.charset, c.cmap, csName = charsetOfCollation(id, colls)
		} else if sc != nil {
			csName = sc.Charset
			c.charset, c.cmap = charsetByName(sc.Charset)
		} else if isBinaryByDefault(c.typ) {
			c.charset = csBinary
		}
		if c.charset == csUnsupported {
			return nil, stop(unsupportedCharsetError(name, c.name, csName))
		}
		c.enum, c.set = enums[i], sets[i]
		if c.charset != csUTF8 && c.charset != csBinary {
			// Member names in the table map are in the column's charset.
			c.enum, c.set = slices.Clone(c.enum), slices.Clone(c.set) // the event's own slices stay as logged
			for _, vals := range [][]string{c.enum, c.set} {
				for j, v := range vals {
					if b, err := toUTF8(c.charset, c.cmap, []byte(v)); err == nil {
						vals[j] = string(b)
					}
				}
			}
		}
		if sc != nil && c.enum == nil && c.typ == gomysql.MYSQL_TYPE_ENUM {
			c.enum = sc.Values
		}
		if sc != nil && c.set == nil && c.typ == gomysql.MYSQL_TYPE_SET {
			c.set = sc.Values
		}
		known, nullable := tm.Nullable(i)
		d.kinds[i] = columnType(c, tm.ColumnMeta[i], known, nullable)
	}
	return d, nil
}

// isBinaryByDefault: without any charset information, GEOMETRY and VECTOR are raw bytes.
func isBinaryByDefault(t byte) bool {
	return t == gomysql.MYSQL_TYPE_GEOMETRY || t == gomysql.MYSQL_TYPE_VECTOR
}

// checkLayout verifies that a tracked schema fits a TableMapEvent: same column count and
// compatible types. A mismatch means the schema is not the one the row was written with, and
// decoding would put values under the wrong names: that is a loud error, never a guess.
func checkLayout(name string, tm *replication.TableMapEvent, sch *tableSchema, mariadb bool) error {
	mismatch := func(why string) error {
		return stop(fmt.Errorf("table %s: the binlog row layout does not match the tracked schema (%s); "+
			"column names cannot be recovered without binlog_row_metadata=FULL. This happens when the table "+
			"was altered between the stored position and now: set binlog_row_metadata=FULL on the server, "+
			"or move the stored position past the ALTER with `outboxd offsets set`", name, why))
	}
	if int(tm.ColumnCount) != len(sch.Cols) {
		return mismatch(fmt.Sprintf("binlog has %d columns, schema has %d: %s", tm.ColumnCount, len(sch.Cols), strings.Join(sch.names(), ", ")))
	}
	for i, c := range sch.Cols {
		rt, _ := realType(tm.ColumnType[i], tm.ColumnMeta[i])
		if !typeCompatible(c.DataType, rt, mariadb) {
			return mismatch(fmt.Sprintf("column %d %q is %s in the schema but binlog type %d", i+1, c.Name, c.DataType, rt))
		}
	}
	return nil
}

// typeCompatible reports whether a DATA_TYPE can be logged with binlog type rt. Unknown data
// types are accepted.
func typeCompatible(dt string, rt byte, mariadb bool) bool {
	var ok []byte
	switch dt {
	case "tinyint", "bool", "boolean":
		ok = []byte{gomysql.MYSQL_TYPE_TINY}
	case "smallint":
		ok = []byte{gomysql.MYSQL_TYPE_SHORT}
	case "mediumint":
		ok = []byte{gomysql.MYSQL_TYPE_INT24}
	case "int", "integer":
		ok = []byte{gomysql.MYSQL_TYPE_LONG}
	case "bigint":
		ok = []byte{gomysql.MYSQL_TYPE_LONGLONG}
	case "decimal", "numeric":
		ok = []byte{gomysql.MYSQL_TYPE_NEWDECIMAL, gomysql.MYSQL_TYPE_DECIMAL}
	case "float":
		ok = []byte{gomysql.MYSQL_TYPE_FLOAT}
	case "double", "real":
		ok = []byte{gomysql.MYSQL_TYPE_DOUBLE}
	case "bit":
		ok = []byte{gomysql.MYSQL_TYPE_BIT}
	case "year":
		ok = []byte{gomysql.MYSQL_TYPE_YEAR}
	case "date":
		ok = []byte{gomysql.MYSQL_TYPE_DATE, gomysql.MYSQL_TYPE_NEWDATE}
	case "time":
		ok = []byte{gomysql.MYSQL_TYPE_TIME, gomysql.MYSQL_TYPE_TIME2}
	case "datetime":
		ok = []byte{gomysql.MYSQL_TYPE_DATETIME, gomysql.MYSQL_TYPE_DATETIME2}
	case "timestamp":
		ok = []byte{gomysql.MYSQL_TYPE_TIMESTAMP, gomysql.MYSQL_TYPE_TIMESTAMP2}
	case "char", "binary":
		ok = []byte{gomysql.MYSQL_TYPE_STRING}
	case "varchar", "varbinary":
		ok = []byte{gomysql.MYSQL_TYPE_VARCHAR, gomysql.MYSQL_TYPE_VAR_STRING}
	case "tinytext", "text", "mediumtext", "longtext", "tinyblob", "blob", "mediumblob", "longblob":
		ok = []byte{gomysql.MYSQL_TYPE_BLOB}
	case "json":
		ok = []byte{gomysql.MYSQL_TYPE_JSON}
		if mariadb {
			ok = []byte{gomysql.MYSQL_TYPE_BLOB}
		}
	case "enum":
		ok = []byte{gomysql.MYSQL_TYPE_ENUM, gomysql.MYSQL_TYPE_STRING}
	case "set":
		ok = []byte{gomysql.MYSQL_TYPE_SET, gomysql.MYSQL_TYPE_STRING}
	default:
		return true
	}
	return slices.Contains(ok, rt)
}

// tableMapMeta is the optional metadata of a TableMapEvent, read by readTableMapMeta.
type tableMapMeta struct {
	unsigned    map[int]bool
	collIDs     map[int]uint64 // column collations, ENUM/SET ones included
	enums, sets map[int][]string
}

// readTableMapMeta reads tm's optional metadata through go-mysql's accessors. They index the
// event's metadata arrays without bounds checks, so a malformed event (FuzzDecodeRowsEvent found
// one: a collation list longer than the character columns) panics inside them: the panic becomes
// an error here, which stops the stream instead of crashing the process.
func readTableMapMeta(tm *replication.TableMapEvent) (md tableMapMeta, err error) {
	if err := checkTableMap(tm); err != nil {
		return md, err
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("malformed table map event metadata (go-mysql: %v): the binlog event cannot be decoded; check the server's binlog_row_metadata and report the event", r)
		}
	}()
	md.unsigned = tm.UnsignedMap()
	md.collIDs = tm.CollationMap()
	if es := tm.EnumSetCollationMap(); len(es) > 0 {
		if md.collIDs == nil {
			md.collIDs = map[int]uint64{}
		}
		maps.Copy(md.collIDs, es)
	}
	md.enums, md.sets = tm.EnumStrValueMap(), tm.SetStrValueMap()
	return md, nil
}

// maxColumns is the most columns a MySQL or MariaDB table can have (and it has at least one).
const maxColumns = 4096

// checkTableMap refuses a TableMapEvent whose column count no table can have (none, or over
// maxColumns: go-mysql loops forever on a rows event of zero columns) or that disagrees
// with its column types: go-mysql's metadata accessors (also called by its row decoding) loop up
// to ColumnCount, so such an event would hang the stream (FuzzDecodeRowsEvent found one).
func checkTableMap(tm *replication.TableMapEvent) error {
	if tm == nil {
		return errors.New("rows event without its table map event: the binlog stream is malformed")
	}
	if tm.ColumnCount == 0 || tm.ColumnCount > maxColumns || int(tm.ColumnCount) != len(tm.ColumnType) || len(tm.ColumnMeta) != len(tm.ColumnType) {
		return fmt.Errorf("malformed table map event for %s.%s: %d columns, %d column types, %d column metadata (at most %d columns): the binlog event cannot be decoded",
			tm.Schema, tm.Table, tm.ColumnCount, len(tm.ColumnType), len(tm.ColumnMeta), maxColumns)
	}
	return nil
}

// anyColumn reports whether the column bitmap of a rows event names one of its n columns.
func anyColumn(bitmap []byte, n int) bool {
	for i := 0; i < n && i>>3 < len(bitmap); i++ {
		if bitmap[i>>3]&(1<<(uint(i)&7)) != 0 {
			return true
		}
	}
	return false
}
