package mysql

import (
	"context"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outboxd/outboxd/source"
)

func TestScanTemporalText(t *testing.T) {
	for _, c := range []struct {
		in   string
		fsp  int
		time bool
		want string
	}{
		{"2024-01-02 03:04:05", 3, false, "2024-01-02 03:04:05.000"},
		{"2024-01-02 03:04:05.123456", 3, false, "2024-01-02 03:04:05.123"},
		{"2024-01-02 03:04:05.120000", 0, false, "2024-01-02 03:04:05"},
		{"0000-00-00 00:00:00", 6, false, "0000-00-00 00:00:00.000000"},
		{"2024-01-02 00:00:00", 0, false, "2024-01-02 00:00:00"},
		{"12:00:00", 2, true, "12:00:00"},
		{"12:00:00.000000", 2, true, "12:00:00"},
		{"-00:00:00.500000", 2, true, "-00:00:00.50"},
		{"838:59:59.900000", 1, true, "838:59:59.9"},
		{"00:00:00", 0, true, "00:00:00"},
	} {
		f := normDateTime
		if c.time {
			f = normTime
		}
		v, err := f([]byte(c.in), c.fsp)
		if err != nil || string(v.Bytes) != c.want {
			t.Errorf("%q fsp %d: %q, %v; want %q", c.in, c.fsp, v.Bytes, err, c.want)
		}
	}
	for _, bad := range []string{"2024-01-02", "2024-01-02 03:04:05x123", "2024-01-02 03:04:05.1234567", "2024-01-02 03:04:05.12a"} {
		if _, err := normDateTime([]byte(bad), 3); err == nil {
			t.Errorf("normDateTime(%q) accepted", bad)
		}
	}
}

func TestScanValueForms(t *testing.T) {
	str := func(s string) gomysql.FieldValue {
		return gomysql.NewFieldValue(gomysql.FieldValueTypeString, 0, []byte(s))
	}
	latin1, _ := charsetByName("latin1")
	for _, c := range []struct {
		what string
		col  column
		dt   string
		v    gomysql.FieldValue
		want string
	}{
		{"BIT(12)", column{typ: gomysql.MYSQL_TYPE_BIT}, "bit", str("\x0a\xbc"), "2748"},
		{"BINARY(16) uuid", column{typ: gomysql.MYSQL_TYPE_STRING, length: 16, charset: csBinary}, "binary", str("\xaa\xbb" + strings.Repeat("\x00", 14)), "aabb0000-0000-0000-0000-000000000000"},
		{"BINARY(4) padded", column{typ: gomysql.MYSQL_TYPE_STRING, length: 4, charset: csBinary}, "binary", str("a"), "a\x00\x00\x00"},
		{"INET6", column{typ: gomysql.MYSQL_TYPE_STRING, length: 16, charset: csBinary}, "inet6", str("::1"), "00000000-0000-0000-0000-000000000001"},
		{"INET4", column{typ: gomysql.MYSQL_TYPE_STRING, length: 4, charset: csBinary}, "inet4", str("1.2.3.4"), "\x01\x02\x03\x04"},
		{"latin1", column{typ: gomysql.MYSQL_TYPE_VARCHAR, charset: latin1}, "varchar", str("\x80\xe9"), "€é"},
		{"empty", column{typ: gomysql.MYSQL_TYPE_VARCHAR}, "varchar", str(""), ""},
		{"unsigned as signed", column{typ: gomysql.MYSQL_TYPE_LONGLONG, unsigned: true}, "bigint",
			gomysql.NewFieldValue(gomysql.FieldValueTypeSigned, 1<<63, nil), "9223372036854775808"},
	} {
		got, err := scanValue(&c.col, c.dt, 0, &c.v)
		if err != nil || string(got.Bytes) != c.want || got.Bytes == nil {
			t.Errorf("%s: %q, %v; want %q", c.what, got.Bytes, err, c.want)
		}
	}
}

