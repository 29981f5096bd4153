package postgres

// Publication coverage: does the publication stream every INSERT into every configured table,
// whole? (issue 11, cases 1-5 and 18.)
//
// pgoutput decides per change, with the catalog as it was when the change was committed (the
// historic snapshot of logical decoding), whether a relation is published and which of its rows
// and columns are sent. So a publication that lacks a table, publishes no inserts, has a row
// filter or a column list, or a table whose payload is a STORED generated column (PostgreSQL 15
// never sends generated columns) makes rows vanish from the stream without a trace — and so does
// a publication that changes while outboxd runs: the rows committed while the table was not in
// it are never streamed, not even after the table is added back.
//
// This file is the pure part: PubShape is what the catalog says (filled by queryShape,
// coveragesql.go), Problems says what is wrong with it and the SQL that fixes it, and
// Changes compares the identity of the rows that make up the coverage (pg_publication,
// pg_publication_rel, pg_publication_namespace and pg_class oids and xmins) between two
// readings. The watcher (coveragewatch.go) and the preflight (preflight.go) use them.

import (
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pglogrepl"
)

// PubShape is the publication and the configured tables as the catalog shows them.
type PubShape struct {
	Name      string // publication name (unquoted)
	Exists    bool
	OID       uint32
	Xmin      uint32 // raw xmin of its pg_publication row: any ALTER PUBLICATION ... SET/RENAME/OWNER changes it
	Age       int64  // age(xmin)
	AllTables bool
	Insert    bool // pubinsert
	ViaRoot   bool // pubviaroot

	Tables []TableShape // one per configured table, in configuration order

	// SlotCatalogAge is age(catalog_xmin) of the replication slot, read in the same transaction
	// as the ages above; -1 when the slot does not exist or has no catalog_xmin.
	SlotCatalogAge int64

	// ReadAt is the server's WAL flush position read before the reading's snapshots.
	ReadAt pglogrepl.LSN

	// InFlight are the xids the reading's snapshots saw as running although they had committed
	// (see inFlightSQL): a reading with any cannot vouch for what committed before it started.
	InFlight []string
}

// TableShape is one configured table (or one inheritance child of it).
type TableShape struct {
	Name      string   // as configured ("schema.table"); for a child, its qualified catalog name
	Ident     string   // quoted schema.table for SQL
	OID       uint32   // pg_class oid; 0 when no such relation exists
	Relkind   string   // pg_class.relkind: "r" table, "p" partitioned table, ...
	Columns   []string // every column, in table order
	Generated []string // STORED generated columns (attgenerated = 's')
	Member    Membership
	Children  []TableShape // inheritance children (of a plain table; partitions are not listed), recursively
}

// Membership is what makes a relation part of the publication (besides FOR ALL TABLES).
type Membership struct {
	RelOID  uint32 // pg_publication_rel row for the relation (0: none)
	RelXmin uint32
	RelAge  int64
	NspOID  uint32 // pg_publication_namespace row for its schema, FOR TABLES IN SCHEMA (0: none)
	NspXmin uint32
	NspAge  int64

	RowFilter     string   // pg_get_expr(prqual): "" when none
	HasColumnList bool     // prattrs is not NULL
	ColumnList    []string // the listed columns
}

// Problem is one reason the publication does not stream every outbox row whole.
type Problem struct {
	What string // what is wrong, naming the table
	Fix  string // the SQL (or change) that fixes it
}

func (p Problem) String() string { return p.What + ": " + p.Fix }

func (t *TableShape) covered(pub *PubShape) bool {
	return pub.AllTables || t.Member.RelOID != 0 || t.Member.NspOID != 0
}

// Problems lists everything that makes the publication lose or mangle rows of the configured
// tables. need are the columns outboxd reads (id, aggregate id, payload, ...; see Config.Columns).
// An absent publication (outboxd creates it) has only the generated-column problem.
func (p *PubShape) Problems(need []string) []Problem {
	if !p.Exists {
		var out []Problem
		for i := range p.Tables {
			t := &p.Tables[i]
			out = append(out, generatedProblems(t, t.Name, need)...)
			for j := range t.Children {
				out = append(out, generatedProblems(&t.Children[j], t.Children[j].Name, need)...)
			}
		}
		return out
	}
	pub := quoteIdent(p.Name)
	var out []Problem
	if !p.Insert && len(p.Tables) > 0 { // no table (the tableless outbox): messages do not depend on it
		out = append(out, Problem{
			What: fmt.Sprintf("publication %q does not publish inserts (publish does not contain 'insert'): no outbox row is streamed", p.Name),
			Fix:  fmt.Sprintf("ALTER PUBLICATION %s SET (publish = 'insert') (keep the other operations other subscribers need, e.g. 'insert, update')", pub)})
	}
	for i := range p.Tables {
		t := &p.Tables[i]
		if t.OID == 0 {
			out = append(out, Problem{What: fmt.Sprintf("table %s (source.tables) does not exist", t.Name),
				Fix: "create the outbox table or fix source.tables"})
			continue
		}
		if t.Relkind != "r" && t.Relkind != "p" {
			out = append(out, Problem{What: fmt.Sprintf("%s (source.tables) is not a table (relkind %q): it cannot be published", t.Name, t.Relkind),
				Fix: "configure the outbox table itself in source.tables"})
			continue
		}
		if t.Relkind == "p" && !p.ViaRoot {
			out = append(out, Problem{
				What: fmt.Sprintf("%s is partitioned but publication %q has publish_via_partition_root = false: its rows are streamed under the partitions' names", t.Name, p.Name),
				Fix:  fmt.Sprintf("ALTER PUBLICATION %s SET (publish_via_partition_root = true)", pub)})
		}
		out = append(out, p.relProblems(t, t.Name, need)...)
		for j := range t.Children {
			c := &t.Children[j]
			out = append(out, p.relProblems(c, fmt.Sprintf("%s (an inheritance child of %s: its rows are rows of %s)", c.Name, t.Name, t.Name), need)...)
		}
	}
	return out
}

