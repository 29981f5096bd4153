package mysql

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outboxd/outboxd/source"
)

// charsetKind is how a column's bytes become the published text.
type charsetKind uint8

const (
	csUTF8   charsetKind = iota // utf8mb4, utf8mb3, ascii: the bytes are UTF-8 already
	csBinary                    // binary/varbinary/blob: raw bytes
	csLatin1                    // MySQL latin1 (cp1252): converted to UTF-8
	csOther                     // another charset: passed through unconverted
)

// column is what the value decoder knows about one column of a captured table.
type column struct {
	name     string
	typ      byte // real binlog type: ENUM and SET unpacked from MYSQL_TYPE_STRING
	length   int  // MYSQL_TYPE_STRING (CHAR/BINARY): declared length in bytes
	unsigned bool
	charset  charsetKind
	enum     []string // ENUM member names, when known
	set      []string // SET member names, when known
}

// realType unpacks the real type and declared byte length of a binlog column (the
// MYSQL_TYPE_STRING metadata encodes ENUM, SET and lengths over 255; see go-mysql decodeValue).
func realType(tp byte, meta uint16) (byte, int) {
	if tp != gomysql.MYSQL_TYPE_STRING {
		return tp, 0
	}
	if meta < 256 {
		return tp, int(meta)
	}
	b0, b1 := byte(meta>>8), byte(meta)
	if b0&0x30 != 0x30 {
		return b0 | 0x30, int(uint16(b1) | uint16((b0&0x30)^0x30)<<4)
	}
	return b0, int(b1)
}

// charsetOfCollation maps a collation id (binlog metadata) to how its bytes are published.
// Unknown ids are assumed to be UTF-8 (every utf8mb3/utf8mb4 collation, including MariaDB's
// uca1400 family, and MySQL's 0900 family).
func charsetOfCollation(id uint64) charsetKind {
	switch id {
	case 63:
		return csBinary
	case 5, 8, 15, 31, 47, 48, 49, 94, 1032, 1071: // latin1_* (1032/1071: MariaDB nopad)
		return csLatin1
	case 1, 3, 4, 6, 7, 9, 10, 12, 13, 14, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27,
		28, 29, 30, 32, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 50, 51, 52, 53, 54, 55, 56,
		57, 58, 59, 60, 61, 62, 64, 67, 68, 69, 70, 71, 72, 73, 74, 75, 77, 78, 79, 80, 81, 82,
		84, 85, 86, 87, 88, 89, 90, 91, 92, 93, 95, 96, 97, 98, 99:
		return csOther // big5, dec8, cp850, hp8, koi8r, latin2, swe7, ujis, sjis, ... utf16, utf32, ucs2, gbk, cp1251, ...
	}
	return csUTF8
}

// charsetOfName maps an information_schema CHARACTER_SET_NAME to how its bytes are published.
func charsetOfName(name string) charsetKind {
	switch strings.ToLower(name) {
	case "", "utf8", "utf8mb3", "utf8mb4", "ascii":
		return csUTF8
	case "binary":
		return csBinary
	case "latin1":
		return csLatin1
	}
	return csOther
}

// decodeRow renders one row image, as go-mysql decoded it, into dst (len(dst) == len(row)).
// It is a pure function of its inputs.
func decodeRow(cols []column, row []any, dst []source.Value) error {
	if len(row) != len(cols) {
		return fmt.Errorf("row has %d columns, the table description %d", len(row), len(cols))
	}
	for i := range row {
		v, err := decodeValue(&cols[i], row[i])
		if err != nil {
			return fmt.Errorf("column %s: %w", cols[i].name, err)
		}
		dst[i] = v
	}
	return nil
}

