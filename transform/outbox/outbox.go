// Package outbox turns a captured outbox row into a Kafka record, with the defaults of Debezium's
// Outbox Event Router: topic "outbox.event.${routedByValue}" (routedByValue = the aggregate type),
// key = aggregate id, value = the payload bytes as stored, header "id" = the event id, plus
// configured extra header columns (a NULL column gives a header with a null value, as Debezium).
//
// Route is a pure function of its inputs: no I/O, no clock; its only shared state is a memo of
// topic names per aggregate type (bounded, read lock-free). A Router is safe for concurrent use.
package outbox

import (
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
)

// RoutedByValue is the placeholder in Config.Topic replaced by the aggregate type.
const RoutedByValue = "${routedByValue}"

// Header maps a row column to a record header name.
type Header struct {
	Column string
	Name   string
}

// Config names the outbox columns and the topic template.
type Config struct {
	IDColumn            string
	AggregateTypeColumn string
	AggregateIDColumn   string
	TypeColumn          string
	PayloadColumn       string
	Topic               string // may contain ${routedByValue}
	Headers             []Header

	// TopicRegex is Debezium's route.topic.regex ("" = none: ${routedByValue} is the aggregate
	// type as is). It must match the whole aggregate type and have the group (?<routedByValue>…).
	TopicRegex string
	// TombstoneOnEmptyPayload is route.tombstone.on.empty.payload: a NULL, empty or blank payload
	// gives a record with a null value (a tombstone); false keeps the payload's bytes.
	TombstoneOnEmptyPayload bool
	// NullKey is NullKeyDLQ ("" too) or NullKeyProduce.
	NullKey string

	// Encoding is EncodingRaw ("" too), EncodingJSON or EncodingJSONSchema: the key and value
	// bytes of Kafka Connect's StringConverter, JsonConverter (schemas.enable=false), or
	// JsonConverter with schemas.
	Encoding string
	// ExpandJSONPayload is table.expand.json.payload.
	ExpandJSONPayload bool
	// Fields are table.fields.additional.placement's entries; header placements come after
	// Headers.
	Fields []Field
	// SchemaNamePrefix is Debezium's topic.prefix, the first part of the envelope's schema name
	// under EncodingJSONSchema (<prefix>.<table>.<aggregate type>.Value); "" = none.
	SchemaNamePrefix string
	// MissingField is MissingFieldError ("" too) or MissingFieldIgnore: what a Fields column the
	// row lacks does (table.field.additional.missing).
	MissingField string
	// HeaderValues is HeaderValuesDebezium ("" too: SimpleHeaderConverter's rendering of the
	// column's Connect value) or HeaderValuesText (the database's text form).
	HeaderValues string
	// Timestamp is TimestampCommit ("" too: the source transaction's commit time),
	// TimestampProduce (the producer's clock) or TimestampColumnPrefix+name (the column, as
	// table.field.event.timestamp reads it).
	Timestamp string
	// TracingColumn is the column holding a java.util.Properties trace context
	// (tracing.span.context.field); "" = no tracing. Unless TracingColumnSet, a table without
	// the column is not traced (the default applies only where the column exists).
	TracingColumn    string
	TracingColumnSet bool
}

// Field is one table.fields.additional.placement entry.
type Field struct {
	Column    string
	Placement string // PlacementHeader | PlacementEnvelope | PlacementPartition
	Alias     string // header name or envelope field name ("" = Column)
}

// Option values.
const (
	EncodingRaw        = "raw"
	EncodingJSON       = "json"
	EncodingJSONSchema = "json_schema"

	PlacementHeader    = "header"
	PlacementEnvelope  = "envelope"
	PlacementPartition = "partition"

	MissingFieldError  = "error"
	MissingFieldIgnore = "ignore"

	HeaderValuesDebezium = "debezium"
	HeaderValuesText     = "text"

	TimestampCommit       = "commit"
	TimestampProduce      = "produce"
	TimestampColumnPrefix = "column:"
)

