// Package connectjson writes JSON byte for byte as Kafka Connect's JsonConverter writes it (Jackson's
// UTF8JsonGenerator behind an ObjectMapper with default settings), and expands JSON payloads as
// Debezium's Outbox Event Router does with table.expand.json.payload (EventRouterDelegate
// parseJsonPayload + JsonSchemaData). It is pure: no I/O, no state, safe for concurrent use.
//
// Reference versions: Kafka Connect 4.4.0 (connect-json), Jackson 2.21, Debezium 3.6.1. Numbers are
// printed as Java's Double.toString/Float.toString of JDK 19 and later (the shortest-digits
// algorithm); JDK 17 prints some doubles of magnitude >= 1e16 and many floats >= 1e7 differently
// (see AppendDouble, AppendFloat).
package connectjson

import "unicode/utf8"

const hexUpper = "0123456789ABCDEF"

// AppendString appends s as a JSON string literal exactly as Jackson's UTF8JsonGenerator writes a
// Java String (the default settings JsonConverter uses) and returns the extended buffer:
//   - `"` and `\` as \" and \\; U+0008, U+0009, U+000A, U+000C, U+000D as \b \t \n \f \r;
//   - every other character below U+0020 as \u00XX with upper-case hex (\u001F);
//   - characters outside the BMP as an escaped UTF-16 surrogate pair with upper-case hex
//     (U+1F600 is \uD83D\uDE00), as Jackson escapes each surrogate char it meets;
//   - everything else (including '/', DEL, U+2028, U+2029, U+FEFF) as its UTF-8 bytes.
//
// s is UTF-8. Bytes that are not valid UTF-8 are replaced by U+FFFD the way Java's UTF-8 decoder
// (new String(bytes, UTF_8), REPLACE) does when a source connector decodes them: one U+FFFD per
// maximal ill-formed subsequence, except that an encoded surrogate (ED A0..BF 80..BF) or its
// 2-byte prefix is one U+FFFD (measured on OpenJDK 17 and 25, testdata/strings.golden).
func AppendString(dst, s []byte) []byte {
	return appendString(dst, s, false)
}

// appendString is AppendString; with wtf8 set, 3-byte encodings of surrogates (ED A0..BF xx, as
// Expand stores the lone surrogates a JSON \uD800 escape produces) are surrogate chars, as Java keeps
// them in a String, and are escaped like any surrogate.
func appendString(dst, s []byte, wtf8 bool) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			dst = appendEscape(dst, rune(c))
			i++
			start = i
			continue
		}
		r, n := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && n <= 1 {
			if wtf8 && i+2 < len(s) && s[i] == 0xED && s[i+1]&0xE0 == 0xA0 && s[i+2]&0xC0 == 0x80 {
				dst = append(dst, s[start:i]...)
				dst = appendU(dst, 0xD000|rune(s[i+1]&0x3F)<<6|rune(s[i+2]&0x3F))
				i += 3
				start = i
				continue
			}
			dst = append(dst, s[start:i]...)
			dst = append(dst, "\uFFFD"...)
			i += javaMalformedLen(s[i:])
			start = i
			continue
		}
		if r > 0xFFFF {
			dst = append(dst, s[start:i]...)
			r1, r2 := surrogates(r)
			dst = appendU(dst, r1)
			dst = appendU(dst, r2)
			i += n
			start = i
			continue
		}
		i += n
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

func surrogates(r rune) (rune, rune) {
	r -= 0x10000
	return 0xD800 + (r>>10)&0x3FF, 0xDC00 + r&0x3FF
}

func appendEscape(dst []byte, c rune) []byte {
	switch c {
	case '"':
		return append(dst, '\\', '"')
	case '\\':
		return append(dst, '\\', '\\')
	case '\b':
		return append(dst, '\\', 'b')
	case '\t':
		return append(dst, '\\', 't')
	case '\n':
		return append(dst, '\\', 'n')
	case '\f':
		return append(dst, '\\', 'f')
	case '\r':
		return append(dst, '\\', 'r')
	}
	return appendU(dst, c)
}

func appendU(dst []byte, c rune) []byte {
	return append(dst, '\\', 'u', hexUpper[c>>12&0xF], hexUpper[c>>8&0xF], hexUpper[c>>4&0xF], hexUpper[c&0xF])
}

// javaMalformedLen returns how many bytes Java's UTF-8 decoder replaces by one U+FFFD at the start
// of s, which does not begin with a valid sequence: the maximal prefix of a well-formed sequence
// (Unicode's "maximal subpart" practice), at least 1 — except that Java takes an encoded surrogate
// (ED A0..BF 80..BF) or its 2-byte prefix as one malformed sequence, measured against
// OpenJDK 17 and 25 (testdata/strings.golden).
func javaMalformedLen(s []byte) int {
	b0 := s[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case b0 >= 0xC2 && b0 <= 0xDF:
		need = 1
	case b0 == 0xE0:
		need, lo = 2, 0xA0
	case b0 >= 0xE1 && b0 <= 0xEC, b0 == 0xEE, b0 == 0xEF:
		need = 2
	case b0 == 0xED:
		// Java's decoder reads ED A0..BF xx (an encoded surrogate) as one malformed sequence of 3.
		need = 2
	case b0 == 0xF0:
		need, lo = 3, 0x90
	case b0 >= 0xF1 && b0 <= 0xF3:
		need = 3
	case b0 == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	n := 1
	for k := 0; k < need && n < len(s); k++ {
		c := s[n]
		if c < lo || c > hi {
			break
		}
		lo, hi = 0x80, 0xBF
		n++
	}
	return n
}

// JavaString returns s as Java's UTF-8 decoder (REPLACE) would decode and Java's encoder re-encode
// it: s itself when it is valid UTF-8, else a copy with each maximal ill-formed subsequence
// replaced by U+FFFD (see AppendString). It is what a Java String built from these bytes holds.
func JavaString(s []byte) []byte {
	if utf8.Valid(s) {
		return s
	}
	out := make([]byte, 0, len(s)+8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && n <= 1 {
			out = append(out, "\uFFFD"...)
			i += javaMalformedLen(s[i:])
			continue
		}
		out = append(out, s[i:i+n]...)
		i += n
	}
	return out
}
