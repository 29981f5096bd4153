package mysql

import (
	"strings"
	"testing"

	"github.com/outboxd/outboxd/source"
)

func TestParsePosition(t *testing.T) {
	for _, tc := range []struct {
		in   source.Position
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
	for _, bad := range []source.Position{"0/16B3748", "0-1", "0-1-42,0-2-43", "file:", "file:-1", "a b:3", "3e11fa47-71ca-11e1-9e33-c80aa9429562:x"} {
		if _, err := parsePosition(bad); err == nil {
			t.Errorf("parsePosition(%q) accepted", bad)
		}
	}
}

func TestComparePosition(t *testing.T) {
	const u = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	for _, tc := range []struct {
		a, b source.Position
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

func TestParsePositionOrigin(t *testing.T) {
	const u = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	for _, tc := range []struct {
		in        source.Position
		kind      posKind
		core, out string
		want      origin
	}{
		{"0-1-42;binlog=mysql-bin.000003:1234;server_id=1", kindMariaGTID, "0-1-42", "0-1-42;binlog=mysql-bin.000003:1234;server_id=1",
			origin{serverID: "1", binlog: "mysql-bin.000003", binlogPos: 1234}},
		// fields in any order, spaces tolerated; the text is rendered in canonical order
		{" 1-2-7,0-1-42 ; server_id=9;binlog=mysql-bin.000010 ", kindMariaGTID, "0-1-42,1-2-7", "0-1-42,1-2-7;binlog=mysql-bin.000010;server_id=9",
			origin{serverID: "9", binlog: "mysql-bin.000010"}},
		{"mysql-bin.000003:1234;server_id=1", kindFile, "mysql-bin.000003:1234", "mysql-bin.000003:1234;server_id=1", origin{serverID: "1"}},
		{source.Position(u + ":1-42;binlog=binlog.000002:77;server_uuid=" + strings.ToUpper(u)), kindMySQLGTID, u + ":1-42",
			u + ":1-42;binlog=binlog.000002:77;server_uuid=" + u, origin{serverUUID: u, binlog: "binlog.000002", binlogPos: 77}},
		{"0-1-42", kindMariaGTID, "0-1-42", "0-1-42", origin{}}, // the older form
	} {
		p, err := parsePosition(tc.in)
		if err != nil {
			t.Errorf("parsePosition(%q): %v", tc.in, err)
			continue
		}
		if p.kind != tc.kind || p.coreString() != tc.core || p.String() != tc.out || p.origin != tc.want {
			t.Errorf("parsePosition(%q) = %v core %q text %q origin %+v; want %v %q %q %+v", tc.in, p.kind, p.coreString(), p.String(), p.origin,
				tc.kind, tc.core, tc.out, tc.want)
		}
		// The text round-trips.
		q, err := parsePosition(source.Position(p.String()))
		if err != nil || q.String() != p.String() {
			t.Errorf("round trip of %q: %q %v", p.String(), q.String(), err)
		}
	}
	for _, bad := range []source.Position{
		";server_id=1",                               // no core
		"0-1-42;",                                    // empty field
		"0-1-42;server_id",                           // not key=value
		"0-1-42;server_id=x",                         // not a number
		"0-1-42;server_id=1;server_id=2",             // twice
		"0-1-42;host=db1",                            // unknown key
		"0-1-42;server_id=1;server_uuid=" + u,        // two identities
		"0-1-42;server_uuid=nope",                    // not a uuid
		"0-1-42;binlog=mysql-bin.000003:0",           // offset 0
		"0-1-42;binlog=mysql-bin.000003:x",           // offset not a number
		"0-1-42;binlog=a/b.000001:4",                 // path
		"mysql-bin.000003:4;binlog=mysql-bin.000003", // binlog= on a file position
		"0-1;server_id=1",                            // bad core
	} {
		if p, err := parsePosition(bad); err == nil {
			t.Errorf("parsePosition(%q) accepted: %+v", bad, p)
		}
	}
}

func TestComparePositionIgnoresOrigin(t *testing.T) {
	for _, tc := range []struct {
		a, b source.Position
		want int
	}{
		{"0-1-42", "0-1-42;binlog=mysql-bin.000003:1234;server_id=1", 0},
		{"0-1-42;binlog=mysql-bin.000003:1234;server_id=1", "0-1-43;binlog=mysql-bin.000003:1500;server_id=1", -1},
		{"0-1-44;binlog=mysql-bin.000004:300;server_id=1", "0-1-43", 1},
		{"mysql-bin.000003:1234;server_id=1", "mysql-bin.000003:1234", 0},
		{"mysql-bin.000009:99999;server_id=1", "mysql-bin.000010:4;server_id=1", -1},
		{"", "0-1-1;server_id=1", -1},
	} {
		if got := ComparePosition(tc.a, tc.b); got != tc.want {
			t.Errorf("ComparePosition(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestParseStart(t *testing.T) {
	for in, want := range map[string]startMode{"": startUnset, "current": startCurrent, " Earliest ": startEarliest,
		"0-1-42": startAt, "mysql-bin.000003:4;server_id=1": startAt} {
		s, err := parseStart(in)
		if err != nil || s.mode != want {
			t.Errorf("parseStart(%q) = %v %v, want %v", in, s.mode, err, want)
		}
	}
	for _, bad := range []string{"latest", "now", "0-1", "beginning"} {
		if err := ValidStart(bad); err == nil || !strings.Contains(err.Error(), "source.mysql.start") {
			t.Errorf("ValidStart(%q) = %v", bad, err)
		}
	}
}
