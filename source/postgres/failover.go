package postgres

// Failover slots (issue 17, source.postgres.failover_slot: auto | on | off). On PostgreSQL 17+ a
// logical slot created with FAILOVER is synchronized to physical standbys that set
// sync_replication_slots = on (with hot_standby_feedback = on, primary_slot_name, and dbname in
// primary_conninfo), so after a failover the promoted standby has outboxd's slot at a position
// it has itself received. The primary's synchronized_standby_slots lists the physical slots of
// those standbys: a walsender of a failover slot sends a change only after they have flushed
// it, so outboxd never gets ahead of the standby it would fail over to.
//
// auto (the default) creates a failover slot on 17+ (a normal one below 17, and on a standby,
// where PostgreSQL refuses FAILOVER); on refuses a server below 17 (at Open and as a check
// FAIL); off creates a normal slot. An existing slot is never changed: a failover property
// that disagrees with the setting is a WARN (check, and a log line at Open) with the command.
//
// The decisions (failoverWanted, failoverLines, createSlotCommand) are pure functions; the
// I/O reads their facts.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The values of source.postgres.failover_slot ("" is auto).
const (
	FailoverAuto = "auto"
	FailoverOn   = "on"
	FailoverOff  = "off"
)

// failoverVersion is the first server_version_num with failover slots (PostgreSQL 17).
const failoverVersion = 170000

// failoverRefusal is a failover_slot setting the server cannot honour: what and the fix.
type failoverRefusal struct{ reason, fix string }

func (e *failoverRefusal) Error() string { return e.reason + ": " + e.fix }

// failoverWanted decides whether a slot outboxd creates is a failover slot, from the setting
// (auto, on, off; "": auto), the server's version and whether it is a standby. on with a server
// that cannot create one is a *failoverRefusal naming the key.
func failoverWanted(setting string, vnum int, standby bool) (bool, error) {
	switch setting {
	case "", FailoverAuto:
		return vnum >= failoverVersion && !standby, nil
	case FailoverOff:
		return false, nil
	case FailoverOn:
		if vnum < failoverVersion {
			return false, &failoverRefusal{
				reason: fmt.Sprintf("source.postgres.failover_slot is on, but the server is PostgreSQL %s: failover slots need PostgreSQL 17 or later", versionText(vnum)),
				fix:    "set source.postgres.failover_slot: auto (a normal slot below 17, a failover slot from 17) or off, or upgrade the server"}
		}
		if standby {
			return false, &failoverRefusal{
				reason: "source.postgres.failover_slot is on, but the server is a standby (pg_is_in_recovery): PostgreSQL creates failover slots only on a primary",
				fix:    "point source.dsn at the primary, or set source.postgres.failover_slot: auto or off"}
		}
		return true, nil
	default:
		return false, &failoverRefusal{reason: fmt.Sprintf("source.postgres.failover_slot %q is not one of auto | on | off", setting),
			fix: "set it to auto, on or off"}
	}
}

// versionText is server_version_num as "15.10" (17+: "17.2").
func versionText(vnum int) string { return fmt.Sprintf("%d.%d", vnum/10000, vnum%10000) }

// createSlotCommand is the replication command creating outboxd's logical pgoutput slot:
// exporting its snapshot (snapshot: initial) or not, with FAILOVER when failover is set (only
// ever asked on 17+, see failoverWanted). PostgreSQL 15+ takes the parenthesised options; 13
// and 14 the keywords (what pglogrepl sends). The slot name is validSlotName's.
func createSlotCommand(slot string, vnum int, export, failover bool) string {
	if vnum < 150000 {
		action := "NOEXPORT_SNAPSHOT"
		if export {
			action = "EXPORT_SNAPSHOT"
		}
		return fmt.Sprintf("CREATE_REPLICATION_SLOT %s LOGICAL pgoutput %s", slot, action)
	}
	opts := "SNAPSHOT 'nothing'"
	if export {
		opts = "SNAPSHOT 'export'"
	}
	if failover {
		opts += ", FAILOVER true"
	}
	return fmt.Sprintf("CREATE_REPLICATION_SLOT %s LOGICAL pgoutput (%s)", quoteIdent(slot), opts)
}