func TestScanSQL(t *testing.T) {
	rows := [][]string{
		{"id", "bigint", "bigint(20)", "NO", "19", "0", "0", "0", "", "1"},
		{"a`b", "datetime", "datetime(3)", "YES", "0", "0", "3", "0", "", "0"},
		{"kind", "varchar", "varchar(10)", "YES", "0", "0", "0", "40", "utf8mb4", "0"},
	}
	tb, err := scanTableFromRows("app.ob", tableKey{"app", "ob"}, rows)
	if err != nil {
		t.Fatal(err)
	}
	q := source.ScanQuery{Table: "app.ob", OrderBy: "A`B", TimeColumn: "a`b", Since: time.Date(2024, 1, 2, 3, 4, 5, 6000, time.FixedZone("x", 3600)), Where: "kind = 'x' -- c"}
	sql, args, err := tb.selectSQL(q)
	want := "SELECT `id`, `a``b`, `kind` FROM `app`.`ob` WHERE `a``b` >= ? AND (\nkind = 'x' -- c\n) ORDER BY `a``b`, `id`"
	if err != nil || sql != want || len(args) != 1 || args[0] != "2024-01-02 02:04:05.000006" {
		t.Errorf("selectSQL = %q %v %v\nwant %q [2024-01-02 02:04:05.000006]", sql, args, err, want)
	}
	if _, err := scanTableFromRows("app.x", tableKey{"app", "x"}, nil); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("no columns: %v", err)
	}
	rows[2][8] = "sjis"
	if _, err := scanTableFromRows("app.ob", tableKey{"app", "ob"}, rows); err == nil || !strings.Contains(err.Error(), "sjis") {
		t.Errorf("unsupported charset: %v", err)
	}
}

// FuzzScanValue: the scan's value conversions never panic on any bytes the server could send,
// and temporal text keeps its shape.
func FuzzScanValue(f *testing.F) {
	for _, s := range []string{"2024-01-02 03:04:05.123456", "-838:59:59.900000", "00:00:00", "::1", "\x01\x02", "0a1b2c3d-4e5f-4061-8273-94a5b6c7d8e9"} {
		f.Add([]byte(s), uint8(3))
	}
	cols := []struct {
		c  column
		dt string
	}{
		{column{typ: gomysql.MYSQL_TYPE_DATETIME2}, "datetime"},
		{column{typ: gomysql.MYSQL_TYPE_TIME2}, "time"},
		{column{typ: gomysql.MYSQL_TYPE_BIT}, "bit"},
		{column{typ: gomysql.MYSQL_TYPE_STRING, length: 16, charset: csBinary}, "uuid"},
		{column{typ: gomysql.MYSQL_TYPE_STRING, length: 16, charset: csBinary}, "inet6"},
		{column{typ: gomysql.MYSQL_TYPE_STRING, length: 4, charset: csBinary}, "inet4"},
		{column{typ: gomysql.MYSQL_TYPE_STRING, length: 16, charset: csBinary}, "binary"},
		{column{typ: gomysql.MYSQL_TYPE_VARCHAR, charset: csUTF16}, "varchar"},
		{column{typ: gomysql.MYSQL_TYPE_VARCHAR, charset: csLatin1}, "varchar"},
	}
	f.Fuzz(func(t *testing.T, b []byte, fsp uint8) {
		for _, c := range cols {
			v := gomysql.NewFieldValue(gomysql.FieldValueTypeString, 0, b)
			out, err := scanValue(&c.c, c.dt, int(fsp%8), &v)
			if err != nil {
				continue
			}
			if c.dt == "datetime" && int(fsp%8) <= 6 {
				if want := 19 + map[bool]int{true: 0, false: int(fsp%8) + 1}[fsp%8 == 0]; len(out.Bytes) != want {
					t.Fatalf("datetime %q fsp %d -> %q", b, fsp%8, out.Bytes)
				}
			}
		}
	})
}

// The method set of internal/app's scanner interface (outboxd republish picks the adapter by it).
var _ interface {
	ScanOutbox(ctx context.Context, q source.ScanQuery, fn func(rows []source.Row) error) error
	CountOutbox(ctx context.Context, q source.ScanQuery) (int64, error)
} = (*Adapter)(nil)
