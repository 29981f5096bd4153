package postgres

// Preflight by doing (issue 17): `outboxd check` proves the role may replicate by doing what
// outboxd does — it opens a replication connection the way the source does (connectReplication,
// replication=database) and runs IDENTIFY_SYSTEM, and, where the slot does not exist yet,
// creates a temporary logical pgoutput slot and drops it. Role attributes (rolsuper,
// rolreplication) are not read for this: they miss managed services' roles (RDS grants
// replication through membership in rds_replication) and pg_hba.conf. A FAIL line carries the
// server's own answer; its fix names the managed service's way where the server shows which
// service it is (preflight_managed.go).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

const (
	replPrivilegeName = "replication privilege"
	slotCreationName  = "replication slot creation"
)

// checkSlotWait bounds the temporary slot's creation: a logical slot is ready only once the
// transactions open at that moment have ended, so a long transaction makes it wait. check then
// cancels it and says so (a WARN: outboxd's own creation would wait the same way).
var checkSlotWait = 10 * time.Second

// onCheckSlot, when set (tests), is called while the temporary slot exists.
var onCheckSlot func(name string)

// replicationChecks returns the "replication privilege" line and, when cfg.Slot does not exist,
// the "replication slot creation" line.
func replicationChecks(ctx context.Context, conn *pgx.Conn, cfg Config) []CheckResult {
	repl, err := (&Source{cfg: cfg}).connectReplication(ctx)
	if err != nil {
		return []CheckResult{refused(ctx, conn, "the server refused a replication connection (replication=database, as outboxd streams)", err)}
	}
	defer repl.Close(context.Background())
	sys, err := pglogrepl.IdentifySystem(ctx, repl)
	if err != nil {
		return []CheckResult{refused(ctx, conn, "IDENTIFY_SYSTEM on a replication connection failed", err)}
	}
	out := []CheckResult{{Name: replPrivilegeName, OK: true,
		Reason: fmt.Sprintf("IDENTIFY_SYSTEM on a replication connection: systemid %s, timeline %d, xlogpos %s", sys.SystemID, sys.Timeline, sys.XLogPos)}}

	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)", cfg.Slot).Scan(&exists); err != nil {
		return append(out, CheckResult{Name: slotCreationName, Reason: "cannot tell whether slot " + cfg.Slot + " exists: " + err.Error(),
			Fix: "check the role may read pg_replication_slots"})
	}
	if exists {
		return out // the slot line (preflight.go) checks it; nothing to create
	}
	return append(out, tryTemporarySlot(ctx, conn, repl))
}

// tryTemporarySlot creates a temporary logical pgoutput slot on repl (no snapshot) and drops it.
func tryTemporarySlot(ctx context.Context, conn *pgx.Conn, repl *pgconn.PgConn) CheckResult {
	name, err := checkSlotName()
	if err != nil {
		return CheckResult{Name: slotCreationName, Reason: err.Error(), Fix: "check the system's random source"}
	}
	var timedOut atomic.Bool
	timer := time.AfterFunc(checkSlotWait, func() {
		timedOut.Store(true)
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		repl.CancelRequest(cctx)
	})
	_, err = pglogrepl.CreateReplicationSlot(ctx, repl, name, "pgoutput", pglogrepl.CreateReplicationSlotOptions{
		Temporary: true, Mode: pglogrepl.LogicalReplication, SnapshotAction: "NOEXPORT_SNAPSHOT"})
	timer.Stop()
	if err != nil {
		if timedOut.Load() {
			gone := slotGone(ctx, conn, repl, name, false)
			return CheckResult{Name: slotCreationName, OK: true, Warn: true,
				Reason: fmt.Sprintf("not proven: a temporary logical slot was still waiting after %s for transactions open at that moment to end (canceled%s); outboxd's own slot creation waits the same way", checkSlotWait, gone),
				Fix:    "end long-running or idle-in-transaction sessions (SELECT pid, xact_start, state FROM pg_stat_activity WHERE backend_xid IS NOT NULL ORDER BY xact_start) and run check again"}
		}
		f := readServerFacts(ctx, conn)
		return CheckResult{Name: slotCreationName,
			Reason: "the server refused a temporary logical slot (pgoutput): " + serverMessage(err),
			Fix:    slotFix(err, f)}
	}
	if onCheckSlot != nil {
		onCheckSlot(name)
	}
	gone := slotGone(ctx, conn, repl, name, true)
	return CheckResult{Name: slotCreationName, OK: true,
		Reason: fmt.Sprintf("created temporary logical slot %s (pgoutput) and dropped it%s", name, gone)}
}