// alterSlotCommand is the replication command that sets an existing slot's failover property
// (PostgreSQL 17+; the slot must not be in use).
func alterSlotCommand(slot string, failover bool) string {
	return fmt.Sprintf("ALTER_REPLICATION_SLOT %s (FAILOVER %t)", quoteIdent(slot), failover)
}

// alterSlotFix is how an operator changes the slot's failover property.
func alterSlotFix(slot string, failover bool) string {
	return fmt.Sprintf(`stop outboxd (the slot must not be in use), then on a replication connection to the slot's database: psql "dbname=<database> replication=database" -c '%s'`,
		alterSlotCommand(slot, failover))
}

// createSlot creates the slot on the replication connection repl (createSlotCommand) and
// parses the walsender's answer.
func createSlot(ctx context.Context, repl *pgconn.PgConn, slot string, vnum int, export, failover bool) (pglogrepl.CreateReplicationSlotResult, error) {
	return pglogrepl.ParseCreateReplicationSlot(repl.Exec(ctx, createSlotCommand(slot, vnum, export, failover)))
}

// slotFailover is what Open decides about failover slots: the server's version and whether a
// slot it creates is a failover slot.
type slotFailover struct {
	vnum     int
	failover bool
}

// failoverPlan reads the server's version (and, on 17+ unless off, whether it is a standby)
// and decides with failoverWanted; on with a server that cannot honour it is an error naming
// source.postgres.failover_slot.
func (s *Source) failoverPlan(ctx context.Context, admin *pgx.Conn) (slotFailover, error) {
	vnum, err := serverVersion(ctx, admin)
	if err != nil {
		return slotFailover{}, err
	}
	standby := false
	if vnum >= failoverVersion && s.cfg.FailoverSlot != FailoverOff {
		if err := admin.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&standby); err != nil {
			return slotFailover{}, fmt.Errorf("read pg_is_in_recovery() (source.postgres.failover_slot): %w", err)
		}
	}
	want, err := failoverWanted(s.cfg.FailoverSlot, vnum, standby)
	if err != nil {
		return slotFailover{}, err
	}
	return slotFailover{vnum: vnum, failover: want}, nil
}

// warnFailoverMismatch logs a WARN when the existing slot's failover property (17+) is not
// what source.postgres.failover_slot asks: outboxd does not change an existing slot.
func (s *Source) warnFailoverMismatch(ctx context.Context, admin *pgx.Conn, plan slotFailover) {
	if plan.vnum < failoverVersion {
		return
	}
	var has bool
	if err := admin.QueryRow(ctx, `SELECT failover FROM pg_replication_slots WHERE slot_name = $1`, s.cfg.Slot).Scan(&has); err != nil {
		s.log.Warn("could not read the slot's failover property (source.postgres.failover_slot)", "error", err)
		return
	}
	if has != plan.failover {
		s.log.Warn("the existing slot's failover property is not what source.postgres.failover_slot asks; outboxd leaves the slot as it is",
			"slot_failover", has, "failover_slot", settingText(s.cfg.FailoverSlot), "fix", alterSlotFix(s.cfg.Slot, plan.failover))
	}
}

func settingText(setting string) string {
	if setting == "" {
		return FailoverAuto
	}
	return setting
}

// failoverFacts are what the failover check lines decide on.
type failoverFacts struct {
	vnum     int
	setting  string // source.postgres.failover_slot
	standby  bool   // pg_is_in_recovery() (17+)
	slot     string
	exists   bool // the slot exists
	failover bool // its failover property (17+)
	// synced are the names in synchronized_standby_slots (17+); physical are the physical
	// slots on the server (name → wal_status) and logical the other slots' names.
	synced   []string
	physical map[string]string
	logical  map[string]bool
}

