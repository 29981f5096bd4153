package mysql

import (
	"testing"

	"github.com/outboxd/outboxd/offsets"
)

func TestParsePosition(t *testing.T) {
	for _, tc := range []struct {
		in   offsets.Position
		kind posKind
		out  string
	}{
		{"", kindNone, ""},
		{"mysql-bin.000003:1234", kindFile, "mysql-bin.000003:1234"},
		{"binlog.000001:4", kindFile, "binlog.000001:4"},
		{"0-1-42", kindMariaGTID, "0-1-42"},
		{"1-2-7,0-1-42", kindMariaGTID, "0-1-42,1-2-7"},
		{"3E11FA47-71CA-11E1-9E33-C80AA9429562:1-42", kindMySQLGTID, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-42"},
		{"3e11fa47-71ca-11e1-9e33-c80aa9429562:7", kindMySQLGTID, "3e11fa47-71ca-11e1-9e33-c80aa9429562:7"},
		{"3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7-9,\n4e11fa47-71ca-11e1-9e33-c80aa9429562:1", kindMySQLGTID,
			"3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7-9,4e11fa47-71ca-11e1-9e33-c80aa9429562:1"},
	} {
		p, err := parsePosition(tc.in)
		if err != nil {
			t.Errorf("parsePosition(%q): %v", tc.in, err)
			continue
		}
		if p.kind != tc.kind || p.String() != tc.out {
			t.Errorf("parsePosition(%q) = %v %q, want %v %q", tc.in, p.kind, p.String(), tc.kind, tc.out)
		}
	}
	for _, bad := range []offsets.Position{"0/16B3748", "0-1", "0-1-42,0-2-43", "file:", "file:-1", "a b:3", "3e11fa47-71ca-11e1-9e33-c80aa9429562:x"} {
		if _, err := parsePosition(bad); err == nil {
			t.Errorf("parsePosition(%q) accepted", bad)
		}
	}
}

func TestComparePosition(t *testing.T) {
	const u = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	for _, tc := range []struct {
		a, b offsets.Position
		want int
	}{
		{"mysql-bin.000003:1234", "mysql-bin.000003:1234", 0},
		{"mysql-bin.000003:1234", "mysql-bin.000003:99999", -1},
		{"mysql-bin.000009:99999", "mysql-bin.000010:4", -1},
		{"mysql-bin.000010:4", "mysql-bin.000009:99999", 1},
		{"0-1-42", "0-1-43", -1},
		{"0-1-43", "0-2-42", 1}, // another server id after a failover: the sequence decides
		{"0-1-9", "0-1-10", -1},
		{"0-1-42,1-1-5", "0-1-42,1-1-6", -1},
		{"0-1-42", "0-1-42,1-1-1", -1},
		{"0-1-42,1-1-5", "0-1-41,1-1-9", -1}, // not nested: by sum
		{u + ":1-42", u + ":1-43", -1},
		{u + ":1-43", u + ":1-42", 1},
		{u + ":1-42", u + ":1-42", 0},
		{"", "0-1-1", -1},
		{"0-1-1", "", 1},
	} {
		if got := ComparePosition(tc.a, tc.b); got != tc.want {
			t.Errorf("ComparePosition(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestMariaGTIDsSet(t *testing.T) {
	p, _ := parsePosition("0-1-5,2-1-7")
	g := p.maria.set(p.maria[0])
	g = g.set(g[1])
	g = g.set(g[0])
	if g.String() != "0-1-5,2-1-7" {
		t.Fatal(g)
	}
	g = g.set(g[0])
	g2, _ := parsePosition("1-3-1")
	g = g.set(g2.maria[0])
	if g.String() != "0-1-5,1-3-1,2-1-7" {
		t.Fatal(g)
	}
}
