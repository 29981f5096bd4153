package app

// Source adapters. Each source type (source/postgres, source/mysql) owns its operations:
// opening its Source, validating its settings, the preflight lines of `outboxd check`,
// `outboxd offsets show/set`, hot standby and the lag metric. Each concern is one small
// interface below; sources maps source.type to the function building the adapter from the
// config, once per command (adapterFor). Nothing else in outboxd looks at source.type.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/source"
	"github.com/outboxd/outboxd/source/mysql"
	"github.com/outboxd/outboxd/source/postgres"
	"github.com/outboxd/outboxd/transform/outbox"
)

// opener builds the pipeline's sources.
type opener interface {
	// Name identifies the source in stored offsets ("postgres:<slot>", "mysql:<server_id>").
	Name() string
	// NewSource returns a new, unopened Source; the pipeline calls it for every (re)open.
	NewSource() source.Source
	// RedactedDSN is source.dsn without its password, for logs.
	RedactedDSN() string
	// Secrets are source.dsn's password as parsed and as written, scrubbed from every error
	// and check line (driver errors may echo either).
	Secrets() []string
}

// validator checks the adapter's own settings (source.dsn, source.<type>.*).
type validator interface {
	// Validate checks the settings without I/O. A problem is an error with a
	// Setting() (key, msg string) method naming the dotted config key at fault (settingError).
	Validate() error
}

// settingError is the error of validator.Validate.
type settingError interface {
	error
	Setting() (key, msg string)
}

// preflighter runs the source's lines of `outboxd check`.
type preflighter interface {
	// Preflight reports each check in order through report (ok true with a non-empty fix is a
	// WARN line: the check passes, exit 0, but a setting should change, and fix names it; ok
	// false: reason says what is
	// wrong, fix what the operator must do) and returns when all ran; ctx bounds its I/O.
	// stored reads the stored position; nil when check does not read it (offsets.store kafka).
	Preflight(ctx context.Context, stored func(context.Context) (source.Position, error), report func(name string, ok bool, reason, fix string))
}

// offsetsOps is the source's side of `outboxd offsets show/set`.
type offsetsOps interface {
	// NoStoredPosition says what the next run does without a stored position.
	NoStoredPosition() string
	// ShowOffsets writes where the source is now (one "label: value" line each) and whether
	// stored ("" for none) can be served.
	ShowOffsets(ctx context.Context, stored source.Position, w io.Writer) error
	// CheckPosition tells whether a run can start at pos: refused says why not (`offsets set`
	// then stores nothing); err is a failure to find out. Warnings (e.g. skipped transactions)
	// go to w.
	CheckPosition(ctx context.Context, pos source.Position, w io.Writer) (refused, err error)
}

// standby decides when this instance of the pipeline may be active (standby.go).
type standby interface {
	// WaitActive blocks until this instance may become active, calling waiting whenever it
	// finds another instance active. release gives the active role up; lost, when not nil, is
	// closed if the role goes away while active. first is true before the first term: a
	// database that cannot be reached then is a startup failure (an error, or a return that
	// lets the pipeline report it), later it is retried. It returns ctx's error when ctx ends.
	// Not called concurrently.
	WaitActive(ctx context.Context, first bool, waiting func()) (release func(), lost <-chan struct{}, err error)
	// Active wraps a source of the active instance: lose ends the term (another process took
	// over), slot receives the replication slot's status while the source is open (not
	// called by sources without one). It may return s itself.
	Active(s source.Source, lose func(why string), slot func(walStatus string, retainedBytes int64)) source.Source
	// CloseStandby releases what WaitActive keeps between calls (its connection).
	CloseStandby()
}

// lagReporter is a Source that knows how far it is behind the server (outboxd_source_lag_bytes).
type lagReporter interface {
	// LagBytes is the log the server has written beyond the confirmed position; ok false when
	// unknown. Safe to call concurrently with the source's other methods.
	LagBytes() (n int64, ok bool)
}

