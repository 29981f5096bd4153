package postgres

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// The managed-service detection and fixes, on facts as each service shows them (not run
// against the services: only vanilla PostgreSQL runs here).

func facts(user string, settings map[string]string, roles ...string) serverFacts {
	f := serverFacts{User: user, Settings: map[string]string{}, Roles: map[string]bool{}}
	for k, v := range settings {
		f.Settings[k] = v
	}
	for _, r := range roles {
		f.Roles[r] = true
	}
	return f
}

func TestDetectService(t *testing.T) {
	for _, c := range []struct {
		name     string
		f        serverFacts
		want     *managedService
		repl     []string // in replicationFix
		walLevel []string // in walLevelFix
	}{
		{"vanilla", facts("app", map[string]string{}), nil,
			[]string{`ALTER ROLE "app" WITH REPLICATION`, "superuser", "not inherit"}, []string{"wal_level = logical in postgresql.conf"}},
		{"vanilla with an unrelated role", facts("app", nil, "replicators"), nil,
			[]string{`ALTER ROLE "app" WITH REPLICATION`}, []string{"postgresql.conf"}},
		{"RDS by setting", facts("app", map[string]string{"rds.extensions": "pg_stat_statements", "rds.logical_replication": "off"}), &serviceRDS,
			[]string{`GRANT rds_replication TO "app"`, "rds_superuser"}, []string{"rds.logical_replication = 1", "parameter group", "reboot"}},
		{"Aurora by role", facts("app", nil, "rds_superuser", "rds_replication"), &serviceRDS,
			[]string{`GRANT rds_replication TO "app"`}, []string{"DB cluster parameter group"}},
		{"Cloud SQL by flag", facts("app", map[string]string{"cloudsql.iam_authentication": "off"}), &serviceCloudSQL,
			[]string{`ALTER USER "app" WITH REPLICATION`, "cloudsqlsuperuser"}, []string{"cloudsql.logical_decoding = on", "restart"}},
		{"Cloud SQL by role", facts("app", nil, "cloudsqlsuperuser"), &serviceCloudSQL, []string{"cloudsqlsuperuser"}, []string{"cloudsql.logical_decoding"}},
		{"Azure flexible by setting", facts("app", map[string]string{"azure.extensions": "pglogical"}, "azure_pg_admin"), &serviceAzure,
			[]string{`ALTER ROLE "app" WITH REPLICATION`, "azure_pg_admin"}, []string{"server parameter wal_level = logical"}},
		{"Azure flexible by role", facts("app", nil, "azure_pg_admin"), &serviceAzure, []string{"azure_pg_admin"}, []string{"wal_level = logical"}},
		{"Azure single server", facts("app", map[string]string{"azure.replication_support": "replica"}), &serviceAzureSingle,
			[]string{"azure_pg_admin"}, []string{"azure.replication_support = logical"}},
		{"Neon", facts("app", map[string]string{"neon.timeline_id": "x"}, "neon_superuser"), &serviceNeon,
			[]string{`ALTER ROLE "app" WITH REPLICATION`, "neon_superuser"}, []string{"Neon project settings"}},
		{"Supabase", facts("app", nil, "supabase_admin"), &serviceSupabase, []string{"postgres user"}, []string{"Supabase"}},
		{"unknown user", facts("", nil), nil, []string{"ALTER ROLE <user> WITH REPLICATION"}, nil},
		{"quoted user", facts(`Odd"Name`, nil, "rds_replication"), &serviceRDS, []string{`GRANT rds_replication TO "Odd""Name"`}, nil},
	} {
		if got := detectService(c.f); got != c.want {
			t.Errorf("%s: detected %v, want %v", c.name, got, c.want)
		}
		rf, wf := replicationFix(c.f), walLevelFix(c.f)
		for _, w := range c.repl {
			if !strings.Contains(rf, w) {
				t.Errorf("%s: replication fix %q lacks %q", c.name, rf, w)
			}
		}
		for _, w := range c.walLevel {
			if !strings.Contains(wf, w) {
				t.Errorf("%s: wal_level fix %q lacks %q", c.name, wf, w)
			}
		}
		if c.want != nil && (!strings.HasPrefix(rf, c.want.Name+": ") || !strings.HasPrefix(wf, c.want.Name+": ")) {
			t.Errorf("%s: the fixes must name the service: %q / %q", c.name, rf, wf)
		}
		if strings.Contains(rf, "%s") {
			t.Errorf("%s: unfilled user in %q", c.name, rf)
		}
	}
}

func serverErr(code, msg string) error {
	return fmt.Errorf("open replication connection (source.dsn): %w", &pgconn.PgError{Severity: "FATAL", Code: code, Message: msg})
}

