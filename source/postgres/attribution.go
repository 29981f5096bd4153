package postgres

import (
	"fmt"
	"maps"
	"sort"
	"strings"

	"github.com/outboxd/outboxd/source"
)

// The decoder's attribution decisions (pure; see relations.go for where the facts come from).

// outboxTable is one configured table as the decoder knows it.
type outboxTable struct {
	name      string // as configured: rows report it
	qualified string // schema.table in the catalog
	oid       uint32 // 0: not loaded (NewDecoder): the first Relation message under the name fixes it
	kind      byte   // 'r', 'p', or 0 when not loaded
}

// attribution says which configured table a relation OID belongs to.
type attribution struct {
	table *outboxTable
	self  bool // the OID is the table itself (else a partition or inheritance child)
}

// NewDecoderFor returns a decoder attributing rows with r (see Relations). A relation that
// descends from two configured tables is not attributed (its inserts are errors that say so).
func NewDecoderFor(r Relations) *Decoder {
	d := &Decoder{
		tables:   make(map[string]*outboxTable, len(r.Tables)),
		byOID:    make(map[uint32]attribution),
		foreign:  make(map[uint32]string),
		loadedAt: r.LoadedAt,
		rels:     make(map[uint32]*relation),
		notNull:  maps.Clone(r.NotNull), // Resolve adds to it; r stays as loaded
		defaults: maps.Clone(r.Defaults),
	}
	if d.defaults == nil {
		d.defaults = make(map[uint32]map[string]string)
	}
	if d.notNull == nil {
		d.notNull = make(map[uint32]map[string]bool)
	}
	for _, t := range r.Tables {
		schema, name := t.Schema, t.Table
		if schema == "" || name == "" {
			schema, name = splitTable(t.Name)
		}
		ot := &outboxTable{name: t.Name, qualified: schema + "." + name, oid: t.OID, kind: t.Kind}
		d.tables[ot.qualified] = ot
		if t.OID != 0 {
			d.byOID[t.OID] = attribution{table: ot, self: true}
		}
	}
	for _, t := range r.Tables {
		parent := d.tables[qualifiedOf(t)]
		for _, c := range t.Descendants {
			d.addDescendant(c.OID, c.String(), parent)
		}
	}
	return d
}

func qualifiedOf(t TableRelation) string {
	if t.Schema == "" || t.Table == "" {
		s, n := splitTable(t.Name)
		return s + "." + n
	}
	return t.Schema + "." + t.Table
}

// addDescendant attributes oid to parent unless it is a configured table itself (then it is its
// own) or already descends from another configured table (then it is ambiguous).
func (d *Decoder) addDescendant(oid uint32, name string, parent *outboxTable) {
	if _, bad := d.foreign[oid]; bad {
		return
	}
	a, ok := d.byOID[oid]
	switch {
	case !ok:
		d.byOID[oid] = attribution{table: parent}
	case a.self || a.table == parent:
	default:
		delete(d.byOID, oid)
		d.foreign[oid] = fmt.Sprintf("it is a partition or inheritance child of both %s and %s, so outboxd cannot tell which outbox its rows belong to", a.table.name, parent.name)
	}
}

// Resolve records what the catalog says about relation oid, after Decode returned an
// *UnknownRelationError for it: a partition or inheritance child of exactly one configured
// table is attributed to it; anything else is not attributed (inserts into it are errors).
func (d *Decoder) Resolve(oid uint32, cr CatalogRelation) {
	if cr.NotNull != nil {
		d.notNull[oid] = cr.NotNull
		d.defaults[oid] = cr.Defaults
	}
	if !cr.Exists {
		d.foreign[oid] = "it no longer exists in the catalog, so outboxd cannot tell whether it was a partition or inheritance child of a table in source.tables (a partition dropped before outboxd read its rows? publish partitioned outbox tables WITH (publish_via_partition_root = true) so their rows arrive under the table's own name)"
		return
	}
	var parents []*outboxTable
	for _, a := range cr.Ancestors {
		if at, ok := d.byOID[a]; ok && at.self {
			parents = append(parents, at.table)
		}
	}
	switch len(parents) {
	case 0:
		d.foreign[oid] = "it is neither a table in source.tables nor a partition or inheritance child of one"
	case 1:
		d.byOID[oid] = attribution{table: parents[0]}
	default:
		names := make([]string, len(parents))
		for i, p := range parents {
			names[i] = p.name
		}
		sort.Strings(names)
		d.foreign[oid] = fmt.Sprintf("it is a partition or inheritance child of %s, so outboxd cannot tell which outbox its rows belong to", strings.Join(names, " and "))
	}
}

// attributedTo returns the configured table relation oid is attributed to, or "".
func (d *Decoder) attributedTo(oid uint32) string {
	if a, ok := d.byOID[oid]; ok {
		return a.table.name
	}
	return ""
}

// past reports whether the open transaction committed before the relations were loaded: its
// catalog is no newer than the loaded one, so a difference is history replayed after a restart.
func (d *Decoder) past() bool {
	return d.inTx && d.commitLSN != 0 && d.commitLSN < d.loadedAt
}

