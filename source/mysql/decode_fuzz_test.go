package mysql

import (
	"bytes"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/google/uuid"
	"golang.org/x/text/encoding/charmap"

	"github.com/outboxd/outboxd/source"
)

// Fuzz targets of the MySQL source's pure parsers: the binlog row decoder (go-mysql's rows
// event → source.Row values: buildDesc, checkImage, decodeRow through the assembler) and the
// DDL tokenizer and parser.

var uuidText36 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// FuzzDecodeRowsEvent replaces the TableMap and WriteRows event bodies of the captured MariaDB
// fixtures (all value types, FULL and MINIMAL row metadata) with the fuzzer's, parses them with
// go-mysql configured as the source configures it, and assembles them. Whatever the bytes, the
// assembler must not panic, and every row it hands out must have one value per column, named
// as its table description says, each in its published form: integers as decimal text,
// floats as parseable text, BINARY(16) as a lower-case uuid, converted text as valid UTF-8.
// (A panic inside go-mysql's own parser is go-mysql's, recovered by its syncer in production,
// and is not a finding here: the input is then skipped.)
func FuzzDecodeRowsEvent(f *testing.F) {
	fixtures := map[bool]fixture{}
	for _, minimal := range []bool{false, true} {
		name := "full"
		if minimal {
			name = "minimal"
		}
		fx := loadFixture(f, filepath.Join("testdata", "mariadb_types_"+name+".json"))
		fixtures[minimal] = fx
		tm, wr := fixtureBodies(fx)
		f.Add(tm, wr, minimal)
	}
	f.Fuzz(func(t *testing.T, tmBody, rowsBody []byte, minimal bool) {
		decodeRowsEvent(t, fixtures[minimal], tmBody, rowsBody)
	})
}

// TestDecodeRowsEventSeeds: FuzzDecodeRowsEvent's seeds (the fixtures' own bodies) decode to
// their row, so the fuzz properties are checked on real rows.
func TestDecodeRowsEventSeeds(t *testing.T) {
	for _, name := range []string{"full", "minimal"} {
		fx := loadFixture(t, filepath.Join("testdata", "mariadb_types_"+name+".json"))
		tm, wr := fixtureBodies(fx)
		if n := decodeRowsEvent(t, fx, tm, wr); n != 1 {
			t.Errorf("%s: %d rows, want 1", name, n)
		}
	}
}

// decodeRowsEvent runs fx's events with the TableMap and WriteRows bodies replaced and checks
// the rows handed out (see FuzzDecodeRowsEvent); it returns how many there were.
func decodeRowsEvent(t *testing.T, fx fixture, tmBody, rowsBody []byte) int {
	raws := fixtureEventsOf(fx)
	p, a := fixtureParser(fx)
	var evs [][]byte
	for _, raw := range raws {
		switch typ := replication.EventType(raw[4]); typ {
		case replication.TABLE_MAP_EVENT:
			evs = append(evs, mysqlEvent(byte(typ), tmBody))
		case replication.WRITE_ROWS_EVENTv1, replication.WRITE_ROWS_EVENTv2:
			evs = append(evs, mysqlEvent(byte(typ), rowsBody))
		default:
			evs = append(evs, raw)
		}
	}
	var txs []source.Tx
	for _, raw := range evs {
		ev, ok := parseRecovered(p, raw)
		if !ok {
			return 0
		}
		if err := a.handle(ev); err != nil {
			return 0 // a loud stop (or a protocol error): fine, as long as it is not a panic
		}
		for tx, ok := a.pop(); ok; tx, ok = a.pop() {
			txs = append(txs, tx)
		}
	}
	rows := 0
	for _, tx := range txs {
		rows += len(tx.Rows)
		for _, r := range tx.Rows {
			d := a.descs[r.Table]
			if d == nil || len(r.Values) != len(r.Columns) || !reflect.DeepEqual(r.Columns, d.names) || len(d.cols) != len(r.Values) {
				t.Fatalf("row %+v does not match its table description %+v", r, d)
			}
			for i, v := range r.Values {
				if err := checkPublished(&d.cols[i], v); err != nil {
					t.Fatalf("column %s (type %d, charset %d, length %d): %v", d.cols[i].name, d.cols[i].typ, d.cols[i].charset, d.cols[i].length, err)
				}
			}
		}
	}
	return rows
}

