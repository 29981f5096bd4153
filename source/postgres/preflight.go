package postgres

// Preflight: the PostgreSQL checks of `outboxd check` (and of `run` before it starts). They
// must FAIL everything Open refuses (issue 11, "Preflight catches what run refuses"): the
// publication's shape (Problems) and the slot's age against the publication (NewerThanSlot,
// settled like Open does by decoding a copy of the slot), besides the server settings.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5"
)

// CheckResult is one preflight line: OK Name (Reason), WARN Name: Reason — Fix (OK and Warn:
// the check passes, but a setting should change), or FAIL Name: Reason — Fix.
type CheckResult struct {
	Name   string
	OK     bool
	Warn   bool // with OK: a WARN line (Fix names the setting)
	Reason string
	Fix    string
}

// Preflight runs the PostgreSQL checks for cfg (DSN, Tables, Slot, Publication, Columns; New's
// defaults apply) and returns one result per check.
func Preflight(ctx context.Context, cfg Config) []CheckResult {
	s := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	cfg = s.cfg
	var out []CheckResult
	conn, err := pgx.Connect(ctx, cfg.DSN)
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
			Fix: walLevelFix(readServerFacts(ctx, conn))}) // the managed service's way (preflight_managed.go)
	}

	var super bool // for the publication line
	conn.QueryRow(ctx, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user").Scan(&super)
	// Replication permission is proven by doing (preflight_repl.go), not read from role
	// attributes: they miss managed services' roles (rds_replication, ...) and pg_hba.conf.
	replRes := replicationChecks(ctx, conn, cfg)
	out = append(out, replRes...)

	out = append(out, tableChecks(ctx, conn, cfg)...)

	vnum, err := serverVersion(ctx, conn)
	if err != nil {
		return append(out, CheckResult{Name: "publication " + cfg.Publication, Reason: err.Error(), Fix: "check the role may read server settings"})
	}
	if cfg.MessagePrefix != "" {
		out = append(out, messagesCheck(ctx, conn, vnum, cfg.MessagePrefix)) // the tableless outbox
	}
	shape, err := queryShape(ctx, conn, vnum, cfg.Publication, cfg.Slot, cfg.Tables)
	if err != nil {
		return append(out, CheckResult{Name: "publication " + cfg.Publication, Reason: err.Error(),
			Fix: "check the role may read pg_publication, pg_publication_rel, pg_class and pg_replication_slots"})
	}
	out = append(out, publicationChecks(ctx, conn, shape, cfg, super)...)
	if shape.Exists && shape.Insert {
		out = append(out, otherTablesCheck(ctx, conn, cfg))
	}

	var plugin, walStatus, confirmed *string
	err = conn.QueryRow(ctx, "SELECT plugin, wal_status, confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", cfg.Slot).Scan(&plugin, &walStatus, &confirmed)
	slotName := "slot " + cfg.Slot
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		var used, max int
		conn.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots").Scan(&used)
		var maxS string
		conn.QueryRow(ctx, "SHOW max_replication_slots").Scan(&maxS)
		fmt.Sscan(maxS, &max)
		out = append(out, slotAbsentCheck(slotName, replRes, used, max)) // as the temporary slot proved
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
		out = append(out, slotAgeCheck(ctx, conn, s, shape, confirmed))
	}
	// WAL retention (WARN lines: a stopped outboxd fills the disk, or its slot is lost) and, on
	// PostgreSQL 17+, failover slots: preflight_retention.go, failover.go.
	out = append(out, retentionChecks(ctx, conn, cfg, vnum)...)
	out = append(out, failoverChecks(ctx, conn, cfg, vnum)...)
	return out
}

