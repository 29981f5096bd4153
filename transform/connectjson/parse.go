package connectjson

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// Jackson 2.21's default StreamReadConstraints.
const (
	maxNestingDepth = 1000
	maxNumberLength = 1000
	maxStringLength = 20_000_000
	maxNameLength   = 50_000
)

type nodeType uint8

const (
	nodeNull nodeType = iota
	nodeBool
	nodeNumber
	nodeString
	nodeArray
	nodeObject
)

type numKind uint8

const (
	numInt32  numKind = iota // Jackson IntNode
	numInt64                 // LongNode
	numBigInt                // BigIntegerNode
	numDouble                // DoubleNode
)

// node is a Jackson JsonNode as ObjectMapper.readTree builds it.
type node struct {
	t     nodeType
	num   numKind
	b     bool
	i     int64
	f     float64
	s     string // string value (WTF-8: lone surrogates from \u escapes kept) or number text
	elems []*node
	keys  []string       // object keys, unique, in first-seen order (a duplicate key replaces the value in place)
	byKey map[string]int // index of keys, for objects with more than smallObject keys
}

// smallObject is the key count up to which an object is searched linearly.
const smallObject = 16

func (n *node) index(key string) (int, bool) {
	if n.byKey != nil {
		i, ok := n.byKey[key]
		return i, ok
	}
	for i, k := range n.keys {
		if k == key {
			return i, true
		}
	}
	return 0, false
}

func (n *node) add(key string, v *node) {
	n.keys = append(n.keys, key)
	n.elems = append(n.elems, v)
	if n.byKey != nil {
		n.byKey[key] = len(n.keys) - 1
	} else if len(n.keys) > smallObject {
		n.byKey = make(map[string]int, 2*len(n.keys))
		for i, k := range n.keys {
			n.byKey[k] = i
		}
	}
}

func (n *node) get(key string) (*node, bool) {
	if i, ok := n.index(key); ok {
		return n.elems[i], true
	}
	return nil, false
}

var errSyntax = errors.New("invalid JSON")

// parser reads one JSON value as Jackson's ReaderBasedJsonParser does with default features: no
// comments, no single quotes, no unquoted names, no leading zeros, no NaN tokens, no trailing
// commas, no raw control characters in strings; whitespace is space, \t, \n, \r.
type parser struct {
	s   []byte
	pos int
}

func (p *parser) fail(what string) error {
	return fmt.Errorf("%w at offset %d: %s", errSyntax, p.pos, what)
}

func (p *parser) ws() {
	for p.pos < len(p.s) {
		switch p.s[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) value(depth int) (*node, error) {
	p.ws()
	if p.pos >= len(p.s) {
		return nil, p.fail("unexpected end of input")
	}
	switch c := p.s[p.pos]; {
	case c == '{':
		if depth >= maxNestingDepth {
			return nil, p.fail("nesting depth exceeds 1000")
		}
		p.pos++
		n := &node{t: nodeObject}
		p.ws()
		if p.pos < len(p.s) && p.s[p.pos] == '}' {
			p.pos++
			return n, nil
		}
		for {
			p.ws()
			if p.pos >= len(p.s) || p.s[p.pos] != '"' {
				return nil, p.fail("expected a field name")
			}
			k, err := p.str(maxNameLength)
			if err != nil {
				return nil, err
			}
			p.ws()
			if p.pos >= len(p.s) || p.s[p.pos] != ':' {
				return nil, p.fail("expected ':'")
			}
			p.pos++
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			if i, ok := n.index(k); ok {
				n.elems[i] = v
			} else {
				n.add(k, v)
			}
			p.ws()
			if p.pos >= len(p.s) {
				return nil, p.fail("unexpected end of input in an object")
			}
			switch p.s[p.pos] {
			case ',':
				p.pos++
			case '}':
				p.pos++
				return n, nil
			default:
				return nil, p.fail("expected ',' or '}'")
			}
		}
	case c == '[':
		if depth >= maxNestingDepth {
			return nil, p.fail("nesting depth exceeds 1000")
		}
		p.pos++
		n := &node{t: nodeArray}
		p.ws()
		if p.pos < len(p.s) && p.s[p.pos] == ']' {
			p.pos++
			return n, nil
		}
		for {
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			n.elems = append(n.elems, v)
			p.ws()
			if p.pos >= len(p.s) {
				return nil, p.fail("unexpected end of input in an array")
			}
			switch p.s[p.pos] {
			case ',':
				p.pos++
			case ']':
				p.pos++
				return n, nil
			default:
				return nil, p.fail("expected ',' or ']'")
			}
		}
	case c == '"':
		s, err := p.str(maxStringLength)
		if err != nil {
			return nil, err
		}
		return &node{t: nodeString, s: s}, nil
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	default:
		for _, lit := range [...]struct {
			text string
			n    node
		}{{"true", node{t: nodeBool, b: true}}, {"false", node{t: nodeBool}}, {"null", node{t: nodeNull}}} {
			if len(p.s)-p.pos >= len(lit.text) && string(p.s[p.pos:p.pos+len(lit.text)]) == lit.text {
				end := p.pos + len(lit.text)
				if end < len(p.s) && isIdentPart(p.s[end]) {
					return nil, p.fail("unrecognized token")
				}
				p.pos = end
				n := lit.n
				return &n, nil
			}
		}
		return nil, p.fail("unexpected character")
	}
}

// isIdentPart is what makes Jackson reject "truex" as one unrecognized token.
func isIdentPart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c >= 0x80
}

func (p *parser) number() (*node, error) {
	start := p.pos
	if p.s[p.pos] == '-' {
		p.pos++
	}
	intStart := p.pos
	for p.pos < len(p.s) && p.s[p.pos] >= '0' && p.s[p.pos] <= '9' {
		p.pos++
	}
	intDigits := p.pos - intStart
	if intDigits == 0 {
		return nil, p.fail("no digits in a number")
	}
	if intDigits > 1 && p.s[intStart] == '0' {
		return nil, p.fail("leading zeros in a number")
	}
	isFloat := false
	digits := intDigits
	if p.pos < len(p.s) && p.s[p.pos] == '.' {
		isFloat = true
		p.pos++
		fs := p.pos
		for p.pos < len(p.s) && p.s[p.pos] >= '0' && p.s[p.pos] <= '9' {
			p.pos++
		}
		if p.pos == fs {
			return nil, p.fail("decimal point not followed by a digit")
		}
		digits += p.pos - fs
	}
	if p.pos < len(p.s) && (p.s[p.pos] == 'e' || p.s[p.pos] == 'E') {
		isFloat = true
		p.pos++
		if p.pos < len(p.s) && (p.s[p.pos] == '+' || p.s[p.pos] == '-') {
			p.pos++
		}
		es := p.pos
		for p.pos < len(p.s) && p.s[p.pos] >= '0' && p.s[p.pos] <= '9' {
			p.pos++
		}
		if p.pos == es {
			return nil, p.fail("exponent indicator not followed by a digit")
		}
		digits += p.pos - es
	}
	text := string(p.s[start:p.pos])
	// StreamReadConstraints.validateIntegerLength / validateFPLength: digits only, no sign or dot.
	if digits > maxNumberLength {
		return nil, p.fail("number with more than 1000 digits")
	}
	if isFloat {
		f, err := strconv.ParseFloat(text, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return nil, p.fail("bad number")
		}
		// Java's Double.parseDouble: overflow is ±Infinity, underflow ±0 (strconv agrees).
		return &node{t: nodeNumber, num: numDouble, f: f, s: text}, nil
	}
	i, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		return &node{t: nodeNumber, num: numBigInt, s: text}, nil
	}
	if i >= math.MinInt32 && i <= math.MaxInt32 {
		return &node{t: nodeNumber, num: numInt32, i: i, s: text}, nil
	}
	return &node{t: nodeNumber, num: numInt64, i: i, s: text}, nil
}

