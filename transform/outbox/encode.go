package outbox

import (
	"errors"
	"fmt"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
	"github.com/outboxd/outboxd/transform/connectjson"
)

// encoding is Config.Encoding, parsed.
type encoding uint8

const (
	encRaw        encoding = iota // StringConverter: the column bytes as they are (today's path)
	encJSON                       // JsonConverter, schemas.enable=false
	encJSONSchema                 // JsonConverter, schemas.enable=true
)

// envelopePayload is the envelope's payload field (EventRouterDelegate.ENVELOPE_PAYLOAD).
const envelopePayload = "payload"

// initEncoding checks and prepares the encoding options of r.cfg (called once by New):
// outbox.encoding, outbox.expand_json_payload and the envelope and partition placements of
// outbox.fields (header placements are initHeaders').
func (r *Router) initEncoding() error {
	switch r.cfg.Encoding {
	case "", EncodingRaw:
		r.enc = encRaw
	case EncodingJSON:
		r.enc = encJSON
	case EncodingJSONSchema:
		r.enc = encJSONSchema
	}
	aliases := map[string]bool{envelopePayload: true}
	for i, f := range r.cfg.Fields {
		alias := f.Alias
		if alias == "" {
			alias = f.Column
		}
		switch f.Placement {
		case PlacementEnvelope:
			if aliases[alias] {
				return fmt.Errorf("outbox.fields[%d]: envelope field %q is already in the envelope (the payload is %q): give it another alias",
					i, alias, envelopePayload)
			}
			aliases[alias] = true
			r.envelope = append(r.envelope, Field{Column: f.Column, Placement: f.Placement, Alias: alias})
		case PlacementPartition:
			if r.partitionCol != "" {
				return fmt.Errorf("outbox.fields[%d]: a second partition placement (column %q; %q is the first): a record has one partition, keep one",
					i, f.Column, r.partitionCol)
			}
			r.partitionCol = f.Column
		}
	}
	if r.enc == encRaw {
		if r.cfg.ExpandJSONPayload {
			return fmt.Errorf("outbox.expand_json_payload needs outbox.encoding json or json_schema: with raw " +
				"(Debezium's StringConverter) an expanded payload is printed as a Connect Struct's toString(), " +
				"which outboxd does not reproduce; set outbox.encoding: json (or json_schema), or drop outbox.expand_json_payload")
		}
		if len(r.envelope) > 0 {
			return fmt.Errorf("outbox.fields: placement envelope (column %q) needs outbox.encoding json or json_schema: "+
				"with raw (StringConverter) Debezium's envelope is a Struct's toString(); set outbox.encoding, or place the column in a header",
				r.envelope[0].Column)
		}
	}
	return nil
}

// encode sets rec.Key and rec.Value for the json and json_schema encodings: the bytes Kafka
// Connect's JsonConverter writes for Debezium's key and value (EventRouterDelegate.apply), each
// with its column's Connect schema. rec's topic is set.
func (r *Router) encode(rec *sink.Record, row *source.Row, aid source.Value, payload source.Value) error {
	_, aidType, _ := row.Lookup(r.cfg.AggregateIDColumn)
	_, payloadType, _ := row.Lookup(r.cfg.PayloadColumn)
	kv, err := columnValue(r.cfg.AggregateIDColumn, aid, aidType)
	if err != nil {
		return err
	}
	if rec.Key, err = r.write(kv, columnSchema(aidType)); err != nil {
		return err
	}

	// route.tombstone.on.empty.payload: Debezium's isDeleteEvent is payload.toString().trim()
	// empty, which a bytes payload (byte[].toString) never is.
	if r.cfg.TombstoneOnEmptyPayload && payloadType.Kind != source.KindBytes && emptyPayload(payload.Bytes, payload.Null) {
		rec.Value = nil
		return nil
	}
	pv, err := columnValue(r.cfg.PayloadColumn, payload, payloadType)
	if err != nil {
		return err
	}
	ps := columnSchema(payloadType)
	if r.cfg.ExpandJSONPayload && !payload.Null && stringKind(payloadType.Kind) {
		ev, es, err := connectjson.Expand(payload.Bytes, connectjson.ExpandOptions{Name: r.cfg.PayloadColumn})
		switch {
		case err == nil:
			pv, ps = ev, es
		case errors.Is(err, connectjson.ErrNotExpanded):
			// Debezium logs a warning and keeps the string (and its schema).
		case errors.Is(err, connectjson.ErrSchemaless) && len(r.envelope) == 0:
			ps = nil // the string with a null schema
		default:
			// Debezium's task fails on this row (a DataException converting it, or an envelope
			// field without a schema): dead-letter it.
			return &Error{Reason: "invalid_value", Column: r.cfg.PayloadColumn,
				Msg: fmt.Sprintf("payload %q cannot be expanded as Debezium's table.expand.json.payload does (%v): Debezium would fail its task on this row; fix the row or turn outbox.expand_json_payload off", r.cfg.PayloadColumn, err)}
		}
	}
	if len(r.envelope) == 0 {
		rec.Value, err = r.write(pv, ps)
		return err
	}
	return r.encodeEnvelope(rec, row, pv, ps)
}

