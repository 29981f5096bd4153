package mysql

// Adapter: the MySQL/MariaDB source's operations for outboxd's commands (internal/app declares
// one small interface per concern and picks this adapter for source.type mysql): its settings
// and their defaults (Settings), their validation, the source's name in stored offsets, the
// preflight lines of `outboxd check` (adapter_check.go), `outboxd offsets show/set`
// (adapter_offsets.go) and hot standby (adapter_standby.go).

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/outboxd/outboxd/source"
)

// DefaultServerID is source.mysql.server_id when the key is absent (or 0).
const DefaultServerID = 4242

// Settings are the source keys of a MySQL pipeline as the config file gives them; a zero value
// stands for the default.
type Settings struct {
	DSN    string   // source.dsn
	Tables []string // source.tables
	// Columns are the outbox columns outboxd reads, checked by `outboxd check`.
	Columns                 []string
	ServerID                uint32 // source.mysql.server_id; 0: DefaultServerID
	Start                   string // source.mysql.start
	AllowMinimalRowMetadata bool   // source.mysql.allow_minimal_row_metadata
	Snapshot                string // source.mysql.snapshot: never (""), initial
	OrderColumn             string // outbox.order_column: the order of snapshot and republish scans
	// MinBinlogRetention is source.mysql.min_binlog_retention (0: 24h): check WARNs when the
	// server keeps binlogs for less.
	MinBinlogRetention time.Duration
	// OffsetsStore describes where the pipeline stores positions (Config.OffsetsStore), given
	// the source's Name (a key of the store may be derived from it).
	OffsetsStore func(sourceName string) string
}

// SettingError is a setting Validate refuses: Key is its dotted config key.
type SettingError struct{ Key, Msg string }

func (e *SettingError) Error() string { return e.Key + ": " + e.Msg }

// Setting returns the key at fault and what is wrong with it.
func (e *SettingError) Setting() (key, msg string) { return e.Key, e.Msg }

// Adapter is the MySQL source's operations for one configured pipeline. Build it with
// NewAdapter; not safe for concurrent use (the standby locker keeps one connection).
type Adapter struct {
	set    Settings // defaults applied
	store  string   // Settings.OffsetsStore
	log    *slog.Logger
	locker Locker
	clean  myCleaner  // outbox.cleanup's connection (cleanup.go)
	keep   snapKeeper // the snapshot its Sources share (snapshot_keep.go)
}

// NewAdapter applies the defaults to s. A nil log discards.
func NewAdapter(s Settings, log *slog.Logger) *Adapter {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if s.ServerID == 0 {
		s.ServerID = DefaultServerID
	}
	if s.MinBinlogRetention == 0 {
		s.MinBinlogRetention = DefaultMinBinlogRetention
	}
	a := &Adapter{set: s, log: log, locker: Locker{DSN: s.DSN, Name: LockName(s.ServerID, s.Tables)}}
	if s.OffsetsStore != nil {
		a.store = s.OffsetsStore(a.Name())
	}
	return a
}

// Config is the source configuration the adapter opens sources with.
func (a *Adapter) Config() Config {
	s := a.set
	return Config{DSN: s.DSN, Tables: s.Tables, ServerID: s.ServerID, Start: s.Start,
		AllowMinimalRowMetadata: s.AllowMinimalRowMetadata, OffsetsStore: a.store, Snapshot: s.Snapshot, OrderColumn: s.OrderColumn}
}

// Validate checks the MySQL settings without I/O; a problem is a *SettingError. source.dsn is
// parsed by the parser the source connects with, whose errors never contain the password.
func (a *Adapter) Validate() error {
	if err := ValidStart(a.set.Start); err != nil {
		return &SettingError{Key: "source.mysql.start", Msg: strings.TrimPrefix(err.Error(), "source.mysql.start: ") +
			" (use current, earliest, or a position such as 0-1-42 or mysql-bin.000003:1234)"}
	}
	if _, err := snapshotInitial(a.set.Snapshot); err != nil {
		return &SettingError{Key: "source.mysql.snapshot", Msg: err.Error() + " (use never, the default, or initial)"}
	}
	if a.set.MinBinlogRetention < 0 {
		return &SettingError{Key: "source.mysql.min_binlog_retention", Msg: fmt.Sprintf("is %s: give how long outboxd may be stopped "+
			"without losing its position, such as 24h or 168h (0 or absent: %s)", a.set.MinBinlogRetention, fmtDuration(DefaultMinBinlogRetention))}
	}
	if _, err := RedactDSN(a.set.DSN); err != nil {
		return &SettingError{Key: "source.dsn", Msg: err.Error()}
	}
	return nil
}

// Name identifies the source in stored offsets: "mysql:<server_id>".
func (a *Adapter) Name() string { return fmt.Sprintf("mysql:%d", a.set.ServerID) }

// NewSource returns a new, unopened Source of the pipeline.
func (a *Adapter) NewSource() source.Source { return a.keep.share(New(a.Config(), a.log)) }

// RedactedDSN is source.dsn for logs without its password; "(unparseable DSN)" when it does
// not parse (nothing of it is shown).
func (a *Adapter) RedactedDSN() string {
	s, err := RedactDSN(a.set.DSN)
	if err != nil {
		return "(unparseable DSN)"
	}
	return s
}

// Secrets are source.dsn's password as parsed, then as written, for scrubbing; nil without one.
func (a *Adapter) Secrets() []string {
	dec, raw, ok := DSNPassword(a.set.DSN)
	if !ok {
		return nil
	}
	if raw == "" || raw == dec {
		return []string{dec}
	}
	return []string{dec, raw}
}