// failoverLines are the failover slot check lines for f.
func failoverLines(f failoverFacts) []CheckResult {
	name := "slot " + f.slot + " failover"
	set := settingText(f.setting)
	want, err := failoverWanted(f.setting, f.vnum, f.standby)
	var ref *failoverRefusal
	if errors.As(err, &ref) {
		return []CheckResult{{Name: name, Reason: ref.reason, Fix: ref.fix}}
	}
	if f.vnum < failoverVersion {
		return []CheckResult{{Name: name, OK: true, Reason: fmt.Sprintf("source.postgres.failover_slot: %s: PostgreSQL %s has no failover slots (they need 17+): the slot is a normal one, not synchronized to standbys, so a standby promoted by a failover has no slot for outboxd",
			set, versionText(f.vnum))}}
	}
	if f.standby {
		return []CheckResult{{Name: name, OK: true, Reason: fmt.Sprintf("source.postgres.failover_slot: %s: the server is a standby, where PostgreSQL creates no failover slot: the slot is a normal one", set)}}
	}
	var out []CheckResult
	effective := want
	switch {
	case !f.exists && want:
		out = append(out, CheckResult{Name: name, OK: true, Reason: "absent, will be created as a failover slot (CREATE_REPLICATION_SLOT ... (FAILOVER true)): standbys with sync_replication_slots = on keep a copy of it"})
	case !f.exists:
		out = append(out, CheckResult{Name: name, OK: true, Reason: "source.postgres.failover_slot: off: the slot will be created as a normal one, not synchronized to standbys"})
	case f.failover == want:
		what := "a failover slot"
		if !want {
			what = "not a failover slot"
		}
		out = append(out, CheckResult{Name: name, OK: true, Reason: fmt.Sprintf("%s, as source.postgres.failover_slot: %s asks", what, set)})
	case want:
		effective = false
		out = append(out, CheckResult{Name: name, OK: true, Warn: true,
			Reason: fmt.Sprintf("exists and is not a failover slot, but source.postgres.failover_slot: %s asks for one: it is not synchronized to standbys, so a standby promoted by a failover has no slot for outboxd (outboxd does not change an existing slot)", set),
			Fix:    alterSlotFix(f.slot, true) + "; or set source.postgres.failover_slot: off"})
	default:
		effective = true
		out = append(out, CheckResult{Name: name, OK: true, Warn: true,
			Reason: "is a failover slot, but source.postgres.failover_slot is off (outboxd does not change an existing slot)",
			Fix:    alterSlotFix(f.slot, false) + "; or set source.postgres.failover_slot: auto"})
	}
	if effective {
		out = append(out, standbySlotsLine(f))
	}
	return out
}