// str reads a string literal at p.pos into WTF-8 (lone surrogate escapes kept as 3-byte sequences,
// as a Java String keeps them; a valid escaped pair becomes the one supplementary character).
func (p *parser) str(limit int) (string, error) {
	p.pos++ // opening quote
	var out []byte
	start := p.pos
	for {
		if p.pos >= len(p.s) {
			return "", p.fail("unexpected end of input in a string")
		}
		c := p.s[p.pos]
		switch {
		case c == '"':
			out = append(out, p.s[start:p.pos]...)
			p.pos++
			if len(out) > limit && utf16Len(out) > limit {
				return "", p.fail("string longer than the limit")
			}
			return string(out), nil
		case c < 0x20:
			return "", p.fail("unescaped control character in a string")
		case c == '\\':
			out = append(out, p.s[start:p.pos]...)
			p.pos++
			if p.pos >= len(p.s) {
				return "", p.fail("unexpected end of input in an escape")
			}
			e := p.s[p.pos]
			p.pos++
			switch e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, ok := p.hex4()
				if !ok {
					return "", p.fail("bad \\u escape")
				}
				if r >= 0xD800 && r < 0xDC00 && p.pos+6 <= len(p.s) && p.s[p.pos] == '\\' && p.s[p.pos+1] == 'u' {
					save := p.pos
					p.pos += 2
					r2, ok := p.hex4()
					if !ok {
						return "", p.fail("bad \\u escape")
					}
					if r2 >= 0xDC00 && r2 < 0xE000 {
						out = utf8.AppendRune(out, 0x10000+(r-0xD800)<<10+(r2-0xDC00))
						break
					}
					p.pos = save
				}
				out = appendWTF8(out, r)
			default:
				return "", p.fail("unrecognized escape")
			}
			start = p.pos
		default:
			p.pos++
		}
	}
}

func (p *parser) hex4() (rune, bool) {
	if p.pos+4 > len(p.s) {
		return 0, false
	}
	var r rune
	for _, c := range p.s[p.pos : p.pos+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	p.pos += 4
	return r, true
}

// appendWTF8 appends a BMP code unit; surrogates as their 3-byte generalized UTF-8 form.
func appendWTF8(out []byte, r rune) []byte {
	if r >= 0xD800 && r < 0xE000 {
		return append(out, 0xED, byte(0x80|(r>>6)&0x3F), byte(0x80|r&0x3F))
	}
	return utf8.AppendRune(out, r)
}

// utf16Len is the length of the WTF-8 string b in Java chars.
func utf16Len(b []byte) int {
	n := 0
	for _, r := range string(b) {
		n++
		if r > 0xFFFF {
			n++
		}
	}
	return n
}
