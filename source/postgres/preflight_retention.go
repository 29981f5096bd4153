package postgres

// WAL retention: the WARN lines of `outboxd check` about the settings that decide whether a
// stopped or lagging outboxd can fill the database server's disk or lose its slot (issue 17).
//
//   - max_slot_wal_keep_size = -1 (the default): a slot retains WAL without limit, so a stopped
//     outboxd makes the server keep WAL until its disk fills (the whole database stops).
//   - the slot's safe_wal_size (PostgreSQL 13+: the WAL the server may still write before the
//     slot is lost) below source.postgres.min_safe_wal_size (default 1GB).
//   - the slot's wal_status extended (retaining more than max_wal_size) or unreserved (past
//     max_slot_wal_keep_size: the next checkpoint may remove WAL it needs).
//
// The decision (retentionLines) is a pure function over the facts read (readRetention).

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// DefaultMinSafeWALSize is source.postgres.min_safe_wal_size when unset: 1GB.
const DefaultMinSafeWALSize int64 = 1 << 30

// sizeUnits are PostgreSQL's memory units (1024-based, case-sensitive as in postgresql.conf).
var sizeUnits = []struct {
	name string
	mult int64
}{{"TB", 1 << 40}, {"GB", 1 << 30}, {"MB", 1 << 20}, {"kB", 1 << 10}, {"B", 1}}

// ParseSize parses a size in PostgreSQL's units ("1GB", "512MB", "1.5GB", "64kB", "100B"):
// a non-negative number and one of B, kB, MB, GB, TB (1024-based, case-sensitive as in
// postgresql.conf). A bare number is refused: its unit would be a guess.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] == '-' || t[i] == '+' || t[i] == '.' || '0' <= t[i] && t[i] <= '9') {
		i++
	}
	num, unit := t[:i], strings.TrimSpace(t[i:])
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size: write a number and a unit, e.g. 1GB or 512MB", s)
	}
	if unit == "" {
		return 0, fmt.Errorf("%q has no unit: write a number and one of B, kB, MB, GB, TB (PostgreSQL's units, 1024-based), e.g. 1GB", s)
	}
	mult := int64(0)
	for _, u := range sizeUnits {
		if unit == u.name {
			mult = u.mult
		}
	}
	if mult == 0 {
		return 0, fmt.Errorf("%q: unknown unit %q: use B, kB, MB, GB or TB (PostgreSQL's units, case-sensitive, 1024-based)", s, unit)
	}
	if f < 0 {
		return 0, fmt.Errorf("%q is negative", s)
	}
	b := f * float64(mult)
	if b >= math.MaxInt64 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return int64(b), nil
}

// formatSize prints n bytes in the largest PostgreSQL unit that keeps it at 1 or more
// ("1GB", "1.5GB", "640MB").
func formatSize(n int64) string {
	neg := ""
	if n < 0 {
		neg, n = "-", -n
	}
	for _, u := range sizeUnits {
		if n >= u.mult {
			v := float64(n) / float64(u.mult)
			return neg + strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64) + u.name
		}
	}
	return neg + "0B"
}

// retentionFacts are what the retention lines decide on.
type retentionFacts struct {
	vnum int // server_version_num
	// keepMB is max_slot_wal_keep_size in MB (pg_settings.setting; -1: unlimited); keepText
	// is its display form (current_setting).
	keepMB   int64
	keepText string
	slot     string
	exists   bool   // the slot exists
	status   string // its wal_status ("" when NULL)
	safe     *int64 // its safe_wal_size in bytes (NULL: unlimited or lost)
	min      int64  // source.postgres.min_safe_wal_size in bytes
}

// keepFix is how to bound the WAL a slot retains, on a server and on managed services.
const keepFix = "bound it: ALTER SYSTEM SET max_slot_wal_keep_size = '<n>GB'; SELECT pg_reload_conf(); " +
	"(n: the WAL the disk can hold besides the data, well above source.postgres.min_safe_wal_size); " +
	"on Amazon RDS set max_slot_wal_keep_size in the DB parameter group, on Cloud SQL as a database flag, " +
	"on Azure Database for PostgreSQL as a server parameter. Trade-off: once outboxd lags by more than that, " +
	"the server invalidates the slot (wal_status lost) instead of filling its disk, and outboxd refuses to start until the slot is recreated and the gap accepted or re-published"

