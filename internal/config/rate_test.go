package config

import "testing"

func TestParseRate(t *testing.T) {
	for in, want := range map[string]Rate{"": {}, "2/5": {Max: 2, Window: 5}, " 0 / 1 ": {Max: 0, Window: 1}, "99/100": {Max: 99, Window: 100}} {
		if got, err := ParseRate(in); err != nil || got != want {
			t.Errorf("ParseRate(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"x", "5", "5/5", "-1/3", "1/0", "a/b", "1/2/3"} {
		if _, err := ParseRate(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
