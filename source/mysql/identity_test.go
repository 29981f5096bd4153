package mysql

import (
	"errors"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/source"
)

// TestJudgeStart: the decision whether a start position belongs to the server's binlog, from
// the facts read about it (see checkStart).
func TestJudgeStart(t *testing.T) {
	const u1, u2 = "3e11fa47-71ca-11e1-9e33-c80aa9429562", "4e11fa47-71ca-11e1-9e33-c80aa9429562"
	maria := serverInfo{mariadb: true, serverID: "1", version: "10.11.19-MariaDB"}
	mysql := serverInfo{serverID: "1", serverUUID: u1, version: "8.0.36"}
	logs := []binlogFile{{"mysql-bin.000002", 5000}, {"mysql-bin.000003", 900}}
	// A healthy MariaDB: the stored 0-1-42 ended at mysql-bin.000003:700, the server is at 0-1-50.
	ok := startFacts{info: maria, logs: logs, boundary: true, atPosKnown: true, gtidAtPos: "0-1-42",
		binlogState: "0-1-50", binlogEnd: "0-1-50"}
	with := func(f startFacts, edit func(*startFacts)) startFacts { edit(&f); return f }
	for _, tc := range []struct {
		name  string
		pos   source.Position
		facts startFacts
		want  string // "" = accepted; else a part of the refusal
	}{
		{"servable", "0-1-42;binlog=mysql-bin.000003:700;server_id=1", ok, ""},
		{"older form, consistent GTIDs", "0-1-42", with(ok, func(f *startFacts) { f.atPosKnown = false }), ""},
		{"another domain behind (set by hand)", "0-1-42,1-1-3;binlog=mysql-bin.000003:700;server_id=1",
			with(ok, func(f *startFacts) {
				f.gtidAtPos = "0-1-42,1-1-9"
				f.binlogState = "0-1-50,1-1-9"
				f.binlogEnd = "0-1-50,1-1-9"
			}), ""},
		{"file purged: left to the purge check", "0-1-42;binlog=mysql-bin.000001:700;server_id=1",
			with(ok, func(f *startFacts) { f.atPosKnown, f.boundary = false, false }), ""},
		{"another server_id", "0-1-42;binlog=mysql-bin.000003:700;server_id=2", ok, "server_id 2, but source.dsn reaches server_id 1"},
		{"MariaDB position on MySQL", "mysql-bin.000003:700;server_id=1", startFacts{info: mysql, logs: logs, boundary: true}, "MariaDB server with server_id 1"},
		{"another server_uuid", source.Position(u1 + ":1-42;binlog=mysql-bin.000003:700;server_uuid=" + u2),
			startFacts{info: mysql, logs: logs, boundary: true, executed: u1 + ":1-50"}, "server_uuid " + u2},
		{"RESET MASTER, numbering restarted", "0-1-42;binlog=mysql-bin.000007:700;server_id=1",
			with(ok, func(f *startFacts) { f.atPosKnown, f.boundary = false, false }), "numbering restarted"},
		{"RESET MASTER, file too short", "0-1-42;binlog=mysql-bin.000003:7000;server_id=1",
			with(ok, func(f *startFacts) { f.atPosKnown, f.boundary = false, false }), "only 900 bytes long"},
		{"RESET MASTER, not a boundary", "0-1-42;binlog=mysql-bin.000003:700;server_id=1",
			with(ok, func(f *startFacts) { f.atPosKnown, f.boundary = false, false }), "not an event boundary"},
		{"RESET MASTER, other transaction at the offset", "0-1-42;binlog=mysql-bin.000003:700;server_id=1",
			with(ok, func(f *startFacts) { f.gtidAtPos = "0-1-9" }), `GTID position "0-1-9", not the stored 0-1-42`},
		{"RESET MASTER, nothing written since", "0-1-42",
			with(ok, func(f *startFacts) { f.binlogState, f.binlogEnd = "", "" }), "no GTIDs of domain 0"},
		{"restored from an older backup", "0-1-42",
			with(ok, func(f *startFacts) { f.binlogState, f.binlogEnd = "0-1-30", "0-1-30" }), "ends at GTID 0-1-30"},
		{"GTID of a server that never wrote here", "0-3-42",
			with(ok, func(f *startFacts) { f.binlogState, f.binlogEnd = "0-1-50", "0-1-50" }), "never had GTID 0-3-42"},
		{"MySQL: executed lacks the stored set", source.Position(u1 + ":1-42;binlog=mysql-bin.000003:700;server_uuid=" + u1),
			startFacts{info: mysql, logs: logs, boundary: true, executed: u1 + ":1-8"}, "gtid_executed"},
		{"MySQL: servable", source.Position(u1 + ":1-42;binlog=mysql-bin.000003:700;server_uuid=" + u1),
			startFacts{info: mysql, logs: logs, boundary: true, executed: u1 + ":1-50"}, ""},
		{"failover history: two server ids in the domain", "0-1-42;binlog=mysql-bin.000003:700;server_id=1",
			with(ok, func(f *startFacts) { f.binlogState, f.binlogEnd = "0-1-50,0-2-60", "0-2-60" }), ""},
		{"failover history: a GTID of the other server id", "0-2-55",
			with(ok, func(f *startFacts) { f.binlogState, f.binlogEnd = "0-1-50,0-2-60", "0-2-60" }), ""},
		{"failover history: a server id that never wrote", "0-3-55",
			with(ok, func(f *startFacts) { f.binlogState, f.binlogEnd = "0-1-50,0-2-60", "0-2-60" }), "never had GTID 0-3-55"},
		{"file position, not a boundary", "mysql-bin.000003:700;server_id=1", startFacts{info: maria, logs: logs}, "not an event boundary"},
		{"file position, servable", "mysql-bin.000003:700;server_id=1", startFacts{info: maria, logs: logs, boundary: true}, ""},
	} {
		p, err := parsePosition(tc.pos)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		err = judgeStart(p, tc.facts)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.want != "" && err == nil:
			t.Errorf("%s: accepted, want a refusal with %q", tc.name, tc.want)
		case tc.want != "":
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "offsets set") {
				t.Errorf("%s: refusal lacks %q or the fix: %v", tc.name, tc.want, err)
			}
			if !errors.Is(err, source.ErrPositionLost) {
				t.Errorf("%s: refusal does not wrap ErrPositionLost (the pipeline would retry it): %v", tc.name, err)
			}
		}
	}
}

func TestParseGTIDState(t *testing.T) {
	for in, want := range map[string]string{"": "", "0-1-5": "0-1-5", "0-1-50,0-2-60": "0-2-60", "0-2-60, 0-1-50,1-1-3": "0-2-60,1-1-3", " 0-1-4 ": "0-1-4"} {
		g, err := parseGTIDState(in)
		if err != nil || g.String() != want {
			t.Errorf("parseGTIDState(%q) = %q %v, want %q", in, g, err, want)
		}
	}
	if _, err := parseGTIDState("0-1"); err == nil {
		t.Error("parseGTIDState accepted 0-1")
	}
}