// outboxLister lists an outbox table's columns for `outboxd check` (checkoutbox.go); an adapter
// without it gets no outbox table lines.
type outboxLister interface {
	// OutboxTableColumns returns table's columns (a name of source.tables) in table order and
	// their source.Types as the source's rows will carry them (read with the adapter's own
	// catalog query; types nil: unknown); ok false when the table does not exist. It blocks on
	// the database, for at most ctx. Not called concurrently.
	OutboxTableColumns(ctx context.Context, table string) (cols []string, types []source.Type, ok bool, err error)
}

// scanner reads the rows already in an outbox table (`outboxd republish`, republish.go).
type scanner interface {
	// ScanOutbox calls fn with the rows q selects, in q's order, at most q.Batch rows a call,
	// shaped as the source's stream shapes them (Columns, Values in the same text form, Types),
	// on a normal (not replication) connection, reading a consistent snapshot of the table. fn's
	// rows are not used by the scan after fn returns; an error from fn ends the scan with it. It
	// blocks on the database for at most ctx. Not called concurrently.
	ScanOutbox(ctx context.Context, q source.ScanQuery, fn func(rows []source.Row) error) error
	// CountOutbox returns how many rows q selects (q.Batch ignored), for progress.
	CountOutbox(ctx context.Context, q source.ScanQuery) (int64, error)
}

// cleaner deletes delivered outbox rows (outbox.cleanup, cleanup.go).
type cleaner interface {
	// DeleteOutboxRows deletes the rows of table whose id column (outbox.columns.id) is one of
	// ids and, when retain > 0, that are older than retain by the adapter's own measure of a
	// row's age; it returns how many it deleted. One statement, on a normal connection the
	// adapter keeps; blocks for at most ctx. Not called concurrently.
	DeleteOutboxRows(ctx context.Context, table string, ids [][]byte, retain time.Duration) (int64, error)
	// OutboxRowEstimate is the server's estimate of table's row count (outboxd_outbox_table_rows).
	OutboxRowEstimate(ctx context.Context, table string) (int64, error)
	// CloseCleaner releases the cleaner's connection.
	CloseCleaner()
}

// adapter is every concern of a source type.
type adapter interface {
	opener
	validator
	preflighter
	offsetsOps
	standby
}

// sources are the source types, in the order `source.type` errors list them.
var sources = []struct {
	name string
	new  func(c *config.Config, log *slog.Logger) adapter
}{
	{"postgres", func(c *config.Config, log *slog.Logger) adapter {
		p := c.Source.Postgres
		return postgres.NewAdapter(postgres.Settings{DSN: c.Source.DSN, Tables: c.Source.Tables, Columns: outboxColumns(c),
			Slot: p.Slot, Publication: p.Publication, HeartbeatInterval: p.HeartbeatInterval, StatusInterval: p.StatusInterval,
			CoverageCheckInterval: p.CoverageCheckInterval, MessagePrefix: messagePrefix(p.Messages), Snapshot: p.Snapshot,
			OrderColumn: c.Outbox.OrderColumn, FailoverSlot: p.FailoverSlot, MinSafeWALSize: p.MinSafeWALSize}, log)
	}},
	{"mysql", func(c *config.Config, log *slog.Logger) adapter {
		m := c.Source.MySQL
		return mysql.NewAdapter(mysql.Settings{DSN: c.Source.DSN, Tables: c.Source.Tables, Columns: outboxColumns(c),
			ServerID: m.ServerID, Start: m.Start, AllowMinimalRowMetadata: m.AllowMinimalRowMetadata,
			Snapshot: m.Snapshot, OrderColumn: c.Outbox.OrderColumn, MinBinlogRetention: m.MinBinlogRetention,
			OffsetsStore: func(name string) string { return storeDescription(c, name) }}, log)
	}},
}

// messagePrefix is source.postgres.messages.prefix: "" when the block is absent (off), the
// default prefix when it is present without one.
func messagePrefix(m *config.Messages) string {
	switch {
	case m == nil:
		return ""
	case m.Prefix == "":
		return postgres.DefaultMessagePrefix
	}
	return m.Prefix
}

// newAdapter builds the adapter of source.type, unvalidated; false for an unknown type.
func newAdapter(c *config.Config, log *slog.Logger) (adapter, bool) {
	for _, s := range sources {
		if s.name == c.Source.Type {
			return s.new(c, log), true
		}
	}
	return nil, false
}

