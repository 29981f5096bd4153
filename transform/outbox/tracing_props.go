package outbox

import (
	"errors"
	"strings"
	"unicode/utf8"
)

// properties is what java.util.Properties.load(Reader) reads from a text: its key/value pairs in
// text order. A key given twice keeps its last value (Hashtable.put), as get returns it.
type properties []property

type property struct{ key, value string }

// get returns the last value of key.
func (p properties) get(key string) (string, bool) {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i].key == key {
			return p[i].value, true
		}
	}
	return "", false
}

// errMalformedU is Properties.load's IllegalArgumentException for a bad \uXXXX escape.
var errMalformedU = errors.New(`malformed \uxxxx encoding`)

// loadProperties reads text as java.util.Properties.load(Reader) does (JDK 9 and later;
// Debezium's PropertiesGetter.extract loads the tracing column's String this way):
//
//   - Lines end at \n, \r or \r\n. A line ending in an odd number of backslashes continues on the
//     next line (the backslash and the line break dropped, the next line's leading whitespace
//     skipped); at the end of the text such a backslash is dropped.
//   - Whitespace is space, \t and \f. Leading whitespace is skipped; blank lines and lines whose
//     first non-whitespace character is # or ! are comments (a comment does not continue).
//   - The key runs to the first unescaped =, : or whitespace; whitespace after it, then one = or
//     : and the whitespace after that, are skipped; the rest of the line is the value (trailing
//     whitespace kept).
//   - In keys and values \t \n \r \f are those characters, \uXXXX (exactly four hex digits, else
//     an error: Java's "Malformed \uxxxx encoding.") is that UTF-16 unit (a surrogate pair of two
//     escapes is one character; a lone surrogate becomes "?", as Java's getBytes(UTF_8) writes
//     it), and a backslash before any other character is dropped.
func loadProperties(text []byte) (properties, error) {
	lr := lineReader{s: text}
	var props properties
	var line []rune
	for {
		var ok bool
		line, ok = lr.readLine(line[:0])
		if !ok {
			return props, nil
		}
		keyLen, valueStart := 0, len(line)
		hasSep, preceding := false, false
		for keyLen < len(line) {
			c := line[keyLen]
			if (c == '=' || c == ':') && !preceding {
				valueStart, hasSep = keyLen+1, true
				break
			} else if isPropSpace(c) && !preceding {
				valueStart = keyLen + 1
				break
			}
			preceding = c == '\\' && !preceding
			keyLen++
		}
		for valueStart < len(line) {
			c := line[valueStart]
			if !isPropSpace(c) {
				if !hasSep && (c == '=' || c == ':') {
					hasSep = true
				} else {
					break
				}
			}
			valueStart++
		}
		key, err := loadConvert(line[:keyLen])
		if err != nil {
			return nil, err
		}
		value, err := loadConvert(line[valueStart:])
		if err != nil {
			return nil, err
		}
		props = append(props, property{key, value})
	}
}

func isPropSpace(c rune) bool { return c == ' ' || c == '\t' || c == '\f' }

// lineReader is Properties.LineReader: it returns logical lines, continuations joined, comments
// and blank lines skipped, escapes still in.
type lineReader struct {
	s      []byte
	off    int
	skipLF bool
}

func (lr *lineReader) next() (rune, bool) {
	if lr.off >= len(lr.s) {
		return 0, false
	}
	c, n := utf8.DecodeRune(lr.s[lr.off:])
	lr.off += n
	return c, true
}

// readLine appends the next logical line to buf; ok is false at the end of the text.
func (lr *lineReader) readLine(buf []rune) (line []rune, ok bool) {
	skipWhiteSpace, appendedLineBegin, preceding := true, false, false
	for {
		c, more := lr.next()
		if !more {
			if len(buf) == 0 {
				return buf, false
			}
			if preceding {
				buf = buf[:len(buf)-1]
			}
			return buf, true
		}
		if lr.skipLF {
			lr.skipLF = false
			if c == '\n' {
				continue
			}
		}
		if skipWhiteSpace {
			if isPropSpace(c) {
				continue
			}
			if !appendedLineBegin && (c == '\r' || c == '\n') {
				continue
			}
			skipWhiteSpace, appendedLineBegin = false, false
		}
		if len(buf) == 0 && (c == '#' || c == '!') { // a comment: skip to the end of the line
			for {
				c, more = lr.next()
				if !more {
					return buf, false
				}
				if c == '\n' || c == '\r' {
					break
				}
			}
			if c == '\r' {
				lr.skipLF = true
			}
			skipWhiteSpace = true
			continue
		}
		if c != '\n' && c != '\r' {
			buf = append(buf, c)
			preceding = c == '\\' && !preceding
			continue
		}
		// End of a natural line.
		if len(buf) == 0 {
			skipWhiteSpace = true
			if c == '\r' {
				lr.skipLF = true
			}
			continue
		}
		if lr.off >= len(lr.s) { // the text ends with this line break
			if preceding {
				buf = buf[:len(buf)-1]
			}
			return buf, true
		}
		if !preceding {
			if c == '\r' {
				lr.skipLF = true
			}
			return buf, true
		}
		buf = buf[:len(buf)-1] // the continuation backslash
		skipWhiteSpace, appendedLineBegin, preceding = true, true, false
		if c == '\r' {
			lr.skipLF = true
		}
	}
}

// loadConvert is Properties.loadConvert: escapes resolved.
func loadConvert(in []rune) (string, error) {
	var out []uint16 // Java chars
	for i := 0; i < len(in); {
		c := in[i]
		i++
		if c == '\\' && i < len(in) {
			c = in[i]
			i++
			if c == 'u' {
				if i+4 > len(in) {
					return "", errMalformedU
				}
				v := 0
				for _, h := range in[i : i+4] {
					switch {
					case h >= '0' && h <= '9':
						v = v<<4 + int(h-'0')
					case h >= 'a' && h <= 'f':
						v = v<<4 + int(h-'a') + 10
					case h >= 'A' && h <= 'F':
						v = v<<4 + int(h-'A') + 10
					default:
						return "", errMalformedU
					}
				}
				i += 4
				out = append(out, uint16(v))
				continue
			}
			switch c {
			case 't':
				c = '\t'
			case 'r':
				c = '\r'
			case 'n':
				c = '\n'
			case 'f':
				c = '\f'
			}
		}
		if c >= 0x10000 {
			c -= 0x10000
			out = append(out, uint16(0xD800+(c>>10)), uint16(0xDC00+(c&0x3FF)))
		} else {
			out = append(out, uint16(c))
		}
	}
	return javaUTF8(out), nil
}

// javaUTF8 is new String(chars).getBytes(UTF_8): surrogate pairs combined, a lone surrogate "?".
func javaUTF8(u []uint16) string {
	var b strings.Builder
	b.Grow(len(u))
	for i := 0; i < len(u); i++ {
		c := rune(u[i])
		switch {
		case c >= 0xD800 && c < 0xDC00 && i+1 < len(u) && u[i+1] >= 0xDC00 && u[i+1] < 0xE000:
			c = 0x10000 + (c-0xD800)<<10 + (rune(u[i+1]) - 0xDC00)
			i++
		case c >= 0xD800 && c < 0xE000:
			c = '?'
		}
		b.WriteRune(c)
	}
	return b.String()
}
