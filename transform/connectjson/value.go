package connectjson

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

// Kind is the kind of a Value.
type Kind uint8

// The kinds of Value.
const (
	KindNull Kind = iota
	KindBool
	KindInt     // int8/int16/int32/int64 and the Date/Time/Timestamp logical types
	KindFloat64 // float64
	KindFloat32 // float32
	KindString
	KindBytes // bytes and the Decimal logical type (its unscaled bytes)
	KindArray
	KindMap
	KindStruct
)

// Value is a Kafka Connect value as JsonConverter converts it; build one with the constructors
// below. A Value is immutable once built (constructors keep the slices they are given: do not
// modify them afterwards).
type Value struct {
	kind  Kind
	wtf8  bool // string may hold lone surrogates (from Expand)
	num   uint64
	str   string
	elems []Value
}

// Null is the null value.
func Null() Value { return Value{} }

// Bool is a boolean value.
func Bool(b bool) Value {
	v := Value{kind: KindBool}
	if b {
		v.num = 1
	}
	return v
}

// Int is an integer value (any of int8..int64, Date, Time, Timestamp: written in decimal).
func Int(i int64) Value { return Value{kind: KindInt, num: uint64(i)} }

// Float64 is a float64 value (written as AppendJSONDouble).
func Float64(f float64) Value { return Value{kind: KindFloat64, num: math.Float64bits(f)} }

// Float32 is a float32 value (written as AppendJSONFloat).
func Float32(f float32) Value { return Value{kind: KindFloat32, num: uint64(math.Float32bits(f))} }

// String is a string value; s is UTF-8 (invalid bytes are written as AppendString writes them).
func String(s string) Value { return Value{kind: KindString, str: s} }

// Bytes is a bytes value (written as AppendBase64). For a Decimal, pass DecimalUnscaled's bytes.
func Bytes(b []byte) Value { return Value{kind: KindBytes, str: string(b)} }

// Array is an array value.
func Array(elems []Value) Value { return Value{kind: KindArray, elems: elems} }

// Struct is a struct value; fields are parallel to its schema's Fields.
func Struct(fields []Value) Value { return Value{kind: KindStruct, elems: fields} }

// Map is a map value: keys and values parallel, written in this order (Java writes a HashMap in
// its hash order; outboxd never produces maps itself).
func Map(keys, values []Value) Value {
	e := make([]Value, 0, 2*len(keys))
	for i := range keys {
		e = append(e, keys[i], values[i])
	}
	return Value{kind: KindMap, elems: e}
}

// Kind returns v's kind.
func (v Value) Kind() Kind { return v.kind }

// Len returns the number of elements of an array, fields of a struct or entries of a map.
func (v Value) Len() int {
	if v.kind == KindMap {
		return len(v.elems) / 2
	}
	return len(v.elems)
}

// Elem returns the i-th element of an array or field of a struct.
func (v Value) Elem(i int) Value { return v.elems[i] }

// Text returns a string's or bytes' content (a string from Expand may hold lone surrogates as
// 3-byte WTF-8 sequences).
func (v Value) Text() string { return v.str }

// Int returns an integer's value.
func (v Value) Int() int64 { return int64(v.num) }

// Float returns a float64's or float32's value.
func (v Value) Float() float64 {
	if v.kind == KindFloat32 {
		return float64(math.Float32frombits(uint32(v.num)))
	}
	return math.Float64frombits(v.num)
}

// Bool returns a boolean's value.
func (v Value) Bool() bool { return v.num != 0 }

// ErrConversion reports a value JsonConverter cannot write with its schema (Java throws a
// DataException and the Connect task fails).
var ErrConversion = errors.New("value does not fit its schema")

// AppendValue appends v with schema s as JsonConverter.convertToJson writes it (compact; struct
// fields in schema order; strings as AppendString; float64 as AppendJSONDouble; float32 as
// AppendJSONFloat; bytes and Decimal as AppendBase64; ints, Date, Time, Timestamp in decimal) and
// returns the extended buffer. A null value is written as s's default when s has one (Connect's
// replace.null.with.default=true, the default), else as null when s is optional; a null value of a
// required schema without default, or a value whose kind does not match s.Type, is an error
// wrapping ErrConversion (where Java fails the task). A nil s accepts any value (schemaless).
func AppendValue(dst []byte, v Value, s *Schema) ([]byte, error) {
	return appendValue(dst, v, s, 0)
}