// decodeValue renders one column value into the bytes the transform publishes:
//
//   - NULL: Null=true.
//   - CHAR/VARCHAR/TEXT/ENUM/SET: the text in UTF-8 (latin1 is converted; utf8/ascii as is).
//   - BINARY(16): MariaDB and MySQL strip trailing zero bytes in the binlog; the value is padded
//     back to 16 bytes and rendered as a canonical lower-case uuid (8-4-4-4-12). Other BINARY(n)
//     are padded to n and kept raw; VARBINARY/BLOB/GEOMETRY are raw bytes.
//   - JSON: MySQL binary JSON is rendered as MySQL's own JSON text (key order, number forms and
//     spacing as `SELECT` prints them: {"a": 1, "b": [1, 2]}); MariaDB
//     JSON is LONGTEXT, so the bytes are exactly as written. An empty MySQL JSON document is
//     "null".
//   - integers (signed/unsigned, fixed up when the binlog lacks signedness), YEAR, BIT:
//     decimal text; FLOAT/DOUBLE: shortest round-trip text; DECIMAL, DATE, TIME, DATETIME,
//     TIMESTAMP: the text go-mysql produces ("2024-01-02 03:04:05.123456", TIMESTAMP in UTC).
//
// Text values alias the binlog event's buffer, which go-mysql allocates per event and never
// reuses: they must be treated as read-only.
func decodeValue(c *column, v any) (source.Value, error) {
	switch x := v.(type) {
	case nil:
		return source.Value{Null: true}, nil
	case string:
		return decodeString(c, x), nil
	case []byte:
		if c.typ == gomysql.MYSQL_TYPE_JSON && len(x) == 0 {
			return source.Value{Bytes: []byte("null")}, nil
		}
		return text(c, x), nil
	case int8:
		if c.unsigned {
			return uintValue(uint64(uint8(x))), nil
		}
		return intValue(int64(x)), nil
	case uint8:
		return uintValue(uint64(x)), nil
	case int16:
		if c.unsigned {
			return uintValue(uint64(uint16(x))), nil
		}
		return intValue(int64(x)), nil
	case uint16:
		return uintValue(uint64(x)), nil
	case int32:
		if c.unsigned {
			if c.typ == gomysql.MYSQL_TYPE_INT24 {
				return uintValue(uint64(uint32(x) & 0xffffff)), nil
			}
			return uintValue(uint64(uint32(x))), nil
		}
		return intValue(int64(x)), nil
	case uint32:
		return uintValue(uint64(x)), nil
	case int64:
		switch c.typ {
		case gomysql.MYSQL_TYPE_ENUM:
			return enumValue(c, x), nil
		case gomysql.MYSQL_TYPE_SET:
			return setValue(c, x), nil
		case gomysql.MYSQL_TYPE_BIT:
			return uintValue(uint64(x)), nil
		}
		if c.unsigned {
			return uintValue(uint64(x)), nil
		}
		return intValue(x), nil
	case uint64:
		return uintValue(x), nil
	case int:
		return intValue(int64(x)), nil
	case float32:
		return source.Value{Bytes: strconv.AppendFloat(nil, float64(x), 'g', -1, 32)}, nil
	case float64:
		return source.Value{Bytes: strconv.AppendFloat(nil, x, 'g', -1, 64)}, nil
	case fmt.Stringer: // decimal.Decimal, should UseDecimal ever be set
		return source.Value{Bytes: []byte(x.String())}, nil
	}
	return source.Value{}, fmt.Errorf("unsupported value of Go type %T (binlog type %d)", v, c.typ)
}

func decodeString(c *column, s string) source.Value {
	switch c.typ {
	case gomysql.MYSQL_TYPE_STRING:
		if c.charset == csBinary {
			if c.length == 16 && len(s) <= 16 {
				return source.Value{Bytes: uuidText(s)}
			}
			return source.Value{Bytes: padZero(s, c.length)}
		}
		return text(c, stringBytes(s))
	case gomysql.MYSQL_TYPE_VARCHAR, gomysql.MYSQL_TYPE_VAR_STRING:
		return text(c, stringBytes(s))
	}
	if c.typ == gomysql.MYSQL_TYPE_JSON {
		return source.Value{Bytes: mysqlJSONSpacing(s)}
	}
	// DECIMAL, DATE, TIME, DATETIME, TIMESTAMP: already the published text.
	return source.Value{Bytes: stringBytes(s)}
}

