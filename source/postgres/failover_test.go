package postgres

import (
	"errors"
	"strings"
	"testing"
)

// TestFailoverWanted: the version gate of source.postgres.failover_slot.
func TestFailoverWanted(t *testing.T) {
	for _, c := range []struct {
		setting string
		vnum    int
		standby bool
		want    bool
		err     string
	}{
		{"", 150010, false, false, ""},
		{"auto", 160004, false, false, ""},
		{"auto", 170000, false, true, ""},
		{"", 180001, false, true, ""},
		{"auto", 170002, true, false, ""}, // PostgreSQL refuses FAILOVER on a standby
		{"off", 170002, false, false, ""},
		{"off", 150010, false, false, ""},
		{"on", 170000, false, true, ""},
		{"on", 169999, false, false, "source.postgres.failover_slot is on, but the server is PostgreSQL 16.9999: failover slots need PostgreSQL 17 or later"},
		{"on", 150010, false, false, "PostgreSQL 15.10: failover slots need PostgreSQL 17 or later: set source.postgres.failover_slot: auto"},
		{"on", 170002, true, false, "source.postgres.failover_slot is on, but the server is a standby"},
		{"yes", 170002, false, false, `source.postgres.failover_slot "yes" is not one of auto | on | off`},
	} {
		got, err := failoverWanted(c.setting, c.vnum, c.standby)
		if c.err == "" && (err != nil || got != c.want) {
			t.Errorf("%q on %d standby %v: %v, %v; want %v", c.setting, c.vnum, c.standby, got, err, c.want)
		}
		var ref *failoverRefusal
		if c.err != "" && (!errors.As(err, &ref) || !strings.Contains(err.Error(), c.err) || got) {
			t.Errorf("%q on %d standby %v: %v, %v; want the error %q", c.setting, c.vnum, c.standby, got, err, c.err)
		}
	}
}

// TestCreateSlotCommand: the exact replication commands (PostgreSQL 17's
// CREATE_REPLICATION_SLOT name LOGICAL plugin (SNAPSHOT ..., FAILOVER true); the keywords
// before 15, as pglogrepl sends them).
func TestCreateSlotCommand(t *testing.T) {
	for _, c := range []struct {
		vnum             int
		export, failover bool
		want             string
	}{
		{130010, false, false, `CREATE_REPLICATION_SLOT outboxd LOGICAL pgoutput NOEXPORT_SNAPSHOT`},
		{140011, true, false, `CREATE_REPLICATION_SLOT outboxd LOGICAL pgoutput EXPORT_SNAPSHOT`},
		{150010, false, false, `CREATE_REPLICATION_SLOT "outboxd" LOGICAL pgoutput (SNAPSHOT 'nothing')`},
		{150010, true, false, `CREATE_REPLICATION_SLOT "outboxd" LOGICAL pgoutput (SNAPSHOT 'export')`},
		{170002, false, true, `CREATE_REPLICATION_SLOT "outboxd" LOGICAL pgoutput (SNAPSHOT 'nothing', FAILOVER true)`},
		{170002, true, true, `CREATE_REPLICATION_SLOT "outboxd" LOGICAL pgoutput (SNAPSHOT 'export', FAILOVER true)`},
		{170002, true, false, `CREATE_REPLICATION_SLOT "outboxd" LOGICAL pgoutput (SNAPSHOT 'export')`},
	} {
		if got := createSlotCommand("outboxd", c.vnum, c.export, c.failover); got != c.want {
			t.Errorf("%d export %v failover %v: %s, want %s", c.vnum, c.export, c.failover, got, c.want)
		}
	}
	if got, want := alterSlotCommand("outboxd", true), `ALTER_REPLICATION_SLOT "outboxd" (FAILOVER true)`; got != want {
		t.Errorf("alter: %s, want %s", got, want)
	}
	if got, want := alterSlotCommand("outboxd", false), `ALTER_REPLICATION_SLOT "outboxd" (FAILOVER false)`; got != want {
		t.Errorf("alter: %s, want %s", got, want)
	}
}

