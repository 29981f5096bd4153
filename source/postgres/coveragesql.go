package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// The coverage queries (see coverage.go). They run as one batch, so in one implicit transaction:
// every age() is taken against the same reference. Catalog columns that PostgreSQL 13/14 lack
// (row filters, column lists, FOR TABLES IN SCHEMA) read as absent there.

// inFlightSQL lists the transactions this statement's snapshot sees as running although they
// have committed (clog says so): commits whose WAL record is written — the walsender may already
// have decoded past them — but that are not visible yet (ProcArrayEndTransaction pending, e.g.
// while waiting for a synchronous standby). A check whose snapshot misses such a transaction
// cannot vouch for positions after its commit (coveragewatch.go).
const inFlightSQL = `ARRAY(SELECT x::text FROM pg_snapshot_xip(pg_current_snapshot()) AS x WHERE pg_xact_status(x) = 'committed')`

// flushQuery is the first statement of a reading: the server's WAL flush position before the
// reading's snapshots are taken. Every commit up to it is visible to them (or in InFlight).
const flushQuery = `SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_flush_lsn() END)::text`

const pubShapeQuery = `SELECT p.oid::int8, p.xmin::text::int8, age(p.xmin)::int8, p.puballtables, p.pubinsert, p.pubviaroot, ` + inFlightSQL + `
	FROM (SELECT 1) AS one LEFT JOIN pg_publication p ON p.pubname = $1`

const slotAgeQuery = `SELECT COALESCE(age(catalog_xmin)::int8, -1) FROM pg_replication_slots WHERE slot_name = $1`

// relShapeQuery returns one row per configured table (self = true, in configuration order) and
// one per inheritance child of a plain configured table (self = false). $1/$2 are the schemas
// and names, $3 the publication name.
func relShapeQuery(version int) string {
	rowFilter, colList := "NULL::text", "NULL::text[]"
	nsp, nspJoin := "0::int8, 0::int8, 0::int8", ""
	if version >= 150000 {
		rowFilter = "pg_get_expr(pr.prqual, pr.prrelid)"
		colList = `CASE WHEN pr.prattrs IS NULL THEN NULL ELSE ARRAY(SELECT a.attname::text FROM pg_attribute a
			WHERE a.attrelid = c.oid AND a.attnum = ANY (pr.prattrs::int2[]) ORDER BY a.attnum) END`
		nsp = "COALESCE(pn.oid, 0)::int8, COALESCE(pn.xmin::text, '0')::int8, COALESCE(age(pn.xmin), 0)::int8"
		nspJoin = "LEFT JOIN pg_publication_namespace pn ON pn.pnnspid = c.relnamespace AND pn.pnpubid = (SELECT oid FROM pub)"
	}
	return `WITH RECURSIVE pub AS (SELECT oid FROM pg_publication WHERE pubname = $3),
inflight AS (SELECT ` + inFlightSQL + ` AS xs),
cfg AS (
	SELECT t.i::int AS i, c.oid AS relid, c.relkind
	FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS t(s, n, i)
	LEFT JOIN pg_namespace ns ON ns.nspname = t.s
	LEFT JOIN pg_class c ON c.relnamespace = ns.oid AND c.relname = t.n
),
kids AS (
	SELECT cfg.i, h.inhrelid AS relid FROM cfg JOIN pg_inherits h ON h.inhparent = cfg.relid WHERE cfg.relkind = 'r'
	UNION
	SELECT k.i, h.inhrelid FROM kids k JOIN pg_inherits h ON h.inhparent = k.relid
),
rels AS (SELECT i, relid, true AS self FROM cfg UNION ALL SELECT i, relid, false FROM kids)
SELECT r.i, r.self, COALESCE(c.oid, 0)::int8, COALESCE(c.relkind::text, ''),
	COALESCE(quote_ident(n.nspname) || '.' || quote_ident(c.relname), ''),
	COALESCE(n.nspname || '.' || c.relname, ''),
	ARRAY(SELECT a.attname::text FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum),
	ARRAY(SELECT a.attname::text FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = 's' ORDER BY a.attnum),
	COALESCE(pr.oid, 0)::int8, COALESCE(pr.xmin::text, '0')::int8, COALESCE(age(pr.xmin), 0)::int8,
	` + rowFilter + `, ` + colList + `, ` + nsp + `, (SELECT xs FROM inflight)
FROM rels r
LEFT JOIN pg_class c ON c.oid = r.relid
LEFT JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_publication_rel pr ON pr.prrelid = c.oid AND pr.prpubid = (SELECT oid FROM pub)
` + nspJoin + `
ORDER BY r.i, r.self DESC, c.oid`
}