// standbySlotsLine: the primary's synchronized_standby_slots names the physical slot(s) of the
// standby(s) a failover would promote, and they exist.
func standbySlotsLine(f failoverFacts) CheckResult {
	const name = "synchronized_standby_slots"
	var phys []string
	for n := range f.physical {
		phys = append(phys, n)
	}
	candidates := "no physical slot exists on this server"
	if len(phys) > 0 {
		slices.Sort(phys)
		candidates = "physical slots on this server: " + strings.Join(phys, ", ")
	}
	fix := "on the primary: ALTER SYSTEM SET synchronized_standby_slots = '<the standby's physical slot: its primary_slot_name>'; SELECT pg_reload_conf(); " +
		"(on managed services the parameter group / database flag / server parameter); on the standby: sync_replication_slots = on, hot_standby_feedback = on, primary_slot_name set and dbname in primary_conninfo (" + candidates + ")"
	if len(f.synced) == 0 {
		return CheckResult{Name: name, OK: true, Warn: true,
			Reason: "is empty: the failover slot can get ahead of the standby: outboxd can receive and deliver transactions a standby has not received yet, and after a failover to it those events are in Kafka while their transactions are not in the new primary, and outboxd's stored position is ahead of the new primary's copy of the slot: the pipeline then needs a resync (compare `outboxd offsets show` with the new primary, `outboxd offsets set`)",
			Fix:    fix}
	}
	var bad []string
	for _, n := range f.synced {
		switch st, ok := f.physical[n]; {
		case ok && st == "lost":
			bad = append(bad, n+" (invalidated: wal_status lost)")
		case ok:
		case f.logical[n]:
			bad = append(bad, n+" (a logical slot, not a standby's physical slot)")
		default:
			bad = append(bad, n+" (no such slot)")
		}
	}
	if len(bad) > 0 {
		return CheckResult{Name: name, OK: true, Warn: true,
			Reason: "names " + strings.Join(bad, ", ") + ": the walsender of a failover slot waits for every slot listed, so outboxd receives nothing until this is fixed (the server log says which slot it waits for)",
			Fix:    "create the standby's physical slot or remove the name from synchronized_standby_slots (ALTER SYSTEM SET synchronized_standby_slots = '...'; SELECT pg_reload_conf(); " + candidates + ")"}
	}
	return CheckResult{Name: name, OK: true, Reason: "names " + strings.Join(f.synced, ", ") +
		": outboxd receives a change only after the standby (or standbys) using these physical slots flushed it, so the synchronized slot is never behind what outboxd delivered"}
}

// parseSlotList splits a slot list setting (synchronized_standby_slots) into its names.
func parseSlotList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		p = strings.TrimSpace(p)
		if len(p) >= 2 && p[0] == '"' && p[len(p)-1] == '"' {
			p = strings.ReplaceAll(p[1:len(p)-1], `""`, `"`)
		}
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

// failoverChecks are the failover slot lines of Preflight.
func failoverChecks(ctx context.Context, conn *pgx.Conn, cfg Config, vnum int) []CheckResult {
	f, err := readFailover(ctx, conn, cfg, vnum)
	if err != nil {
		return []CheckResult{{Name: "slot " + cfg.Slot + " failover", OK: true, Warn: true, Reason: "could not be checked: " + err.Error(),
			Fix: "check the role may read pg_replication_slots and synchronized_standby_slots"}}
	}
	return failoverLines(f)
}

// readFailover reads the facts failoverLines decides on (below 17 only the version matters).
func readFailover(ctx context.Context, conn *pgx.Conn, cfg Config, vnum int) (failoverFacts, error) {
	f := failoverFacts{vnum: vnum, setting: cfg.FailoverSlot, slot: cfg.Slot, physical: map[string]string{}, logical: map[string]bool{}}
	if vnum < failoverVersion {
		return f, nil
	}
	var synced string
	if err := conn.QueryRow(ctx, `SELECT pg_is_in_recovery(), current_setting('synchronized_standby_slots')`).Scan(&f.standby, &synced); err != nil {
		return f, fmt.Errorf("read pg_is_in_recovery() and synchronized_standby_slots: %w", err)
	}
	f.synced = parseSlotList(synced)
	rows, err := conn.Query(ctx, `SELECT slot_name, slot_type, coalesce(wal_status, ''), coalesce(failover, false) FROM pg_replication_slots`)
	if err != nil {
		return f, fmt.Errorf("read pg_replication_slots: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var n, typ, st string
		var fo bool
		if err := rows.Scan(&n, &typ, &st, &fo); err != nil {
			return f, fmt.Errorf("read pg_replication_slots: %w", err)
		}
		if n == cfg.Slot {
			f.exists, f.failover = true, fo
		}
		switch {
		case typ == "physical":
			f.physical[n] = st
		default:
			f.logical[n] = true
		}
	}
	return f, rows.Err()
}