// attribute decides rel's attribution from its Relation message (schema ns, name).
func (d *Decoder) attribute(rel *relation, ns, name string) error {
	qualified := ns + "." + name
	if a, ok := d.byOID[rel.oid]; ok {
		t := a.table
		if a.self && qualified != t.qualified {
			if !d.past() {
				return d.renamedError(t, qualified)
			}
			d.notice("replaying a transaction from before outboxd started: the outbox table had another name then; its rows are attributed to the table",
				"table", t.name, "oid", rel.oid, "name_then", qualified, "commit_lsn", d.commitLSN)
		}
		rel.table, rel.capture = t.name, true
		return nil
	}
	if t, ok := d.tables[qualified]; ok {
		switch {
		case t.oid == 0: // not loaded (NewDecoder): this Relation message fixes the OID
			t.oid = rel.oid
			d.byOID[rel.oid] = attribution{table: t, self: true}
		case d.past():
			// An earlier incarnation of the table (dropped, or renamed away, before this start):
			// its rows were written under the configured name.
			d.notice("replaying a transaction from before outboxd started: the table then had another OID (dropped and re-created, or replaced, before this start); its rows are attributed to the table",
				"table", t.name, "oid_then", rel.oid, "oid", t.oid, "commit_lsn", d.commitLSN)
		default:
			return d.recreatedError(t, rel.oid)
		}
		rel.table, rel.capture = t.name, true
		return nil
	}
	if why, ok := d.foreign[rel.oid]; ok {
		rel.why = why
		return nil
	}
	return &UnknownRelationError{OID: rel.oid, Schema: ns, Table: name}
}

func (d *Decoder) notice(msg string, args ...any) {
	if d.log != nil {
		d.log.Warn(msg, args...)
	}
}

// where describes the open transaction for error messages.
func (d *Decoder) where() string {
	if !d.inTx {
		return "outside a transaction"
	}
	w := fmt.Sprintf("in the transaction committing at LSN %s at %s", d.commitLSN, d.tx.CommitTime.UTC().Format("2006-01-02T15:04:05.000000Z"))
	if d.handedRows > 0 {
		w += fmt.Sprintf(" (a big transaction: %d of its rows were already handed out in earlier chunks; at_least_once may have delivered them, exactly_once aborts them)", d.handedRows)
	}
	return w
}

func (d *Decoder) renamedError(t *outboxTable, now string) error {
	return stopf("pgoutput: relation OID %d, which was %s (source.tables) when outboxd started, arrives named %s %s: "+
		"the outbox table was renamed while outboxd was running. outboxd stops before handing out the end of this transaction, so no position past it is stored or confirmed. "+
		"Rows written under the name %s since the rename went to another table, which this stream does not carry as the outbox. To recover: "+
		"if %s is still the outbox, set source.tables to %s and restart; otherwise make the publication cover the new %s (ALTER PUBLICATION … SET TABLE %s), "+
		"re-publish from it the rows written since the rename (at or before %s), skip %s's rows with `outboxd offsets set -c FILE --position <pg_current_wal_lsn() after the fix>`, and restart",
		t.oid, t.qualified, now, d.where(), t.qualified, now, now, t.qualified, t.qualified, d.commitLSN, now)
}

func (d *Decoder) recreatedError(t *outboxTable, oid uint32) error {
	return stopf("pgoutput: %s (source.tables) arrives as relation OID %d, but it was OID %d when outboxd started, %s: "+
		"the outbox table was dropped and re-created (or renamed and replaced) while outboxd was running. outboxd stops before handing out the end of this transaction, so no position past it is stored or confirmed. "+
		"If rows were written to the new table before the publication covered it, they were never streamed: re-publish them from the table (rows written since it was created, at or before %s). "+
		"Then check that the publication covers the new table (SELECT * FROM pg_publication_tables) and restart outboxd: it loads the new OID and delivers the new table's rows from the stored position on",
		t.qualified, oid, t.oid, d.where(), d.commitLSN)
}

// notAttributed is the error for an INSERT into a relation no configured table owns.
func (d *Decoder) notAttributed(rel *relation) error {
	why := rel.why
	if why == "" {
		why = "it is neither a table in source.tables nor a partition or inheritance child of one"
	}
	return stopf("pgoutput: INSERT into %s (relation OID %d) %s, but %s. outboxd stops rather than skip a row it cannot attribute, so no position past this transaction is stored or confirmed. "+
		"The publication (source.postgres.publication) streams this relation: if it holds outbox rows, add it to source.tables; otherwise remove it from the publication "+
		"(ALTER PUBLICATION … DROP TABLE %s; a FOR ALL TABLES or FOR TABLES IN SCHEMA publication cannot be used unless every table it streams is an outbox table). Then restart; "+
		"if the transaction can never be attributed, skip it with `outboxd offsets set -c FILE --position <this transaction's end LSN, past %s>` after re-publishing what it holds",
		rel.table, rel.oid, d.where(), why, rel.table, d.commitLSN)
}

// stopError is an attribution stop. It matches source.ErrPositionLost, so the pipeline does not
// reconnect (a new session would load the catalog as it is now and could take the change for
// history): outboxd exits 1, and the operator's restart is the acknowledgement.
type stopError struct{ msg string }

func (e *stopError) Error() string        { return e.msg }
func (e *stopError) Is(target error) bool { return target == source.ErrPositionLost }

func stopf(format string, args ...any) error { return &stopError{msg: fmt.Sprintf(format, args...)} }

// message handles a logical decoding Message the stream received outside a transaction, before
// its heartbeat handling: only a non-transactional message with outboxd's heartbeat prefix is a
// heartbeat; a non-transactional one with the outbox message prefix is ignored (debug log); a
// transactional one with it is an error (pgoutput sends those inside a transaction, and outboxd
// never drops an outbox event); every other one is reported to onMessage (message.go). None is
// a row: inside a transaction Decode handles messages (decodeMessage).
func (d *Decoder) message(b []byte) error {
	m, err := parseMessage(b)
	if err != nil {
		return err
	}
	return d.otherMessage(m)
}