// slotGone drops the temporary slot name when drop is set (failing that, it closes repl: a
// temporary slot goes with its session; a canceled creation drops it on the server's side) and
// waits until pg_replication_slots no longer lists it; it returns a note for the line.
func slotGone(ctx context.Context, conn *pgx.Conn, repl *pgconn.PgConn, name string, drop bool) string {
	note := ""
	if drop {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := pglogrepl.DropReplicationSlot(dctx, repl, name, pglogrepl.DropReplicationSlotOptions{})
		cancel()
		if err != nil {
			repl.Close(context.Background())
			note = " (DROP_REPLICATION_SLOT failed: " + serverMessage(err) + "; closed the session, which drops it)"
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		var left bool
		err := conn.QueryRow(wctx, "SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)", name).Scan(&left)
		if err == nil && !left {
			return note
		}
		select {
		case <-wctx.Done():
			return fmt.Sprintf(" (but pg_replication_slots still listed %s after 10s; the server drops a temporary slot when its session ends)", name)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// checkSlotName is a fresh slot name: outboxd_check_ and 8 random hex digits.
func checkSlotName() (string, error) {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("name a temporary slot: %w", err)
	}
	return "outboxd_check_" + hex.EncodeToString(b), nil
}

// refused is the FAIL "replication privilege" line for err, the server's answer.
func refused(ctx context.Context, conn *pgx.Conn, what string, err error) CheckResult {
	f := readServerFacts(ctx, conn)
	return CheckResult{Name: replPrivilegeName, Reason: what + " for role " + f.userName() + ": " + serverMessage(err), Fix: connectFix(err, f)}
}

// serverMessage is the server's own message (with SQLSTATE) when err carries one.
func serverMessage(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		msg := pgErr.Message
		if pgErr.Detail != "" {
			msg += " (" + pgErr.Detail + ")"
		}
		return fmt.Sprintf("%s %s (SQLSTATE %s)", pgErr.Severity, msg, pgErr.Code)
	}
	return err.Error()
}

func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// connectFix: the fix for a refused replication connection.
func connectFix(err error, f serverFacts) string {
	switch code := sqlState(err); {
	case code == "42501": // insufficient_privilege: "must be superuser or replication role to start walsender"
		return replicationFix(f)
	case code == "28000": // pg_hba.conf
		return "add a pg_hba.conf line for user " + f.userName() + " and this database, then reload (SELECT pg_reload_conf()): a logical replication connection (replication=database) matches a line for its database; the keyword replication matches physical replication only"
	case code == "53300": // too_many_connections: max_wal_senders (or max_connections) reached
		return "raise max_wal_senders (a replication connection needs a free one; restart) or max_connections, or stop an idle walsender (SELECT pid, application_name FROM pg_stat_replication)"
	case code == "":
		return "check source.dsn and that it reaches PostgreSQL directly: a replication connection does not pass a transaction-mode pooler (PgBouncer, a managed pooler endpoint)"
	}
	return replicationFix(f) + "; connect directly to PostgreSQL, not through a pooler"
}

// slotFix: the fix for a refused temporary slot.
func slotFix(err error, f serverFacts) string {
	switch code := sqlState(err); code {
	case "53400": // configuration_limit_exceeded: "all replication slots are in use"
		return slotsFullFix(f)
	case "55000": // object_not_in_prerequisite_state: "logical decoding requires wal_level >= logical"
		if strings.Contains(err.Error(), "wal_level") {
			return walLevelFix(f)
		}
	case "42501":
		return replicationFix(f)
	}
	return "check wal_level = logical, a free max_replication_slots entry and the role's replication permission: " + replicationFix(f)
}

// replicationProven reports whether replicationChecks proved the role may replicate: every
// line OK and none a WARN (a slot creation that timed out proved nothing).
func replicationProven(res []CheckResult) bool {
	for _, r := range res {
		if !r.OK || r.Warn {
			return false
		}
	}
	return len(res) > 0
}

// slotAbsentCheck is the "slot <name>" line for a slot that does not exist, agreeing with what
// replicationChecks proved (used/max: pg_replication_slots' count and max_replication_slots).
func slotAbsentCheck(name string, res []CheckResult, used, max int) CheckResult {
	if replicationProven(res) {
		return CheckResult{Name: name, OK: true, Reason: "absent, will be created"} // the slot creation line says how it was proven
	}
	for _, r := range res {
		switch {
		case r.OK && r.Warn:
			return CheckResult{Name: name, OK: true, Warn: true, Reason: "absent, will be created once the open transactions end (see " + r.Name + ")", Fix: r.Fix}
		case !r.OK:
			return CheckResult{Name: name, Reason: fmt.Sprintf("absent and cannot be created: see %s (%d of max_replication_slots=%d used)", r.Name, used, max), Fix: r.Fix}
		}
	}
	return CheckResult{Name: name, Reason: "absent, and the replication checks returned nothing", Fix: "report this as an outboxd bug"}
}