func TestParseSlotList(t *testing.T) {
	for in, want := range map[string]string{"": "", "a": "a", " a , b ": "a|b", `"sb1", sb2`: "sb1|sb2", ",,a,": "a"} {
		if got := strings.Join(parseSlotList(in), "|"); got != want {
			t.Errorf("parseSlotList(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestFailoverLines: the check lines decided from (version, setting, slot facts,
// synchronized_standby_slots).
func TestFailoverLines(t *testing.T) {
	const fo, sss = "slot s failover", "synchronized_standby_slots"
	phys := map[string]string{"standby1": "reserved", "old": "lost"}
	type want struct{ name, state, words string }
	for _, c := range []struct {
		what string
		f    failoverFacts
		want []want
	}{
		{"15 auto", failoverFacts{vnum: 150010, slot: "s"}, []want{{fo, "OK", "auto|PostgreSQL 15.10 has no failover slots (they need 17+)|normal"}}},
		{"15 on", failoverFacts{vnum: 150010, setting: "on", slot: "s"}, []want{{fo, "FAIL", "source.postgres.failover_slot is on|17 or later|auto"}}},
		{"15 off", failoverFacts{vnum: 150010, setting: "off", slot: "s", exists: true}, []want{{fo, "OK", "off|need 17+"}}},
		{"17 auto absent, synchronized_standby_slots empty", failoverFacts{vnum: 170002, slot: "s", physical: phys},
			[]want{{fo, "OK", "will be created as a failover slot|FAILOVER true"},
				{sss, "WARN", "is empty|ahead of the standby|resync|ALTER SYSTEM SET synchronized_standby_slots|pg_reload_conf|sync_replication_slots = on|hot_standby_feedback = on|primary_slot_name|dbname in primary_conninfo|physical slots on this server: old, standby1"}}},
		{"17 on exists failover, names standby1", failoverFacts{vnum: 170002, setting: "on", slot: "s", exists: true, failover: true, synced: []string{"standby1"}, physical: phys},
			[]want{{fo, "OK", "a failover slot, as source.postgres.failover_slot: on asks"}, {sss, "OK", "names standby1|flushed"}}},
		{"17 auto exists without failover", failoverFacts{vnum: 170002, slot: "s", exists: true, synced: []string{"standby1"}, physical: phys},
			[]want{{fo, "WARN", `not a failover slot|does not change an existing slot|ALTER_REPLICATION_SLOT "s" (FAILOVER true)|replication=database|stop outboxd|failover_slot: off`}}},
		{"17 off exists with failover", failoverFacts{vnum: 170002, setting: "off", slot: "s", exists: true, failover: true},
			[]want{{fo, "WARN", `is a failover slot, but source.postgres.failover_slot is off|ALTER_REPLICATION_SLOT "s" (FAILOVER false)`},
				{sss, "WARN", "is empty|no physical slot exists on this server"}}},
		{"17 off absent", failoverFacts{vnum: 170002, setting: "off", slot: "s"}, []want{{fo, "OK", "normal one"}}},
		{"17 off exists without failover", failoverFacts{vnum: 170002, setting: "off", slot: "s", exists: true}, []want{{fo, "OK", "not a failover slot, as source.postgres.failover_slot: off asks"}}},
		{"17 names missing, logical and lost slots", failoverFacts{vnum: 170002, slot: "s", synced: []string{"standby1", "gone", "other", "old"}, physical: phys, logical: map[string]bool{"other": true}},
			[]want{{fo, "OK", "will be created"}, {sss, "WARN", "gone (no such slot)|other (a logical slot|old (invalidated: wal_status lost)|receives nothing|remove the name"}}},
		{"17 standby auto", failoverFacts{vnum: 170002, slot: "s", standby: true}, []want{{fo, "OK", "standby|normal one"}}},
		{"17 standby on", failoverFacts{vnum: 170002, setting: "on", slot: "s", standby: true}, []want{{fo, "FAIL", "standby|primary"}}},
	} {
		got := failoverLines(c.f)
		if len(got) != len(c.want) {
			t.Errorf("%s: %d lines %+v, want %d", c.what, len(got), got, len(c.want))
			continue
		}
		for i, w := range c.want {
			r := got[i]
			if r.Name != w.name || retState(r) != w.state {
				t.Errorf("%s: line %d is %s %s, want %s %s", c.what, i, retState(r), r.Name, w.state, w.name)
			}
			if w.state != "OK" && r.Fix == "" {
				t.Errorf("%s: %s %s has no fix", c.what, w.state, r.Name)
			}
			for _, word := range strings.Split(w.words, "|") {
				if !strings.Contains(r.Reason+" — "+r.Fix, word) {
					t.Errorf("%s: %s %q — %q lacks %q", c.what, r.Name, r.Reason, r.Fix, word)
				}
			}
		}
	}
}
