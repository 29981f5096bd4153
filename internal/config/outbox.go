package config

import "github.com/outboxd/outboxd/transform/outbox"

// DefaultTracingColumn is Debezium's tracing.span.context.field default, used when the table has it.
const DefaultTracingColumn = "tracingspancontext"

// OutboxConfig is the router's configuration from c's outbox section (defaults applied): the one
// place that maps outbox.* keys to transform/outbox.
func OutboxConfig(c *Config) outbox.Config {
	o := &c.Outbox
	oc := outbox.Config{IDColumn: o.Columns.ID, AggregateTypeColumn: o.Columns.AggregateType,
		AggregateIDColumn: o.Columns.AggregateID, TypeColumn: o.Columns.Type,
		PayloadColumn: o.Columns.Payload, Topic: o.Topic, TopicRegex: o.TopicRegex,
		TombstoneOnEmptyPayload: o.TombstoneOnEmptyPayload, NullKey: o.NullKey,
		Encoding: o.Encoding, ExpandJSONPayload: o.ExpandJSONPayload, MissingField: o.MissingField,
		HeaderValues: o.HeaderValues, Timestamp: o.Timestamp, TracingColumn: DefaultTracingColumn,
		SchemaNamePrefix: o.SchemaNamePrefix}
	if o.TracingColumn != nil {
		oc.TracingColumn, oc.TracingColumnSet = *o.TracingColumn, true
	}
	for _, h := range o.Headers {
		oc.Headers = append(oc.Headers, outbox.Header{Column: h.Column, Name: h.Name})
	}
	for _, f := range o.Fields {
		oc.Fields = append(oc.Fields, outbox.Field{Column: f.Column, Placement: f.Placement, Alias: f.Alias})
	}
	return oc
}
