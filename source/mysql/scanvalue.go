package mysql

import (
	"bytes"
	"fmt"
	"net"
	"strconv"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outboxd/outboxd/source"
)

// scanValue renders one value of a scanned row (binary protocol, character_set_results=NULL,
// time_zone '+00:00'; see scan.go) into the bytes the binlog stream publishes for it
// (decodeValue). c is the column as columnFromCatalog describes it with its charset, dt its
// DATA_TYPE and fsp its DATETIME_PRECISION. The value never aliases f. Pure.
func scanValue(c *column, dt string, fsp int, f *gomysql.FieldValue) (source.Value, error) {
	switch f.Type {
	case gomysql.FieldValueTypeNull:
		return source.Value{Null: true}, nil
	case gomysql.FieldValueTypeUnsigned:
		return uintValue(f.AsUint64()), nil
	case gomysql.FieldValueTypeSigned:
		if c.unsigned {
			return uintValue(f.AsUint64()), nil
		}
		return intValue(f.AsInt64()), nil
	case gomysql.FieldValueTypeFloat:
		if c.typ == gomysql.MYSQL_TYPE_FLOAT {
			return source.Value{Bytes: strconv.AppendFloat(nil, float64(float32(f.AsFloat64())), 'g', -1, 32)}, nil
		}
		return source.Value{Bytes: strconv.AppendFloat(nil, f.AsFloat64(), 'g', -1, 64)}, nil
	case gomysql.FieldValueTypeString:
	default:
		return source.Value{}, fmt.Errorf("unexpected protocol value type %d", f.Type)
	}
	b := append([]byte{}, f.AsString()...)
	switch dt {
	case "bit":
		if len(b) > 8 {
			return source.Value{}, fmt.Errorf("BIT value of %d bytes", len(b))
		}
		var n uint64
		for _, x := range b {
			n = n<<8 | uint64(x)
		}
		return uintValue(n), nil
	case "datetime", "timestamp":
		return normDateTime(b, fsp)
	case "time":
		return normTime(b, fsp)
	case "uuid": // MariaDB: the server sends the uuid text
		if len(b) == 16 {
			return source.Value{Bytes: uuidText(string(b))}, nil
		}
		return source.Value{Bytes: bytes.ToLower(b)}, nil
	case "inet6", "inet4": // MariaDB: text; the binlog has the address bytes
		if len(b) == c.length {
			return source.Value{Bytes: scanBinary(c, b)}, nil
		}
		ip := net.ParseIP(string(b))
		if dt == "inet4" {
			ip = ip.To4()
		} else {
			ip = ip.To16()
		}
		if ip == nil {
			return source.Value{}, fmt.Errorf("%s value %q is not an address", dt, b)
		}
		return source.Value{Bytes: scanBinary(c, ip)}, nil
	}
	switch {
	case c.charset == csBinary:
		return source.Value{Bytes: scanBinary(c, b)}, nil
	case c.typ == gomysql.MYSQL_TYPE_JSON: // MySQL: the text SELECT prints, as the stream renders it
		return source.Value{Bytes: b}, nil
	}
	return text(c, b) // text in the column's charset; DECIMAL, DATE, YEAR text as is (csUTF8)
}

// scanBinary renders a binary value as decodeString does: BINARY(16) as uuid text, BINARY(n)
// padded to n bytes, anything else raw.
func scanBinary(c *column, b []byte) []byte {
	if c.typ == gomysql.MYSQL_TYPE_STRING {
		if c.length == 16 && len(b) <= 16 {
			return uuidText(string(b))
		}
		if len(b) < c.length {
			return padZero(string(b), c.length)
		}
	}
	return b
}

// fraction6 returns the six fractional digits of a temporal text's fraction part ("" → "000000").
func fraction6(frac []byte) ([]byte, error) {
	if len(frac) > 6 {
		return nil, fmt.Errorf("fraction %q has more than 6 digits", frac)
	}
	for _, d := range frac {
		if d < '0' || d > '9' {
			return nil, fmt.Errorf("fraction %q is not digits", frac)
		}
	}
	out := []byte("000000")
	copy(out, frac)
	return out, nil
}

// normDateTime renders a DATETIME/TIMESTAMP text ("2024-01-02 03:04:05[.ffffff]", as go-mysql
// formats the binary protocol) with fsp fractional digits, as the binlog decoder does
// (formatDatetime, fracTime, formatZeroTime: always fsp digits).
func normDateTime(b []byte, fsp int) (source.Value, error) {
	if len(b) < 19 || fsp < 0 || fsp > 6 {
		return source.Value{}, fmt.Errorf("datetime %q (fsp %d) is not YYYY-MM-DD hh:mm:ss[.ffffff]", b, fsp)
	}
	var frac []byte
	if len(b) > 19 {
		if b[19] != '.' {
			return source.Value{}, fmt.Errorf("datetime %q is not YYYY-MM-DD hh:mm:ss[.ffffff]", b)
		}
		frac = b[20:]
	}
	f6, err := fraction6(frac)
	if err != nil {
		return source.Value{}, fmt.Errorf("datetime %q: %w", b, err)
	}
	out := b[:19:19]
	if fsp > 0 {
		out = append(append(out, '.'), f6[:fsp]...)
	}
	return source.Value{Bytes: out}, nil
}

// normTime renders a TIME text ("[-]hh:mm:ss[.ffffff]") as the binlog decoder does (decodeTime2,
// timeFormat): fsp fractional digits, none when the fraction is zero.
func normTime(b []byte, fsp int) (source.Value, error) {
	if fsp < 0 || fsp > 6 {
		return source.Value{}, fmt.Errorf("time %q: fsp %d", b, fsp)
	}
	base, frac, _ := bytes.Cut(b, []byte{'.'})
	if len(base) < 8 {
		return source.Value{}, fmt.Errorf("time %q is not [-]hh:mm:ss[.ffffff]", b)
	}
	f6, err := fraction6(frac)
	if err != nil {
		return source.Value{}, fmt.Errorf("time %q: %w", b, err)
	}
	out := base[:len(base):len(base)]
	if fsp > 0 && !bytes.Equal(f6, []byte("000000")) {
		out = append(append(out, '.'), f6[:fsp]...)
	}
	return source.Value{Bytes: out}, nil
}
