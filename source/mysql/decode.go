package mysql

import (
	"fmt"
	"strconv"
	"unicode/utf8"
	"unsafe"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"golang.org/x/text/encoding/charmap"

	"github.com/outboxd/outboxd/source"
)

// column is what the value decoder knows about one column of a captured table.
type column struct {
	name     string
	typ      byte // real binlog type: ENUM and SET unpacked from MYSQL_TYPE_STRING
	length   int  // MYSQL_TYPE_STRING (CHAR/BINARY): declared length in bytes
	unsigned bool
	charset  charsetKind
	cmap     *charmap.Charmap // csSingle: the charset's table
	enum     []string         // ENUM member names, when known
	set      []string         // SET member names, when known
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
//   - CHAR/VARCHAR/TEXT/ENUM/SET: the text in UTF-8 (latin1, utf16, ucs2, utf32 and the
//     single-byte charsets of charset.go are converted; utf8/ascii as is).
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
		return decodeString(c, x)
	case []byte:
		if c.typ == gomysql.MYSQL_TYPE_JSON && len(x) == 0 {
			return source.Value{Bytes: []byte("null")}, nil
		}
		return text(c, x)
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

func decodeString(c *column, s string) (source.Value, error) {
	switch c.typ {
	case gomysql.MYSQL_TYPE_STRING:
		if c.charset == csBinary {
			if c.length == 16 && len(s) <= 16 {
				return source.Value{Bytes: uuidText(s)}, nil
			}
			return source.Value{Bytes: padZero(s, c.length)}, nil
		}
		return text(c, stringBytes(s))
	case gomysql.MYSQL_TYPE_VARCHAR, gomysql.MYSQL_TYPE_VAR_STRING:
		return text(c, stringBytes(s))
	}
	if c.typ == gomysql.MYSQL_TYPE_JSON {
		return source.Value{Bytes: mysqlJSONSpacing(s)}, nil
	}
	// DECIMAL, DATE, TIME, DATETIME, TIMESTAMP: already the published text.
	return source.Value{Bytes: stringBytes(s)}, nil
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

// text converts a text column's bytes to UTF-8 from the column's charset (see charset.go).
func text(c *column, b []byte) (source.Value, error) {
	switch c.charset {
	case csUTF8, csBinary:
		return source.Value{Bytes: b}, nil
	case csUnsupported:
		return source.Value{}, fmt.Errorf("text in a character set outboxd cannot convert to UTF-8")
	}
	out, err := toUTF8(c.charset, c.cmap, b)
	if err != nil {
		return source.Value{}, err
	}
	return source.Value{Bytes: out}, nil
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
	if isASCII(b) {
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
	n := 0 // members written: an empty member name still takes its comma, as MySQL prints it
	for i, name := range c.set {
		if i < 64 && uint64(mask)&(1<<uint(i)) != 0 {
			if n > 0 {
				b = append(b, ',')
			}
			b = append(b, name...)
			n++
		}
	}
	if b == nil {
		b = []byte{}
	}
	return source.Value{Bytes: b}
}