// retentionLines are the retention check lines for f.
func retentionLines(f retentionFacts) []CheckResult {
	var out []CheckResult
	const keepName = "max_slot_wal_keep_size"
	switch {
	case f.vnum < 130000:
		out = append(out, CheckResult{Name: keepName, OK: true, Warn: true,
			Reason: fmt.Sprintf("PostgreSQL %d has no max_slot_wal_keep_size (13+): a slot retains WAL without limit, so a stopped outboxd makes the server keep WAL until its disk fills", f.vnum/10000),
			Fix:    "watch the disk and the slot's lag (outboxd_source_lag_bytes), or upgrade to PostgreSQL 13+ and bound max_slot_wal_keep_size"})
		return out
	case f.keepMB < 0:
		out = append(out, CheckResult{Name: keepName, OK: true, Warn: true,
			Reason: "-1 (unlimited): a stopped or lagging outboxd makes the server keep WAL for its slot until the disk fills, and then the database stops",
			Fix:    keepFix})
	default:
		out = append(out, CheckResult{Name: keepName, OK: true,
			Reason: f.keepText + ": the server keeps at most that much WAL for a lagging slot (beyond it the slot is lost, not the disk filled)"})
	}
	if !f.exists || f.status == "lost" { // absent: nothing retained yet; lost: the slot line FAILs
		return out
	}
	slotName := "slot " + f.slot
	if f.keepMB >= 0 && f.safe != nil {
		name := slotName + " safe_wal_size"
		if *f.safe < f.min {
			out = append(out, CheckResult{Name: name, OK: true, Warn: true,
				Reason: fmt.Sprintf("%s, below source.postgres.min_safe_wal_size %s: the slot is lost (wal_status lost, events after outboxd's position gone) once the server writes that much more WAL while outboxd lags",
					formatSize(*f.safe), formatSize(f.min)),
				Fix: "raise max_slot_wal_keep_size (ALTER SYSTEM SET max_slot_wal_keep_size = '<n>GB'; SELECT pg_reload_conf(); on managed services the parameter group / database flag / server parameter), " +
					"or free the lag: start outboxd (or fix what stops it) so it confirms its position"})
		} else {
			out = append(out, CheckResult{Name: name, OK: true,
				Reason: fmt.Sprintf("%s (at least source.postgres.min_safe_wal_size %s): the WAL the server may still write before the slot is lost", formatSize(*f.safe), formatSize(f.min))})
		}
	}
	switch f.status {
	case "extended":
		out = append(out, CheckResult{Name: slotName + " wal_status", OK: true, Warn: true,
			Reason: "extended: the slot retains more WAL than max_wal_size (outboxd lags, or was stopped)",
			Fix:    "let outboxd catch up (start it, or fix what slows it: see outboxd_source_lag_bytes); with max_slot_wal_keep_size = -1 the WAL keeps growing until the disk fills"})
	case "unreserved":
		out = append(out, CheckResult{Name: slotName + " wal_status", OK: true, Warn: true,
			Reason: "unreserved: the slot retains more WAL than max_slot_wal_keep_size; the next checkpoint may remove WAL it needs, and the slot is then lost",
			Fix:    "let outboxd catch up now, or raise max_slot_wal_keep_size (ALTER SYSTEM SET max_slot_wal_keep_size = '<n>GB'; SELECT pg_reload_conf(); on managed services the parameter group / database flag / server parameter)"})
	}
	return out
}

// retentionChecks are the WAL retention lines of Preflight (cfg.MinSafeWALSize: 0 stands for
// DefaultMinSafeWALSize). A fact that cannot be read is a WARN saying so.
func retentionChecks(ctx context.Context, conn *pgx.Conn, cfg Config, vnum int) []CheckResult {
	f, err := readRetention(ctx, conn, cfg, vnum)
	if err != nil {
		return []CheckResult{{Name: "max_slot_wal_keep_size", OK: true, Warn: true, Reason: "could not be read: " + err.Error(),
			Fix: "check the role may read pg_settings and pg_replication_slots"}}
	}
	return retentionLines(f)
}

// readRetention reads the facts retentionLines decides on.
func readRetention(ctx context.Context, conn *pgx.Conn, cfg Config, vnum int) (retentionFacts, error) {
	f := retentionFacts{vnum: vnum, slot: cfg.Slot, min: cfg.MinSafeWALSize}
	if f.min <= 0 {
		f.min = DefaultMinSafeWALSize
	}
	if vnum < 130000 {
		return f, nil
	}
	if err := conn.QueryRow(ctx, `SELECT setting::bigint, current_setting('max_slot_wal_keep_size') FROM pg_settings WHERE name = 'max_slot_wal_keep_size'`).
		Scan(&f.keepMB, &f.keepText); err != nil {
		return f, fmt.Errorf("read max_slot_wal_keep_size: %w", err)
	}
	var status *string
	err := conn.QueryRow(ctx, `SELECT wal_status, safe_wal_size FROM pg_replication_slots WHERE slot_name = $1`, cfg.Slot).Scan(&status, &f.safe)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return f, nil
	case err != nil:
		return f, fmt.Errorf("read slot %s's wal_status and safe_wal_size: %w", cfg.Slot, err)
	}
	f.exists, f.status = true, deref(status)
	return f, nil
}
