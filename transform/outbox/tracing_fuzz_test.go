package outbox

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// storeProperties writes props as java.util.Properties.store(Writer) does (saveConvert: keys with
// spaces escaped, a value's leading space escaped, \t \n \r \f as escapes, = : # ! and \ escaped,
// other characters as they are), one "key=value" line each.
func storeProperties(props properties) []byte {
	var b strings.Builder
	save := func(s string, key bool) {
		for i, c := range s {
			switch {
			case c > 61 && c < 127:
				if c == '\\' {
					b.WriteString(`\\`)
				} else {
					b.WriteRune(c)
				}
			case c == ' ':
				if i == 0 || key {
					b.WriteString(`\ `)
				} else {
					b.WriteByte(' ')
				}
			case c == '\t':
				b.WriteString(`\t`)
			case c == '\n':
				b.WriteString(`\n`)
			case c == '\r':
				b.WriteString(`\r`)
			case c == '\f':
				b.WriteString(`\f`)
			case c == '=' || c == ':' || c == '#' || c == '!':
				b.WriteByte('\\')
				b.WriteRune(c)
			default:
				b.WriteRune(c)
			}
		}
	}
	for _, p := range props {
		save(p.key, true)
		b.WriteByte('=')
		save(p.value, false)
		b.WriteByte('\n')
	}
	return []byte(b.String())
}

// FuzzLoadProperties: loadProperties never panics, returns valid UTF-8, and what it read,
// written back as Properties.store writes it, reads back the same (the keys' last values).
func FuzzLoadProperties(f *testing.F) {
	for _, c := range propsJava {
		f.Add([]byte(c.in))
	}
	f.Add([]byte("traceparent=" + testTraceparent + "\r\ntracestate=a\\=1\\, b\\=2\\\n\t  ,c\\=3"))
	f.Add([]byte("\\u00"))
	f.Add([]byte("a\\"))
	f.Fuzz(func(t *testing.T, text []byte) {
		p, err := loadProperties(text)
		if err != nil {
			if err != errMalformedU {
				t.Fatalf("loadProperties(%q): unexpected error %v", text, err)
			}
			return
		}
		for _, kv := range p {
			if !utf8.ValidString(kv.key) || !utf8.ValidString(kv.value) {
				t.Fatalf("loadProperties(%q): invalid UTF-8 in %q=%q", text, kv.key, kv.value)
			}
		}
		stored := storeProperties(p)
		p2, err := loadProperties(stored)
		if err != nil {
			t.Fatalf("reading back %q (from %q): %v", stored, text, err)
		}
		if a, b := fmtProps(p), fmtProps(p2); a != b {
			t.Fatalf("loadProperties(%q) = %s, but its store %q reads back as %s", text, a, stored, b)
		}
	})
}
