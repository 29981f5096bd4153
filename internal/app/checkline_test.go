package app

import "testing"

// TestCheckLineFormats: the three line kinds of `outboxd check` (interface.md: `OK name` or
// `FAIL name: reason — how to fix`; issue 17 adds WARN: an OK check with a fix).
func TestCheckLineFormats(t *testing.T) {
	for _, tc := range []struct {
		r    CheckResult
		want string
	}{
		{CheckResult{Name: "wal_level", OK: true}, "OK   wal_level"},
		{CheckResult{Name: "wal_level", OK: true, Reason: "logical"}, "OK   wal_level (logical)"},
		{CheckResult{Name: "max_slot_wal_keep_size", OK: true, Reason: "is -1", Fix: "set it"}, "WARN max_slot_wal_keep_size: is -1 — set it"},
		{CheckResult{Name: "wal_level", Reason: "is replica", Fix: "set logical"}, "FAIL wal_level: is replica — set logical"},
	} {
		if got := tc.r.String(); got != tc.want {
			t.Errorf("%+v: got %q, want %q", tc.r, got, tc.want)
		}
	}
}