// mysqlJSONSpacing turns go-mysql's compact rendering of MySQL binary JSON ({"a":1,"b":[1,2]})
// into MySQL's own text form, which has a space after every ':' and ',' outside strings
// ({"a": 1, "b": [1, 2]}): the same text `SELECT payload` prints.
func mysqlJSONSpacing(s string) []byte {
	out := make([]byte, 0, len(s)+len(s)/4)
	inStr := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		out = append(out, c)
		switch {
		case inStr && c == '\\' && i+1 < len(s):
			i++
			out = append(out, s[i])
		case c == '"':
			inStr = !inStr
		case !inStr && (c == ',' || c == ':') && (i+1 == len(s) || s[i+1] != ' '):
			out = append(out, ' ')
		}
	}
	return out
}

// stringBytes returns the bytes of s without copying (s is never modified afterwards; see
// decodeValue). An empty string gives an empty, non-nil slice.
func stringBytes(s string) []byte {
	if len(s) == 0 {
		return []byte{}
	}
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

func padZero(s string, n int) []byte {
	if len(s) >= n {
		return stringBytes(s)
	}
	b := make([]byte, n)
	copy(b, s)
	return b
}

const hexDigits = "0123456789abcdef"

// uuidText renders a BINARY(16) value as a canonical lower-case uuid; b may lack trailing
// zero bytes (the binlog strips them), which are rendered as "00".
func uuidText(b string) []byte {
	out := make([]byte, 36)
	j := 0
	for i := 0; i < 16; i++ {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out[j] = '-'
			j++
		}
		var c byte
		if i < len(b) {
			c = b[i]
		}
		out[j], out[j+1] = hexDigits[c>>4], hexDigits[c&0x0f]
		j += 2
	}
	return out
}

func text(c *column, b []byte) source.Value {
	if c.charset == csLatin1 {
		return source.Value{Bytes: latin1ToUTF8(b)}
	}
	return source.Value{Bytes: b}
}

// cp1252High maps bytes 0x80..0x9F of MySQL's latin1 (which is cp1252, with the five
// undefined cp1252 positions mapped to the C1 controls) to Unicode. 0xA0..0xFF map to
// U+00A0..U+00FF.
var cp1252High = [32]rune{
	0x20AC, 0x0081, 0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021,
	0x02C6, 0x2030, 0x0160, 0x2039, 0x0152, 0x008D, 0x017D, 0x008F,
	0x0090, 0x2018, 0x2019, 0x201C, 0x201D, 0x2022, 0x2013, 0x2014,
	0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, 0x009D, 0x017E, 0x0178,
}

func latin1ToUTF8(b []byte) []byte {
	ascii := true
	for _, c := range b {
		if c >= 0x80 {
			ascii = false
			break
		}
	}
	if ascii {
		return b
	}
	out := make([]byte, 0, len(b)+len(b)/2)
	for _, c := range b {
		switch {
		case c < 0x80:
			out = append(out, c)
		case c < 0xA0:
			out = utf8.AppendRune(out, cp1252High[c-0x80])
		default:
			out = utf8.AppendRune(out, rune(c))
		}
	}
	return out
}

func intValue(n int64) source.Value {
	return source.Value{Bytes: strconv.AppendInt(make([]byte, 0, 8), n, 10)}
}

func uintValue(n uint64) source.Value {
	return source.Value{Bytes: strconv.AppendUint(make([]byte, 0, 8), n, 10)}
}

// enumValue renders an ENUM index (1-based; 0 is the empty error value) as its member name
// when the members are known, else as the index.
func enumValue(c *column, idx int64) source.Value {
	if idx == 0 {
		return source.Value{Bytes: []byte{}}
	}
	if idx > 0 && int(idx) <= len(c.enum) {
		return source.Value{Bytes: []byte(c.enum[idx-1])}
	}
	return intValue(idx)
}

// setValue renders a SET bitmask as its comma-separated member names when they are known,
// else as the number.
func setValue(c *column, mask int64) source.Value {
	if len(c.set) == 0 {
		return uintValue(uint64(mask))
	}
	var b []byte
	for i, name := range c.set {
		if i < 64 && uint64(mask)&(1<<uint(i)) != 0 {
			if len(b) > 0 {
				b = append(b, ',')
			}
			b = append(b, name...)
		}
	}
	if b == nil {
		b = []byte{}
	}
	return source.Value{Bytes: b}
}