func TestReplicationFixes(t *testing.T) {
	rds := facts("app", map[string]string{"rds.extensions": "x"})
	van := facts("app", nil)
	for _, c := range []struct {
		name string
		fix  string
		want string
	}{
		{"walsender refused, RDS", connectFix(serverErr("42501", "must be superuser or replication role to start walsender"), rds), `GRANT rds_replication TO "app"`},
		{"walsender refused, vanilla", connectFix(serverErr("42501", "must be superuser or replication role to start walsender"), van), `ALTER ROLE "app" WITH REPLICATION`},
		{"pg_hba", connectFix(serverErr("28000", `no pg_hba.conf entry for replication connection from host "10.0.0.1", user "app", no encryption`), van), "pg_hba.conf"},
		{"max_wal_senders", connectFix(serverErr("53300", "number of requested standby connections exceeds max_wal_senders (currently 0)"), van), "max_wal_senders"},
		{"pooler", connectFix(errors.New("dial tcp: connection refused"), van), "pooler"},
		{"slots full, vanilla", slotFix(serverErr("53400", "all replication slots are in use"), van), "max_replication_slots in postgresql.conf"},
		{"slots full, RDS", slotFix(serverErr("53400", "all replication slots are in use"), rds), "parameter group"},
		{"wal_level, RDS", slotFix(serverErr("55000", `logical decoding requires wal_level >= logical`), rds), "rds.logical_replication = 1"},
		{"slot permission", slotFix(serverErr("42501", "permission denied"), rds), "rds_replication"},
		{"other slot error", slotFix(serverErr("XX000", "boom"), van), "wal_level = logical"},
	} {
		if !strings.Contains(c.fix, c.want) {
			t.Errorf("%s: fix %q lacks %q", c.name, c.fix, c.want)
		}
	}
	msg := serverMessage(serverErr("42501", "must be superuser or replication role to start walsender"))
	if msg != "FATAL must be superuser or replication role to start walsender (SQLSTATE 42501)" {
		t.Errorf("server message: %q", msg)
	}
	if serverMessage(errors.New("plain")) != "plain" {
		t.Error("a non-server error is shown as is")
	}
}

func TestSlotAbsentAgrees(t *testing.T) {
	ok := CheckResult{Name: replPrivilegeName, OK: true, Reason: "IDENTIFY_SYSTEM ..."}
	slotOK := CheckResult{Name: slotCreationName, OK: true, Reason: "created temporary logical slot"}
	slotWarn := CheckResult{Name: slotCreationName, OK: true, Warn: true, Reason: "not proven", Fix: "end long transactions"}
	refusedL := CheckResult{Name: replPrivilegeName, Reason: "refused", Fix: "GRANT rds_replication TO app"}
	slotFail := CheckResult{Name: slotCreationName, Reason: "all replication slots are in use", Fix: "raise max_replication_slots"}
	for _, c := range []struct {
		name          string
		res           []CheckResult
		proven        bool
		ok, warn      bool
		reason, fixIs string
	}{
		{"proven", []CheckResult{ok, slotOK}, true, true, false, "absent, will be created", ""},
		{"waiting", []CheckResult{ok, slotWarn}, false, true, true, "once the open transactions end", "end long transactions"},
		{"refused", []CheckResult{refusedL}, false, false, false, "see replication privilege (3 of max_replication_slots=10 used)", "GRANT rds_replication TO app"},
		{"slots full", []CheckResult{ok, slotFail}, false, false, false, "see replication slot creation", "raise max_replication_slots"},
		{"nothing", nil, false, false, false, "returned nothing", "report this as an outboxd bug"},
	} {
		if p := replicationProven(c.res); p != c.proven {
			t.Errorf("%s: proven %v", c.name, p)
		}
		got := slotAbsentCheck("slot s", c.res, 3, 10)
		if got.OK != c.ok || got.Warn != c.warn || !strings.Contains(got.Reason, c.reason) || got.Fix != c.fixIs {
			t.Errorf("%s: %+v", c.name, got)
		}
	}
	// An existing slot: the privilege line alone proves it.
	if !replicationProven([]CheckResult{ok}) {
		t.Error("the privilege line alone must prove replication for an existing slot")
	}
}

func TestCheckSlotName(t *testing.T) {
	a, err1 := checkSlotName()
	b, err2 := checkSlotName()
	if err1 != nil || err2 != nil || a == b || len(a) != len("outboxd_check_")+8 || !strings.HasPrefix(a, "outboxd_check_") {
		t.Errorf("names %q %q (%v %v)", a, b, err1, err2)
	}
	for _, r := range a {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			t.Errorf("%q: slot names use lower-case letters, digits and _", a)
		}
	}
}
