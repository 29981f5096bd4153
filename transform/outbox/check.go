package outbox

import (
	"fmt"
	"slices"
	"strings"

	"github.com/outboxd/outboxd/source"
)

// The router's part of `outboxd check`: whether an outbox table (its columns and their types, as
// the source describes them on its rows) fits the configured options, before any row of it is
// routed. Pure: the caller lists the table's columns.

// CheckTable returns what is wrong with outbox table table for this router, one problem per
// entry, each saying what to change; none when the table fits. cols are the table's columns in
// table order and types their source.Types (parallel to cols; nil: unknown, then only the
// columns' presence is checked):
//
//   - the event id, aggregate id and payload columns (and the aggregate type when the topic is
//     routed by it) exist;
//   - the outbox.headers and outbox.fields columns exist, unless outbox.missing_field is ignore;
//   - a partition placement's column is int32 (Debezium reads it with getInt32 and fails on any
//     other type);
//   - outbox.timestamp: column:<name> names a column of io.debezium.time.Timestamp or
//     MicroTimestamp (TimestampColumnError, timestamp.go; Debezium's table.field.event.timestamp
//     also takes NanoTimestamp, which no outboxd source produces, and fails on others:
//     timestamptz is a ZonedTimestamp string);
//   - an outbox.tracing_column set explicitly exists, unless outbox.missing_field is ignore (the
//     default tracingspancontext applies only where the table has it).
//
// Every one of these would otherwise dead-letter every row of the table.
func (r *Router) CheckTable(table string, cols []string, types []source.Type) []string {
	find := func(col string) (source.Type, bool) {
		i := slices.Index(cols, col)
		if i < 0 {
			return source.Type{}, false
		}
		if i < len(types) {
			return types[i], true
		}
		return source.Type{Kind: source.KindString, Optional: true}, true
	}
	known := types != nil
	var problems []string
	required := []struct{ key, col string }{
		{"outbox.columns.id", r.cfg.IDColumn},
		{"outbox.columns.aggregate_id", r.cfg.AggregateIDColumn},
		{"outbox.columns.payload", r.cfg.PayloadColumn},
	}
	if r.routed || r.re != nil {
		required = append(required, struct{ key, col string }{"outbox.columns.aggregate_type", r.cfg.AggregateTypeColumn})
	}
	for _, q := range required {
		if _, ok := find(q.col); !ok {
			problems = append(problems, fmt.Sprintf("no column %q (%s): add it to %s or set %s to one of its columns (%s)",
				q.col, q.key, table, q.key, strings.Join(cols, ", ")))
		}
	}
	ignore := r.cfg.MissingField == MissingFieldIgnore
	optional := func(key, col string) {
		if _, ok := find(col); !ok && !ignore {
			problems = append(problems, fmt.Sprintf("no column %q (%s): add it to %s, drop it from %s, or set outbox.missing_field: ignore",
				col, key, table, key))
		}
	}
	for _, h := range r.cfg.Headers {
		optional("outbox.headers", h.Column)
	}
	for _, f := range r.cfg.Fields {
		optional("outbox.fields", f.Column)
		if t, ok := find(f.Column); ok && known && f.Placement == PlacementPartition && t.Kind != source.KindInt32 {
			problems = append(problems, fmt.Sprintf("partition column %q is %s, not int32 (Debezium reads a partition placement with getInt32): "+
				"make it integer (PostgreSQL int4, MySQL INT or MEDIUMINT), or drop its partition placement from outbox.fields", f.Column, kindName(t.Kind)))
		}
	}
	if err := r.TimestampColumnError(table, cols, types); err != nil { // timestamp.go
		problems = append(problems, err.Error())
	}
	if r.cfg.TracingColumnSet && r.cfg.TracingColumn != "" {
		optional("outbox.tracing_column", r.cfg.TracingColumn)
	}
	return problems
}

// Columns are the columns the router reads, in the order CheckTable checks them: the event id,
// aggregate id, payload, the aggregate type when the topic is routed by it, then the header,
// outbox.fields, timestamp and tracing columns (each once).
func (r *Router) Columns() []string {
	cols := []string{r.cfg.IDColumn, r.cfg.AggregateIDColumn, r.cfg.PayloadColumn}
	if r.routed || r.re != nil {
		cols = append(cols, r.cfg.AggregateTypeColumn)
	}
	for _, h := range r.cfg.Headers {
		cols = append(cols, h.Column)
	}
	for _, f := range r.cfg.Fields {
		cols = append(cols, f.Column)
	}
	if col, ok := strings.CutPrefix(r.cfg.Timestamp, TimestampColumnPrefix); ok && col != "" {
		cols = append(cols, col)
	}
	if r.cfg.TracingColumnSet && r.cfg.TracingColumn != "" {
		cols = append(cols, r.cfg.TracingColumn)
	}
	var out []string
	for _, c := range cols {
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// Summary is the router's options in one short phrase, for `outboxd check`:
// "encoding json, timestamp commit, header values debezium, fields type:header:eventType".
func (r *Router) Summary() string {
	or := func(v, def string) string {
		if v == "" {
			return def
		}
		return v
	}
	parts := []string{"encoding " + or(r.cfg.Encoding, EncodingRaw)}
	if r.cfg.ExpandJSONPayload {
		parts = append(parts, "expand_json_payload")
	}
	parts = append(parts, "timestamp "+or(r.cfg.Timestamp, TimestampCommit), "header values "+or(r.cfg.HeaderValues, HeaderValuesDebezium))
	if len(r.cfg.Fields) > 0 {
		fs := make([]string, len(r.cfg.Fields))
		for i, f := range r.cfg.Fields {
			fs[i] = f.Column + ":" + f.Placement
			if f.Alias != "" && f.Alias != f.Column {
				fs[i] += ":" + f.Alias
			}
		}
		parts = append(parts, "fields "+strings.Join(fs, ","))
		if r.cfg.MissingField == MissingFieldIgnore {
			parts = append(parts, "missing fields ignored")
		}
	}
	switch {
	case r.cfg.TracingColumnSet && r.cfg.TracingColumn == "":
		parts = append(parts, "tracing off")
	case r.cfg.TracingColumnSet:
		parts = append(parts, "tracing "+r.cfg.TracingColumn)
	case r.cfg.TracingColumn != "":
		parts = append(parts, "tracing "+r.cfg.TracingColumn+" where present")
	}
	if r.cfg.TopicRegex != "" {
		parts = append(parts, "topic_regex "+r.cfg.TopicRegex)
	}
	if r.cfg.TombstoneOnEmptyPayload {
		parts = append(parts, "tombstone on empty payload")
	}
	if r.cfg.NullKey == NullKeyProduce {
		parts = append(parts, "null key produced")
	}
	return strings.Join(parts, ", ")
}