// DefaultConfig returns Debezium's defaults.
func DefaultConfig() Config {
	return Config{
		IDColumn: "id", AggregateTypeColumn: "aggregatetype", AggregateIDColumn: "aggregateid",
		TypeColumn: "type", PayloadColumn: "payload", Topic: "outbox.event." + RoutedByValue,
	}
}

// Error is a permanent transform failure for one row: the row can never become a record, so the
// pipeline dead-letters it. Reason is a stable snake_case code for the DLQ header and metrics.
type Error struct {
	Reason string // missing_column | invalid_topic | invalid_value | invalid_partition | invalid_message
	Column string // the column at fault, when there is one
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

// Router routes rows to records.
type Router struct {
	cfg    Config
	prefix string // topic text before ${routedByValue}
	suffix string // and after it
	routed bool

	re      *regexp.Regexp // Config.TopicRegex, anchored (Java matches()); nil when unset
	reFind  *regexp.Regexp // Config.TopicRegex, unanchored (Java find(), as replaceFirst)
	reGroup int            // index of its routedByValue group

	enc          encoding // encode.go
	envelope     []Field  // the envelope placements of Config.Fields, Alias set
	partitionCol string   // the partition placement's column, "" = none
	envNames     sync.Map // payload schema JSON → envelope schema name (encode.go envelopeName)
	envNamesLen  atomic.Int64

	// topics memoises prefix + aggregate type + suffix for valid topic names, so a row of a known
	// aggregate type costs one map lookup (no allocation, no validation). Copy-on-write: readers
	// load the map without locking; a new aggregate type copies it under topicsMu. At most
	// maxTopics entries (aggregate types are few; an endless stream of new ones is not memoised).
	topics   atomic.Pointer[map[string]string]
	topicsMu sync.Mutex

	hs headerState // headers.go: header columns, record timestamp, tracing

	msg messageShape // message.go: how message rows' content becomes columns
}

const maxTopics = 4096

// New validates cfg and returns a Router.
func New(cfg Config) (*Router, error) {
	for name, v := range map[string]string{"outbox.columns.id": cfg.IDColumn, "outbox.columns.aggregate_id": cfg.AggregateIDColumn,
		"outbox.columns.payload": cfg.PayloadColumn, "outbox.topic": cfg.Topic} {
		if v == "" {
			return nil, fmt.Errorf("%s must not be empty", name)
		}
	}
	r := &Router{cfg: cfg}
	switch cfg.NullKey {
	case "", NullKeyDLQ, NullKeyProduce:
	default:
		return nil, fmt.Errorf("outbox.null_key %q is not one of dlq | produce", cfg.NullKey)
	}
	if err := checkEnums(cfg); err != nil {
		return nil, err
	}
	if cfg.TopicRegex != "" {
		re, find, g, err := compileTopicRegex(cfg.TopicRegex)
		if err != nil {
			return nil, fmt.Errorf("outbox.topic_regex: %w", err)
		}
		if cfg.AggregateTypeColumn == "" {
			return nil, fmt.Errorf("outbox.topic_regex is set but outbox.columns.aggregate_type is empty")
		}
		r.re, r.reFind, r.reGroup = re, find, g
	}
	if i := strings.Index(cfg.Topic, RoutedByValue); i >= 0 {
		if strings.Count(cfg.Topic, RoutedByValue) > 1 {
			return nil, fmt.Errorf("outbox.topic %q: ${routedByValue} may appear once", cfg.Topic)
		}
		if cfg.AggregateTypeColumn == "" {
			return nil, fmt.Errorf("outbox.topic uses ${routedByValue} but outbox.columns.aggregate_type is empty")
		}
		r.routed, r.prefix, r.suffix = true, cfg.Topic[:i], cfg.Topic[i+len(RoutedByValue):]
	} else if err := ValidTopic(cfg.Topic); err != nil {
		return nil, fmt.Errorf("outbox.topic: %w", err)
	}
	if err := r.initEncoding(); err != nil { // encode.go
		return nil, err
	}
	if err := r.initHeaders(); err != nil { // headers.go
		return nil, err
	}
	r.msg = r.newMessageShape() // message.go
	return r, nil
}

// Route builds the record for one row. A *Error means the row can never be delivered; the
// record is then as far as it was built, and carries the `id` header whenever the row has a
// non-NULL event id, so that the row's dead letter can be found by event id. A message row
// (row.Message) is parsed into its column view first and routed as that (message.go); malformed
// content is an *Error with reason invalid_message.
func (r *Router) Route(row *source.Row, commit time.Time) (sink.Record, error) {
	if row.Message {
		return r.routeMessage(row, commit) // message.go
	}
	rec, err := r.route(row, commit)
	if err != nil && len(rec.Headers) == 0 {
		if v, ok := row.Get(r.cfg.IDColumn); ok && !v.Null {
			rec.Headers = []sink.Header{{Key: "id", Value: canonicalID(v.Bytes)}}
		}
	}
	return rec, err
}

func (r *Router) route(row *source.Row, commit time.Time) (sink.Record, error) {
	var rec sink.Record
	get := func(col string, required bool) (source.Value, error) {
		v, ok := row.Get(col)
		if !ok {
			return v, &Error{Reason: "missing_column", Column: col,
				Msg: fmt.Sprintf("table %s has no column %q (check outbox.columns)", row.Table, col)}
		}
		if required && v.Null {
			return v, &Error{Reason: "missing_column", Column: col, Msg: fmt.Sprintf("column %q is NULL", col)}
		}
		return v, nil
	}
	if r.routed || r.re != nil {
		at, err := get(r.cfg.AggregateTypeColumn, true)
		if err != nil {
			return rec, err
		}
		var known map[string]string
		if m := r.topics.Load(); m != nil {
			known = *m
		}
		if t, ok := known[string(at.Bytes)]; ok { // m[string(b)] does not allocate
			rec.Topic = t
		} else {
			if r.re != nil {
				rec.Topic = r.regexTopic(at.Bytes)
			} else {
				rec.Topic = r.prefix + string(at.Bytes) + r.suffix
			}
			if err := ValidTopic(rec.Topic); err != nil {
				return rec, &Error{Reason: "invalid_topic", Column: r.cfg.AggregateTypeColumn, Msg: err.Error()}
			}
			r.memoTopic(string(at.Bytes), rec.Topic)
		}
	} else {
		rec.Topic = r.cfg.Topic // validated by New
	}
	aid, err := get(r.cfg.AggregateIDColumn, r.cfg.NullKey != NullKeyProduce)
	if err != nil {
		return rec, err
	}
	rec.Key = aid.Bytes // nil for NULL (NullKeyProduce): a Kafka null key
	if r.cfg.NullKey == NullKeyProduce && !aid.Null && rec.Key == nil {
		rec.Key = []byte{} // an empty id is a key: only NULL gives the null key
	}
	id, err := get(r.cfg.IDColumn, true)
	if err != nil {
		return rec, err
	}
	payload, err := get(r.cfg.PayloadColumn, false)
	if err != nil {
		return rec, err
	}
	if r.enc != encRaw {
		if err := r.encode(&rec, row, aid, payload); err != nil { // encode.go
			return rec, err
		}
	} else if r.cfg.TombstoneOnEmptyPayload && emptyPayload(payload.Bytes, payload.Null) {
		rec.Value = nil // tombstone
	} else if !payload.Null {
		rec.Value = payload.Bytes
		if rec.Value == nil {
			rec.Value = []byte{}
		}
	}
	if r.partitionCol != "" {
		if err := r.setPartition(&rec, row); err != nil { // fields.go
			return rec, err
		}
	}
	rec.Headers = make([]sink.Header, 0, 1+len(r.hs.cols)) // id, then the header columns (headers.go)
	rec.Headers = append(rec.Headers, sink.Header{Key: "id", Value: canonicalID(id.Bytes)})
	if err := r.appendHeaders(&rec, row); err != nil { // headers.go
		return rec, err
	}
	if rec.Timestamp, err = r.timestamp(row, commit); err != nil { // timestamp.go
		return rec, err
	}
	return rec, nil
}

// field looks up a column of outbox.fields (or outbox.headers): ok false when the row lacks it
// and outbox.missing_field is ignore; a missing_column *Error when it lacks it otherwise.
func (r *Router) field(row *source.Row, col string) (v source.Value, t source.Type, ok bool, err error) {
	v, t, ok = row.Lookup(col)
	if ok {
		return v, t, true, nil
	}
	if r.cfg.MissingField == MissingFieldIgnore {
		return v, t, false, nil
	}
	return v, t, false, &Error{Reason: "missing_column", Column: col,
		Msg: fmt.Sprintf("table %s has no column %q (check outbox.fields and outbox.headers, or set outbox.missing_field: ignore)", row.Table, col)}
}

// memoTopic adds aggregate type at → topic to the memo (copy-on-write), unless it is full.
func (r *Router) memoTopic(at, topic string) {
	r.topicsMu.Lock()
	defer r.topicsMu.Unlock()
	var old map[string]string
	if m := r.topics.Load(); m != nil {
		old = *m
	}
	if _, ok := old[at]; ok || len(old) >= maxTopics {
		return
	}
	m := make(map[string]string, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[at] = topic
	r.topics.Store(&m)
}

// canonicalID renders an event id as canonical lower-case uuid text when it is one (16 raw bytes,
// 32 hex digits, or 36-character uuid text in any case); any other id is passed through as is.
func canonicalID(b []byte) []byte {
	var raw [16]byte
	switch len(b) {
	case 16:
		copy(raw[:], b)
	case 32:
		if _, err := hex.Decode(raw[:], b); err != nil {
			return b
		}
	case 36:
		if b[8] != '-' || b[13] != '-' || b[18] != '-' || b[23] != '-' {
			return b
		}
		lower := true
		for _, c := range b {
			if c >= 'A' && c <= 'F' {
				lower = false
			}
		}
		if lower {
			return b // the common case: already canonical, no allocation
		}
		var h [32]byte
		copy(h[:], b[0:8])
		copy(h[8:], b[9:13])
		copy(h[12:], b[14:18])
		copy(h[16:], b[19:23])
		copy(h[20:], b[24:36])
		if _, err := hex.Decode(raw[:], h[:]); err != nil {
			return b
		}
	default:
		return b
	}
	out := make([]byte, 36)
	hex.Encode(out[0:8], raw[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], raw[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], raw[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], raw[8:10])
	out[23] = '-'
	hex.Encode(out[24:], raw[10:])
	return out
}

// ValidTopic checks a Kafka topic name (see sink.ValidTopic).
func ValidTopic(name string) error { return sink.ValidTopic(name) }

// ReasonCode returns the stable snake_case reason used in DLQ headers and metrics.
func (e *Error) ReasonCode() string { return e.Reason }

// checkEnums checks the options that take one of a few values ("" is each one's default).
func checkEnums(cfg Config) error {
	for _, o := range []struct {
		key, v string
		ok     []string
	}{
		{"outbox.encoding", cfg.Encoding, []string{EncodingRaw, EncodingJSON, EncodingJSONSchema}},
		{"outbox.missing_field", cfg.MissingField, []string{MissingFieldError, MissingFieldIgnore}},
		{"outbox.header_values", cfg.HeaderValues, []string{HeaderValuesDebezium, HeaderValuesText}},
	} {
		if o.v != "" && !slices.Contains(o.ok, o.v) {
			return fmt.Errorf("%s %q is not one of %s", o.key, o.v, strings.Join(o.ok, " | "))
		}
	}
	if ts := cfg.Timestamp; ts != "" && ts != TimestampCommit && ts != TimestampProduce &&
		(!strings.HasPrefix(ts, TimestampColumnPrefix) || ts == TimestampColumnPrefix) {
		return fmt.Errorf("outbox.timestamp %q is not one of commit | produce | column:<name>", ts)
	}
	for i, f := range cfg.Fields {
		if f.Column == "" {
			return fmt.Errorf("outbox.fields[%d]: the column is empty", i)
		}
		if !slices.Contains([]string{PlacementHeader, PlacementEnvelope, PlacementPartition}, f.Placement) {
			return fmt.Errorf("outbox.fields[%d].placement %q is not one of header | envelope | partition", i, f.Placement)
		}
	}
	return nil
}
