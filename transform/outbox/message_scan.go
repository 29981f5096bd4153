package outbox

import (
	"bytes"
	"encoding/json"

	"github.com/outboxd/outboxd/source"
)

// jsonScan reads a message's content in one pass, validating it as it goes (RFC 8259, as
// encoding/json's Valid: FuzzMessage compares the two) and slicing out the members' values, so
// the content is not walked twice. UTF-8 is checked before (parseMessage). Each method starts at
// p.i and moves p.i past what it read; false means the content is not JSON there.
type jsonScan struct {
	b []byte
	i int
}

// maxDepth is encoding/json's nesting limit: deeper content is not JSON to it, nor here.
const maxDepth = 10000

func (p *jsonScan) is(c byte) bool { return p.i < len(p.b) && p.b[p.i] == c }

func (p *jsonScan) space() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\t' || p.b[p.i] == '\n' || p.b[p.i] == '\r') {
		p.i++
	}
}

// skipString moves past the string at p.i (its opening quote) and reports whether it holds an
// escape.
func (p *jsonScan) skipString() (escaped, ok bool) {
	p.i++
	for p.i < len(p.b) {
		switch c := p.b[p.i]; {
		case c == '"':
			p.i++
			return escaped, true
		case c == '\\':
			escaped = true
			if p.i+1 >= len(p.b) {
				return escaped, false
			}
			switch p.b[p.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				p.i += 2
			case 'u':
				if p.i+6 > len(p.b) {
					return escaped, false
				}
				for _, h := range p.b[p.i+2 : p.i+6] {
					if _, ok := unhexDigit(h); !ok {
						return escaped, false
					}
				}
				p.i += 6
			default:
				return escaped, false
			}
		case c < 0x20:
			return escaped, false // a control character must be escaped
		default:
			p.i++
		}
	}
	return escaped, false
}

func unhexDigit(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// skipValue moves past the value at p.i, nested depth containers deep.
func (p *jsonScan) skipValue(depth int) bool {
	if p.i >= len(p.b) {
		return false
	}
	switch c := p.b[p.i]; {
	case c == '"':
		_, ok := p.skipString()
		return ok
	case c == '{':
		return p.skipContainer('}', true, depth+1)
	case c == '[':
		return p.skipContainer(']', false, depth+1)
	case c == 't':
		return p.lit("true")
	case c == 'f':
		return p.lit("false")
	case c == 'n':
		return p.lit("null")
	case c == '-' || '0' <= c && c <= '9':
		return p.number()
	}
	return false
}

// skipContainer moves past the object (members) or array at p.i, which closes with end.
func (p *jsonScan) skipContainer(end byte, object bool, depth int) bool {
	if depth > maxDepth {
		return false
	}
	p.i++
	p.space()
	if p.is(end) {
		p.i++
		return true
	}
	for {
		if object {
			if !p.is('"') {
				return false
			}
			if _, ok := p.skipString(); !ok {
				return false
			}
			p.space()
			if !p.is(':') {
				return false
			}
			p.i++
			p.space()
		}
		if !p.skipValue(depth) {
			return false
		}
		p.space()
		switch {
		case p.is(','):
			p.i++
			p.space()
		case p.is(end):
			p.i++
			return true
		default:
			return false
		}
	}
}

func (p *jsonScan) lit(s string) bool {
	if !bytes.HasPrefix(p.b[p.i:], []byte(s)) {
		return false
	}
	p.i += len(s)
	return true
}

// number moves past a number: -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
func (p *jsonScan) number() bool {
	if p.is('-') {
		p.i++
	}
	switch {
	case p.is('0'):
		p.i++
	case p.i < len(p.b) && '1' <= p.b[p.i] && p.b[p.i] <= '9':
		p.digits()
	default:
		return false
	}
	if p.is('.') {
		p.i++
		if !p.digits() {
			return false
		}
	}
	if p.is('e') || p.is('E') {
		p.i++
		if p.is('+') || p.is('-') {
			p.i++
		}
		if !p.digits() {
			return false
		}
	}
	return true
}

func (p *jsonScan) digits() bool {
	start := p.i
	for p.i < len(p.b) && '0' <= p.b[p.i] && p.b[p.i] <= '9' {
		p.i++
	}
	return p.i > start
}

// key reads a member name at p.i: one of names when it is one (no allocation), else its text.
func (p *jsonScan) key(names []string) (string, bool) {
	b, ok := p.strBytes()
	if !ok {
		return "", false
	}
	for _, n := range names {
		if string(b) == n {
			return n, true
		}
	}
	return string(b), true
}

// strBytes reads a string at p.i: a slice of the content when it has no escape, else its
// decoded text.
func (p *jsonScan) strBytes() ([]byte, bool) {
	start := p.i
	escaped, ok := p.skipString()
	if !ok {
		return nil, false
	}
	raw := p.b[start:p.i]
	if !escaped {
		return raw[1 : len(raw)-1 : len(raw)-1], true
	}
	var out string
	if err := json.Unmarshal(raw, &out); err != nil { // valid by now: cannot fail
		return nil, false
	}
	return []byte(out), true
}

// value reads the member value at p.i as the column value and type a table would have (see
// message.go's file comment).
func (p *jsonScan) value(key string, shape messageShape) (source.Value, source.Type, bool) {
	t := source.Type{Optional: true}
	for _, c := range shape.required {
		if c == key {
			t.Optional = false
		}
	}
	if p.i >= len(p.b) {
		return source.Value{}, t, false
	}
	start := p.i
	switch c := p.b[p.i]; {
	case c == '"':
		s, ok := p.strBytes()
		t.Kind = source.KindString
		if shape.timestamp != "" && key == shape.timestamp {
			t.Kind = source.KindMicroTimestamp
		}
		if s == nil {
			s = []byte{}
		}
		return source.Value{Bytes: s}, t, ok
	case c == 'n':
		t.Optional = true
		return source.Value{Null: true}, t, p.lit("null")
	case c == 't' || c == 'f':
		ok := p.skipValue(1)
		t.Kind = source.KindBool
		return source.Value{Bytes: p.b[start:p.i:p.i]}, t, ok
	case c == '{' || c == '[':
		ok := p.skipValue(1)
		t.Kind = source.KindJSON
		return source.Value{Bytes: p.b[start:p.i:p.i]}, t, ok
	case c == '-' || '0' <= c && c <= '9':
		ok := p.number()
		num := p.b[start:p.i:p.i]
		t.Kind = numberKind(num, shape.partition != "" && key == shape.partition)
		return source.Value{Bytes: num}, t, ok
	}
	return source.Value{}, t, false
}
