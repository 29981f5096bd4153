package mysql

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"golang.org/x/text/encoding/charmap"
)

// This file turns the bytes of a text column into UTF-8, from the column's character set as the
// binlog's table map (collation ids, binlog_row_metadata=FULL) or information_schema names it.
// A character set outboxd cannot convert exactly is refused (at Open, in `outboxd check`, and
// when a table map shows one), never passed through: a key or payload in raw UTF-16 or Shift-JIS
// bytes is wrong data that looks delivered.

// charsetKind is how a column's bytes become the published text.
type charsetKind uint8

const (
	csUTF8        charsetKind = iota // utf8mb4, utf8mb3, ascii: the bytes are UTF-8 already
	csBinary                         // binary/varbinary/blob: raw bytes
	csLatin1                         // MySQL latin1 (cp1252): converted to UTF-8
	csUTF16                          // utf16 and ucs2: big-endian UTF-16
	csUTF16LE                        // utf16le
	csUTF32                          // utf32: big-endian UTF-32
	csSingle                         // a single-byte charset, converted with a table (column.cmap)
	csUnsupported                    // a charset outboxd cannot convert: refused
)

// singleByte maps the MySQL/MariaDB names of single-byte character sets to their tables.
var singleByte = map[string]*charmap.Charmap{
	"cp1250": charmap.Windows1250, "cp1251": charmap.Windows1251, "cp1256": charmap.Windows1256,
	"cp1257": charmap.Windows1257, "latin2": charmap.ISO8859_2, "latin5": charmap.ISO8859_9,
	"latin7": charmap.ISO8859_13, "greek": charmap.ISO8859_7, "hebrew": charmap.ISO8859_8,
	"koi8r": charmap.KOI8R, "koi8u": charmap.KOI8U, "cp866": charmap.CodePage866,
	"cp850": charmap.CodePage850, "cp852": charmap.CodePage852, "macroman": charmap.Macintosh,
}

// charsetByName maps a character set name (information_schema CHARACTER_SET_NAME) to how its
// bytes are published; an empty name means unknown and is taken as UTF-8 (columns without a
// charset: numbers, dates).
func charsetByName(name string) (charsetKind, *charmap.Charmap) {
	switch name = strings.ToLower(name); name {
	case "", "utf8", "utf8mb3", "utf8mb4", "ascii":
		return csUTF8, nil
	case "binary":
		return csBinary, nil
	case "latin1":
		return csLatin1, nil
	case "utf16", "ucs2":
		return csUTF16, nil
	case "utf16le":
		return csUTF16LE, nil
	case "utf32":
		return csUTF32, nil
	}
	if m := singleByte[name]; m != nil {
		return csSingle, m
	}
	return csUnsupported, nil
}

// supportedCharset reports whether outboxd converts text in charset name to UTF-8 exactly.
func supportedCharset(name string) bool {
	k, _ := charsetByName(name)
	return k != csUnsupported
}

// collationCharsetName returns the character set of a collation id: from the server's own
// table (information_schema.COLLATIONS, read at Open) when given, else from MariaDB's
// UCA-14.0.0 id scheme or the static table of well-known ids. "" means unknown.
func collationCharsetName(id uint64, server map[uint64]string) string {
	if cs, ok := server[id]; ok {
		return cs
	}
	if id >= 2048 && id < 4096 { // MariaDB 10.10+ uca1400 collations: the charset is in bits 8-10
		switch (id >> 8) & 7 {
		case 0:
			return "utf8mb3"
		case 1:
			return "utf8mb4"
		case 2:
			return "ucs2"
		case 3:
			return "utf16"
		case 4:
			return "utf32"
		}
		return ""
	}
	if server != nil {
		return ""
	}
	base := id
	if base >= 1024 && base < 2048 { // MariaDB NO PAD variants: 1024 + the PAD collation's id
		base -= 1024
	}
	if cs, ok := staticCollations[base]; ok {
		return cs
	}
	if id >= 255 && id <= 323 { // MySQL 8's utf8mb4 0900 family
		return "utf8mb4"
	}
	return ""
}

