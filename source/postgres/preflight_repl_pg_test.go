package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/internal/testenv"
)

// Preflight by doing (issue 17) against the private PostgreSQL 15: the replication lines come
// from a replication connection and a temporary slot, as the server answers them.

// testRole creates role name in the shared cluster with attrs (e.g. "LOGIN REPLICATION"), runs
// the extra statements in db (grants), and drops it when the test ends. It returns a DSN for db
// as that role.
func testRole(t *testing.T, db, name, attrs string, extra ...string) string {
	t.Helper()
	ctx := context.Background()
	if err := pgShared.Exec(ctx, db, append([]string{"CREATE ROLE " + name + " " + attrs}, extra...)...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pgShared.Exec(context.Background(), db, "DROP OWNED BY "+name, "DROP ROLE "+name); err != nil {
			t.Errorf("drop role %s: %v", name, err)
		}
	})
	return strings.Replace(pgShared.DSN(db), "postgres://postgres@", "postgres://"+name+"@", 1)
}

// grantsFor are the rights the other check lines need (publication created, tables read).
func grantsFor(db, role string) []string {
	return []string{"GRANT CREATE ON DATABASE " + db + " TO " + role, "GRANT SELECT ON ALL TABLES IN SCHEMA public TO " + role}
}

// lineMap indexes the check lines by name.
func lineMap(rs []CheckResult) map[string]CheckResult {
	m := map[string]CheckResult{}
	for _, r := range rs {
		m[r.Name] = r
	}
	return m
}

