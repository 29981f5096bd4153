package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseTime(t *testing.T) {
	for in, want := range map[string]time.Time{
		"2026-12-01":                       time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
		"2026-12-01T10:00:00Z":             time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC),
		"2026-12-01T10:00:00.5+02:00":      time.Date(2026, 12, 1, 8, 0, 0, 500000000, time.UTC),
		"2026-12-01T10:00:00.123456-01:30": time.Date(2026, 12, 1, 11, 30, 0, 123456000, time.UTC),
	} {
		got, err := parseTime(in)
		if err != nil || !got.Equal(want) {
			t.Errorf("parseTime(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "yesterday", "2026-12-01 10:00:00", "2026-13-01", "1733040000"} {
		if _, err := parseTime(in); err == nil || !strings.Contains(err.Error(), "RFC 3339") {
			t.Errorf("parseTime(%q): %v, want a refusal naming the forms", in, err)
		}
	}
}

// TestRepublishUsage: every flag mistake is exit 2 naming the flag, before any connection (the
// config's servers do not exist).
func TestRepublishUsage(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "outboxd.yaml")
	if err := os.WriteFile(cfg, []byte("source: {type: postgres, dsn: 'postgres://x@127.0.0.1:1/db', tables: [public.outbox]}\nkafka: {brokers: ['127.0.0.1:1']}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{nil, "need -c FILE"},
		{[]string{"-c", cfg, "--since", "soon"}, `invalid value "soon" for flag -since`},
		{[]string{"-c", cfg, "--until", "2026-01-01"}, "--until: needs --time-column"},
		{[]string{"-c", cfg, "--table", "public.other"}, `--table: "public.other" is not one of source.tables (public.outbox)`},
		{[]string{"-c", cfg, "--batch", "0"}, "--batch: 0"},
		{[]string{"-c", cfg, "--batch", "-5"}, "--batch: -5"},
		{[]string{"-c", cfg, "--since", "2026-01-02", "--until", "2026-01-02", "--time-column", "t"}, "--until: 2026-01-02T00:00:00Z is not after --since"},
		{[]string{"-c", cfg, "stray"}, "no other arguments"},
	} {
		var stdout, stderr strings.Builder
		if code := Main(append([]string{"republish"}, c.args...), &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), c.msg) {
			t.Errorf("republish %v: exit %d, want 2 with %q\n%s", c.args, code, c.msg, stderr.String())
		}
	}
	if isTerminal(&strings.Builder{}) {
		t.Error("a buffer is not a terminal")
	}
}

// FuzzParseTime: parseTime never panics, and a time it accepts reads back the same from its
// RFC 3339 form (what the usage errors print).
func FuzzParseTime(f *testing.F) {
	for _, s := range []string{"2026-12-01", "2026-12-01T10:00:00Z", "2026-12-01T10:00:00.5+02:00", "yesterday", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseTime(s)
		if err != nil {
			return
		}
		back, err := parseTime(got.Format(time.RFC3339Nano))
		if err != nil || !back.Equal(got) {
			t.Fatalf("parseTime(%q) = %v, whose RFC 3339 form reads back as %v, %v", s, got, back, err)
		}
	})
}