// charsetOfCollation maps a collation id (binlog metadata) to how its bytes are published.
// An id that neither the server's table nor the static one knows is refused, never guessed.
func charsetOfCollation(id uint64, server map[uint64]string) (charsetKind, *charmap.Charmap, string) {
	name := collationCharsetName(id, server)
	if name == "" {
		return csUnsupported, nil, fmt.Sprintf("unknown (collation id %d)", id)
	}
	k, m := charsetByName(name)
	return k, m, name
}

// toUTF8 converts text bytes of the given kind to UTF-8. b itself is returned when it already
// is (UTF-8 kinds, ASCII-only single-byte text).
func toUTF8(kind charsetKind, m *charmap.Charmap, b []byte) ([]byte, error) {
	switch kind {
	case csLatin1:
		return latin1ToUTF8(b), nil
	case csSingle:
		return singleByteToUTF8(m, b), nil
	case csUTF16, csUTF16LE:
		return utf16ToUTF8(b, kind == csUTF16LE)
	case csUTF32:
		return utf32ToUTF8(b)
	}
	return b, nil
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

func singleByteToUTF8(m *charmap.Charmap, b []byte) []byte {
	if isASCII(b) {
		return b
	}
	out := make([]byte, 0, len(b)+len(b)/2)
	for _, c := range b {
		out = utf8.AppendRune(out, m.DecodeByte(c))
	}
	return out
}

func utf16ToUTF8(b []byte, little bool) ([]byte, error) {
	if len(b)%2 != 0 {
		return nil, fmt.Errorf("UTF-16 text of odd length %d", len(b))
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i += 2 {
		u := rune(b[i])<<8 | rune(b[i+1])
		if little {
			u = rune(b[i+1])<<8 | rune(b[i])
		}
		if utf16.IsSurrogate(u) && i+3 < len(b) {
			u2 := rune(b[i+2])<<8 | rune(b[i+3])
			if little {
				u2 = rune(b[i+3])<<8 | rune(b[i+2])
			}
			if r := utf16.DecodeRune(u, u2); r != utf8.RuneError {
				out = utf8.AppendRune(out, r)
				i += 2
				continue
			}
		}
		if utf16.IsSurrogate(u) {
			return nil, fmt.Errorf("UTF-16 text with an unpaired surrogate at byte %d", i)
		}
		out = utf8.AppendRune(out, u)
	}
	return out, nil
}

func utf32ToUTF8(b []byte) ([]byte, error) {
	if len(b)%4 != 0 {
		return nil, fmt.Errorf("UTF-32 text of length %d (not a multiple of 4)", len(b))
	}
	out := make([]byte, 0, len(b)/2)
	for i := 0; i < len(b); i += 4 {
		r := rune(b[i])<<24 | rune(b[i+1])<<16 | rune(b[i+2])<<8 | rune(b[i+3])
		if !utf8.ValidRune(r) {
			return nil, fmt.Errorf("UTF-32 text with the invalid code point %#x at byte %d", uint32(r), i)
		}
		out = utf8.AppendRune(out, r)
	}
	return out, nil
}

// unsupportedCharsetError is the refusal of a text column in a charset outboxd cannot convert.
func unsupportedCharsetError(table, col, charset string) error {
	if charset == "" {
		charset = "an unknown charset"
	}
	return fmt.Errorf("table %s column %s is in character set %s, which outboxd cannot convert to UTF-8 "+
		"(supported: utf8mb4, utf8mb3, ascii, latin1, utf16, utf16le, ucs2, utf32, binary, %s): "+
		"convert the column with ALTER TABLE %s MODIFY %s ... CHARACTER SET utf8mb4",
		table, col, charset, strings.Join(singleByteNames(), ", "), table, col)
}

func singleByteNames() []string {
	out := make([]string, 0, len(singleByte))
	for n := range singleByte {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
