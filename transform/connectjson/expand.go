package connectjson

import (
	"errors"
	"fmt"
)

// Behaviours of Debezium's table.json.payload.null.behavior and
// table.json.payload.empty.array.behavior ("" is the default, ignore).
const (
	NullIgnore               = "ignore"
	NullOptionalBytes        = "optional_bytes"
	EmptyArrayIgnore         = "ignore"
	EmptyArrayOptionalString = "optional_string"
)

// ExpandOptions are the EventRouter options that shape an expanded payload.
type ExpandOptions struct {
	// Name is the payload column's name (table.field.event.payload, default "payload"): Debezium
	// names the top-level struct schema after it and nested structs by their dotted path
	// ("payload.lineItems").
	Name string
	// NullBehavior: NullIgnore ("" too) drops fields whose value is null; NullOptionalBytes keeps
	// them with an optional bytes schema.
	NullBehavior string
	// EmptyArrayBehavior: EmptyArrayIgnore ("" too) drops fields whose value is an empty array;
	// EmptyArrayOptionalString keeps them as arrays of optional strings. The option
	// (table.json.payload.empty.array.behavior, dbz#921) is newer than Debezium 3.6.1, which always
	// ignores; pass EmptyArrayIgnore to match 3.6.1.
	EmptyArrayBehavior string
}

// ErrNotExpanded reports a payload Debezium leaves as it is (its String value and its schema),
// logging "JSON expansion failed": it does not start with '{' or '[' (no trimming: leading
// whitespace counts), Jackson cannot parse it, or the schema cannot be inferred (an array mixing
// JSON types or number kinds, an array whose elements are all null, an array of empty arrays, a
// field with an empty name).
var ErrNotExpanded = errors.New("payload not expanded")

// ErrSchemaless reports a payload for which Debezium keeps the String value but drops its schema
// (a top-level empty array with EmptyArrayIgnore): JsonConverter then writes the string with a null
// schema.
var ErrSchemaless = errors.New("payload kept as a string without a schema")

// ErrRecordFails reports a payload whose schema Debezium infers but whose value does not fit it
// (a top-level array, an integer beyond int64, array elements of conflicting types, a null element
// in an array of differently shaped objects): Debezium replaces the payload's schema but keeps the
// String value, and the record then fails to convert (DataException), which stops the Connect
// task. Expand also returns it past its memory caps (see Expand).
var ErrRecordFails = errors.New("expanded payload fails to convert in Debezium")

// Expand expands payload as Debezium's EventRouter does with table.expand.json.payload=true
// (EventRouterDelegate.parseJsonPayload, then JsonSchemaData.toConnectSchema and toConnectData)
// and returns the value and its schema, to be written with AppendValue / AppendEnvelope.
//
// payload is the column's text (UTF-8; invalid bytes are read as Java decodes them, see
// AppendString). It is parsed as Jackson's ObjectMapper.readTree does by default: content after
// the first complete value is ignored, a duplicate key keeps its first position and takes the last
// value, nesting deeper than 1000 and numbers longer than 1000 characters are parse errors.
// Inference: strings → optional string, booleans → optional boolean, integers fitting int32 →
// optional int32, else fitting int64 → optional int64, other numbers → optional float64, objects →
// optional struct named by their key path with fields in document order, arrays → optional array
// of the first non-null element's schema (for objects, the merge of all elements' schemas: fields
// of the first, then new fields of the others; such a merged struct is not optional, as Connect's
// SchemaUtil.copySchemaBasics does not copy optionality), nulls and empty arrays per
// ExpandOptions. When the elements' struct schemas differ, Java merges them in HashSet order,
// which varies between JVM runs (it hashes an enum's identity); Expand merges them in document
// order, one of the orders Java may pick.
//
// Errors: ErrNotExpanded, ErrSchemaless or ErrRecordFails (wrapped, with the reason). Expand never
// panics; it allocates in proportion to len(payload), plus the struct names (key paths: at most
// nesting depth × len(payload), capped at 64 MiB, beyond which the record fails — Debezium has no
// cap), plus, for arrays of objects with differing schemas, elements × merged fields (as Java
// does; capped at 16 field slots per payload byte, beyond which the record fails, ErrRecordFails).
func Expand(payload []byte, o ExpandOptions) (Value, *Schema, error) {
	return expand(payload, o, false)
}

