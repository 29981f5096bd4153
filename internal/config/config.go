// Package config loads outboxd's YAML configuration: ${ENV} expansion, unknown keys rejected,
// defaults applied, every value validated with an error that names its key. The source's own
// keys (source.dsn's syntax, source.postgres.*, source.mysql.*) are defaulted and validated by
// its adapter (source/postgres, source/mysql), which internal/app.Load runs right after Load;
// config itself imports no runtime package.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Config is the whole configuration file. Field tags are the YAML keys of the contract
// (README.md, "Configuration"); README's key table is checked against them (reference_test.go).
type Config struct {
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	Source          Source        `yaml:"source"`
	Outbox          Outbox        `yaml:"outbox"`
	Kafka           Kafka         `yaml:"kafka"`
	Offsets         Offsets       `yaml:"offsets"`
	HTTP            HTTP          `yaml:"http"`
	Log             Log           `yaml:"log"`
}

type Source struct {
	Type     string   `yaml:"type"`
	DSN      string   `yaml:"dsn"`
	Tables   []string `yaml:"tables"`
	Postgres Postgres `yaml:"postgres"`
	MySQL    MySQL    `yaml:"mysql"`
}

// Postgres is source.postgres. Its defaults and validation are the PostgreSQL adapter's
// (source/postgres.Settings, run by internal/app): zero values here mean "the default".
type Postgres struct {
	Slot        string `yaml:"slot"`
	Publication string `yaml:"publication"`
	// HeartbeatInterval is nil when the key is absent (the adapter's default, 30s); an explicit
	// 0 (or an empty value) disables heartbeats.
	HeartbeatInterval *time.Duration `yaml:"heartbeat_interval"`
	StatusInterval    time.Duration  `yaml:"status_interval"`
	// CoverageCheckInterval: how often the publication's coverage is re-checked while streaming
	// (besides the checks before idle progress); 0 means the default, 1s.
	CoverageCheckInterval time.Duration `yaml:"coverage_check_interval"`
	// Messages, when present, publishes transactional logical decoding messages
	// (pg_logical_emit_message) with its prefix as outbox events (the tableless outbox);
	// nil: off. Defaulted and validated by the PostgreSQL adapter.
	Messages *Messages `yaml:"messages"`
	// Snapshot is what the first start of a new slot does with the rows already in the outbox
	// tables: never (default) | initial (publish them, then stream with no gap). The adapter's.
	Snapshot string `yaml:"snapshot"`
	// FailoverSlot is whether the slot is created as a failover slot (PostgreSQL 17+,
	// CREATE_REPLICATION_SLOT ... (FAILOVER)): auto (default: on when the server is 17+) | on |
	// off. The adapter's.
	FailoverSlot string `yaml:"failover_slot"`
	// MinSafeWALSize: `outboxd check` WARNs when the slot's safe_wal_size (the WAL the server may
	// still write before the slot is lost) is below it; PostgreSQL units (kB, MB, GB, TB), default
	// 1GB. The adapter's.
	MinSafeWALSize string `yaml:"min_safe_wal_size"`
}

// Messages is source.postgres.messages.
type Messages struct {
	// Prefix is the logical decoding message prefix of outbox events (default outboxd.event).
	Prefix string `yaml:"prefix"`
}

// MySQL is source.mysql. Its defaults and validation are the MySQL adapter's
// (source/mysql.Settings, run by internal/app): zero values here mean "the default".
type MySQL struct {
	ServerID uint32 `yaml:"server_id"`
	// Start is where the first run (no stored position) begins: "current", "earliest" or an
	// explicit position. Empty with no stored position is a refusal (no silent skip).
	Start string `yaml:"start"`
	// AllowMinimalRowMetadata accepts binlog_row_metadata=MINIMAL (column names then come from
	// information_schema, which is wrong for rows written before an ALTER made while stopped).
	AllowMinimalRowMetadata bool `yaml:"allow_minimal_row_metadata"`
	// Snapshot is what a first start (no stored position) does with the rows already in the
	// outbox tables: never (default) | initial (publish them, then stream from the binlog
	// position of the consistent read). The adapter's.
	Snapshot string `yaml:"snapshot"`
	// MinBinlogRetention: `outboxd check` WARNs when the server keeps binlogs for less than this
	// (binlog_expire_logs_seconds / expire_logs_days; on RDS `binlog retention hours`): how long
	// outboxd may be stopped without losing its position. 0 means the default, 24h. The adapter's.
	MinBinlogRetention time.Duration `yaml:"min_binlog_retention"`
}

