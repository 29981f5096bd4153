package postgres

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/outboxd/outboxd/source"
)

// The hand-written LSN text form must stay identical to pglogrepl's (PostgreSQL's "%X/%X").
func TestLSNMatchesPglogrepl(t *testing.T) {
	vals := []pglogrepl.LSN{0, 1, 0xF, 0x10, 0x16B3748, 0xFFFFFFFF, 1 << 32, 0x1A_0000_000B, 0xFFFFFFFF_FFFFFFFF, 0x8000_0000_8000_0000}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 10000; i++ {
		v := r.Uint64() >> (r.IntN(64)) // every magnitude
		vals = append(vals, pglogrepl.LSN(v), pglogrepl.LSN(v&0xFFFFFFFF), pglogrepl.LSN(v&^0xFFFFFFFF))
	}
	for _, v := range vals {
		want := v.String()
		if got := formatLSN(v); got != want {
			t.Fatalf("formatLSN(%#x) = %q, want %q", uint64(v), got, want)
		}
		if got := lsnPosition(v); string(got) != want {
			t.Fatalf("lsnPosition(%#x) = %q, want %q", uint64(v), got, want)
		}
		for _, s := range []string{want, strings.ToLower(want)} {
			got, err := ParseLSN(source.Position(s))
			ref, rerr := pglogrepl.ParseLSN(s)
			if err != nil || rerr != nil || got != v || ref != v {
				t.Fatalf("ParseLSN(%q) = %#x, %v; pglogrepl %#x, %v; want %#x", s, uint64(got), err, uint64(ref), rerr, uint64(v))
			}
		}
	}
	// Leading zeros are accepted (up to 8 digits a half), as before.
	for s, want := range map[string]pglogrepl.LSN{"00000000/00000001": 1, "0001/0": 1 << 32, "ffffffff/FFFFFFFF": 0xFFFFFFFF_FFFFFFFF} {
		if got, err := ParseLSN(source.Position(s)); err != nil || got != want {
			t.Errorf("ParseLSN(%q) = %#x, %v", s, uint64(got), err)
		}
	}
	for _, bad := range []string{"", "/", "0/", "/0", "0//0", "0/0/", " 0/1", "0/1 ", "+1/0", "0/-1", "0x1/0", "g/0",
		"123456789/0", "0/123456789", "0/1\x00"} {
		if l, err := ParseLSN(source.Position(bad)); err == nil {
			t.Errorf("ParseLSN(%q) = %#x, no error", bad, uint64(l))
		}
	}
	if got := CompareLSN("1/0", "bad"); got != 1 {
		t.Errorf("CompareLSN(1/0, bad) = %d", got)
	}
	if got := CompareLSN("12/xyz", "0/0"); got != 0 {
		t.Errorf("CompareLSN(12/xyz, 0/0) = %d: a malformed position counts as 0/0", got)
	}
}

var (
	sinkPos source.Position
	sinkLSN pglogrepl.LSN
)

// BenchmarkLSN compares the hand-written LSN text form with pglogrepl's fmt-based one.
func BenchmarkLSN(b *testing.B) {
	l := pglogrepl.LSN(0x1A_016B_3748)
	s := source.Position(l.String())
	b.Run("format", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			sinkPos = lsnPosition(l + pglogrepl.LSN(i))
		}
	})
	b.Run("format-pglogrepl", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			sinkPos = source.Position((l + pglogrepl.LSN(i)).String())
		}
	})
	b.Run("parse", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			sinkLSN, _ = ParseLSN(s)
		}
	})
	b.Run("parse-pglogrepl", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			sinkLSN, _ = pglogrepl.ParseLSN(string(s))
		}
	})
}

// BenchmarkDecodeTx measures decoding a whole single-row transaction (Begin, Insert, Commit:
// one op), Position text form included.
func BenchmarkDecodeTx(b *testing.B) {
	d := NewDecoder([]string{"public.outbox"})
	ins := testInsert()
	begin, commit := beginMsg(0x10, t0, 1), commitMsg(0x10, 0x1A_016B_3748, t0)
	if _, _, err := d.Decode(relMsg(1, "public", "outbox", outboxCols...)); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		d.Decode(begin)
		d.Decode(ins)
		if _, done, err := d.Decode(commit); !done || err != nil {
			b.Fatal(done, err)
		}
	}
}
