package postgres

// Relation attribution: which relations' rows belong to which configured outbox table.
//
// pgoutput names every row by the relation it is published as: the table itself; a leaf
// partition (publish_via_partition_root = false: the leaf's own OID and name); the partition
// root (publish_via_partition_root = true: the root's OID and name, and the leaf's Relation
// message is sent too); or an inheritance child (always its own OID and name). At Open,
// loadRelations reads from the catalog, for every table in source.tables, its OID, relkind and
// all its descendants (pg_inherits, recursively: partitions at every level and inheritance
// children). The Decoder attributes a relation to a configured table when it is that table
// (same OID and same schema.table) or one of its descendants, and rows then carry the configured
// name. A relation that appears later (a partition or child created while outboxd runs) is
// unknown to the decoder: Decode returns an *UnknownRelationError, the stream loop looks the OID
// up in the catalog (lookupRelation, a query on a separate connection: this is rare), hands the
// answer to Decoder.Resolve and decodes the same message again. The byte-level decoding stays
// free of I/O.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/source"
)

// Relations is what the decoder knows about the configured tables, as the catalog had them
// when outboxd started.
type Relations struct {
	// LoadedAt is pg_current_wal_lsn() taken just before the catalog was read. A transaction
	// that commits before it was decoded with a catalog no newer than the one loaded: a
	// difference then is history that predates this start (a replay after a restart), not a
	// change made while outboxd runs.
	LoadedAt pglogrepl.LSN
	Tables   []TableRelation
	// NotNull is, per relation OID (the configured tables and their descendants), the set of its
	// columns declared NOT NULL (pg_attribute.attnotnull), the source of each column's
	// source.Type Optional: pgoutput's Relation message does not carry nullability. A relation
	// or column it lacks is nullable (Optional true), as Debezium defaults a column whose
	// optionality it could not read. Read at Open, like the rest of Relations: Debezium re-reads
	// the catalog for every Relation message, but a query there would put I/O into the decoder
	// and a round trip into the stream loop after every ALTER TABLE; nullability only shapes the
	// json_schema "optional" flag, so a SET/DROP NOT NULL while outboxd runs shows from the next
	// start (a relation looked up while streaming, lookupRelation, brings its own).
	NotNull map[uint32]map[string]bool
	// Defaults is, per relation OID like NotNull, its columns' DEFAULT expressions as pgjdbc's
	// COLUMN_DEF gives them to Debezium (pg_get_expr of pg_attrdef), read by the same query and
	// at the same time; a column without a DEFAULT is absent. defaults.go turns them into the
	// source.Type's default.
	Defaults map[uint32]map[string]string
}

// TableRelation is one table of source.tables as the catalog has it.
type TableRelation struct {
	Name          string // as written in source.tables; rows report this name
	Schema, Table string // catalog names
	OID           uint32
	Kind          byte // 'r' (table) or 'p' (partitioned table)
	// Descendants are its partitions (every level) and inheritance children.
	Descendants []RelationName
}

// RelationName is a relation's OID and qualified catalog name.
type RelationName struct {
	OID           uint32
	Schema, Table string
}

func (r RelationName) String() string { return r.Schema + "." + r.Table }

// CatalogRelation is what the catalog says now about a relation the decoder did not know.
type CatalogRelation struct {
	Exists    bool
	Name      RelationName
	Ancestors []uint32          // pg_inherits parents, every level
	NotNull   map[string]bool   // its NOT NULL columns (see Relations.NotNull); nil: unknown
	Defaults  map[string]string // its columns' DEFAULT expressions (see Relations.Defaults)
}

// UnknownRelationError is returned by Decode for a Relation message whose OID the decoder cannot
// attribute yet. The caller looks the relation up (lookupRelation), passes the answer to
// Resolve and calls Decode again with the same message; the decoder's state is unchanged.
type UnknownRelationError struct {
	OID           uint32
	Schema, Table string
}

func (e *UnknownRelationError) Error() string {
	return fmt.Sprintf("pgoutput: Relation %s.%s (OID %d) is not known yet: look it up and call Resolve", e.Schema, e.Table, e.OID)
}

// relState is the Source's part of attribution (a Source field).
type relState struct {
	loaded *Relations // set by setup (loadRelations); nil only for streams started without setup (tests)
	// lookup reads an unknown relation from the catalog; nil: lookupRelation on source.dsn.
	lookup func(ctx context.Context, oid uint32) (CatalogRelation, error)

	foreignMessages atomic.Uint64 // logical decoding messages that are not outboxd heartbeats
	messageLogged   atomic.Bool
}

// ForeignMessages reports how many logical decoding messages arrived that are not outboxd's
// heartbeats (another application's pg_logical_emit_message calls). They are not outbox data and
// are ignored; the first is logged at INFO.
func (s *Source) ForeignMessages() uint64 { return s.rel.foreignMessages.Load() }