type Outbox struct {
	Columns Columns `yaml:"columns"`
	Topic   string  `yaml:"topic"`
	Headers Headers `yaml:"headers"`
	// TopicRegex is Debezium's route.topic.regex (needs the group (?<routedByValue>…)).
	TopicRegex string `yaml:"topic_regex"`
	// TombstoneOnEmptyPayload is route.tombstone.on.empty.payload.
	TombstoneOnEmptyPayload bool `yaml:"tombstone_on_empty_payload"`
	// NullKey is what a NULL aggregate id does: dlq | produce (a null Kafka key).
	NullKey string `yaml:"null_key"`
	// Encoding is the key and value bytes: raw | json | json_schema (Kafka Connect's
	// StringConverter, JsonConverter with schemas.enable=false, JsonConverter with schemas).
	Encoding string `yaml:"encoding"`
	// ExpandJSONPayload is Debezium's table.expand.json.payload.
	ExpandJSONPayload bool `yaml:"expand_json_payload"`
	// Fields is Debezium's table.fields.additional.placement, as a list.
	Fields []Field `yaml:"fields,omitempty"`
	// SchemaNamePrefix is Debezium's topic.prefix as it appears in the envelope's schema name
	// (json_schema with an envelope field).
	SchemaNamePrefix string `yaml:"schema_name_prefix"`
	// MissingField is what a Fields column the table lacks does: error | ignore
	// (Debezium's table.field.additional.missing).
	MissingField string `yaml:"missing_field"`
	// HeaderValues is how header column values are written: debezium | text.
	HeaderValues string `yaml:"header_values"`
	// Timestamp is the Kafka record timestamp: commit | produce | column:<name>.
	Timestamp string `yaml:"timestamp"`
	// TracingColumn is Debezium's tracing.span.context.field (nil: tracingspancontext when the
	// table has it; "": no tracing).
	TracingColumn *string `yaml:"tracing_column"`
	// Cleanup deletes outbox rows whose events are delivered (housekeeping; off by default).
	Cleanup Cleanup `yaml:"cleanup"`
	// OrderColumn orders the rows of a table scan (outboxd republish, snapshot: initial);
	// "": the order the table keeps (the source adapter's choice, README "Republish").
	OrderColumn string `yaml:"order_column"`
}

// Cleanup is outbox.cleanup: periodically delete outbox rows whose records are delivered (the
// stored position covers them) and that are older than Retain, Batch rows per DELETE, every
// Interval.
type Cleanup struct {
	Enabled  bool          `yaml:"enabled"`
	Interval time.Duration `yaml:"interval"` // default 10s
	Batch    int           `yaml:"batch"`    // default 1000
	Retain   time.Duration `yaml:"retain"`   // default 0: as soon as delivered
}

// Field is one entry of outbox.fields: a column placed into a header, the envelope or the
// partition, under alias (default: the column's name).
type Field struct {
	Column    string `yaml:"column"`
	Placement string `yaml:"placement"`
	Alias     string `yaml:"alias"`
}

type Columns struct {
	ID            string `yaml:"id"`
	AggregateType string `yaml:"aggregate_type"`
	AggregateID   string `yaml:"aggregate_id"`
	Type          string `yaml:"type"`
	Payload       string `yaml:"payload"`
}

// Header maps a column to a record header name.
type Header struct{ Column, Name string }

// Headers is an ordered column → header-name map (YAML mapping order is kept).
type Headers []Header

// UnmarshalYAML keeps the mapping's order.
func (h *Headers) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: must be a mapping of column: header-name", n.Line)
	}
	*h = nil
	for i := 0; i+1 < len(n.Content); i += 2 {
		*h = append(*h, Header{Column: n.Content[i].Value, Name: n.Content[i+1].Value})
	}
	return nil
}

type HTTP struct {
	Listen string `yaml:"listen"` // default 127.0.0.1:9464; an explicit "" disables the server

	set bool // listen was given (possibly empty)
}