// tableChecks: every configured table exists and has the columns outboxd reads.
func tableChecks(ctx context.Context, conn *pgx.Conn, cfg Config) []CheckResult {
	var out []CheckResult
	for _, t := range cfg.Tables {
		schema, table := splitTable(t)
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
		for _, col := range cfg.Columns {
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
	return out
}

// publicationChecks: an existing publication streams every outbox row whole (one FAIL per
// problem); an absent one can be created.
func publicationChecks(ctx context.Context, conn *pgx.Conn, shape *PubShape, cfg Config, super bool) []CheckResult {
	name := "publication " + cfg.Publication
	problems := shape.Problems(cfg.Columns)
	if !shape.Exists {
		var out []CheckResult
		var canCreate bool
		conn.QueryRow(ctx, "SELECT has_database_privilege(current_database(), 'CREATE')").Scan(&canCreate)
		absent := "absent, will be created: "
		if len(shape.Tables) == 0 {
			absent = "absent, will be created with no table (source.tables is empty, the tableless outbox: only logical decoding messages are streamed): "
		}
		if canCreate || super {
			out = append(out, CheckResult{Name: name, OK: true, Reason: absent + createPublicationSQL(shape)})
		} else {
			out = append(out, CheckResult{Name: name, Reason: "absent and the role may not create it",
				Fix: createPublicationSQL(shape) + " as an owner of the tables"})
		}
		for _, p := range problems { // generated columns: not streamed by any publication
			out = append(out, CheckResult{Name: name, Reason: p.What, Fix: p.Fix})
		}
		return out
	}
	if len(problems) == 0 && len(shape.Tables) == 0 { // the tableless outbox
		return []CheckResult{{Name: name, OK: true, Reason: "exists; source.tables is empty (the tableless outbox): only logical decoding messages are streamed, whatever the publication lists (other tables: see the next line)"}}
	}
	if len(problems) == 0 {
		var tables []string
		for _, t := range shape.Tables {
			d := t.Name
			if len(t.Children) > 0 {
				d += fmt.Sprintf(" with %d inheritance child(ren)", len(t.Children))
			}
			if t.Relkind == "p" {
				d += " (partitioned, published via its root)"
			}
			tables = append(tables, d)
		}
		return []CheckResult{{Name: name, OK: true, Reason: fmt.Sprintf("exists: publishes inserts of %s, no row filter, no column list dropping a column, no generated column outboxd reads",
			strings.Join(tables, ", "))}}
	}
	var out []CheckResult
	for _, p := range problems {
		out = append(out, CheckResult{Name: name, Reason: p.What, Fix: p.Fix})
	}
	return out
}

// slotAgeCheck: the slot does not decode from before the publication's current membership.
func slotAgeCheck(ctx context.Context, conn *pgx.Conn, s *Source, shape *PubShape, confirmed *string) CheckResult {
	name := fmt.Sprintf("slot %s vs publication %s", s.cfg.Slot, s.cfg.Publication)
	if !shape.Exists {
		return CheckResult{Name: name, Reason: "the slot exists but the publication does not: a publication created now is younger than the slot, which decodes changes from before it (pgoutput fails with `publication does not exist` or skips the rows)",
			Fix: "drop the slot (SELECT pg_drop_replication_slot('" + s.cfg.Slot + "')) so outboxd creates it after the publication; re-publish from the outbox table the rows that matter"}
	}
	hits := shape.NewerThanSlot()
	if len(hits) == 0 {
		return CheckResult{Name: name, OK: true, Reason: "the publication's membership is older than the slot's catalog_xmin"}
	}
	// check does not read the stored position: the slot's confirmed position stands in for it
	// (from 0), and the refusal reads as for a slot older than its publication.
	err := s.settleAge(ctx, conn, hits, 0, slotInfo{exists: true, confirmedLSN: confirmed})
	if err == nil {
		return CheckResult{Name: name, OK: true, Reason: "the publication changes younger than the slot's catalog_xmin committed before its confirmed position (checked on a decoded copy of the slot)"}
	}
	fix := "drop the slot (SELECT pg_drop_replication_slot('" + s.cfg.Slot + "')) and let outboxd create it after the publication; re-publish from the outbox table the rows committed after the stored position and before the publication change"
	return CheckResult{Name: name, Reason: err.Error(), Fix: fix}
}

// otherTablesQuery lists (up to 11) relations the publication streams that are neither a
// configured table nor a partition or inheritance descendant of one.
const otherTablesQuery = `SELECT quote_ident(pt.schemaname) || '.' || quote_ident(pt.tablename)
FROM pg_publication_tables pt
WHERE pt.pubname = $1 AND NOT EXISTS (
	WITH RECURSIVE d AS (
		SELECT c.oid FROM unnest($2::text[], $3::text[]) AS t(s, n)
		JOIN pg_namespace ns ON ns.nspname = t.s JOIN pg_class c ON c.relnamespace = ns.oid AND c.relname = t.n
		UNION SELECT i.inhrelid FROM d JOIN pg_inherits i ON i.inhparent = d.oid)
	SELECT 1 FROM d JOIN pg_class c2 ON c2.oid = d.oid JOIN pg_namespace n2 ON n2.oid = c2.relnamespace
	WHERE n2.nspname = pt.schemaname AND c2.relname = pt.tablename)
ORDER BY 1 LIMIT 11`

// otherTablesCheck: the publication streams no other table's inserts. The stream stops at the
// first INSERT into a relation it cannot attribute to an outbox table (decoder.go), so such a
// publication would stop outboxd at some later moment; check says so up front.
func otherTablesCheck(ctx context.Context, conn *pgx.Conn, cfg Config) CheckResult {
	name := "publication " + cfg.Publication + " streams only the outbox tables"
	create := "outboxd creates it for source.tables"
	if len(cfg.Tables) == 0 {
		name = "publication " + cfg.Publication + " streams no table (source.tables is empty)"
		create = "outboxd creates it with no table"
	}
	schemas, names := make([]string, len(cfg.Tables)), make([]string, len(cfg.Tables))
	for i, t := range cfg.Tables {
		schemas[i], names[i] = splitTable(t)
	}
	rows, err := conn.Query(ctx, otherTablesQuery, cfg.Publication, schemas, names)
	if err != nil {
		return CheckResult{Name: name, Reason: err.Error(), Fix: "check the role may read pg_publication_tables"}
	}
	others, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return CheckResult{Name: name, Reason: err.Error(), Fix: "check the role may read pg_publication_tables"}
	}
	if len(others) == 0 {
		return CheckResult{Name: name, OK: true}
	}
	list := strings.Join(others[:min(len(others), 10)], ", ")
	if len(others) > 10 {
		list += ", ..."
	}
	return CheckResult{Name: name,
		Reason: fmt.Sprintf("it also publishes inserts of %s: outboxd stops at the first INSERT into a table that is not an outbox table (it never skips a row it cannot attribute)", list),
		Fix:    fmt.Sprintf("give outboxd a publication of its own (set source.postgres.publication to a new name; %s), or ALTER PUBLICATION %s DROP TABLE <each of them>", create, quoteIdent(cfg.Publication))}
}
