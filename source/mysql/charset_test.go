package mysql

import (
	"errors"
	"strings"
	"testing"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outboxd/outboxd/source"
)

// TestCharsetConversion: byte fixtures as MariaDB logs them (utf16/ucs2/utf32 are big-endian),
// converted to UTF-8.
func TestCharsetConversion(t *testing.T) {
	for _, tc := range []struct {
		charset string
		in      string
		want    string
	}{
		{"utf16", "\x00\xe9\x26\x03", "é☃"},
		{"utf16", "\xd8\x3d\xde\x00", "😀"}, // surrogate pair
		{"ucs2", "\x00K\x00\x31", "K1"},
		{"utf16le", "\xe9\x00\x03\x26", "é☃"},
		{"utf32", "\x00\x00\x00a\x00\x01\xf6\x00", "a😀"},
		{"latin1", "caf\xe9 \x80", "café €"},
		{"cp1250", "\x8a\xe8", "Šč"},
		{"cp1251", "\xcf\xf0\xe8", "При"},
		{"koi8r", "\xf0\xd2\xc9", "При"},
		{"latin2", "\xb1", "ą"},
		{"utf8mb4", "é☃", "é☃"},
		{"ascii", "K1", "K1"},
		{"binary", "\xff\x00", "\xff\x00"},
	} {
		kind, m := charsetByName(tc.charset)
		if kind == csUnsupported {
			t.Fatalf("%s unsupported", tc.charset)
		}
		c := column{name: "c", typ: gomysql.MYSQL_TYPE_VARCHAR, charset: kind, cmap: m}
		v, err := decodeValue(&c, tc.in)
		if err != nil {
			t.Fatalf("%s %q: %v", tc.charset, tc.in, err)
		}
		if string(v.Bytes) != tc.want {
			t.Errorf("%s %q -> %q, want %q", tc.charset, tc.in, v.Bytes, tc.want)
		}
	}
	// Malformed input is an error, not a guess.
	for _, tc := range []struct{ charset, in string }{{"utf16", "\x00"}, {"utf16", "\xd8\x3d"}, {"utf32", "\x00\x00\x00"}, {"utf32", "\x00\x11\x00\x00"}} {
		kind, m := charsetByName(tc.charset)
		c := column{name: "c", typ: gomysql.MYSQL_TYPE_VARCHAR, charset: kind, cmap: m}
		if v, err := decodeValue(&c, tc.in); err == nil {
			t.Errorf("%s %q -> %q, want an error", tc.charset, tc.in, v.Bytes)
		}
	}
	for _, cs := range []string{"sjis", "gbk", "big5", "ujis", "euckr", "gb18030", "tis620", "dec8", "whatever"} {
		if supportedCharset(cs) {
			t.Errorf("%s should be refused", cs)
		}
	}
	if err := unsupportedCharsetError("app.outbox", "aggregateid", "sjis"); !strings.Contains(err.Error(), "ALTER TABLE app.outbox MODIFY aggregateid") {
		t.Errorf("refusal names no fix: %v", err)
	}
}

func TestCollationCharset(t *testing.T) {
	server := map[uint64]string{54: "utf16", 8: "latin1", 45: "utf8mb4"}
	for _, tc := range []struct {
		id     uint64
		server map[uint64]string
		want   charsetKind
	}{
		{54, server, csUTF16},
		{8, server, csLatin1},
		{2816, server, csUTF16},      // MariaDB utf16_uca1400_ai_ci
		{2560, server, csUTF16},      // ucs2_uca1400_ai_ci
		{3072, server, csUTF32},      // utf32_uca1400_ai_ci
		{2304, server, csUTF8},       // utf8mb4_uca1400_ai_ci
		{999, server, csUnsupported}, // the server does not know it: refuse, do not guess
		{54, nil, csUTF16},
		{1078, nil, csUTF16}, // utf16_general_nopad_ci
		{60, nil, csUTF32},
		{35, nil, csUTF16}, // ucs2_general_ci
		{56, nil, csUTF16LE},
		{63, nil, csBinary},
		{1032, nil, csLatin1},
		{255, nil, csUTF8},         // utf8mb4_0900_ai_ci
		{24, nil, csUnsupported},   // gb2312_chinese_ci
		{9999, nil, csUnsupported}, // unknown: refused
	} {
		if got, _, _ := charsetOfCollation(tc.id, tc.server); got != tc.want {
			t.Errorf("collation %d (server table %v): %v, want %v", tc.id, tc.server != nil, got, tc.want)
		}
	}
}

// TestBuildDescCharsets: with FULL metadata the table map's collation ids decide each text
// column's conversion; a charset outboxd cannot convert is a final error naming the column.
func TestBuildDescCharsets(t *testing.T) {
	tm := func(colls ...uint64) *replication.TableMapEvent {
		return &replication.TableMapEvent{Schema: []byte("app"), Table: []byte("outbox"), ColumnCount: 3,
			ColumnType: []byte{gomysql.MYSQL_TYPE_LONG, gomysql.MYSQL_TYPE_VARCHAR, gomysql.MYSQL_TYPE_VARCHAR},
			ColumnMeta: []uint16{0, 80, 40}, ColumnName: [][]byte{[]byte("id"), []byte("agg"), []byte("note")},
			ColumnCharset: colls}
	}
	d, err := buildDesc("app.outbox", tm(54, 8), nil, -1, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.cols[1].charset != csUTF16 || d.cols[2].charset != csLatin1 || d.cols[0].charset != csUTF8 {
		t.Fatalf("charsets %v %v %v", d.cols[0].charset, d.cols[1].charset, d.cols[2].charset)
	}
	v, err := decodeValue(&d.cols[1], "\x00K\x00\xe9")
	if err != nil || string(v.Bytes) != "Ké" {
		t.Fatalf("utf16 value %q %v", v.Bytes, err)
	}
	_, err = buildDesc("app.outbox", tm(54, 24), nil, -1, true, nil) // gb2312
	if err == nil || !strings.Contains(err.Error(), "column note is in character set gb2312") || !errors.Is(err, source.ErrPositionLost) {
		t.Fatalf("gb2312 column: %v", err)
	}
	// The server's own collation table wins over the static one.
	if _, err = buildDesc("app.outbox", tm(54, 8), nil, -1, true, map[uint64]string{54: "utf16", 8: "sjis"}); err == nil {
		t.Fatal("a collation the server calls sjis was accepted")
	}
}