// DefaultListen is http.listen when the key is absent.
const DefaultListen = "127.0.0.1:9464"

// UnmarshalYAML tells an absent http.listen (default) from an explicit empty one (disabled).
func (h *HTTP) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: http must be a mapping", n.Line)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i].Value; k != "listen" {
			return fmt.Errorf("line %d: field %s not found in type config.HTTP", n.Content[i].Line, k)
		}
		h.Listen, h.set = n.Content[i+1].Value, true
	}
	return nil
}

type Log struct {
	Level  string `yaml:"level"`
	Format string `yaml:"format"`
}

// Error is a configuration error; Key is the dotted key at fault ("kafka.brokers").
type Error struct {
	Key string
	Msg string
}

func (e *Error) Error() string {
	if e.Key == "" {
		return "config: " + e.Msg
	}
	return fmt.Sprintf("config: %s: %s", e.Key, e.Msg)
}

// IsConfigError reports whether err is a configuration error (exit status 2).
func IsConfigError(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

// Load reads, expands, decodes, defaults and validates the file at path; sourceTypes are the
// registered source.type names (none: source.type is not checked). The source adapter's own
// keys (source.dsn's syntax, source.postgres.*, source.mysql.*) are validated, and defaulted,
// by the adapter: internal/app.Load is Load with the registered names followed by that
// validation, and every command loads its config with it.
func Load(path string, sourceTypes ...string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, &Error{Msg: fmt.Sprintf("read config file: %v", err)}
	}
	return Parse(b, os.LookupEnv, sourceTypes...)
}

// Parse is Load on bytes, with lookup for environment variables.
func Parse(b []byte, lookup func(string) (string, bool), sourceTypes ...string) (*Config, error) {
	root, err := oneDocument(b)
	if err != nil {
		return nil, err
	}
	if err := expandNode(root, "", lookup); err != nil {
		return nil, err
	}
	heartbeat := mappingValue(root, "source", "postgres", "heartbeat_interval")
	if heartbeat != nil && heartbeat.Kind == yaml.ScalarNode && heartbeat.Value == "0" {
		heartbeat.Value, heartbeat.Tag, heartbeat.Style = "0s", "!!str", 0 // "0 disables"; YAML's int 0 is no duration
	}
	expanded, err := yaml.Marshal(root)
	if err != nil {
		return nil, &Error{Msg: err.Error()}
	}
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(expanded))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		if i := strings.Index(msg, "line "); i >= 0 { // the line is of the expanded document: drop it
			if j := strings.Index(msg[i:], ": "); j >= 0 {
				msg = strings.TrimSpace(strings.TrimPrefix(msg[:i]+msg[i+j+2:], "unmarshal errors:\n"))
			}
		}
		if strings.Contains(msg, " not found in type ") {
			msg = "unknown key (check spelling; see the configuration reference in README.md)"
		}
		return nil, &Error{Key: keyAtLine(expanded, err.Error()), Msg: msg}
	}
	c.applyDefaults()
	if heartbeat != nil && c.Source.Postgres.HeartbeatInterval == nil { // an empty value: 0, disabled
		c.Source.Postgres.HeartbeatInterval = new(time.Duration)
	}
	if err := c.Validate(sourceTypes...); err != nil {
		return nil, err
	}
	return &c, nil
}

// oneDocument parses b, which must hold one YAML document: a second document (after a `---`
// line) would be ignored by a plain decode, settings and all, so it is an error. A `---` before
// the only document, and empty documents (comments only), are fine.
func oneDocument(b []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil && !errors.Is(err, io.EOF) {
		return nil, &Error{Msg: fmt.Sprintf("not valid YAML: %v", err)}
	}
	for n := 2; ; n++ {
		var next yaml.Node
		err := dec.Decode(&next)
		if errors.Is(err, io.EOF) {
			return &root, nil
		}
		if err != nil {
			return nil, &Error{Msg: fmt.Sprintf("not valid YAML (document %d): %v", n, err)}
		}
		if emptyDocument(&next) {
			continue // an empty document: nothing ignored
		}
		if emptyDocument(&root) {
			root = next // comments or nothing before the `---`
			continue
		}
		return nil, &Error{Msg: fmt.Sprintf("the config file has more than one YAML document (a second `---`, document %d at line %d): "+
			"outboxd reads a single document; merge the settings into one document and remove the `---` line", n, next.Line)}
	}
}

