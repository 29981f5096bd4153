package mysql

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outboxd/outboxd/source"
)

// outboxColumnsQuery lists a table's columns with what types.go needs (see columnFromCatalog).
const outboxColumnsQuery = `SELECT COLUMN_NAME, LOWER(DATA_TYPE), LOWER(COLUMN_TYPE), IS_NULLABLE,
	IFNULL(NUMERIC_PRECISION, 0), IFNULL(NUMERIC_SCALE, 0), IFNULL(DATETIME_PRECISION, 0), IFNULL(CHARACTER_OCTET_LENGTH, 0)
FROM information_schema.COLUMNS WHERE LOWER(TABLE_SCHEMA) = LOWER(?) AND LOWER(TABLE_NAME) = LOWER(?) ORDER BY ORDINAL_POSITION`

// OutboxTableColumns returns the columns of table (a name of source.tables) and the
// source.Types the source's rows will carry for them, from information_schema (as the
// TableMapEvent of the table's rows would give them: columnFromCatalog); ok false when the table
// does not exist. For `outboxd check`; it opens its own connection, bounded by ctx.
func (a *Adapter) OutboxTableColumns(ctx context.Context, table string) (cols []string, types []source.Type, ok bool, err error) {
	s := New(a.Config(), nil)
	if s.cfgErr != nil {
		return nil, nil, false, s.cfgErr
	}
	var key tableKey
	found := false
	for k, name := range s.captured {
		if name == table {
			key, found = k, true
		}
	}
	if !found {
		return nil, nil, false, fmt.Errorf("table %s is not in source.tables", table)
	}
	c, err := connect(ctx, s.dsn)
	if err != nil {
		return nil, nil, false, err
	}
	defer c.Close()
	rows, err := query(c, outboxColumnsQuery, key.DB, key.Table)
	if err != nil {
		return nil, nil, false, fmt.Errorf("list the columns of %s from information_schema: %w", table, err)
	}
	if len(rows) == 0 {
		return nil, nil, false, nil
	}
	for _, r := range rows {
		col, meta := columnFromCatalog(r[1], r[2], atoi(r[4]), atoi(r[5]), atoi(r[6]), atoi(r[7]))
		cols = append(cols, r[0])
		types = append(types, columnType(&col, meta, true, strings.EqualFold(r[3], "YES")))
	}
	return cols, types, true, nil
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// columnFromCatalog is the column (binlog type, signedness, charset class, byte length) and
// TableMapEvent metadata a column of information_schema DATA_TYPE dt and COLUMN_TYPE ct is
// logged with, so columnType gives check the Type the rows will have. precision, scale, fsp and
// octets are NUMERIC_PRECISION, NUMERIC_SCALE, DATETIME_PRECISION and CHARACTER_OCTET_LENGTH.
func columnFromCatalog(dt, ct string, precision, scale, fsp, octets int) (column, uint16) {
	c := column{typ: gomysql.MYSQL_TYPE_VARCHAR, charset: csUTF8, unsigned: strings.Contains(ct, "unsigned") || strings.Contains(ct, "zerofill")}
	var meta uint16
	switch dt {
	case "tinyint":
		c.typ = gomysql.MYSQL_TYPE_TINY
	case "smallint":
		c.typ = gomysql.MYSQL_TYPE_SHORT
	case "mediumint":
		c.typ = gomysql.MYSQL_TYPE_INT24
	case "int", "integer":
		c.typ = gomysql.MYSQL_TYPE_LONG
	case "bigint":
		c.typ = gomysql.MYSQL_TYPE_LONGLONG
	case "float":
		c.typ = gomysql.MYSQL_TYPE_FLOAT
	case "double", "real":
		c.typ = gomysql.MYSQL_TYPE_DOUBLE
	case "decimal", "numeric":
		c.typ, meta = gomysql.MYSQL_TYPE_NEWDECIMAL, uint16(precision<<8|scale&0xff)
	case "bit":
		c.typ, meta = gomysql.MYSQL_TYPE_BIT, uint16(precision/8<<8|precision%8)
	case "year":
		c.typ = gomysql.MYSQL_TYPE_YEAR
	case "date":
		c.typ = gomysql.MYSQL_TYPE_DATE
	case "datetime":
		c.typ, meta = gomysql.MYSQL_TYPE_DATETIME2, uint16(fsp)
	case "timestamp":
		c.typ, meta = gomysql.MYSQL_TYPE_TIMESTAMP2, uint16(fsp)
	case "time":
		c.typ, meta = gomysql.MYSQL_TYPE_TIME2, uint16(fsp)
	case "json": // MySQL; MariaDB's JSON is LONGTEXT in the catalog as in the binlog
		c.typ = gomysql.MYSQL_TYPE_JSON
	case "char":
		c.typ, c.length = gomysql.MYSQL_TYPE_STRING, octets
	case "binary":
		c.typ, c.length, c.charset = gomysql.MYSQL_TYPE_STRING, octets, csBinary
	case "uuid", "inet6": // MariaDB: BINARY(16) in the binlog
		c.typ, c.length, c.charset = gomysql.MYSQL_TYPE_STRING, 16, csBinary
	case "inet4": // MariaDB: BINARY(4)
		c.typ, c.length, c.charset = gomysql.MYSQL_TYPE_STRING, 4, csBinary
	case "varbinary":
		c.charset = csBinary
	case "tinytext", "text", "mediumtext", "longtext":
		c.typ = gomysql.MYSQL_TYPE_BLOB
	case "tinyblob", "blob", "mediumblob", "longblob":
		c.typ, c.charset = gomysql.MYSQL_TYPE_BLOB, csBinary
	case "enum":
		c.typ = gomysql.MYSQL_TYPE_ENUM
	case "set":
		c.typ = gomysql.MYSQL_TYPE_SET
	case "geometry", "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
		"geometrycollection", "geomcollection":
		c.typ, c.charset = gomysql.MYSQL_TYPE_GEOMETRY, csBinary
	case "vector":
		c.typ, c.charset = gomysql.MYSQL_TYPE_VECTOR, csBinary
	}
	return c, meta
}