// stringKind: the Kinds whose Connect value is a Java String (expand applies to those only).
func stringKind(k source.Kind) bool {
	switch k {
	case source.KindString, source.KindJSON, source.KindUUID, source.KindZonedTimestamp:
		return true
	}
	return false
}

// write is JsonConverter.fromConnectData for a value v with schema s: v's JSON (json), or
// {"schema":…,"payload":…} (json_schema). A null value is written too (JsonConverter writes no
// bytes only when schema and value are both null, and a null value always has a schema here).
func (r *Router) write(v connectjson.Value, s *connectjson.Schema) ([]byte, error) {
	var out []byte
	var err error
	if r.enc == encJSONSchema {
		out, err = connectjson.AppendEnvelope(nil, v, s)
	} else {
		out, err = connectjson.AppendValue(nil, v, s)
	}
	if err != nil {
		return nil, &Error{Reason: "invalid_value", Msg: fmt.Sprintf("cannot encode the record as JsonConverter does: %v", err)}
	}
	return out, nil
}

// encodeEnvelope sets rec.Value to Debezium's envelope: a Struct {payload, alias…} in
// outbox.fields order (ERD getSchemaBuilder), each field with its column's Connect schema and
// value. A column the row lacks is an error, or left out of schema and value with
// outbox.missing_field: ignore.
func (r *Router) encodeEnvelope(rec *sink.Record, row *source.Row, pv connectjson.Value, ps *connectjson.Schema) error {
	s := &connectjson.Schema{Type: connectjson.TypeStruct, Fields: make([]connectjson.Field, 1, 1+len(r.envelope))}
	if r.enc == encJSONSchema { // the name is only visible with schemas
		var err error
		if s.Name, err = r.envelopeName(row, ps); err != nil {
			return err
		}
	}
	s.Fields[0] = connectjson.Field{Name: envelopePayload, Schema: ps}
	vals := make([]connectjson.Value, 1, 1+len(r.envelope))
	vals[0] = pv
	for _, f := range r.envelope {
		v, t, ok, err := r.field(row, f.Column)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		cv, err := columnValue(f.Column, v, t)
		if err != nil {
			return err
		}
		s.Fields = append(s.Fields, connectjson.Field{Name: f.Alias, Schema: columnSchema(t)})
		vals = append(vals, cv)
	}
	var err error
	rec.Value, err = r.write(connectjson.Struct(vals), s)
	return err
}

// envelopeName is the envelope's schema name as Debezium gives it: ERD.getValueSchema caches the
// envelope schema per payload schema (payloadSchemaCache, 10000 entries), so every record whose
// payload has the same Connect schema carries the name built for the first such record since
// the task started, whatever its own aggregate type. With a json/jsonb payload (one schema for
// every row) that is the first row's aggregate type since outboxd started. Beyond
// maxEnvelopeNames payload schemas, names are built per row.
func (r *Router) envelopeName(row *source.Row, ps *connectjson.Schema) (string, error) {
	k, err := connectjson.AppendSchema(nil, ps)
	if err != nil {
		return "", &Error{Reason: "invalid_value", Column: r.cfg.PayloadColumn, Msg: fmt.Sprintf("payload schema: %v", err)}
	}
	if n, ok := r.envNames.Load(string(k)); ok {
		return n.(string), nil
	}
	name := r.envelopeSchemaName(row)
	if r.envNamesLen.Load() >= maxEnvelopeNames {
		return name, nil
	}
	n, loaded := r.envNames.LoadOrStore(string(k), name)
	if !loaded {
		r.envNamesLen.Add(1)
	}
	return n.(string), nil
}

const maxEnvelopeNames = 10000

// envelopeSchemaName is ERD.getSchemaName: the change event's value schema name
// (<topic.prefix>.<schema>.<table>.Value, <prefix>.<db>.<table>.Value on MySQL) with the row's
// route value (the aggregate type as stored, not the final topic) before the last part.
func (r *Router) envelopeSchemaName(row *source.Row) string {
	routed := "null" // Java's string concatenation of a null getString
	if r.cfg.AggregateTypeColumn != "" {
		if v, ok := row.Get(r.cfg.AggregateTypeColumn); ok && !v.Null {
			routed = string(v.Bytes)
		}
	}
	name := row.Table + "." + routed + ".Value"
	if r.cfg.SchemaNamePrefix != "" {
		name = r.cfg.SchemaNamePrefix + "." + name
	}
	return name
}