// parseRecovered is p.Parse, with a panic inside go-mysql reported as not ok.
func parseRecovered(p *replication.BinlogParser, raw []byte) (ev *replication.BinlogEvent, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	ev, err := p.Parse(raw)
	return ev, err == nil
}

// fixtureBodies returns the bodies (no header, no checksum) of fx's TableMap and WriteRows events.
func fixtureBodies(fx fixture) (tm, wr []byte) {
	for _, raw := range fixtureEventsOf(fx) {
		switch replication.EventType(raw[4]) {
		case replication.TABLE_MAP_EVENT:
			tm = raw[19 : len(raw)-4]
		case replication.WRITE_ROWS_EVENTv1, replication.WRITE_ROWS_EVENTv2:
			wr = raw[19 : len(raw)-4]
		}
	}
	return tm, wr
}

func fixtureEventsOf(fx fixture) [][]byte {
	var out [][]byte
	for _, h := range fx.Events {
		raw := make([]byte, len(h)/2)
		for i := range raw {
			b, _ := strconv.ParseUint(h[2*i:2*i+2], 16, 8)
			raw[i] = byte(b)
		}
		out = append(out, raw)
	}
	return out
}

// checkPublished checks one decoded value has the form decodeValue documents for its column.
func checkPublished(c *column, v source.Value) error {
	if v.Null {
		if v.Bytes != nil {
			return fmt.Errorf("NULL with bytes %q", v.Bytes)
		}
		return nil
	}
	if v.Bytes == nil {
		return fmt.Errorf("a non-NULL value without bytes")
	}
	s := string(v.Bytes)
	switch c.typ {
	case gomysql.MYSQL_TYPE_TINY, gomysql.MYSQL_TYPE_SHORT, gomysql.MYSQL_TYPE_INT24, gomysql.MYSQL_TYPE_LONG,
		gomysql.MYSQL_TYPE_LONGLONG, gomysql.MYSQL_TYPE_YEAR, gomysql.MYSQL_TYPE_BIT:
		if _, err := strconv.ParseInt(s, 10, 64); err != nil {
			if _, err := strconv.ParseUint(s, 10, 64); err != nil {
				return fmt.Errorf("integer %q is not decimal text", s)
			}
		}
		if c.unsigned && strings.HasPrefix(s, "-") {
			return fmt.Errorf("unsigned integer %q is negative", s)
		}
	case gomysql.MYSQL_TYPE_FLOAT, gomysql.MYSQL_TYPE_DOUBLE:
		if _, err := strconv.ParseFloat(s, 64); err != nil {
			return fmt.Errorf("float %q does not parse", s)
		}
	case gomysql.MYSQL_TYPE_STRING:
		if c.charset == csBinary && c.length == 16 && len(v.Bytes) <= 16 && !uuidText36.MatchString(s) {
			return fmt.Errorf("BINARY(16) %q is not a lower-case uuid", s)
		}
	}
	switch c.charset {
	case csLatin1, csUTF16, csUTF16LE, csUTF32, csSingle:
		if isTextBinlogType(c.typ) && !utf8.Valid(v.Bytes) {
			return fmt.Errorf("converted text %q is not valid UTF-8", s)
		}
	}
	return nil
}

func isTextBinlogType(t byte) bool {
	switch t {
	case gomysql.MYSQL_TYPE_STRING, gomysql.MYSQL_TYPE_VARCHAR, gomysql.MYSQL_TYPE_VAR_STRING, gomysql.MYSQL_TYPE_BLOB,
		gomysql.MYSQL_TYPE_TINY_BLOB, gomysql.MYSQL_TYPE_MEDIUM_BLOB, gomysql.MYSQL_TYPE_LONG_BLOB:
		return true
	}
	return false
}

