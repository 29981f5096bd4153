package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/internal/config"
)

// CheckResult is one preflight line: OK name, or FAIL name: reason — fix.
type CheckResult struct {
	Name   string
	OK     bool
	Reason string
	Fix    string
}

func (r CheckResult) String() string {
	if r.OK {
		if r.Reason != "" {
			return fmt.Sprintf("OK   %s (%s)", r.Name, r.Reason)
		}
		return "OK   " + r.Name
	}
	return fmt.Sprintf("FAIL %s: %s — %s", r.Name, r.Reason, r.Fix)
}

// Preflight runs the same checks as `outboxd check` and returns an error naming every FAIL.
// run refuses to start on a FAIL.
func Preflight(ctx context.Context, c *config.Config, log *slog.Logger) error {
	var buf strings.Builder
	if Check(ctx, c, &buf) {
		return nil
	}
	var fails []string
	for _, line := range strings.Split(buf.String(), "\n") {
		if strings.HasPrefix(line, "FAIL ") {
			fails = append(fails, strings.TrimPrefix(line, "FAIL "))
			log.Error("preflight check failed", "check", strings.TrimPrefix(line, "FAIL "))
		}
	}
	return fmt.Errorf("preflight failed (%d check(s)); see `outboxd check`: %s", len(fails), strings.Join(fails, "; "))
}

// Check runs every preflight check of the contract and writes one line per check to w. It
// returns false when any check failed.
func Check(ctx context.Context, c *config.Config, w io.Writer) bool {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var results []CheckResult
	switch c.Source.Type {
	case "postgres":
		results = append(results, checkPostgres(ctx, c)...)
	case "mysql":
		results = append(results, checkMySQL(ctx, c)...)
	}
	results = append(results, checkKafka(ctx, c)...)
	ok := true
	secrets := secretsOf(c)
	for _, r := range results {
		r.Reason = Scrub(r.Reason, secrets...)
		fmt.Fprintln(w, r.String())
		ok = ok && r.OK
	}
	return ok
}

