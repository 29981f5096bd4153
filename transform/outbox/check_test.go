package outbox

import (
	"strings"
	"testing"

	"github.com/outboxd/outboxd/source"
)

func TestCheckTable(t *testing.T) {
	cols := []string{"id", "aggregatetype", "aggregateid", "type", "payload", "created_at", "part", "createdz", "tracingspancontext"}
	types := []source.Type{{Kind: source.KindUUID}, {Kind: source.KindString}, {Kind: source.KindString}, {Kind: source.KindString},
		{Kind: source.KindJSON, Optional: true}, {Kind: source.KindMicroTimestamp}, {Kind: source.KindInt64},
		{Kind: source.KindZonedTimestamp}, {Kind: source.KindString, Optional: true}}
	for _, c := range []struct {
		what  string
		cfg   func(*Config)
		cols  []string
		types []source.Type
		want  []string // one substring per expected problem; none: fits
	}{
		{"defaults fit", func(*Config) {}, cols, types, nil},
		{"no aggregate id", func(c *Config) { c.AggregateIDColumn = "aggid" }, cols, types, []string{`"aggid" (outbox.columns.aggregate_id)`}},
		{"aggregate type only when routed", func(c *Config) { c.AggregateTypeColumn = "nope"; c.Topic = "events" }, cols, types, nil},
		{"aggregate type routed", func(c *Config) { c.AggregateTypeColumn = "nope" }, cols, types, []string{`"nope" (outbox.columns.aggregate_type)`}},
		{"missing field", func(c *Config) { c.Fields = []Field{{Column: "eventtype", Placement: PlacementHeader}} }, cols, types,
			[]string{`no column "eventtype" (outbox.fields)`}},
		{"missing field ignored", func(c *Config) {
			c.Fields = []Field{{Column: "eventtype", Placement: PlacementHeader}}
			c.MissingField = MissingFieldIgnore
		}, cols, types, nil},
		{"missing header", func(c *Config) { c.Headers = []Header{{Column: "h", Name: "h"}} }, cols, types, []string{`"h" (outbox.headers)`}},
		{"partition not int32", func(c *Config) { c.Fields = []Field{{Column: "part", Placement: PlacementPartition}} }, cols, types,
			[]string{`partition column "part" is int64, not int32`}},
		{"partition int32", func(c *Config) { c.Fields = []Field{{Column: "type", Placement: PlacementPartition}} },
			cols, append(types[:3:3], source.Type{Kind: source.KindInt32}, types[4], types[5], types[6], types[7], types[8]), nil},
		{"partition, types unknown", func(c *Config) { c.Fields = []Field{{Column: "part", Placement: PlacementPartition}} }, cols, nil, nil},
		{"timestamp column", func(c *Config) { c.Timestamp = "column:created_at" }, cols, types, nil},
		{"timestamptz column", func(c *Config) { c.Timestamp = "column:createdz" }, cols, types,
			[]string{`column "createdz" of public.outbox is io.debezium.time.ZonedTimestamp`}},
		{"timestamp column missing", func(c *Config) { c.Timestamp = "column:at" }, cols, types, []string{`outbox.timestamp: column:at: table public.outbox has no column "at"`}},
		{"tracing column set", func(c *Config) { c.TracingColumn, c.TracingColumnSet = "trace", true }, cols, types,
			[]string{`"trace" (outbox.tracing_column)`}},
		{"tracing default absent", func(c *Config) { c.TracingColumn = "trace" }, cols, types, nil},
		{"several", func(c *Config) {
			c.PayloadColumn = "body"
			c.Timestamp = "column:createdz"
		}, cols, types, []string{`"body"`, `"createdz"`}},
	} {
		t.Run(c.what, func(t *testing.T) {
			cfg := DefaultConfig()
			c.cfg(&cfg)
			r, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			got := r.CheckTable("public.outbox", c.cols, c.types)
			if len(got) != len(c.want) {
				t.Fatalf("problems %q, want %d like %q", got, len(c.want), c.want)
			}
			for i, w := range c.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("problem %q lacks %q", got[i], w)
				}
			}
		})
	}
}

func TestColumnsAndSummary(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Encoding, cfg.Timestamp = EncodingJSON, "column:created_at"
	cfg.Fields = []Field{{Column: "type", Placement: PlacementHeader, Alias: "eventType"}, {Column: "id", Placement: PlacementEnvelope}}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(r.Columns(), ","), "id,aggregateid,payload,aggregatetype,type,created_at"; got != want {
		t.Errorf("Columns %s, want %s", got, want)
	}
	if got, want := r.Summary(), "encoding json, timestamp column:created_at, header values debezium, fields type:header:eventType,id:envelope"; got != want {
		t.Errorf("Summary %q, want %q", got, want)
	}
	d, _ := New(DefaultConfig())
	if got, want := d.Summary(), "encoding raw, timestamp commit, header values debezium"; got != want {
		t.Errorf("default Summary %q, want %q", got, want)
	}
}