// cp1252Undefined are the five cp1252 positions MySQL's latin1 maps to the C1 controls.
var cp1252Undefined = map[byte]bool{0x81: true, 0x8D: true, 0x8F: true, 0x90: true, 0x9D: true}

// FuzzDecodeRow decodes one value of every Go type go-mysql hands over (nil, string, []byte,
// the integer and float types) for an arbitrary column (binlog type, metadata, signedness,
// charset, ENUM/SET members) through decodeRow, and checks it against a reference written from
// decodeValue's documentation: NULL only for nil; integers as decimal text of the value
// (unsigned columns reinterpreted, MEDIUMINT masked to 24 bits, ENUM/SET as member names);
// floats as text that parses back to the same value; BINARY(16) as the lower-case uuid of the
// zero-padded bytes, other BINARY(n) zero-padded; text as UTF-8 equal to an independent
// conversion (x/text's cp1252 with MySQL's five C1 positions, utf16, UTF-32), UTF-8 and binary
// bytes as they are; MySQL JSON with exactly one space after each ',' and ':' outside strings.
func FuzzDecodeRow(f *testing.F) {
	f.Add(byte(gomysql.MYSQL_TYPE_STRING), uint16(gomysql.MYSQL_TYPE_STRING)<<8|16, byte(1<<1|0), byte(1), []byte("\x00\x11\x22\x33\x44\x55\x66\x77\x88\x99\xaa\xbb\xcc"), int64(0), "")
	f.Add(byte(gomysql.MYSQL_TYPE_VARCHAR), uint16(64), byte(2<<1), byte(1), []byte("caf\xe9 \x80\x81"), int64(0), "")
	f.Add(byte(gomysql.MYSQL_TYPE_VARCHAR), uint16(64), byte(3<<1), byte(1), []byte("\xd8\x3d\xde\x00\x00a"), int64(0), "")
	f.Add(byte(gomysql.MYSQL_TYPE_BLOB), uint16(4), byte(5<<1), byte(2), []byte("\x00\x01\xf6\x03"), int64(0), "")
	f.Add(byte(gomysql.MYSQL_TYPE_JSON), uint16(4), byte(0), byte(1), []byte(`{"a":1,"b":[1,2],"s":"x,y:\"z"}`), int64(0), "")
	f.Add(byte(gomysql.MYSQL_TYPE_LONG), uint16(0), byte(1), byte(7), []byte(nil), int64(-1), "")
	f.Add(byte(gomysql.MYSQL_TYPE_INT24), uint16(0), byte(1), byte(7), []byte(nil), int64(-5), "")
	f.Add(byte(gomysql.MYSQL_TYPE_STRING), uint16(gomysql.MYSQL_TYPE_ENUM)<<8|1, byte(0), byte(9), []byte(nil), int64(2), "red,green")
	f.Add(byte(gomysql.MYSQL_TYPE_STRING), uint16(gomysql.MYSQL_TYPE_SET)<<8|1, byte(0), byte(9), []byte(nil), int64(5), "a,b,c")
	f.Add(byte(gomysql.MYSQL_TYPE_DOUBLE), uint16(8), byte(0), byte(13), []byte(nil), int64(0x4002000000000000), "")
	f.Add(byte(gomysql.MYSQL_TYPE_FLOAT), uint16(4), byte(0), byte(12), []byte(nil), int64(0x3fc00000), "")
	f.Add(byte(gomysql.MYSQL_TYPE_TINY), uint16(0), byte(1), byte(3), []byte(nil), int64(-6), "")
	f.Add(byte(gomysql.MYSQL_TYPE_TIMESTAMP2), uint16(3), byte(0), byte(1), []byte("2024-01-02 03:04:05.678"), int64(0), "")
	f.Fuzz(func(t *testing.T, typ byte, meta uint16, flags, kind byte, data []byte, n int64, members string) {
		c := column{name: "c", unsigned: flags&1 != 0, charset: charsetKind(flags >> 1 % 8)}
		c.typ, c.length = realType(typ, meta)
		if c.charset == csSingle {
			c.cmap = charmap.Windows1251
		}
		if members != "" {
			c.enum, c.set = strings.Split(members, ","), strings.Split(members, ",")
		}
		var v any
		switch kind % 14 {
		case 0:
			v = nil
		case 1:
			v = string(data)
		case 2:
			v = bytes.Clone(data)
		case 3:
			v = int8(n)
		case 4:
			v = uint8(n)
		case 5:
			v = int16(n)
		case 6:
			v = uint16(n)
		case 7:
			v = int32(n)
		case 8:
			v = uint32(n)
		case 9:
			v = n
		case 10:
			v = uint64(n)
		case 11:
			v = int(n)
		case 12:
			v = math.Float32frombits(uint32(n))
		case 13:
			v = math.Float64frombits(uint64(n))
		}
		dst := make([]source.Value, 1)
		err := decodeRow([]column{c}, []any{v}, dst)
		got := dst[0]
		want, wantErr := refValue(&c, v)
		if wantErr != "" {
			if err == nil {
				t.Fatalf("%T %v in column %+v: %q, want an error (%s)", v, v, c, got.Bytes, wantErr)
			}
			return
		}
		if err != nil {
			t.Fatalf("%T %v in column %+v: %v, want %q", v, v, c, err, want)
		}
		if v == nil {
			if !got.Null || got.Bytes != nil {
				t.Fatalf("nil decoded as %+v, want NULL", got)
			}
			return
		}
		if got.Null || got.Bytes == nil {
			t.Fatalf("%T %v decoded as %+v: NULL or nil bytes", v, v, got)
		}
		switch x := v.(type) {
		case float32:
			if back, err := strconv.ParseFloat(string(got.Bytes), 32); err != nil || float32(back) != x && !(x != x && back != back) {
				t.Fatalf("float32 %v published as %q", x, got.Bytes)
			}
			return
		case float64:
			if back, err := strconv.ParseFloat(string(got.Bytes), 64); err != nil || back != x && !(x != x && back != back) {
				t.Fatalf("float64 %v published as %q", x, got.Bytes)
			}
			return
		}
		if string(got.Bytes) != want {
			t.Fatalf("%T %q in column %+v: %q, want %q", v, v, c, got.Bytes, want)
		}
	})
}