func expand(payload []byte, o ExpandOptions, reverse bool) (Value, *Schema, error) {
	if len(payload) == 0 || payload[0] != '{' && payload[0] != '[' {
		return Value{}, nil, fmt.Errorf("%w: it does not start with '{' or '['", ErrNotExpanded)
	}
	p := parser{s: JavaString(payload)}
	root, err := p.value(0)
	if err != nil {
		return Value{}, nil, fmt.Errorf("%w: %v", ErrNotExpanded, err)
	}
	inf := inferrer{nullBytes: o.NullBehavior == NullOptionalBytes, emptyString: o.EmptyArrayBehavior == EmptyArrayOptionalString, reverse: reverse}
	s, err := inf.schema(o.Name, false, root)
	if errors.Is(err, errNamesTooLong) {
		return Value{}, nil, fmt.Errorf("%w: %v", ErrRecordFails, err)
	}
	if err != nil {
		return Value{}, nil, fmt.Errorf("%w: %v", ErrNotExpanded, err)
	}
	if s == nil {
		return Value{}, nil, fmt.Errorf("%w: the payload is an empty array", ErrSchemaless)
	}
	if s.Type != TypeStruct {
		return Value{}, nil, fmt.Errorf("%w: the payload is not a JSON object (Connect: \"Not a struct schema\")", ErrRecordFails)
	}
	b := builder{slots: 16*len(payload) + 1<<16}
	v, err := b.structValue(root, s)
	if err != nil {
		return Value{}, nil, fmt.Errorf("%w: %v", ErrRecordFails, err)
	}
	return v, s, nil
}

var errNamesTooLong = errors.New("the struct schema names (dotted key paths) exceed 64 MiB in total")

var (
	optString  = &Schema{Type: TypeString, Optional: true}
	optBool    = &Schema{Type: TypeBoolean, Optional: true}
	optInt32   = &Schema{Type: TypeInt32, Optional: true}
	optInt64   = &Schema{Type: TypeInt64, Optional: true}
	optFloat64 = &Schema{Type: TypeFloat64, Optional: true}
	optBytes   = &Schema{Type: TypeBytes, Optional: true}
)

type inferrer struct {
	nullBytes, emptyString bool
	// reverse merges an array's distinct element schemas last-seen first: the other order Java's
	// HashSet may iterate them in (tests only).
	reverse bool
	// nameBytes counts the bytes of the struct names built so far (dotted key paths grow with
	// depth × key length), against maxNameBytes.
	nameBytes int
}

// maxNameBytes bounds the total length of the struct schema names one expansion builds. Debezium
// has no such bound (a deep payload with long keys makes it build huge names, or run out of
// memory); outboxd fails such a record instead (ErrRecordFails).
const maxNameBytes = 64 << 20

// schema is JsonSchemaData.toConnectSchema; keyNull is Java's key == null. A nil schema (no
// error) is Java's null: the field is dropped.
func (in *inferrer) schema(key string, keyNull bool, n *node) (*Schema, error) {
	switch n.t {
	case nodeString:
		return optString, nil
	case nodeBool:
		return optBool, nil
	case nodeNumber:
		return numberSchema(n), nil
	case nodeArray:
		if len(n.elems) == 0 {
			if in.emptyString {
				return &Schema{Type: TypeArray, Optional: true, Items: optString}, nil
			}
			return nil, nil
		}
		items, err := in.arrayItems(key, keyNull, n)
		if err != nil {
			return nil, err
		}
		return &Schema{Type: TypeArray, Optional: true, Items: items}, nil
	case nodeObject:
		if in.nameBytes += len(key); in.nameBytes > maxNameBytes {
			return nil, errNamesTooLong
		}
		s := &Schema{Type: TypeStruct, Optional: true, Name: key, NameSet: !keyNull}
		prefix := ""
		if !keyNull && !javaBlank(key) {
			prefix = key + "."
		}
		for i, k := range n.keys {
			fs, err := in.schema(prefix+k, false, n.elems[i])
			if err != nil {
				return nil, err
			}
			if fs != nil {
				if k == "" {
					// SchemaBuilder.field: "fieldName cannot be null."
					return nil, errors.New("a field with an empty name")
				}
				s.Fields = append(s.Fields, Field{Name: k, Schema: fs})
			}
		}
		return s, nil
	case nodeNull:
		if in.nullBytes {
			return optBytes, nil
		}
	}
	return nil, nil
}

