package postgres

// Adapter: the PostgreSQL source's operations for outboxd's commands (internal/app declares
// one small interface per concern and picks this adapter for source.type postgres): its
// settings and their defaults (Settings), their validation, the source's name in stored
// offsets, the preflight lines of `outboxd check`, `outboxd offsets show/set`
// (adapter_offsets.go), hot standby (adapter_standby.go) and the lag metric (lag.go).

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/source"
)

// DefaultHeartbeatInterval is source.postgres.heartbeat_interval when the key is absent (an
// explicit 0 disables heartbeats). The other defaults are New's: slot and publication
// "outboxd", status_interval 10s, coverage_check_interval 1s.
const DefaultHeartbeatInterval = 30 * time.Second

// Settings are the source keys of a PostgreSQL pipeline as the config file gives them; a zero
// value stands for the default.
type Settings struct {
	DSN    string   // source.dsn
	Tables []string // source.tables
	// Columns are the outbox columns outboxd reads (Config.Columns).
	Columns               []string
	Slot                  string         // source.postgres.slot
	Publication           string         // source.postgres.publication
	HeartbeatInterval     *time.Duration // source.postgres.heartbeat_interval; nil: DefaultHeartbeatInterval
	StatusInterval        time.Duration  // source.postgres.status_interval
	CoverageCheckInterval time.Duration  // source.postgres.coverage_check_interval
	// MessagePrefix is source.postgres.messages.prefix: transactional logical decoding messages
	// with it are outbox events (Config.MessagePrefix); "": off.
	MessagePrefix string
	Snapshot      string // source.postgres.snapshot: never (""), initial
	OrderColumn   string // outbox.order_column: the order of snapshot and republish scans
	FailoverSlot  string // source.postgres.failover_slot: auto (""), on, off
	// MinSafeWALSize is source.postgres.min_safe_wal_size (PostgreSQL units; "": 1GB): check
	// WARNs when the slot's safe_wal_size is below it.
	MinSafeWALSize string
}

// SettingError is a setting Validate refuses: Key is its dotted config key.
type SettingError struct{ Key, Msg string }

func (e *SettingError) Error() string { return e.Key + ": " + e.Msg }

// Setting returns the key at fault and what is wrong with it.
func (e *SettingError) Setting() (key, msg string) { return e.Key, e.Msg }

// Adapter is the PostgreSQL source's operations for one configured pipeline. Build it with
// NewAdapter; not safe for concurrent use (the standby probe keeps one connection).
type Adapter struct {
	set   Settings
	cfg   Config // New's defaults applied
	log   *slog.Logger
	probe SlotProbe
	// keeper keeps the snapshot a Source took for the Sources opened after it (snapshot_keep.go).
	keeper *snapshotKeeper
	clean  pgCleaner // outbox.cleanup's connection (cleanup.go)
}

// NewAdapter applies the defaults to s. A nil log discards.
func NewAdapter(s Settings, log *slog.Logger) *Adapter {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	hb := DefaultHeartbeatInterval
	if s.HeartbeatInterval != nil {
		hb = *s.HeartbeatInterval
	}
	cfg := New(Config{DSN: s.DSN, Tables: s.Tables, Slot: s.Slot, Publication: s.Publication,
		StandbyTimeout: s.StatusInterval, HeartbeatInterval: hb, Columns: s.Columns,
		CoverageCheckInterval: s.CoverageCheckInterval, MessagePrefix: s.MessagePrefix, Snapshot: s.Snapshot,
		OrderColumn: s.OrderColumn, FailoverSlot: s.FailoverSlot, MinSafeWALSize: minSafe(s.MinSafeWALSize)}, log).cfg
	s.Slot, s.Publication, s.HeartbeatInterval = cfg.Slot, cfg.Publication, &hb
	return &Adapter{set: s, cfg: cfg, log: log, probe: SlotProbe{DSN: s.DSN, Slot: cfg.Slot}, keeper: &snapshotKeeper{}}
}

// minSafe is source.postgres.min_safe_wal_size in bytes; 0 (the default) when unset or invalid
// (Validate refuses an invalid one).
func minSafe(s string) int64 {
	n, err := ParseSize(s)
	if s == "" || err != nil {
		return 0
	}
	return n
}

