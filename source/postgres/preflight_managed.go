package postgres

// Managed PostgreSQL services: which one the server is (from the settings and roles it shows),
// and the fix a FAIL line names for it. Role attributes alone miss these services' own ways of
// granting replication (RDS: membership in rds_replication), so the preflight proves permission
// by doing (preflight_repl.go) and uses this only to word the fix. Pure functions over
// serverFacts, read by readServerFacts; unit-tested per service (preflight_repl_test.go).

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
)

// serverFacts are what the server tells about itself that names a managed service.
type serverFacts struct {
	User     string            // current_user
	Settings map[string]string // the services' own settings (name → setting): rds.*, cloudsql.*, azure.*, neon.*
	Roles    map[string]bool   // which of serviceRoles exist
}

// serviceRoles are the roles a managed service creates in every instance.
var serviceRoles = []string{"rds_replication", "rds_superuser", "cloudsqlsuperuser", "azure_pg_admin", "neon_superuser", "supabase_admin"}

// servicePrefixes are the prefixes of the services' own settings.
var servicePrefixes = []string{"rds.", "cloudsql.", "azure.", "neon."}

// managedService is a detected service: its name and the fixes for its users.
type managedService struct {
	Name        string
	replication string // how to let %s (the quoted user) open a replication connection
	walLevel    string // how to set wal_level = logical
}

var (
	serviceRDS = managedService{Name: "Amazon RDS / Aurora PostgreSQL",
		replication: "GRANT rds_replication TO %s (run as the master user or another rds_superuser member; RDS does not let you set the REPLICATION attribute)",
		walLevel:    "set rds.logical_replication = 1 in the DB parameter group (Aurora: the DB cluster parameter group) and reboot the instance; wal_level becomes logical"}
	serviceCloudSQL = managedService{Name: "Google Cloud SQL for PostgreSQL",
		replication: "ALTER USER %s WITH REPLICATION (run as a cloudsqlsuperuser member, e.g. the postgres user)",
		walLevel:    "set the database flag cloudsql.logical_decoding = on and restart the instance; wal_level becomes logical"}
	serviceAzure = managedService{Name: "Azure Database for PostgreSQL flexible server",
		replication: "ALTER ROLE %s WITH REPLICATION (run as the server admin, an azure_pg_admin member)",
		walLevel:    "set the server parameter wal_level = logical and restart the server"}
	serviceAzureSingle = managedService{Name: "Azure Database for PostgreSQL single server",
		replication: serviceAzure.replication,
		walLevel:    "set the server parameter azure.replication_support = logical and restart the server (single server is retired: consider flexible server)"}
	serviceNeon = managedService{Name: "Neon",
		replication: "ALTER ROLE %s WITH REPLICATION (run as a neon_superuser member, e.g. the project's default role)",
		walLevel:    "enable logical replication in the Neon project settings (sets wal_level = logical for the project and restarts its computes; it cannot be turned off)"}
	serviceSupabase = managedService{Name: "Supabase",
		replication: "ALTER ROLE %s WITH REPLICATION (run as the postgres user)",
		walLevel:    "Supabase runs with wal_level = logical; ask Supabase support why this project does not"}
)

// detectService names the managed service the facts show, or nil for a PostgreSQL of one's own.
func detectService(f serverFacts) *managedService {
	has := func(prefix string) bool {
		for name := range f.Settings {
			if strings.HasPrefix(name, prefix) {
				return true
			}
		}
		return false
	}
	switch {
	case has("rds.") || f.Roles["rds_replication"] || f.Roles["rds_superuser"]:
		return &serviceRDS
	case has("cloudsql.") || f.Roles["cloudsqlsuperuser"]:
		return &serviceCloudSQL
	case has("azure.") || f.Roles["azure_pg_admin"]:
		if _, single := f.Settings["azure.replication_support"]; single {
			return &serviceAzureSingle
		}
		return &serviceAzure
	case has("neon.") || f.Roles["neon_superuser"]:
		return &serviceNeon
	case f.Roles["supabase_admin"]:
		return &serviceSupabase
	}
	return nil
}

// userName is the quoted user for a fix, or <user> when unknown.
func (f serverFacts) userName() string {
	if f.User == "" {
		return "<user>"
	}
	return quoteIdent(f.User)
}

// replicationFix: how to let the user open a replication connection.
func replicationFix(f serverFacts) string {
	u := f.userName()
	if s := detectService(f); s != nil {
		return s.Name + ": " + strings.ReplaceAll(s.replication, "%s", u)
	}
	return "ALTER ROLE " + u + " WITH REPLICATION (run as a superuser; membership in a role that has REPLICATION is not enough, PostgreSQL does not inherit the attribute)"
}

// walLevelFix: how to set wal_level = logical.
func walLevelFix(f serverFacts) string {
	if s := detectService(f); s != nil {
		return s.Name + ": " + s.walLevel
	}
	return "set wal_level = logical in postgresql.conf and restart PostgreSQL"
}

// slotsFullFix: how to make room for one more replication slot.
func slotsFullFix(f serverFacts) string {
	where := "in postgresql.conf and restart PostgreSQL"
	switch detectService(f) {
	case &serviceRDS:
		where = "in the DB (cluster) parameter group and reboot"
	case &serviceCloudSQL:
		where = "with the database flag max_replication_slots and restart"
	case &serviceAzure, &serviceAzureSingle:
		where = "with the server parameter max_replication_slots and restart"
	}
	return "drop slots no consumer reads (SELECT slot_name, active, wal_status FROM pg_replication_slots; SELECT pg_drop_replication_slot('<name>')), or raise max_replication_slots " + where
}

// readServerFacts reads serverFacts; what it cannot read stays empty (the fix is then worded
// for a PostgreSQL of one's own).
func readServerFacts(ctx context.Context, conn *pgx.Conn) serverFacts {
	f := serverFacts{Settings: map[string]string{}, Roles: map[string]bool{}}
	conn.QueryRow(ctx, "SELECT current_user").Scan(&f.User)
	var likes []string
	for _, p := range servicePrefixes {
		likes = append(likes, p+"%")
	}
	if rows, err := conn.Query(ctx, "SELECT name, setting FROM pg_settings WHERE name LIKE ANY($1)", likes); err == nil {
		for rows.Next() {
			var n, v string
			if rows.Scan(&n, &v) == nil {
				f.Settings[n] = v
			}
		}
		rows.Close()
	}
	if rows, err := conn.Query(ctx, "SELECT rolname FROM pg_roles WHERE rolname = ANY($1)", serviceRoles); err == nil {
		for rows.Next() {
			var n string
			if rows.Scan(&n) == nil {
				f.Roles[n] = true
			}
		}
		rows.Close()
	}
	return f
}