func numberSchema(n *node) *Schema {
	switch n.num {
	case numInt32:
		return optInt32
	case numInt64:
		return optInt64
	}
	return optFloat64
}

// javaBlank is Debezium's Strings.isNullOrBlank for a non-null string: trim() removes every char
// up to U+0020.
func javaBlank(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] > ' ' {
			return false
		}
	}
	return true
}

// arrayItems is JsonSchemaData.toConnectSchemaWithCycles with getFirstArrayElement.
func (in *inferrer) arrayItems(key string, keyNull bool, n *node) (*Schema, error) {
	var ref *node
	for _, e := range n.elems {
		if e.t == nodeNull {
			continue
		}
		if ref == nil {
			ref = e
		}
		if e.t != ref.t {
			return nil, errors.New("field is not a homogenous array")
		}
		if ref.t == nodeNumber && numberSchema(e) != numberSchema(ref) {
			return nil, errors.New("field is not a homogenous array: different number types")
		}
	}
	if ref == nil {
		ref = &node{t: nodeNull}
	}
	if ref.t != nodeObject {
		s, err := in.schema("", true, ref)
		if err != nil {
			return nil, err
		}
		if s == nil {
			return nil, errors.New("array has unrecognized member schema")
		}
		return s, nil
	}
	// Java collects the element schemas in a HashSet: equal schemas count once.
	var distinct []*Schema
	byHash := map[uint64][]*Schema{}
	for _, e := range n.elems {
		if e.t != nodeObject {
			continue
		}
		s, err := in.schema(key, keyNull, e)
		if err != nil {
			return nil, err
		}
		h := schemaHash(s)
		dup := false
		for _, d := range byHash[h] {
			if schemaEqual(d, s) {
				dup = true
				break
			}
		}
		if !dup {
			byHash[h] = append(byHash[h], s)
			distinct = append(distinct, s)
		}
	}
	if in.reverse {
		for i, j := 0, len(distinct)-1; i < j; i, j = i+1, j-1 {
			distinct[i], distinct[j] = distinct[j], distinct[i]
		}
	}
	return mergeSchemas(distinct), nil
}

// mergeSchemas folds JsonSchemaData.mergeSchema over the schemas (nil for none): one schema is
// returned as it is; two or more give the first's fields, then each later schema's new fields (a
// bytes field — a null under NullOptionalBytes — gives way to a later non-bytes one, in place),
// under the first's name, version, doc and parameters but not its optionality
// (SchemaUtil.copySchemaBasics).
func mergeSchemas(schemas []*Schema) *Schema {
	if len(schemas) == 0 {
		return nil
	}
	left := schemas[0]
	if len(schemas) == 1 {
		return left
	}
	fields := append([]Field(nil), left.Fields...)
	at := make(map[string]int, len(fields))
	for i, f := range fields {
		at[f.Name] = i
	}
	for _, right := range schemas[1:] {
		for _, f := range right.Fields {
			i, found := at[f.Name]
			if !found {
				at[f.Name] = len(fields)
				fields = append(fields, f)
				continue
			}
			if old := fields[i]; !schemaEqual(old.Schema, f.Schema) && old.Schema.Type == TypeBytes && f.Schema.Type != TypeBytes {
				fields[i] = f
			}
		}
	}
	return &Schema{Type: left.Type, Name: left.Name, NameSet: left.NameSet, Version: left.Version,
		VersionSet: left.VersionSet, Doc: left.Doc, Parameters: left.Parameters, Fields: fields}
}