// adapterFor builds the adapter of source.type and validates its settings: an unknown type or
// a bad setting is a *config.Error naming the key. A nil log discards.
func adapterFor(c *config.Config, log *slog.Logger) (adapter, error) {
	a, ok := newAdapter(c, log)
	if !ok {
		return nil, &config.Error{Key: "source.type", Msg: fmt.Sprintf("%q is not one of %s", c.Source.Type, strings.Join(sourceTypes(), " | "))}
	}
	if err := a.Validate(); err != nil {
		var se settingError
		if errors.As(err, &se) {
			key, msg := se.Setting()
			return nil, &config.Error{Key: key, Msg: msg}
		}
		return nil, &config.Error{Key: "source", Msg: err.Error()}
	}
	if ms, ok := a.(messageSource); len(c.Source.Tables) == 0 && (!ok || ms.MessagePrefix() == "") {
		// config lets source.tables be empty with source.postgres.messages; only an adapter
		// that carries events as messages (the tableless outbox) needs no table.
		return nil, &config.Error{Key: "source.tables", Msg: fmt.Sprintf("is empty: list at least one outbox table; source.type %s reads events only from tables (source.postgres.messages, the tableless outbox, is PostgreSQL's)", c.Source.Type)}
	}
	return a, nil
}

// Validate runs the checks config.Load leaves to the source adapters (source.type, source.dsn,
// source.<type>.*); a problem is a *config.Error naming the key, as config.Load's own.
func Validate(c *config.Config) error {
	_, err := adapterFor(c, nil)
	return err
}

// sourceTypes are the registered source.type names.
func sourceTypes() []string {
	var names []string
	for _, s := range sources {
		names = append(names, s.name)
	}
	return names
}

// Load is config.Load (source.type checked against the registered names) followed by
// Validate: every command loads its config with it.
func Load(path string) (*config.Config, error) {
	c, err := config.Load(path, sourceTypes()...)
	if err != nil {
		return nil, err
	}
	if err := Validate(c); err != nil {
		return nil, err
	}
	return c, nil
}

// Parse is Load on bytes, with lookup for environment variables.
func Parse(b []byte, lookup func(string) (string, bool)) (*config.Config, error) {
	c, err := config.Parse(b, lookup, sourceTypes()...)
	if err != nil {
		return nil, err
	}
	if err := Validate(c); err != nil {
		return nil, err
	}
	return c, nil
}

// outboxColumns are the outbox columns outboxd reads: id, aggregate id, payload, the aggregate
// type when the topic is routed by it (or by outbox.topic_regex), the timestamp column, and the
// header, outbox.fields and explicit tracing columns unless outbox.missing_field is ignore. The
// source checks that each table has them and that its publication (PostgreSQL) carries them.
func outboxColumns(c *config.Config) []string {
	cols := []string{c.Outbox.Columns.ID, c.Outbox.Columns.AggregateID, c.Outbox.Columns.Payload}
	if strings.Contains(c.Outbox.Topic, "${routedByValue}") {
		cols = append(cols, c.Outbox.Columns.AggregateType)
	}
	if c.Outbox.TopicRegex != "" && !slices.Contains(cols, c.Outbox.Columns.AggregateType) {
		cols = append(cols, c.Outbox.Columns.AggregateType)
	}
	if ts, ok := strings.CutPrefix(c.Outbox.Timestamp, outbox.TimestampColumnPrefix); ok && ts != "" {
		cols = append(cols, ts)
	}
	// With outbox.missing_field: ignore, header, fields and tracing columns may be absent (as
	// Debezium's table.field.additional.missing=ignore): only the router's check names them.
	if c.Outbox.MissingField == outbox.MissingFieldIgnore {
		return cols
	}
	for _, h := range c.Outbox.Headers {
		cols = append(cols, h.Column)
	}
	for _, f := range c.Outbox.Fields {
		cols = append(cols, f.Column)
	}
	if c.Outbox.TracingColumn != nil && *c.Outbox.TracingColumn != "" {
		cols = append(cols, *c.Outbox.TracingColumn)
	}
	var out []string
	for _, col := range cols {
		if !slices.Contains(out, col) {
			out = append(out, col)
		}
	}
	return out
}