// queryShape reads the publication's shape for tables (as configured) and, when slot is not
// empty, the slot's catalog_xmin age. version is server_version_num.
func queryShape(ctx context.Context, conn *pgx.Conn, version int, pub, slot string, tables []string) (*PubShape, error) {
	schemas, names := make([]string, len(tables)), make([]string, len(tables))
	for i, t := range tables {
		schemas[i], names[i] = splitTable(t)
	}
	b := &pgx.Batch{}
	b.Queue(flushQuery)
	b.Queue(pubShapeQuery, pub)
	b.Queue(relShapeQuery(version), schemas, names, pub)
	if slot != "" {
		b.Queue(slotAgeQuery, slot)
	}
	br := conn.SendBatch(ctx, b)
	defer br.Close()

	p := &PubShape{Name: pub, SlotCatalogAge: -1}
	var flush string
	if err := br.QueryRow().Scan(&flush); err != nil {
		return nil, fmt.Errorf("read the WAL flush position: %w", err)
	}
	readAt, err := pglogrepl.ParseLSN(flush)
	if err != nil {
		return nil, fmt.Errorf("read the WAL flush position: %q: %w", flush, err)
	}
	p.ReadAt = readAt
	var (
		oid, xmin, age             *int64
		allTables, insert, viaRoot *bool
		inFlight                   []string
	)
	if err := br.QueryRow().Scan(&oid, &xmin, &age, &allTables, &insert, &viaRoot, &inFlight); err != nil {
		return nil, fmt.Errorf("read publication %q from pg_publication: %w", pub, err)
	}
	if oid != nil {
		p.Exists, p.OID, p.Xmin, p.Age = true, uint32(*oid), uint32(*xmin), *age
		p.AllTables, p.Insert, p.ViaRoot = *allTables, *insert, *viaRoot
	}
	p.InFlight = inFlight

	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("read the outbox tables' publication membership: %w", err)
	}
	p.Tables = make([]TableShape, len(tables))
	for rows.Next() {
		var (
			i                            int
			self                         bool
			relOID, prOID, prXmin, pnOID int64
			pnXmin                       int64
			t                            TableShape
			ident, name                  string
			rowFilter                    *string
			colList, inFlight            []string
		)
		if err := rows.Scan(&i, &self, &relOID, &t.Relkind, &ident, &name, &t.Columns, &t.Generated,
			&prOID, &prXmin, &t.Member.RelAge, &rowFilter, &colList, &pnOID, &pnXmin, &t.Member.NspAge, &inFlight); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read the outbox tables' publication membership: %w", err)
		}
		if i < 1 || i > len(tables) {
			rows.Close()
			return nil, fmt.Errorf("publication membership query returned table index %d of %d", i, len(tables))
		}
		for _, x := range inFlight {
			if !slices.Contains(p.InFlight, x) {
				p.InFlight = append(p.InFlight, x)
			}
		}
		t.OID, t.Ident = uint32(relOID), ident
		t.Member.RelOID, t.Member.RelXmin = uint32(prOID), uint32(prXmin)
		t.Member.NspOID, t.Member.NspXmin = uint32(pnOID), uint32(pnXmin)
		if rowFilter != nil {
			t.Member.RowFilter = *rowFilter
		}
		t.Member.HasColumnList, t.Member.ColumnList = colList != nil, colList
		parent := &p.Tables[i-1]
		if self {
			t.Name = tables[i-1]
			if t.Ident == "" {
				t.Ident = pgx.Identifier{schemas[i-1], names[i-1]}.Sanitize()
			}
			t.Children = parent.Children // none yet: self sorts first
			*parent = t
		} else {
			t.Name = name
			parent.Children = append(parent.Children, t)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the outbox tables' publication membership: %w", err)
	}
	if slot != "" {
		err := br.QueryRow().Scan(&p.SlotCatalogAge)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("read catalog_xmin of replication slot %q: %w", slot, err)
		}
	}
	return p, nil
}

// serverVersion returns server_version_num.
func serverVersion(ctx context.Context, conn *pgx.Conn) (int, error) {
	var v int
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read server_version_num: %w", err)
	}
	return v, nil
}