// Config is the source configuration the adapter opens sources with (defaults applied).
func (a *Adapter) Config() Config { return a.cfg }

// Validate checks the PostgreSQL settings without I/O, in the order the config reference
// lists them; a problem is a *SettingError. source.dsn is parsed by pgconn, the parser the
// source connects with, so that a DSN the driver would refuse is a config error up front. The
// DSN is never quoted: pgconn's own errors echo it with only a best-effort redaction, which
// leaves fragments of a password holding '@', ':' or '?' in the text.
func (a *Adapter) Validate() error {
	dsn := a.set.DSN
	if _, err := url.Parse(dsn); err != nil && strings.Contains(dsn, "://") {
		return &SettingError{Key: "source.dsn", Msg: "not a valid PostgreSQL URL"}
	}
	if *a.set.HeartbeatInterval < 0 {
		return &SettingError{Key: "source.postgres.heartbeat_interval", Msg: "must be 0 (off) or positive"}
	}
	if a.set.StatusInterval < 0 {
		return &SettingError{Key: "source.postgres.status_interval", Msg: "must be positive"}
	}
	if a.set.MessagePrefix == HeartbeatPrefix {
		return &SettingError{Key: "source.postgres.messages.prefix", Msg: fmt.Sprintf("%q is outboxd's heartbeat prefix (non-transactional idle progress): choose another prefix for outbox events, e.g. %s", HeartbeatPrefix, DefaultMessagePrefix)}
	}
	switch a.set.Snapshot {
	case "", SnapshotNever, SnapshotInitial:
	default:
		return &SettingError{Key: "source.postgres.snapshot", Msg: fmt.Sprintf("%q is not one of never | initial", a.set.Snapshot)}
	}
	switch a.set.FailoverSlot {
	case "", FailoverAuto, FailoverOn, FailoverOff:
	default:
		return &SettingError{Key: "source.postgres.failover_slot", Msg: fmt.Sprintf("%q is not one of auto | on | off (auto: a failover slot when the server is PostgreSQL 17+)", a.set.FailoverSlot)}
	}
	if a.set.MinSafeWALSize != "" {
		if n, err := ParseSize(a.set.MinSafeWALSize); err != nil {
			return &SettingError{Key: "source.postgres.min_safe_wal_size", Msg: err.Error()}
		} else if n <= 0 {
			return &SettingError{Key: "source.postgres.min_safe_wal_size", Msg: fmt.Sprintf("%q: must be positive, e.g. 1GB (the default)", a.set.MinSafeWALSize)}
		}
	}
	if !validSlotName(a.set.Slot) {
		return &SettingError{Key: "source.postgres.slot", Msg: fmt.Sprintf("%q: slot names use lower-case letters, digits and _ only", a.set.Slot)}
	}
	if _, err := pgconn.ParseConfig(dsn); err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return &SettingError{Key: "source.dsn", Msg: "a file it names cannot be read (" + pe.Error() + "): fix the path or the file's permissions"}
		}
		return &SettingError{Key: "source.dsn", Msg: "PostgreSQL's driver cannot parse it (the DSN is not shown: it may hold the password). " +
			"In URL form postgres://user:password@host:5432/db, percent-encode the password's special characters " +
			"(@ %40, : %3A, / %2F, ? %3F, # %23, % %25, space %20); or use key=value form: host=... user=... password='...' dbname=..."}
	}
	return nil
}

// Name identifies the source in stored offsets: "postgres:<slot>".
func (a *Adapter) Name() string { return "postgres:" + a.cfg.Slot }

// NewSource returns a new, unopened Source of the pipeline.
func (a *Adapter) NewSource() source.Source {
	s := New(a.cfg, a.log)
	s.keeper, s.ownKeeper = a.keeper, false
	return s
}

// RedactedDSN is source.dsn for logs without its password (RedactDSN).
func (a *Adapter) RedactedDSN() string { return RedactDSN(a.set.DSN) }

// Secrets are source.dsn's password as parsed and as written (DSNSecrets).
func (a *Adapter) Secrets() []string { return DSNSecrets(a.set.DSN) }