// refValue is the published text of v in column c per decodeValue's documentation, or the
// reason it must be an error. Floats are checked by parsing back (their text is strconv's).
func refValue(c *column, v any) (string, string) {
	u := func(x uint64) string { return strconv.FormatUint(x, 10) }
	i := func(x int64) string { return strconv.FormatInt(x, 10) }
	switch x := v.(type) {
	case nil, float32, float64:
		return "", ""
	case int8:
		if c.unsigned {
			return u(uint64(uint8(x))), ""
		}
		return i(int64(x)), ""
	case uint8:
		return u(uint64(x)), ""
	case int16:
		if c.unsigned {
			return u(uint64(uint16(x))), ""
		}
		return i(int64(x)), ""
	case uint16:
		return u(uint64(x)), ""
	case int32:
		switch {
		case c.unsigned && c.typ == gomysql.MYSQL_TYPE_INT24:
			return u(uint64(uint32(x) & 0xffffff)), ""
		case c.unsigned:
			return u(uint64(uint32(x))), ""
		}
		return i(int64(x)), ""
	case uint32:
		return u(uint64(x)), ""
	case int64:
		switch c.typ {
		case gomysql.MYSQL_TYPE_ENUM:
			switch {
			case x == 0:
				return "", ""
			case x > 0 && x <= int64(len(c.enum)):
				return c.enum[x-1], ""
			}
			return i(x), ""
		case gomysql.MYSQL_TYPE_SET:
			if len(c.set) == 0 {
				return u(uint64(x)), ""
			}
			var names []string
			for k, name := range c.set {
				if k < 64 && uint64(x)>>k&1 == 1 {
					names = append(names, name)
				}
			}
			return strings.Join(names, ","), ""
		case gomysql.MYSQL_TYPE_BIT:
			return u(uint64(x)), ""
		}
		if c.unsigned {
			return u(uint64(x)), ""
		}
		return i(x), ""
	case uint64:
		return u(x), ""
	case int:
		return i(int64(x)), ""
	case string:
		switch c.typ {
		case gomysql.MYSQL_TYPE_STRING:
			if c.charset == csBinary {
				if c.length == 16 && len(x) <= 16 {
					raw := make([]byte, 16)
					copy(raw, x)
					return uuid.UUID(raw).String(), ""
				}
				if len(x) < c.length {
					return x + strings.Repeat("\x00", c.length-len(x)), ""
				}
				return x, ""
			}
			return refText(c, []byte(x))
		case gomysql.MYSQL_TYPE_VARCHAR, gomysql.MYSQL_TYPE_VAR_STRING:
			return refText(c, []byte(x))
		case gomysql.MYSQL_TYPE_JSON:
			return refJSONSpacing(x), ""
		}
		return x, ""
	case []byte:
		if c.typ == gomysql.MYSQL_TYPE_JSON && len(x) == 0 {
			return "null", ""
		}
		return refText(c, x)
	}
	return "", "an unsupported Go type"
}

