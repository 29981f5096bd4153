package postgres

import (
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/outboxd/outboxd/source"
)

// lsnForm is the text form ParseLSN accepts: 1 to 8 hex digits, a slash, 1 to 8 hex digits.
var lsnForm = regexp.MustCompile(`^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$`)

// FuzzLSN checks the hand-written LSN text form both ways. Parsing: ParseLSN accepts exactly
// lsnForm, agrees with pglogrepl's parser on what it accepts, and its value formats back to the
// same text up to case and leading zeros. Formatting: formatLSN(v) is pglogrepl's LSN.String,
// parses back to v in either case, and CompareLSN orders formatted positions as their values.
func FuzzLSN(f *testing.F) {
	for _, s := range []string{"0/16B3748", "1A/b", "0/0", "FFFFFFFF/FFFFFFFF", "00000000/00000001", "0/", "/1",
		"123456789/0", "0/1/2", " 0/1", "+1/0", "0x1/0", "mysql-bin.000003:4", "0-1-42", ""} {
		f.Add(s, uint64(0x16B3748), uint64(0x1_0000_0200))
	}
	f.Add("1/200", uint64(0xFFFFFFFF_FFFFFFFF), uint64(0))
	f.Add("8/80000000", uint64(1<<32), uint64(0xFFFFFFFF))
	f.Fuzz(func(t *testing.T, s string, v, w uint64) {
		l, err := ParseLSN(source.Position(s))
		if ok := lsnForm.MatchString(s); ok != (err == nil) {
			t.Fatalf("ParseLSN(%q) = %#x, %v; the text form says ok=%v", s, uint64(l), err, ok)
		}
		if err == nil {
			ref, rerr := pglogrepl.ParseLSN(s)
			if rerr != nil || ref != l {
				t.Fatalf("ParseLSN(%q) = %#x; pglogrepl says %#x, %v", s, uint64(l), uint64(ref), rerr)
			}
			hi, lo, _ := strings.Cut(s, "/")
			trim := func(h string) string {
				if h = strings.TrimLeft(h, "0"); h == "" {
					return "0"
				}
				return h
			}
			if want := trim(hi) + "/" + trim(lo); !strings.EqualFold(formatLSN(l), want) {
				t.Fatalf("ParseLSN(%q) formats back as %q, want %q up to case", s, formatLSN(l), want)
			}
			if CompareLSN(source.Position(s), lsnPosition(l)) != 0 {
				t.Fatalf("CompareLSN(%q, its own formatted form) != 0", s)
			}
		} else if CompareLSN(source.Position(s), "0/0") != 0 {
			t.Fatalf("malformed %q does not compare as 0/0", s)
		}

		for _, x := range []uint64{v, w} {
			text := formatLSN(pglogrepl.LSN(x))
			if want := pglogrepl.LSN(x).String(); text != want || string(lsnPosition(pglogrepl.LSN(x))) != want {
				t.Fatalf("formatLSN(%#x) = %q, pglogrepl %q", x, text, want)
			}
			for _, form := range []string{text, strings.ToLower(text)} {
				if back, err := ParseLSN(source.Position(form)); err != nil || uint64(back) != x {
					t.Fatalf("ParseLSN(formatLSN(%#x) = %q) = %#x, %v", x, form, uint64(back), err)
				}
			}
		}
		want := 0
		switch {
		case v < w:
			want = -1
		case v > w:
			want = 1
		}
		if got := CompareLSN(lsnPosition(pglogrepl.LSN(v)), lsnPosition(pglogrepl.LSN(w))); got != want {
			t.Fatalf("CompareLSN(%#x, %#x) = %d, want %d", v, w, got, want)
		}
	})
}