// checkSlotsLeft is how many outboxd_check_ slots pg_replication_slots lists for db.
func checkSlotsLeft(t *testing.T, admin *pgx.Conn, db string) int {
	t.Helper()
	var n int
	if err := admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots WHERE database = $1 AND slot_name LIKE 'outboxd\_check\_%'`, db).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// watchCheckSlots records every temporary slot the check creates and what the server listed
// for it while it existed.
func watchCheckSlots(t *testing.T, admin *pgx.Conn) *[]string {
	seen := &[]string{}
	onCheckSlot = func(name string) {
		var temporary bool
		var plugin, typ string
		err := admin.QueryRow(context.Background(), "SELECT temporary, plugin, slot_type FROM pg_replication_slots WHERE slot_name = $1", name).Scan(&temporary, &plugin, &typ)
		*seen = append(*seen, name)
		if err != nil || !temporary || plugin != "pgoutput" || typ != "logical" {
			t.Errorf("while the check's slot %s exists the server lists temporary=%v plugin=%q type=%q (err %v), want a temporary logical pgoutput slot", name, temporary, plugin, typ, err)
		}
	}
	t.Cleanup(func() { onCheckSlot = nil })
	return seen
}

func replCfg(dsn, slot string) Config {
	return Config{DSN: dsn, Tables: []string{"public.outbox"}, Slot: slot, Publication: slot}
}

// TestPreflightReplicationRole: a non-superuser role WITH REPLICATION passes the replication
// lines: IDENTIFY_SYSTEM answers, a temporary slot is created (the server lists it as one) and
// is gone afterwards, and the absent slot will be created.
func TestPreflightReplicationRole(t *testing.T) {
	db := "prrole"
	_, admin := testDB(t, db)
	dsn := testRole(t, db, "prrole_user", "LOGIN REPLICATION", grantsFor(db, "prrole_user")...)
	seen := watchCheckSlots(t, admin)
	lines := lineMap(Preflight(context.Background(), replCfg(dsn, "prrole")))
	if l := lines[replPrivilegeName]; !l.OK || l.Warn || !strings.Contains(l.Reason, "IDENTIFY_SYSTEM") || !strings.Contains(l.Reason, "systemid") {
		t.Errorf("replication privilege: %+v", l)
	}
	if l := lines[slotCreationName]; !l.OK || l.Warn || !strings.Contains(l.Reason, "created temporary logical slot outboxd_check_") {
		t.Errorf("slot creation: %+v", l)
	}
	if l := lines["slot prrole"]; !l.OK || l.Warn || !strings.Contains(l.Reason, "absent, will be created") {
		t.Errorf("slot line: %+v", l)
	}
	if len(*seen) != 1 {
		t.Errorf("the check created %d temporary slots (%v), want 1", len(*seen), *seen)
	}
	if n := checkSlotsLeft(t, admin, db); n != 0 {
		t.Errorf("%d outboxd_check_ slots left behind", n)
	}
	var super bool
	admin.QueryRow(context.Background(), "SELECT rolsuper FROM pg_roles WHERE rolname = 'prrole_user'").Scan(&super)
	if super {
		t.Fatal("the test role must not be a superuser")
	}
}

// TestPreflightNoReplication: a role without REPLICATION fails the privilege line with the
// server's refusal and the fix; the absent slot cannot be created; no slot is tried or left.
func TestPreflightNoReplication(t *testing.T) {
	db := "prnorepl"
	_, admin := testDB(t, db)
	dsn := testRole(t, db, "prnorepl_user", "LOGIN", grantsFor(db, "prnorepl_user")...)
	seen := watchCheckSlots(t, admin)
	lines := lineMap(Preflight(context.Background(), replCfg(dsn, "prnorepl")))
	l := lines[replPrivilegeName]
	if l.OK || !strings.Contains(l.Reason, "must be superuser or replication role to start walsender") ||
		!strings.Contains(l.Fix, `ALTER ROLE "prnorepl_user" WITH REPLICATION`) {
		t.Errorf("replication privilege: %+v", l)
	}
	if s := lines["slot prnorepl"]; s.OK || !strings.Contains(s.Reason, "absent and cannot be created") || s.Fix != l.Fix {
		t.Errorf("slot line: %+v", s)
	}
	if _, ok := lines[slotCreationName]; ok || len(*seen) != 0 {
		t.Errorf("a slot was tried without a replication connection: %+v %v", lines[slotCreationName], *seen)
	}
	if n := checkSlotsLeft(t, admin, db); n != 0 {
		t.Errorf("%d outboxd_check_ slots left behind", n)
	}
}

// TestPreflightReplicationViaGroup: a role that has REPLICATION only through membership in a
// group role that has it (as close as vanilla PostgreSQL gets to RDS's rds_replication). Vanilla
// PostgreSQL does not inherit REPLICATION, so the server refuses the walsender: the check
// gives the server's own answer, not the catalog's, and leaves no slot.
func TestPreflightReplicationViaGroup(t *testing.T) {
	db := "prgroup"
	_, admin := testDB(t, db)
	testRole(t, db, "prgroup_repl", "NOLOGIN REPLICATION")
	dsn := testRole(t, db, "prgroup_user", "LOGIN INHERIT IN ROLE prgroup_repl", grantsFor(db, "prgroup_user")...)
	ctx := context.Background()
	var member bool
	if err := admin.QueryRow(ctx, "SELECT pg_has_role('prgroup_user', 'prgroup_repl', 'USAGE')").Scan(&member); err != nil || !member {
		t.Fatalf("prgroup_user must inherit prgroup_repl: %v %v", member, err)
	}
	// The server's answer, asked directly.
	pc, err := pgconn.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	pc.RuntimeParams["replication"] = "database"
	var want *pgconn.PgError
	if c, err := pgconn.ConnectConfig(ctx, pc); err == nil {
		c.Close(ctx)
		t.Fatal("the server accepted a replication connection from a role with REPLICATION only through a group: this test's premise (vanilla PostgreSQL) does not hold")
	} else if !errors.As(err, &want) {
		t.Fatalf("replication connection: %v, want a server error", err)
	}

	seen := watchCheckSlots(t, admin)
	lines := lineMap(Preflight(ctx, replCfg(dsn, "prgroup")))
	l := lines[replPrivilegeName]
	if l.OK || !strings.Contains(l.Reason, want.Message) || !strings.Contains(l.Reason, want.Code) {
		t.Errorf("replication privilege: %+v, want the server's %q (%s)", l, want.Message, want.Code)
	}
	if !strings.Contains(l.Fix, "not inherit") {
		t.Errorf("the fix should say REPLICATION is not inherited: %s", l.Fix)
	}
	if s := lines["slot prgroup"]; s.OK {
		t.Errorf("slot line: %+v", s)
	}
	if len(*seen) != 0 {
		t.Errorf("temporary slots created: %v", *seen)
	}
	if n := checkSlotsLeft(t, admin, db); n != 0 {
		t.Errorf("%d outboxd_check_ slots left behind", n)
	}
}

// TestPreflightExistingSlot: with the configured slot already there, the check proves the
// replication connection but creates no temporary slot.
func TestPreflightExistingSlot(t *testing.T) {
	db := "prexist"
	_, admin := testDB(t, db)
	exec(t, admin, "SELECT pg_create_logical_replication_slot('prexist', 'pgoutput')")
	dsn := testRole(t, db, "prexist_user", "LOGIN REPLICATION", grantsFor(db, "prexist_user")...)
	seen := watchCheckSlots(t, admin)
	lines := lineMap(Preflight(context.Background(), replCfg(dsn, "prexist")))
	if l := lines[replPrivilegeName]; !l.OK {
		t.Errorf("replication privilege: %+v", l)
	}
	if l, ok := lines[slotCreationName]; ok || len(*seen) != 0 {
		t.Errorf("a temporary slot was created for an existing slot: %+v %v", l, *seen)
	}
	if l := lines["slot prexist"]; !l.OK || !strings.Contains(l.Reason, "exists") {
		t.Errorf("slot line: %+v", l)
	}
	if n := checkSlotsLeft(t, admin, db); n != 0 {
		t.Errorf("%d outboxd_check_ slots left behind", n)
	}
}

// TestPreflightSlotWaits: a transaction open with an xid makes a logical slot's creation wait;
// the check cancels it after checkSlotWait and says so in WARN lines, leaving no slot.
func TestPreflightSlotWaits(t *testing.T) {
	db := "prwait"
	dsn, admin := testDB(t, db)
	old := checkSlotWait
	checkSlotWait = time.Second
	t.Cleanup(func() { checkSlotWait = old })
	ctx := context.Background()
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "INSERT INTO public.other (note) VALUES ('holds an xid')"); err != nil {
		t.Fatal(err)
	}
	other, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	start := time.Now()
	lines := lineMap(Preflight(ctx, replCfg(dsn, "prwait")))
	if el := time.Since(start); el > 20*time.Second {
		t.Errorf("check took %s with checkSlotWait 1s", el)
	}
	if l := lines[slotCreationName]; !l.OK || !l.Warn || !strings.Contains(l.Reason, "not proven") || !strings.Contains(l.Fix, "pg_stat_activity") {
		t.Errorf("slot creation: %+v", l)
	}
	if l := lines["slot prwait"]; !l.OK || !l.Warn {
		t.Errorf("slot line: %+v", l)
	}
	if n := checkSlotsLeft(t, other, db); n != 0 {
		t.Errorf("%d outboxd_check_ slots left behind", n)
	}
}

// TestPreflightServerLimits, on a private server with max_replication_slots=1 and
// max_wal_senders=1: with every slot taken the temporary slot is refused with the server's
// answer and the fix; with every walsender taken the replication connection is.
func TestPreflightServerLimits(t *testing.T) {
	p := testenv.NewPostgres(t, "max_replication_slots=1", "max_wal_senders=1")
	ctx := context.Background()
	if err := p.Exec(ctx, "app", testenv.OutboxDDL, "SELECT pg_create_logical_replication_slot('occupied', 'pgoutput')"); err != nil {
		t.Fatal(err)
	}
	lines := lineMap(Preflight(ctx, replCfg(p.DSN("app"), "limits")))
	if l := lines[replPrivilegeName]; !l.OK {
		t.Errorf("replication privilege: %+v", l)
	}
	if l := lines[slotCreationName]; l.OK || !strings.Contains(l.Reason, "all replication slots are in use") || !strings.Contains(l.Reason, "53400") ||
		!strings.Contains(l.Fix, "raise max_replication_slots") {
		t.Errorf("slot creation: %+v", l)
	}
	if l := lines["slot limits"]; l.OK || !strings.Contains(l.Reason, "1 of max_replication_slots=1 used") {
		t.Errorf("slot line: %+v", l)
	}

	pc, err := pgconn.ParseConfig(p.DSN("app"))
	if err != nil {
		t.Fatal(err)
	}
	pc.RuntimeParams["replication"] = "database"
	holder, err := pgconn.ConnectConfig(ctx, pc) // takes the only walsender
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	lines = lineMap(Preflight(ctx, replCfg(p.DSN("app"), "limits")))
	if l := lines[replPrivilegeName]; l.OK || !strings.Contains(l.Reason, "max_wal_senders") || !strings.Contains(l.Fix, "raise max_wal_senders") {
		t.Errorf("replication privilege with no free walsender: %+v", l)
	}
}