// relProblems checks one published relation: covered, no row filter, no column list that drops
// a column, no generated column outboxd needs.
func (p *PubShape) relProblems(t *TableShape, label string, need []string) []Problem {
	pub := quoteIdent(p.Name)
	if !t.covered(p) {
		return []Problem{{What: fmt.Sprintf("publication %q does not include %s: its rows are not streamed", p.Name, label),
			Fix: fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s", pub, t.Ident)}}
	}
	var out []Problem
	// A row filter or column list lives on the pg_publication_rel row; re-adding the table in
	// one transaction replaces it without a moment where the table is not published.
	readd := fmt.Sprintf("BEGIN; ALTER PUBLICATION %s DROP TABLE %s; ALTER PUBLICATION %s ADD TABLE %s; COMMIT;", pub, t.Ident, pub, t.Ident)
	if t.Member.RowFilter != "" {
		out = append(out, Problem{
			What: fmt.Sprintf("publication %q has a row filter on %s (WHERE %s): rows it rejects are never streamed", p.Name, label, t.Member.RowFilter),
			Fix:  "remove the filter: " + readd})
	}
	if t.Member.HasColumnList {
		var dropped []string
		for _, c := range t.Columns {
			// Generated columns are never streamed anyway (checked below).
			if !slices.Contains(t.Member.ColumnList, c) && !slices.Contains(t.Generated, c) {
				if slices.Contains(need, c) {
					c += " (used by outboxd)"
				}
				dropped = append(dropped, c)
			}
		}
		if len(dropped) > 0 {
			out = append(out, Problem{
				What: fmt.Sprintf("publication %q has a column list on %s that leaves out %s: those values are never streamed", p.Name, label, strings.Join(dropped, ", ")),
				Fix:  "remove the column list: " + readd})
		}
	}
	return append(out, generatedProblems(t, label, need)...)
}

// generatedProblems: pgoutput (PostgreSQL 15-17) never streams generated columns.
func generatedProblems(t *TableShape, label string, need []string) []Problem {
	var gen []string
	for _, c := range t.Generated {
		if slices.Contains(need, c) {
			gen = append(gen, c)
		}
	}
	if len(gen) == 0 {
		return nil
	}
	return []Problem{{
		What: fmt.Sprintf("column(s) %s of %s are STORED generated columns: pgoutput never streams generated columns", strings.Join(gen, ", "), label),
		Fix: fmt.Sprintf("make them plain columns (ALTER TABLE %s ALTER COLUMN %s DROP EXPRESSION, and fill them in the INSERT) or map outbox.columns to plain columns",
			t.Ident, quoteIdent(gen[0]))}}
}

// Changes describes how the coverage identity differs from base (read at Open): any
// pg_publication, pg_publication_rel or pg_publication_namespace row, or any configured table or
// inheritance child, that is gone, new or replaced. An empty result means nothing changed. With
// no configured table (the tableless outbox) only a dropped or re-created publication counts:
// an ALTER PUBLICATION changes no message, and a table it adds stops the stream at its first
// row (attribution.go, notAttributed).
func Changes(base, now *PubShape) []string {
	var out []string
	switch {
	case !now.Exists:
		return []string{fmt.Sprintf("publication %q was dropped", base.Name)}
	case now.OID != base.OID:
		out = append(out, fmt.Sprintf("publication %q was dropped and created again (oid %d -> %d)", base.Name, base.OID, now.OID))
	case now.Xmin != base.Xmin && len(base.Tables) > 0: // no table: its options change no message
		out = append(out, fmt.Sprintf("publication %q was altered (ALTER PUBLICATION ... SET/RENAME/OWNER; now publish insert=%t, publish_via_partition_root=%t, all tables=%t)",
			base.Name, now.Insert, now.ViaRoot, now.AllTables))
	}
	for i := range base.Tables {
		if i >= len(now.Tables) {
			break
		}
		out = append(out, relChanges(&base.Tables[i], &now.Tables[i], base.Name)...)
		bc, nc := childMap(base.Tables[i].Children), childMap(now.Tables[i].Children)
		for oid, c := range bc {
			if n, ok := nc[oid]; !ok {
				out = append(out, fmt.Sprintf("inheritance child %s of %s is gone (dropped or detached)", c.Name, base.Tables[i].Name))
			} else {
				out = append(out, relChanges(c, n, base.Name)...)
			}
		}
		for oid, c := range nc {
			if _, ok := bc[oid]; !ok {
				out = append(out, fmt.Sprintf("%s became an inheritance child of %s (its rows are rows of %s)", c.Name, now.Tables[i].Name, now.Tables[i].Name))
			}
		}
	}
	return out
}

func childMap(cs []TableShape) map[uint32]*TableShape {
	m := make(map[uint32]*TableShape, len(cs))
	for i := range cs {
		m[cs[i].OID] = &cs[i]
	}
	return m
}

func relChanges(b, n *TableShape, pub string) []string {
	switch {
	case n.OID == 0:
		return []string{fmt.Sprintf("table %s no longer exists (dropped, or renamed)", b.Name)}
	case b.OID != n.OID:
		return []string{fmt.Sprintf("%s is now another table (oid %d -> %d: dropped and created again, or renamed and another created under its name)", b.Name, b.OID, n.OID)}
	}
	var out []string
	bm, nm := b.Member, n.Member
	switch {
	case bm.RelOID != 0 && nm.RelOID == 0:
		out = append(out, fmt.Sprintf("%s was removed from publication %q (ALTER PUBLICATION ... DROP TABLE or SET TABLE)", b.Name, pub))
	case bm.RelOID != nm.RelOID || bm.RelXmin != nm.RelXmin:
		out = append(out, fmt.Sprintf("%s was removed from publication %q and added again, or its row filter or column list changed (pg_publication_rel row %d -> %d)", b.Name, pub, bm.RelOID, nm.RelOID))
	}
	switch {
	case bm.NspOID != 0 && nm.NspOID == 0:
		out = append(out, fmt.Sprintf("the schema of %s was removed from publication %q (ALTER PUBLICATION ... DROP TABLES IN SCHEMA)", b.Name, pub))
	case bm.NspOID != nm.NspOID || bm.NspXmin != nm.NspXmin:
		out = append(out, fmt.Sprintf("the schema of %s was removed from publication %q and added again, or added (pg_publication_namespace row %d -> %d)", b.Name, pub, bm.NspOID, nm.NspOID))
	}
	return out
}

// AgeHit is one coverage row that may be younger than the slot's restart point.
type AgeHit struct {
	What string // which row, in words
	Xmin uint32 // its xmin: the transaction that wrote it
}

// NewerThanSlot lists the coverage rows written at or after the slot's catalog_xmin: changes the
// slot may decode as happening after its restart point, i.e. rows committed before the change
// and after the stored position may never have been streamed. A row is newer when its age is at
// most the slot's catalog_xmin age (both read in one transaction, so against the same
// reference). Returns nil when the slot's age is unknown.
//
// This test errs on the safe side: catalog_xmin can be older than the slot's restart point
// (a new slot takes the oldest catalog_xmin of the other slots, or the oldest running
// transaction), so a hit is only a "maybe"; setup settles it by decoding a copy of the slot
// (coverageprobe.go).
func (p *PubShape) NewerThanSlot() []AgeHit {
	if !p.Exists || p.SlotCatalogAge < 0 {
		return nil
	}
	newer := func(age int64, oid uint32) bool { return oid != 0 && age <= p.SlotCatalogAge }
	var out []AgeHit
	if newer(p.Age, p.OID) {
		out = append(out, AgeHit{fmt.Sprintf("publication %q was created or altered (pg_publication xmin %d)", p.Name, p.Xmin), p.Xmin})
	}
	var rel func(t *TableShape)
	rel = func(t *TableShape) {
		if newer(t.Member.RelAge, t.Member.RelOID) {
			out = append(out, AgeHit{fmt.Sprintf("%s was added to the publication (pg_publication_rel xmin %d)", t.Name, t.Member.RelXmin), t.Member.RelXmin})
		}
		if newer(t.Member.NspAge, t.Member.NspOID) {
			out = append(out, AgeHit{fmt.Sprintf("the schema of %s was added to the publication (pg_publication_namespace xmin %d)", t.Name, t.Member.NspXmin), t.Member.NspXmin})
		}
		for i := range t.Children {
			rel(&t.Children[i])
		}
	}
	for i := range p.Tables {
		rel(&p.Tables[i])
	}
	return out
}

// singleRelation reports whether the configuration streams exactly one relation: one configured
// table without inheritance children (a partitioned table counts as one: its rows come under the
// root's name). The stream loop's fast path for data transactions depends on it (stream.go).
func (p *PubShape) singleRelation() bool {
	return len(p.Tables) == 1 && len(p.Tables[0].Children) == 0
}