func checkPostgres(ctx context.Context, c *config.Config) []CheckResult {
	var out []CheckResult
	conn, err := pgx.Connect(ctx, c.Source.DSN)
	if err != nil {
		return append(out, CheckResult{Name: "postgres reachable", Reason: err.Error(),
			Fix: "check source.dsn (host, port, user, password, database) and that PostgreSQL accepts the connection (pg_hba.conf)"})
	}
	defer conn.Close(context.Background())
	var version string
	conn.QueryRow(ctx, "SHOW server_version").Scan(&version)
	out = append(out, CheckResult{Name: "postgres reachable", OK: true, Reason: "PostgreSQL " + version})

	var walLevel string
	conn.QueryRow(ctx, "SHOW wal_level").Scan(&walLevel)
	if walLevel == "logical" {
		out = append(out, CheckResult{Name: "wal_level", OK: true, Reason: "logical"})
	} else {
		out = append(out, CheckResult{Name: "wal_level", Reason: fmt.Sprintf("is %s, needs logical", walLevel),
			Fix: "set wal_level = logical in postgresql.conf and restart PostgreSQL"})
	}

	var super, repl bool
	conn.QueryRow(ctx, "SELECT rolsuper, rolreplication FROM pg_roles WHERE rolname = current_user").Scan(&super, &repl)
	if super || repl {
		out = append(out, CheckResult{Name: "replication privilege", OK: true})
	} else {
		out = append(out, CheckResult{Name: "replication privilege", Reason: "the role has neither REPLICATION nor SUPERUSER",
			Fix: "ALTER ROLE <user> WITH REPLICATION"})
	}

	cols := []string{c.Outbox.Columns.ID, c.Outbox.Columns.AggregateID, c.Outbox.Columns.Payload}
	if strings.Contains(c.Outbox.Topic, "${routedByValue}") {
		cols = append(cols, c.Outbox.Columns.AggregateType)
	}
	for _, h := range c.Outbox.Headers {
		cols = append(cols, h.Column)
	}
	for _, t := range c.Source.Tables {
		schema, table, _ := strings.Cut(t, ".")
		rows, err := conn.Query(ctx, `SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2`, schema, table)
		if err != nil {
			out = append(out, CheckResult{Name: "table " + t, Reason: err.Error(), Fix: "grant SELECT on information_schema"})
			continue
		}
		have := map[string]bool{}
		for rows.Next() {
			var n string
			rows.Scan(&n)
			have[n] = true
		}
		rows.Close()
		if len(have) == 0 {
			out = append(out, CheckResult{Name: "table " + t, Reason: "does not exist (or is not visible to this role)",
				Fix: "create the outbox table or fix source.tables"})
			continue
		}
		var missing []string
		for _, col := range cols {
			if !have[col] {
				missing = append(missing, col)
			}
		}
		if len(missing) > 0 {
			out = append(out, CheckResult{Name: "table " + t, Reason: "lacks column(s) " + strings.Join(missing, ", "),
				Fix: "add the columns or map them in outbox.columns / outbox.headers"})
		} else {
			out = append(out, CheckResult{Name: "table " + t, OK: true})
		}
	}

	var pubExists bool
	conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)", c.Source.Postgres.Publication).Scan(&pubExists)
	if pubExists {
		out = append(out, CheckResult{Name: "publication " + c.Source.Postgres.Publication, OK: true, Reason: "exists"})
	} else {
		var canCreate bool
		conn.QueryRow(ctx, "SELECT has_database_privilege(current_database(), 'CREATE')").Scan(&canCreate)
		if canCreate || super {
			out = append(out, CheckResult{Name: "publication " + c.Source.Postgres.Publication, OK: true, Reason: "absent, will be created"})
		} else {
			out = append(out, CheckResult{Name: "publication " + c.Source.Postgres.Publication, Reason: "absent and the role may not create it",
				Fix: fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert') as an owner of the tables", c.Source.Postgres.Publication, strings.Join(c.Source.Tables, ", "))})
		}
	}

	var plugin, walStatus *string
	err = conn.QueryRow(ctx, "SELECT plugin, wal_status FROM pg_replication_slots WHERE slot_name = $1", c.Source.Postgres.Slot).Scan(&plugin, &walStatus)
	slotName := "slot " + c.Source.Postgres.Slot
	switch {
	case err == pgx.ErrNoRows:
		var used, max int
		conn.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots").Scan(&used)
		var maxS string
		conn.QueryRow(ctx, "SHOW max_replication_slots").Scan(&maxS)
		fmt.Sscan(maxS, &max)
		if used < max && walLevel == "logical" && (super || repl) {
			out = append(out, CheckResult{Name: slotName, OK: true, Reason: "absent, will be created"})
		} else {
			out = append(out, CheckResult{Name: slotName, Reason: fmt.Sprintf("absent and cannot be created (%d of max_replication_slots=%d used)", used, max),
				Fix: "raise max_replication_slots, set wal_level = logical, grant REPLICATION"})
		}
	case err != nil:
		out = append(out, CheckResult{Name: slotName, Reason: err.Error(), Fix: "check the role may read pg_replication_slots"})
	case plugin == nil || *plugin != "pgoutput":
		out = append(out, CheckResult{Name: slotName, Reason: "exists but is not a pgoutput logical slot",
			Fix: "drop it or choose another source.postgres.slot"})
	case walStatus != nil && *walStatus == "lost":
		out = append(out, CheckResult{Name: slotName, Reason: "wal_status is lost: WAL it needed was removed",
			Fix: "events after the stored position are gone from this slot; drop the slot, recreate it, and accept or backfill the gap (outboxd offsets set)"})
	default:
		st := "reserved"
		if walStatus != nil {
			st = *walStatus
		}
		out = append(out, CheckResult{Name: slotName, OK: true, Reason: "exists, wal_status " + st})
	}
	return out
}