// appendValue writes v inside depth open containers.
func appendValue(dst []byte, v Value, s *Schema, depth int) ([]byte, error) {
	if v.kind == KindNull {
		if s == nil {
			return append(dst, "null"...), nil
		}
		if s.Default != nil && s.Default.kind != KindNull {
			return appendValue(dst, *s.Default, s, depth)
		}
		if s.Optional {
			return append(dst, "null"...), nil
		}
		return dst, fmt.Errorf("null value for a required %s: %w", s.Type, ErrConversion)
	}
	if s != nil && !kindFits(v.kind, s.Type) {
		return dst, fmt.Errorf("a %s value for a %s schema: %w", kindName(v.kind), s.Type, ErrConversion)
	}
	if (v.kind == KindArray || v.kind == KindStruct || v.kind == KindMap) && depth+1 > maxWriteDepth {
		return dst, errTooDeep()
	}
	var err error
	switch v.kind {
	case KindBool:
		if v.num != 0 {
			return append(dst, "true"...), nil
		}
		return append(dst, "false"...), nil
	case KindInt:
		return strconv.AppendInt(dst, int64(v.num), 10), nil
	case KindFloat64:
		return AppendJSONDouble(dst, math.Float64frombits(v.num)), nil
	case KindFloat32:
		return AppendJSONFloat(dst, math.Float32frombits(uint32(v.num))), nil
	case KindString:
		return appendString(dst, []byte(v.str), v.wtf8), nil
	case KindBytes:
		return AppendBase64(dst, []byte(v.str)), nil
	case KindArray:
		var items *Schema
		if s != nil {
			items = s.Items
		}
		dst = append(dst, '[')
		for i, e := range v.elems {
			if i > 0 {
				dst = append(dst, ',')
			}
			if dst, err = appendValue(dst, e, items, depth+1); err != nil {
				return dst, err
			}
		}
		return append(dst, ']'), nil
	case KindMap:
		return appendMap(dst, v, s, depth)
	case KindStruct:
		if s == nil {
			return dst, fmt.Errorf("a struct value without a schema: %w", ErrConversion)
		}
		if len(v.elems) != len(s.Fields) {
			return dst, fmt.Errorf("a struct value with %d fields for a schema with %d: %w", len(v.elems), len(s.Fields), ErrConversion)
		}
		dst = append(dst, '{')
		for i, f := range s.Fields {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, []byte(f.Name), true)
			dst = append(dst, ':')
			if dst, err = appendValue(dst, v.elems[i], f.Schema, depth+1); err != nil {
				return dst, fmt.Errorf("field %q: %w", f.Name, err)
			}
		}
		return append(dst, '}'), nil
	}
	return dst, fmt.Errorf("unknown value kind %d: %w", v.kind, ErrConversion)
}

// appendMap writes a map as JsonConverter does: a JSON object when the key schema is string (or,
// schemaless, every key is a string), else an array of [key, value] pairs.
func appendMap(dst []byte, v Value, s *Schema, depth int) ([]byte, error) {
	var ks, vs *Schema
	object := true
	if s != nil {
		ks, vs = s.Keys, s.Items
		object = ks != nil && ks.Type == TypeString
	} else {
		for i := 0; i < len(v.elems); i += 2 {
			if v.elems[i].kind != KindString {
				object = false
			}
		}
	}
	var err error
	if object {
		dst = append(dst, '{')
	} else {
		dst = append(dst, '[')
	}
	for i := 0; i < len(v.elems); i += 2 {
		if i > 0 {
			dst = append(dst, ',')
		}
		if object {
			k := v.elems[i]
			if k.kind != KindString {
				return dst, fmt.Errorf("a %s map key for a string key schema: %w", kindName(k.kind), ErrConversion)
			}
			dst = appendString(dst, []byte(k.str), k.wtf8)
			dst = append(dst, ':')
			if dst, err = appendValue(dst, v.elems[i+1], vs, depth+1); err != nil {
				return dst, err
			}
			continue
		}
		if depth+2 > maxWriteDepth {
			return dst, errTooDeep()
		}
		dst = append(dst, '[')
		if dst, err = appendValue(dst, v.elems[i], ks, depth+2); err != nil {
			return dst, err
		}
		dst = append(dst, ',')
		if dst, err = appendValue(dst, v.elems[i+1], vs, depth+1); err != nil {
			return dst, err
		}
		dst = append(dst, ']')
	}
	if object {
		return append(dst, '}'), nil
	}
	return append(dst, ']'), nil
}

func kindFits(k Kind, t Type) bool {
	switch k {
	case KindBool:
		return t == TypeBoolean
	case KindInt:
		return t == TypeInt8 || t == TypeInt16 || t == TypeInt32 || t == TypeInt64
	case KindFloat64:
		return t == TypeFloat64
	case KindFloat32:
		return t == TypeFloat32
	case KindString:
		return t == TypeString
	case KindBytes:
		return t == TypeBytes
	case KindArray:
		return t == TypeArray
	case KindMap:
		return t == TypeMap
	case KindStruct:
		return t == TypeStruct
	}
	return false
}

func kindName(k Kind) string {
	return [...]string{"null", "boolean", "integer", "float64", "float32", "string", "bytes", "array", "map", "struct"}[k]
}

// AppendEnvelope appends JsonConverter's schemas.enable=true form of v: {"schema":…,"payload":…}
// (AppendSchema then AppendValue). Note JsonConverter writes no bytes at all (a Kafka null) when
// both the schema and the value are null; that is the caller's decision, not made here.
func AppendEnvelope(dst []byte, v Value, s *Schema) ([]byte, error) {
	var err error
	dst = append(dst, `{"schema":`...)
	if dst, err = appendSchema(dst, s, "", false, 1); err != nil {
		return dst, err
	}
	dst = append(dst, `,"payload":`...)
	if dst, err = appendValue(dst, v, s, 1); err != nil {
		return dst, err
	}
	return append(dst, '}'), nil
}
