package mysql

import "strings"

// A small SQL tokenizer for the DDL reader (ddl.go).

type tokKind uint8

const (
	tWord   tokKind = iota // bare word or number
	tQuoted                // `quoted identifier`
	tString                // 'string' or "string"
	tPunct                 // one punctuation character
)

type tok struct {
	kind tokKind
	s    string
}

func (t tok) is(kw string) bool { return t.kind == tWord && strings.EqualFold(t.s, kw) }
func (t tok) ident() bool       { return t.kind == tWord || t.kind == tQuoted }
func (t tok) punct(c byte) bool { return t.kind == tPunct && len(t.s) == 1 && t.s[0] == c }
func isWordByte(c byte) bool    { return c == '_' || c == '$' || c >= 0x80 || isAlnum(c) }
func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' }
func anyIs(t tok, kws ...string) bool {
	for _, k := range kws {
		if t.is(k) {
			return true
		}
	}
	return false
}

// tokenize splits SQL text into tokens, dropping comments. Executable comments (/*!50100 ...*/,
// /*M!100100 ...*/) are read as the SQL they contain.
func tokenize(q string) []tok {
	var out []tok
	exec := 0
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case isSpace(c):
			i++
		case c == '#' || c == '-' && strings.HasPrefix(q[i:], "--") && (i+2 == len(q) || isSpace(q[i+2])):
			if j := strings.IndexByte(q[i:], '\n'); j >= 0 {
				i += j + 1
			} else {
				i = len(q)
			}
		case strings.HasPrefix(q[i:], "/*!") || strings.HasPrefix(q[i:], "/*M!"):
			i += 3
			if q[i-1] == 'M' {
				i++
			}
			for i < len(q) && q[i] >= '0' && q[i] <= '9' {
				i++
			}
			exec++
		case strings.HasPrefix(q[i:], "/*"):
			if j := strings.Index(q[i+2:], "*/"); j >= 0 {
				i += j + 4
			} else {
				i = len(q)
			}
		case exec > 0 && strings.HasPrefix(q[i:], "*/"):
			exec--
			i += 2
		case c == '`':
			var b strings.Builder
			j := i + 1
			for j < len(q) {
				if q[j] == '`' {
					if j+1 < len(q) && q[j+1] == '`' {
						b.WriteByte('`')
						j += 2
						continue
					}
					break
				}
				b.WriteByte(q[j])
				j++
			}
			out = append(out, tok{tQuoted, b.String()})
			i = j + 1
		case c == '\'' || c == '"':
			var b strings.Builder
			j := i + 1
			for j < len(q) {
				if q[j] == '\\' && j+1 < len(q) {
					b.WriteByte(q[j+1])
					j += 2
					continue
				}
				if q[j] == c {
					if j+1 < len(q) && q[j+1] == c {
						b.WriteByte(c)
						j += 2
						continue
					}
					break
				}
				b.WriteByte(q[j])
				j++
			}
			out = append(out, tok{tString, b.String()})
			i = j + 1
		case isWordByte(c):
			j := i
			for j < len(q) && isWordByte(q[j]) {
				j++
			}
			out = append(out, tok{tWord, q[i:j]})
			i = j
		default:
			out = append(out, tok{tPunct, q[i : i+1]})
			i++
		}
	}
	return out
}

// splitTop splits tokens at top-level commas (outside parentheses).
func splitTop(ts []tok) [][]tok {
	var out [][]tok
	depth, start := 0, 0
	for i, t := range ts {
		switch {
		case t.punct('('):
			depth++
		case t.punct(')'):
			depth--
		case t.punct(',') && depth == 0:
			out = append(out, ts[start:i])
			start = i + 1
		}
	}
	return append(out, ts[start:])
}

// closeParen returns the index of the ')' matching the '(' at ts[open], or -1.
func closeParen(ts []tok, open int) int {
	depth := 0
	for i := open; i < len(ts); i++ {
		if ts[i].punct('(') {
			depth++
		} else if ts[i].punct(')') {
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}