// loadRelations reads the configured tables' relations from the catalog (see Relations) and
// keeps them for the stream's decoder.
func (s *Source) loadRelations(ctx context.Context, conn *pgx.Conn) error {
	rels, err := loadRelations(ctx, conn, s.cfg.Tables)
	if err != nil {
		return err
	}
	for _, t := range rels.Tables {
		desc := make([]string, len(t.Descendants))
		for i, d := range t.Descendants {
			desc[i] = d.String()
		}
		s.log.Info("outbox table", "table", t.Name, "oid", t.OID, "relkind", string(t.Kind), "descendants", desc)
	}
	s.rel.loaded = rels
	return nil
}

// loadRelations reads, for each table in tables, its OID, relkind and descendants.
func loadRelations(ctx context.Context, conn *pgx.Conn, tables []string) (*Relations, error) {
	rels := &Relations{}
	var lsn string
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		return nil, fmt.Errorf("read the server's WAL position: %w", err)
	}
	l, err := pglogrepl.ParseLSN(lsn)
	if err != nil {
		return nil, fmt.Errorf("read the server's WAL position: %w", err)
	}
	rels.LoadedAt = l
	for _, name := range tables {
		schema, table := splitTable(name)
		t := TableRelation{Name: name, Schema: schema, Table: table}
		var kind string
		err := conn.QueryRow(ctx, `SELECT c.oid, c.relkind::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND c.relname = $2`, schema, table).Scan(&t.OID, &kind)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("table %s from source.tables does not exist (names are schema.table, case-sensitive as in the catalog): create it or fix source.tables", name)
		}
		if err != nil {
			return nil, fmt.Errorf("look up table %s from source.tables: %w", name, err)
		}
		if kind != "r" && kind != "p" {
			return nil, fmt.Errorf("%s from source.tables has relkind %q, not a table ('r') or partitioned table ('p'): logical replication publishes only tables; list the table itself in source.tables", name, kind)
		}
		t.Kind = kind[0]
		rows, err := conn.Query(ctx, `WITH RECURSIVE d(oid) AS (
				SELECT inhrelid FROM pg_inherits WHERE inhparent = $1
				UNION SELECT i.inhrelid FROM pg_inherits i JOIN d ON i.inhparent = d.oid)
			SELECT c.oid, n.nspname, c.relname FROM d JOIN pg_class c ON c.oid = d.oid
				JOIN pg_namespace n ON n.oid = c.relnamespace ORDER BY 1`, t.OID)
		if err != nil {
			return nil, fmt.Errorf("list partitions and inheritance children of %s: %w", name, err)
		}
		t.Descendants, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (RelationName, error) {
			var d RelationName
			err := r.Scan(&d.OID, &d.Schema, &d.Table)
			return d, err
		})
		if err != nil {
			return nil, fmt.Errorf("list partitions and inheritance children of %s: %w", name, err)
		}
		rels.Tables = append(rels.Tables, t)
		oids := []uint32{t.OID}
		for _, d := range t.Descendants {
			oids = append(oids, d.OID)
		}
		if err := loadNotNull(ctx, conn, oids, rels); err != nil {
			return nil, fmt.Errorf("read the NOT NULL columns of %s and its partitions: %w", name, err)
		}
	}
	return rels, nil
}

// notNullQuery lists the columns of the relations $1 that are NOT NULL or have a DEFAULT (with
// its expression as pgjdbc's getColumns reads it).
const notNullQuery = `SELECT a.attrelid, a.attname, a.attnotnull, pg_get_expr(d.adbin, d.adrelid)
	FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
	WHERE a.attrelid = ANY($1::oid[]) AND a.attnum > 0 AND NOT a.attisdropped
		AND (a.attnotnull OR d.adbin IS NOT NULL)`

// loadNotNull adds the NOT NULL columns of oids to rels.NotNull and their DEFAULTs to
// rels.Defaults.
func loadNotNull(ctx context.Context, conn *pgx.Conn, oids []uint32, rels *Relations) error {
	if rels.NotNull == nil {
		rels.NotNull = make(map[uint32]map[string]bool)
	}
	if rels.Defaults == nil {
		rels.Defaults = make(map[uint32]map[string]string)
	}
	for _, o := range oids { // a relation without NOT NULL columns is known too: an empty set
		if rels.NotNull[o] == nil {
			rels.NotNull[o] = map[string]bool{}
		}
	}
	rows, err := conn.Query(ctx, notNullQuery, oids)
	if err != nil {
		return err
	}
	var oid uint32
	var col string
	var notNull bool
	var def *string
	_, err = pgx.ForEachRow(rows, []any{&oid, &col, &notNull, &def}, func() error {
		if notNull {
			rels.NotNull[oid][col] = true
		}
		if def != nil {
			if rels.Defaults[oid] == nil {
				rels.Defaults[oid] = map[string]string{}
			}
			rels.Defaults[oid][col] = *def
		}
		return nil
	})
	return err
}