// schemaEqual is ConnectSchema.equals (fields compared by name, position and schema).
func schemaEqual(a, b *Schema) bool {
	if a == b {
		return true
	}
	if a == nil || b == nil {
		return false
	}
	if a.Type != b.Type || a.Optional != b.Optional || a.Name != b.Name || a.NameSet != b.NameSet ||
		a.VersionSet != b.VersionSet || a.Version != b.Version || a.Doc != b.Doc ||
		(a.Default == nil) != (b.Default == nil) || len(a.Fields) != len(b.Fields) ||
		(a.Parameters == nil) != (b.Parameters == nil) || len(a.Parameters) != len(b.Parameters) {
		return false
	}
	for i := range a.Fields {
		if a.Fields[i].Name != b.Fields[i].Name || !schemaEqual(a.Fields[i].Schema, b.Fields[i].Schema) {
			return false
		}
	}
	for i := range a.Parameters {
		if a.Parameters[i] != b.Parameters[i] {
			return false
		}
	}
	return schemaEqual(a.Items, b.Items) && schemaEqual(a.Keys, b.Keys)
}

// schemaHash is a shallow FNV-1a hash of a struct schema (its fields' names and types): enough to
// bucket element schemas for schemaEqual, and O(fields) so that nested arrays stay linear.
func schemaHash(s *Schema) uint64 {
	h := uint64(14695981039346656037)
	mix := func(b string) {
		for i := 0; i < len(b); i++ {
			h ^= uint64(b[i])
			h *= 1099511628211
		}
		h ^= 0xFF
		h *= 1099511628211
	}
	for _, f := range s.Fields {
		mix(f.Name)
		mix(string(f.Schema.Type))
	}
	return h
}

// builder builds the expanded value; slots is what is left of the struct field slots it may
// allocate. An array of n objects with distinct keys gives every element all n merged fields (Java
// does the same), so a small payload could otherwise demand n² values.
type builder struct {
	slots int
}

// structValue is JsonSchemaData.jsonNodeToStructInternal plus Connect's Struct.put validation: a
// field absent from the document stays null.
func (b *builder) structValue(n *node, s *Schema) (Value, error) {
	if b.slots -= len(s.Fields); b.slots < 0 {
		return Value{}, errors.New("the merged struct fields exceed outboxd's limit of 16 per payload byte (Debezium would build them all)")
	}
	fields := make([]Value, len(s.Fields))
	for i, f := range s.Fields {
		c, ok := n.get(f.Name)
		if !ok {
			continue
		}
		v, err := b.fieldValue(c, f.Schema)
		if err != nil {
			return Value{}, fmt.Errorf("field %q: %w", f.Name, err)
		}
		fields[i] = v
	}
	return Struct(fields), nil
}

// fieldValue is JsonSchemaData.getStructFieldValue with ConnectSchema.validateValue.
func (b *builder) fieldValue(n *node, s *Schema) (Value, error) {
	var v Value
	switch n.t {
	case nodeNull:
		if !s.Optional {
			return Value{}, errors.New("null value for a required field")
		}
		return Null(), nil
	case nodeString:
		v = Value{kind: KindString, str: n.s, wtf8: true}
	case nodeBool:
		v = Bool(n.b)
	case nodeNumber:
		switch n.num {
		case numDouble:
			v = Float64(n.f)
		case numInt32, numInt64:
			v = Int(n.i)
			if n.num == numInt32 && s.Type != TypeInt32 || n.num == numInt64 && s.Type != TypeInt64 {
				return Value{}, fmt.Errorf("an integer (%s) for a %s schema", n.s, s.Type)
			}
		default:
			return Value{}, fmt.Errorf("integer %s does not fit int64 (a BigDecimal for a %s schema)", n.s, s.Type)
		}
	case nodeArray:
		if s.Type != TypeArray {
			return Value{}, fmt.Errorf("an array for a %s schema", s.Type)
		}
		elems := make([]Value, len(n.elems))
		for i, e := range n.elems {
			ev, err := b.fieldValue(e, s.Items)
			if err != nil {
				return Value{}, fmt.Errorf("element %d: %w", i, err)
			}
			elems[i] = ev
		}
		return Array(elems), nil
	case nodeObject:
		if s.Type != TypeStruct {
			return Value{}, fmt.Errorf("an object for a %s schema", s.Type)
		}
		return b.structValue(n, s)
	}
	if !kindFits(v.kind, s.Type) {
		return Value{}, fmt.Errorf("a %s for a %s schema", kindName(v.kind), s.Type)
	}
	return v, nil
}