// refText converts text in c's charset to UTF-8 independently of charset.go.
func refText(c *column, b []byte) (string, string) {
	switch c.charset {
	case csUTF8, csBinary:
		return string(b), ""
	case csUnsupported:
		return "", "an unconvertible charset"
	case csLatin1:
		var r []rune
		for _, x := range b {
			if cp1252Undefined[x] {
				r = append(r, rune(x))
			} else {
				r = append(r, charmap.Windows1252.DecodeByte(x))
			}
		}
		return string(r), ""
	case csSingle:
		var r []rune
		for _, x := range b {
			r = append(r, c.cmap.DecodeByte(x))
		}
		return string(r), ""
	case csUTF16, csUTF16LE:
		if len(b)%2 != 0 {
			return "", "odd UTF-16 length"
		}
		u16 := make([]uint16, len(b)/2)
		for k := range u16 {
			if c.charset == csUTF16LE {
				u16[k] = uint16(b[2*k+1])<<8 | uint16(b[2*k])
			} else {
				u16[k] = uint16(b[2*k])<<8 | uint16(b[2*k+1])
			}
		}
		for k := 0; k < len(u16); k++ { // an unpaired surrogate is an error
			switch {
			case utf16.IsSurrogate(rune(u16[k])) && u16[k] < 0xDC00 && k+1 < len(u16) && u16[k+1] >= 0xDC00 && u16[k+1] <= 0xDFFF:
				k++
			case utf16.IsSurrogate(rune(u16[k])):
				return "", "an unpaired surrogate"
			}
		}
		return string(utf16.Decode(u16)), ""
	case csUTF32:
		if len(b)%4 != 0 {
			return "", "UTF-32 length not a multiple of 4"
		}
		var r []rune
		for k := 0; k < len(b); k += 4 {
			x := rune(b[k])<<24 | rune(b[k+1])<<16 | rune(b[k+2])<<8 | rune(b[k+3])
			if !utf8.ValidRune(x) {
				return "", "an invalid code point"
			}
			r = append(r, x)
		}
		return string(r), ""
	}
	return "", "an unknown charset kind"
}

// refJSONSpacing: every ',' and ':' outside strings followed by exactly one added space unless
// one is already there.
func refJSONSpacing(s string) string {
	var b strings.Builder
	inStr, esc := false, false
	for k := 0; k < len(s); k++ {
		ch := s[k]
		b.WriteByte(ch)
		switch {
		case esc:
			esc = false
		case inStr && ch == '\\':
			esc = true
		case ch == '"':
			inStr = !inStr
		case !inStr && (ch == ',' || ch == ':') && (k+1 == len(s) || s[k+1] != ' '):
			b.WriteByte(' ')
		}
	}
	return b.String()
}