// lookupRelation reads relation oid's current name and ancestors.
func lookupRelation(ctx context.Context, conn *pgx.Conn, oid uint32) (CatalogRelation, error) {
	cr := CatalogRelation{Name: RelationName{OID: oid}}
	err := conn.QueryRow(ctx, `SELECT n.nspname, c.relname, ARRAY(
			WITH RECURSIVE a(oid) AS (
				SELECT inhparent FROM pg_inherits WHERE inhrelid = c.oid
				UNION SELECT i.inhparent FROM pg_inherits i JOIN a ON i.inhrelid = a.oid)
			SELECT oid FROM a)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1`, oid).
		Scan(&cr.Name.Schema, &cr.Name.Table, &cr.Ancestors)
	if errors.Is(err, pgx.ErrNoRows) {
		return cr, nil
	}
	if err != nil {
		return cr, fmt.Errorf("look up relation OID %d: %w", oid, err)
	}
	cr.Exists = true
	var rels Relations
	if err := loadNotNull(ctx, conn, []uint32{oid}, &rels); err != nil {
		return cr, fmt.Errorf("read the NOT NULL columns of relation OID %d: %w", oid, err)
	}
	cr.NotNull = rels.NotNull[oid]
	cr.Defaults = rels.Defaults[oid]
	return cr, nil
}

// relationLookupTimeout bounds one catalog lookup from the stream loop.
const relationLookupTimeout = 10 * time.Second

// lookupUnknown runs the catalog lookup for an unknown relation (stream loop, rare).
func (s *Source) lookupUnknown(oid uint32) (CatalogRelation, error) {
	ctx, cancel := context.WithTimeout(context.Background(), relationLookupTimeout)
	defer cancel()
	if s.rel.lookup != nil {
		return s.rel.lookup(ctx, oid)
	}
	conn, err := pgx.Connect(ctx, s.cfg.DSN)
	if err != nil {
		return CatalogRelation{}, fmt.Errorf("connect to look up relation OID %d (source.dsn): %w", oid, err)
	}
	defer conn.Close(context.Background())
	return lookupRelation(ctx, conn, oid)
}

// newDecoder returns the stream's decoder: attributing with the relations loaded at Open,
// turning outbox messages (Config.MessagePrefix) into rows, and reporting logical decoding
// messages that are not outboxd's to the Source.
func (s *Source) newDecoder() *Decoder {
	var d *Decoder
	if s.rel.loaded != nil {
		d = NewDecoderFor(*s.rel.loaded)
	} else {
		d = NewDecoder(s.cfg.Tables)
	}
	d.log = s.log
	d.onMessage = s.foreignMessage
	d.SetChunkCaps(s.cfg.ChunkRows, s.cfg.ChunkBytes)
	d.SetMessagePrefix(s.cfg.MessagePrefix) // the tableless outbox (message.go)
	return d
}

// foreignMessage counts a logical decoding message that is not an outboxd heartbeat and logs
// the first one (they are not outbox data; another application emits them).
func (s *Source) foreignMessage(m pgMessage) {
	s.rel.foreignMessages.Add(1)
	ours := strings.HasPrefix(m.prefix, "outboxd")
	switch {
	case m.transactional && m.prefix == DefaultMessagePrefix:
		s.log.Warn("a transactional logical decoding message with the tableless outbox's default prefix arrived, but source.postgres.messages is not set (or has another prefix): it is NOT published; set source.postgres.messages to publish such events",
			"prefix", m.prefix, "lsn", m.lsn, "bytes", len(m.content))
	case ours && m.transactional:
		s.log.Warn("a transactional logical decoding message with outboxd's prefix: outboxd's heartbeats are never transactional, so this one is not outboxd's; ignored (it is not outbox data)",
			"prefix", m.prefix, "lsn", m.lsn, "bytes", len(m.content))
	case ours:
		s.log.Warn("a logical decoding message with an outboxd prefix that is not a heartbeat: ignored (it is not outbox data)",
			"prefix", m.prefix, "lsn", m.lsn, "bytes", len(m.content))
	case s.rel.messageLogged.CompareAndSwap(false, true):
		s.log.Info("logical decoding messages from another application arrive on the stream (pg_logical_emit_message): they are not outbox data and are ignored; this is logged once, the count is in the source's ForeignMessages",
			"prefix", m.prefix, "transactional", m.transactional, "lsn", m.lsn, "bytes", len(m.content))
	default:
		s.log.Debug("logical decoding message ignored", "prefix", m.prefix, "transactional", m.transactional, "lsn", m.lsn)
	}
}

// retryDecode handles an *UnknownRelationError from Decode (any other error is returned as it
// is): it looks the relation up in the catalog, resolves it and decodes msg again.
func (st *stream) retryDecode(msg []byte, err error) (tx source.Tx, done bool, _ error) {
	var unknown *UnknownRelationError
	if !errors.As(err, &unknown) {
		return tx, false, err
	}
	cr, lerr := st.s.lookupUnknown(unknown.OID)
	if lerr != nil {
		return tx, false, fmt.Errorf("relation %s.%s (OID %d) appeared on the stream and could not be looked up: %w: outboxd stops; on restart it resumes from the stored position",
			unknown.Schema, unknown.Table, unknown.OID, lerr)
	}
	st.dec.Resolve(unknown.OID, cr)
	st.s.log.Info("relation looked up", "oid", unknown.OID, "name", unknown.Schema+"."+unknown.Table,
		"exists", cr.Exists, "attributed_to", st.dec.attributedTo(unknown.OID))
	return st.dec.Decode(msg)
}
