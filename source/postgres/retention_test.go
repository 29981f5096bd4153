package postgres

import (
	"errors"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"1GB": 1 << 30, "1.5GB": 3 << 29, "512MB": 512 << 20, "64kB": 64 << 10, "100B": 100,
		"2TB": 2 << 40, " 2 GB ": 2 << 30, "0MB": 0, "+3MB": 3 << 20, ".5GB": 1 << 29,
	} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for in, msg := range map[string]string{
		"12XB": `unknown unit "XB"`, "-1GB": "is negative", "1gb": `unknown unit "gb"`, "1KB": `unknown unit "KB"`,
		"10": "has no unit", "": "is not a size", "GB": "is not a size", "1e3GB": `unknown unit "e3GB"`,
		"NaNGB": "is not a size", "InfGB": "is not a size", "0x10MB": "unknown unit", "99999999999TB": "too large",
		"1.2.3GB": "is not a size", "--1GB": "is not a size",
	} {
		if got, err := ParseSize(in); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseSize(%q) = %d, %v; want an error with %q", in, got, err, msg)
		}
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{1 << 30: "1GB", 3 << 29: "1.5GB", 640 << 20: "640MB", 1023: "1023B",
		0: "0B", -(5 << 20): "-5MB", 1 << 40: "1TB", 1536: "1.5kB"} {
		if got := formatSize(n); got != want {
			t.Errorf("formatSize(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestRetentionSettings: source.postgres.min_safe_wal_size and failover_slot are validated
// (a SettingError naming the key) and reach the Config.
func TestRetentionSettings(t *testing.T) {
	base := Settings{DSN: "postgres://u@h/db", Tables: []string{"public.outbox"}}
	for _, c := range []struct{ min, failover, key, msg string }{
		{"12XB", "", "source.postgres.min_safe_wal_size", `"12XB": unknown unit "XB"`},
		{"-1GB", "", "source.postgres.min_safe_wal_size", "is negative"},
		{"0GB", "", "source.postgres.min_safe_wal_size", "must be positive"},
		{"10", "", "source.postgres.min_safe_wal_size", "has no unit"},
		{"1gb", "", "source.postgres.min_safe_wal_size", "use B, kB, MB, GB or TB (PostgreSQL's units, case-sensitive"},
		{"", "maybe", "source.postgres.failover_slot", `"maybe" is not one of auto | on | off`},
		{"", "true", "source.postgres.failover_slot", "is not one of auto | on | off"},
		{"", "ON", "source.postgres.failover_slot", "is not one of auto | on | off"},
	} {
		s := base
		s.MinSafeWALSize, s.FailoverSlot = c.min, c.failover
		err := NewAdapter(s, nil).Validate()
		var se *SettingError
		if !errors.As(err, &se) || se.Key != c.key || !strings.Contains(se.Msg, c.msg) {
			t.Errorf("min %q failover %q: %v, want %s: %s", c.min, c.failover, err, c.key, c.msg)
		}
	}
	for _, c := range []struct {
		min, failover string
		want          int64
	}{{"", "", 0}, {"2GB", "auto", 2 << 30}, {"512MB", "on", 512 << 20}, {"1TB", "off", 1 << 40}} {
		s := base
		s.MinSafeWALSize, s.FailoverSlot = c.min, c.failover
		a := NewAdapter(s, nil)
		if err := a.Validate(); err != nil {
			t.Errorf("min %q failover %q: %v", c.min, c.failover, err)
		}
		if cfg := a.Config(); cfg.MinSafeWALSize != c.want || cfg.FailoverSlot != c.failover {
			t.Errorf("min %q failover %q: Config has %d %q", c.min, c.failover, cfg.MinSafeWALSize, cfg.FailoverSlot)
		}
	}
}

func retPtr[T any](v T) *T { return &v }

// line finds the check line named name.
func retLine(res []CheckResult, name string) (CheckResult, bool) {
	for _, r := range res {
		if r.Name == name {
			return r, true
		}
	}
	return CheckResult{}, false
}

// lineState is "OK", "WARN" or "FAIL".
func retState(r CheckResult) string {
	switch {
	case r.OK && r.Warn:
		return "WARN"
	case r.OK:
		return "OK"
	}
	return "FAIL"
}

// TestRetentionLines: the decision over read facts, each line's state and the words its
// reason and fix must carry.
func TestRetentionLines(t *testing.T) {
	const keep, safe, status = "max_slot_wal_keep_size", "slot s safe_wal_size", "slot s wal_status"
	gb := int64(1 << 30)
	type want struct{ name, state, words string } // words: |-separated, in reason + fix
	for _, c := range []struct {
		what string
		f    retentionFacts
		want []want
	}{
		{"unlimited, no slot", retentionFacts{vnum: 150010, keepMB: -1, keepText: "-1", slot: "s", min: gb},
			[]want{{keep, "WARN", "-1 (unlimited)|disk fills|ALTER SYSTEM SET max_slot_wal_keep_size = '<n>GB'|SELECT pg_reload_conf()|DB parameter group|Cloud SQL as a database flag|Azure|server parameter|wal_status lost"}}},
		{"unlimited, slot reserved (safe_wal_size NULL)", retentionFacts{vnum: 150010, keepMB: -1, keepText: "-1", slot: "s", exists: true, status: "reserved", min: gb},
			[]want{{keep, "WARN", "-1 (unlimited)"}}},
		{"bounded, plenty", retentionFacts{vnum: 150010, keepMB: 10240, keepText: "10GB", slot: "s", exists: true, status: "reserved", safe: retPtr(5 * gb), min: gb},
			[]want{{keep, "OK", "10GB"}, {safe, "OK", "5GB|1GB"}}},
		{"bounded, below the threshold", retentionFacts{vnum: 160004, keepMB: 1024, keepText: "1GB", slot: "s", exists: true, status: "reserved", safe: retPtr(gb / 2), min: gb},
			[]want{{keep, "OK", "1GB"}, {safe, "WARN", "512MB|below source.postgres.min_safe_wal_size 1GB|lost|raise max_slot_wal_keep_size|free the lag"}}},
		{"bounded, slot absent", retentionFacts{vnum: 150010, keepMB: 1024, keepText: "1GB", slot: "s", min: gb},
			[]want{{keep, "OK", "1GB"}}},
		{"unlimited, extended", retentionFacts{vnum: 150010, keepMB: -1, keepText: "-1", slot: "s", exists: true, status: "extended", min: gb},
			[]want{{keep, "WARN", "-1"}, {status, "WARN", "extended|max_wal_size|catch up"}}},
		{"bounded, unreserved", retentionFacts{vnum: 150010, keepMB: 1024, keepText: "1GB", slot: "s", exists: true, status: "unreserved", safe: retPtr(-gb / 4), min: gb},
			[]want{{keep, "OK", "1GB"}, {safe, "WARN", "-256MB"}, {status, "WARN", "unreserved|next checkpoint|raise max_slot_wal_keep_size"}}},
		{"lost: the slot line FAILs, nothing more here", retentionFacts{vnum: 150010, keepMB: 1024, keepText: "1GB", slot: "s", exists: true, status: "lost", min: gb},
			[]want{{keep, "OK", "1GB"}}},
		{"PostgreSQL 12", retentionFacts{vnum: 120010, slot: "s", exists: true, min: gb},
			[]want{{keep, "WARN", "PostgreSQL 12 has no max_slot_wal_keep_size|upgrade"}}},
	} {
		got := retentionLines(c.f)
		if len(got) != len(c.want) {
			t.Errorf("%s: %d lines %+v, want %d", c.what, len(got), got, len(c.want))
			continue
		}
		for i, w := range c.want {
			r := got[i]
			if r.Name != w.name || retState(r) != w.state {
				t.Errorf("%s: line %d is %s %s, want %s %s", c.what, i, retState(r), r.Name, w.state, w.name)
			}
			if w.state == "WARN" && r.Fix == "" {
				t.Errorf("%s: %s WARN has no fix", c.what, r.Name)
			}
			for _, word := range strings.Split(w.words, "|") {
				if !strings.Contains(r.Reason+" — "+r.Fix, word) {
					t.Errorf("%s: %s %q — %q lacks %q", c.what, r.Name, r.Reason, r.Fix, word)
				}
			}
		}
	}
}
