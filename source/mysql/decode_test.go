package mysql

import (
	"encoding/binary"
	"encoding/hex"
	"path/filepath"
	"testing"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outboxd/outboxd/source"
)

func TestDecodeValue(t *testing.T) {
	bin16 := column{typ: gomysql.MYSQL_TYPE_STRING, length: 16, charset: csBinary}
	for _, tc := range []struct {
		name string
		col  column
		in   any
		want string // "NULL" for SQL NULL
	}{
		{"null", column{typ: gomysql.MYSQL_TYPE_VARCHAR}, nil, "NULL"},
		{"binary16 uuid", bin16, "\x00\x11\x22\x33\x44\x55\x66\x77\x88\x99\xaa\xbb\xcc\xdd\xee\xff", "00112233-4455-6677-8899-aabbccddeeff"},
		{"binary16 trailing zeros stripped by MariaDB", bin16, "\x00\x11\x22\x33\x44\x55\x66\x77\x88\x99\xaa\xbb\xcc", "00112233-4455-6677-8899-aabbcc000000"},
		{"binary16 all zero", bin16, "", "00000000-0000-0000-0000-000000000000"},
		{"binary4 padded raw", column{typ: gomysql.MYSQL_TYPE_STRING, length: 4, charset: csBinary}, "ab", "ab\x00\x00"},
		{"char36 uuid as is", column{typ: gomysql.MYSQL_TYPE_STRING, length: 144}, "0a1b2c3d-4e5f-4061-8273-94a5b6c7d8e9", "0a1b2c3d-4e5f-4061-8273-94a5b6c7d8e9"},
		{"varchar utf8", column{typ: gomysql.MYSQL_TYPE_VARCHAR}, "héllo ☃", "héllo ☃"},
		{"varchar empty", column{typ: gomysql.MYSQL_TYPE_VARCHAR}, "", ""},
		{"varchar latin1", column{typ: gomysql.MYSQL_TYPE_VARCHAR, charset: csLatin1}, "caf\xe9 \x80", "café €"},
		{"text latin1 ascii", column{typ: gomysql.MYSQL_TYPE_BLOB, charset: csLatin1}, []byte("plain"), "plain"},
		{"mariadb json longtext", column{typ: gomysql.MYSQL_TYPE_BLOB}, []byte(`{"n":1,  "x" : "y"}`), `{"n":1,  "x" : "y"}`},
		{"blob raw", column{typ: gomysql.MYSQL_TYPE_BLOB, charset: csBinary}, []byte{0, 0xff}, "\x00\xff"},
		{"mysql json text", column{typ: gomysql.MYSQL_TYPE_JSON}, `{"a":1,"b":["x, y:",{"c":null}]}`, `{"a": 1, "b": ["x, y:", {"c": null}]}`},
		{"mysql json escaped quote", column{typ: gomysql.MYSQL_TYPE_JSON}, `{"a\",":"\\"}`, `{"a\",": "\\"}`},
		{"mysql json empty document", column{typ: gomysql.MYSQL_TYPE_JSON}, []byte{}, "null"},
		{"tinyint", column{typ: gomysql.MYSQL_TYPE_TINY}, int8(-5), "-5"},
		{"tinyint unsigned from signed decode", column{typ: gomysql.MYSQL_TYPE_TINY, unsigned: true}, int8(-6), "250"},
		{"tinyint unsigned", column{typ: gomysql.MYSQL_TYPE_TINY, unsigned: true}, uint8(250), "250"},
		{"smallint unsigned fixup", column{typ: gomysql.MYSQL_TYPE_SHORT, unsigned: true}, int16(-1), "65535"},
		{"mediumint unsigned fixup", column{typ: gomysql.MYSQL_TYPE_INT24, unsigned: true}, int32(-1), "16777215"},
		{"int unsigned fixup", column{typ: gomysql.MYSQL_TYPE_LONG, unsigned: true}, int32(-1), "4294967295"},
		{"int", column{typ: gomysql.MYSQL_TYPE_LONG}, int32(-42), "-42"},
		{"bigint unsigned", column{typ: gomysql.MYSQL_TYPE_LONGLONG, unsigned: true}, uint64(18446744073709551615), "18446744073709551615"},
		{"bigint unsigned fixup", column{typ: gomysql.MYSQL_TYPE_LONGLONG, unsigned: true}, int64(-1), "18446744073709551615"},
		{"bigint", column{typ: gomysql.MYSQL_TYPE_LONGLONG}, int64(-9223372036854775808), "-9223372036854775808"},
		{"year", column{typ: gomysql.MYSQL_TYPE_YEAR}, 2024, "2024"},
		{"bit", column{typ: gomysql.MYSQL_TYPE_BIT}, int64(165), "165"},
		{"float", column{typ: gomysql.MYSQL_TYPE_FLOAT}, float32(1.5), "1.5"},
		{"double", column{typ: gomysql.MYSQL_TYPE_DOUBLE}, 0.1, "0.1"},
		{"decimal", column{typ: gomysql.MYSQL_TYPE_NEWDECIMAL}, "-12.50", "-12.50"},
		{"datetime", column{typ: gomysql.MYSQL_TYPE_DATETIME2}, "2024-01-02 03:04:05.123456", "2024-01-02 03:04:05.123456"},
		{"timestamp", column{typ: gomysql.MYSQL_TYPE_TIMESTAMP2}, "2024-01-02 03:04:05", "2024-01-02 03:04:05"},
		{"enum named", column{typ: gomysql.MYSQL_TYPE_ENUM, enum: []string{"red", "green"}}, int64(2), "green"},
		{"enum unnamed", column{typ: gomysql.MYSQL_TYPE_ENUM}, int64(2), "2"},
		{"enum empty", column{typ: gomysql.MYSQL_TYPE_ENUM, enum: []string{"red"}}, int64(0), ""},
		{"set named", column{typ: gomysql.MYSQL_TYPE_SET, set: []string{"a", "b", "c"}}, int64(5), "a,c"},
		{"set unnamed", column{typ: gomysql.MYSQL_TYPE_SET}, int64(5), "5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := decodeValue(&tc.col, tc.in)
			if err != nil {
				t.Fatal(err)
			}
			got := string(v.Bytes)
			if v.Null {
				got = "NULL"
			} else if v.Bytes == nil {
				t.Fatalf("non-NULL value with nil Bytes")
			}
			if got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
	if _, err := decodeValue(&column{name: "x"}, struct{}{}); err == nil {
		t.Fatal("unsupported Go type accepted")
	}
}

func TestRealType(t *testing.T) {
	for _, tc := range []struct {
		tp     byte
		meta   uint16
		want   byte
		length int
	}{
		{gomysql.MYSQL_TYPE_STRING, 0xfe10, gomysql.MYSQL_TYPE_STRING, 16},  // BINARY(16)
		{gomysql.MYSQL_TYPE_STRING, 0xfe90, gomysql.MYSQL_TYPE_STRING, 144}, // CHAR(36) utf8mb4
		{gomysql.MYSQL_TYPE_STRING, 0xdefc, gomysql.MYSQL_TYPE_STRING, 764}, // CHAR(191) utf8mb4: length > 255
		{gomysql.MYSQL_TYPE_STRING, 0xf701, gomysql.MYSQL_TYPE_ENUM, 1},
		{gomysql.MYSQL_TYPE_STRING, 0xf801, gomysql.MYSQL_TYPE_SET, 1},
		{gomysql.MYSQL_TYPE_VARCHAR, 400, gomysql.MYSQL_TYPE_VARCHAR, 0},
	} {
		rt, n := realType(tc.tp, tc.meta)
		if rt != tc.want || n != tc.length {
			t.Errorf("realType(%d, %#x) = %d, %d; want %d, %d", tc.tp, tc.meta, rt, n, tc.want, tc.length)
		}
	}
}

// mysqlEvent builds one binlog event (19-byte header, body, 4-byte checksum placeholder).
func mysqlEvent(typ byte, body []byte) []byte {
	ev := make([]byte, 19, 19+len(body)+4)
	binary.LittleEndian.PutUint32(ev[0:], uint32(time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC).Unix()))
	ev[4] = typ
	binary.LittleEndian.PutUint32(ev[5:], 1)
	binary.LittleEndian.PutUint32(ev[9:], uint32(19+len(body)+4))
	binary.LittleEndian.PutUint32(ev[13:], 1000)
	ev = append(ev, body...)
	return append(ev, 0, 0, 0, 0)
}

// TestMySQLBinaryJSON decodes a hand-built MySQL TableMap + WriteRows pair whose JSON column
// holds the binary document {"a": 1, "b": "x"} and expects MySQL's own text for it.
func TestMySQLBinaryJSON(t *testing.T) {
	fde := fixtureEvents(t, "full")[0] // a real FormatDescriptionEvent (CRC32 checksums)
	p := replication.NewBinlogParser()
	p.SetFlavor("mysql")
	p.SetRenderJSONAsMySQLText(true)
	if _, err := p.Parse(fde); err != nil {
		t.Fatal(err)
	}
	tableID := []byte{7, 0, 0, 0, 0, 0}
	tm := append(append([]byte{}, tableID...), 0, 0) // flags
	tm = append(tm, 3, 'a', 'p', 'p', 0, 6, 'o', 'u', 't', 'b', 'o', 'x', 0)
	tm = append(tm, 1, gomysql.MYSQL_TYPE_JSON)                 // 1 column: JSON
	tm = append(tm, 1, 4)                                       // metadata: pack length 4
	tm = append(tm, 0x01)                                       // nullable
	tm = append(tm, 4, 8, 7, 'p', 'a', 'y', 'l', 'o', 'a', 'd') // optional metadata: COLUMN_NAME
	doc := []byte{0x00,                                         // JSONB_SMALL_OBJECT
		0x02, 0x00, 0x16, 0x00, 0x12, 0x00, 0x01, 0x00, 0x13, 0x00, 0x01, 0x00,
		0x05, 0x01, 0x00, // INT16 inline 1
		0x0c, 0x14, 0x00, // STRING at offset 20
		'a', 'b', 0x01, 'x'}
	rows := append(append([]byte{}, tableID...), 1, 0) // flags: STMT_END
	rows = append(rows, 1, 0x01, 0x00)                 // 1 column, present bitmap, null bitmap
	rows = binary.LittleEndian.AppendUint32(rows, uint32(len(doc)))
	rows = append(rows, doc...)
	captured := map[tableKey]string{{"app", "outbox"}: "app.outbox"}
	start, _ := parsePosition("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5")
	a := newAssembler(start, captured, nil, false, time.Hour, testLogger())
	a.inTx = true
	for _, raw := range [][]byte{mysqlEvent(byte(replication.TABLE_MAP_EVENT), tm), mysqlEvent(byte(replication.WRITE_ROWS_EVENTv1), rows)} {
		ev, err := p.Parse(raw)
		if err != nil {
			t.Fatalf("parse: %v", err)
		}
		if err := a.handle(ev); err != nil {
			t.Fatal(err)
		}
	}
	if len(a.rows) != 1 {
		t.Fatalf("rows: %+v", a.rows)
	}
	expectRow(t, a.rows[0], "payload", map[string]string{"payload": `{"a": 1, "b": "x"}`})
}

func fixtureEvents(t testing.TB, name string) [][]byte {
	f := loadFixture(t, filepath.Join("testdata", "mariadb_types_"+name+".json"))
	var out [][]byte
	for _, h := range f.Events {
		raw, _ := hex.DecodeString(h)
		out = append(out, raw)
	}
	return out
}

// BenchmarkDecodeRow decodes the outbox row shape (BINARY(16) id, three VARCHARs, a JSON
// payload, a TIMESTAMP) as go-mysql hands it over.
func BenchmarkDecodeRow(b *testing.B) {
	cols := []column{
		{name: "id", typ: gomysql.MYSQL_TYPE_STRING, length: 16, charset: csBinary},
		{name: "aggregatetype", typ: gomysql.MYSQL_TYPE_VARCHAR},
		{name: "aggregateid", typ: gomysql.MYSQL_TYPE_VARCHAR},
		{name: "type", typ: gomysql.MYSQL_TYPE_VARCHAR},
		{name: "payload", typ: gomysql.MYSQL_TYPE_BLOB},
		{name: "created_at", typ: gomysql.MYSQL_TYPE_TIMESTAMP2},
	}
	row := []any{"\x00\x11\x22\x33\x44\x55\x66\x77\x88\x99\xaa\xbb\xcc\xdd\xee", "order", "a-1234", "created",
		[]byte(`{"n": 1, "agg": "a-1234", "items": [1, 2, 3]}`), "2024-01-02 03:04:05.123456"}
	dst := make([]source.Value, len(cols))
	b.ReportAllocs()
	for b.Loop() {
		if err := decodeRow(cols, row, dst); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeFixture runs a captured MariaDB transaction (one 29-column row of every
// supported type) through go-mysql's parser and the assembler: the per-transaction cost of the
// whole decode path, without the network.
func BenchmarkDecodeFixture(b *testing.B) {
	decode := fixtureDecoder(b, loadFixture(b, filepath.Join("testdata", "mariadb_types_full.json")))
	b.ReportAllocs()
	for b.Loop() {
		if txs := decode(); len(txs) != 1 {
			b.Fatal(len(txs))
		}
	}
}