// emptyDocument: nothing, or a document of only comments (a null scalar with no text).
func emptyDocument(n *yaml.Node) bool {
	if n.Kind == 0 || (n.Kind == yaml.DocumentNode && len(n.Content) == 0) {
		return true
	}
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		c := n.Content[0]
		return c.Kind == yaml.ScalarNode && c.Tag == "!!null" && c.Value == ""
	}
	return false
}

// mappingValue returns the value node at path through the document's mappings (nil if absent).
func mappingValue(n *yaml.Node, path ...string) *yaml.Node {
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	for _, k := range path {
		if n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				next = n.Content[i+1]
			}
		}
		if next == nil {
			return nil
		}
		n = next
	}
	return n
}

// keyAtLine finds the dotted key whose key or value sits on line of the (re-marshalled) YAML doc,
// so that decode errors ("line 7: field acks not found", "cannot unmarshal ... into
// time.Duration") name the key rather than a line of a document the user never saw.
func keyAtLine(doc []byte, msg string) string {
	var line int
	if i := strings.Index(msg, "line "); i >= 0 {
		fmt.Sscanf(msg[i:], "line %d", &line)
	}
	if line == 0 {
		return ""
	}
	var root yaml.Node
	if yaml.Unmarshal(doc, &root) != nil {
		return ""
	}
	var find func(n *yaml.Node, path string) string
	find = func(n *yaml.Node, path string) string {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				if k := find(c, path); k != "" {
					return k
				}
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				if k := find(c, fmt.Sprintf("%s[%d]", path, i)); k != "" {
					return k
				}
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				p := n.Content[i].Value
				if path != "" {
					p = path + "." + p
				}
				if k := find(n.Content[i+1], p); k != "" {
					return k
				}
				if n.Content[i].Line == line {
					return p
				}
			}
		case yaml.ScalarNode:
			if n.Line == line {
				return path
			}
		}
		return ""
	}
	return find(&root, "")
}

// expandNode replaces ${NAME} in every scalar value with the environment variable NAME, keeps
// ${routedByValue}, and turns $$ into $. Mapping keys are not expanded.
func expandNode(n *yaml.Node, path string, lookup func(string) (string, bool)) error {
	n.Style &^= yaml.FlowStyle // block style: one key per line, so decode errors map to one key
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for i, c := range n.Content {
			p := path
			if n.Kind == yaml.SequenceNode {
				p = fmt.Sprintf("%s[%d]", path, i)
			}
			if err := expandNode(c, p, lookup); err != nil {
				return err
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := n.Content[i].Value
			if path != "" {
				p = path + "." + p
			}
			if err := expandNode(n.Content[i+1], p, lookup); err != nil {
				return err
			}
		}
	case yaml.ScalarNode:
		if !strings.Contains(n.Value, "$") {
			return nil
		}
		v, err := Expand(n.Value, lookup)
		if err != nil {
			return &Error{Key: path, Msg: err.Error()}
		}
		n.Value = v
		if n.Tag == "!!str" || n.Style != 0 {
			break
		}
		n.Style = yaml.DoubleQuotedStyle // an expanded value stays a string (e.g. a numeric password)
	}
	return nil
}

// Expand performs the ${NAME} / $$ substitution on one value.
func Expand(s string, lookup func(string) (string, bool)) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 < len(s) && s[i+1] == '$' {
			b.WriteByte('$')
			i++
			continue
		}
		if i+1 < len(s) && s[i+1] == '{' {
			end := strings.IndexByte(s[i:], '}')
			if end < 0 {
				return "", fmt.Errorf("unterminated ${ in %q", s)
			}
			name := s[i+2 : i+end]
			if name == "routedByValue" {
				b.WriteString("${routedByValue}")
			} else {
				if name == "" {
					return "", fmt.Errorf("empty ${} in value")
				}
				v, ok := lookup(name)
				if !ok {
					return "", fmt.Errorf("environment variable %s is not set (write $$ for a literal $)", name)
				}
				b.WriteString(v)
			}
			i += end
			continue
		}
		b.WriteByte('$')
	}
	return b.String(), nil
}
