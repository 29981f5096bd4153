package connectjson

import (
	"fmt"
	"strconv"
)

// Type is a Kafka Connect schema type (org.apache.kafka.connect.data.Schema.Type), named as Connect
// names it.
type Type string

// The Connect schema types. AppendSchema writes TypeFloat32 as "float" and TypeFloat64 as "double",
// as JsonConverter does; the others under their own name.
const (
	TypeBoolean Type = "boolean"
	TypeInt8    Type = "int8"
	TypeInt16   Type = "int16"
	TypeInt32   Type = "int32"
	TypeInt64   Type = "int64"
	TypeFloat32 Type = "float32"
	TypeFloat64 Type = "float64"
	TypeBytes   Type = "bytes"
	TypeString  Type = "string"
	TypeArray   Type = "array"
	TypeMap     Type = "map"
	TypeStruct  Type = "struct"
)

// Logical type names JsonConverter renders specially (AppendValue): Decimal is a Bytes value holding
// the unscaled two's-complement bytes (see DecimalUnscaled), written as Base64 (decimal.format=BASE64,
// the default); Date (int32 days), Time (int32 ms) and Timestamp (int64 ms) are Int values.
const (
	DecimalName   = "org.apache.kafka.connect.data.Decimal"
	DateName      = "org.apache.kafka.connect.data.Date"
	TimeName      = "org.apache.kafka.connect.data.Time"
	TimestampName = "org.apache.kafka.connect.data.Timestamp"
)

// Schema is a Kafka Connect schema, as much of it as JsonConverter writes. The zero value is not
// valid (Type is required). Schemas are values to read: never modify one after handing it out.
type Schema struct {
	Type     Type
	Optional bool
	// Name is the schema name; "" means none unless NameSet (Connect distinguishes a null name from
	// an empty one, and Debezium's JSON expansion can produce an empty one).
	Name    string
	NameSet bool
	// Version is written when VersionSet.
	Version    int32
	VersionSet bool
	// Doc is written when not "".
	Doc string
	// Parameters in insertion order (Connect keeps them in a LinkedHashMap); nil means none, an
	// empty non-nil slice is written as "parameters":{} as Connect writes an empty map.
	Parameters []Param
	// Default is the default value, nil for none. JsonConverter writes it as "default" and, with
	// replace.null.with.default=true (its default), writes it instead of a null value.
	Default *Value
	// Fields of a struct, in order.
	Fields []Field
	// Items is an array's element schema or a map's value schema.
	Items *Schema
	// Keys is a map's key schema.
	Keys *Schema
}

// Field is one field of a struct schema.
type Field struct {
	Name   string
	Schema *Schema
}

// Param is one schema parameter.
type Param struct {
	Key, Value string
}

// jsonTypeName is the "type" JsonConverter writes for t.
func jsonTypeName(t Type) string {
	switch t {
	case TypeFloat32:
		return "float"
	case TypeFloat64:
		return "double"
	}
	return string(t)
}

// AppendSchema appends s as JsonConverter.asJsonSchema writes it (compact, Jackson's escaping) and
// returns the extended buffer. Keys come in JsonConverter's order:
//
//	primitive: type, optional, name, version, doc, parameters, default
//	array:     type, items, optional, name, …
//	map:       type, keys, values, optional, name, …
//	struct:    type, fields, optional, name, …  (each field: its schema's keys, then "field")
//
// e.g. {"type":"struct","fields":[{"type":"string","optional":false,"field":"id"}],"optional":false,"name":"n"}.
// A nil s appends null (the envelope of a schemaless value). A Default value is written with
// AppendValue's rules; an error there is returned.
func AppendSchema(dst []byte, s *Schema) ([]byte, error) {
	return appendSchema(dst, s, "", false, 0)
}

// maxWriteDepth is Jackson's StreamWriteConstraints.DEFAULT_MAX_DEPTH: a generator refuses to open
// a 1001st nested array or object.
const maxWriteDepth = 1000

func errTooDeep() error {
	return fmt.Errorf("JSON nesting deeper than %d (Jackson's StreamWriteConstraints): %w", maxWriteDepth, ErrConversion)
}

// appendSchema writes s inside depth open containers; isField adds the "field" key of a struct
// field schema.
func appendSchema(dst []byte, s *Schema, field string, isField bool, depth int) ([]byte, error) {
	if s == nil {
		return append(dst, "null"...), nil
	}
	if depth+1 > maxWriteDepth || depth+2 > maxWriteDepth && (s.Type == TypeStruct || s.Parameters != nil) {
		return dst, errTooDeep()
	}
	var err error
	dst = append(dst, `{"type":`...)
	dst = AppendString(dst, []byte(jsonTypeName(s.Type)))
	switch s.Type {
	case TypeArray:
		dst = append(dst, `,"items":`...)
		if dst, err = appendSchema(dst, s.Items, "", false, depth+1); err != nil {
			return dst, err
		}
	case TypeMap:
		dst = append(dst, `,"keys":`...)
		if dst, err = appendSchema(dst, s.Keys, "", false, depth+1); err != nil {
			return dst, err
		}
		dst = append(dst, `,"values":`...)
		if dst, err = appendSchema(dst, s.Items, "", false, depth+1); err != nil {
			return dst, err
		}
	case TypeStruct:
		dst = append(dst, `,"fields":[`...)
		for i, f := range s.Fields {
			if i > 0 {
				dst = append(dst, ',')
			}
			if dst, err = appendSchema(dst, f.Schema, f.Name, true, depth+2); err != nil {
				return dst, err
			}
		}
		dst = append(dst, ']')
	}
	if s.Optional {
		dst = append(dst, `,"optional":true`...)
	} else {
		dst = append(dst, `,"optional":false`...)
	}
	if s.Name != "" || s.NameSet {
		dst = append(dst, `,"name":`...)
		dst = appendString(dst, []byte(s.Name), true)
	}
	if s.VersionSet {
		dst = append(dst, `,"version":`...)
		dst = strconv.AppendInt(dst, int64(s.Version), 10)
	}
	if s.Doc != "" {
		dst = append(dst, `,"doc":`...)
		dst = AppendString(dst, []byte(s.Doc))
	}
	if s.Parameters != nil {
		dst = append(dst, `,"parameters":{`...)
		for i, p := range s.Parameters {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = AppendString(dst, []byte(p.Key))
			dst = append(dst, ':')
			dst = AppendString(dst, []byte(p.Value))
		}
		dst = append(dst, '}')
	}
	if s.Default != nil {
		dst = append(dst, `,"default":`...)
		if dst, err = appendValue(dst, *s.Default, s, depth+1); err != nil {
			return dst, err
		}
	}
	if isField {
		dst = append(dst, `,"field":`...)
		dst = appendString(dst, []byte(field), true)
	}
	return append(dst, '}'), nil
}
