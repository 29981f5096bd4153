package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/source"
)

func regclass(t *testing.T, conn *pgx.Conn, name string) uint32 {
	t.Helper()
	var oid uint32
	if err := conn.QueryRow(context.Background(), `SELECT $1::regclass::oid`, name).Scan(&oid); err != nil {
		t.Fatalf("%s::regclass: %v", name, err)
	}
	return oid
}

func descNames(ds []RelationName) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.String())
	}
	slices.Sort(out)
	return out
}

// TestLoadRelations reads OIDs, relkinds and descendants from a real catalog: a plain table, a
// sub-partitioned table, an inheritance tree, and refuses a missing table and a view.
func TestLoadRelations(t *testing.T) {
	_, conn := testDB(t, "loadrels")
	exec(t, conn, `CREATE TABLE public.pout (id uuid, created_at timestamptz NOT NULL, payload jsonb) PARTITION BY RANGE (created_at)`)
	exec(t, conn, `CREATE TABLE public.pout_2024 PARTITION OF public.pout FOR VALUES FROM ('2024-01-01') TO ('2025-01-01') PARTITION BY HASH (id)`)
	exec(t, conn, `CREATE TABLE public.pout_2024_h0 PARTITION OF public.pout_2024 FOR VALUES WITH (MODULUS 2, REMAINDER 0)`)
	exec(t, conn, `CREATE TABLE public.pout_2024_h1 PARTITION OF public.pout_2024 FOR VALUES WITH (MODULUS 2, REMAINDER 1)`)
	exec(t, conn, `CREATE TABLE public.pout_2025 PARTITION OF public.pout FOR VALUES FROM ('2025-01-01') TO ('2026-01-01')`)
	exec(t, conn, `CREATE SCHEMA "Arch"`)
	exec(t, conn, `CREATE TABLE public.inh (id uuid, payload jsonb)`)
	exec(t, conn, `CREATE TABLE "Arch"."Inh Child" (extra text) INHERITS (public.inh)`)
	exec(t, conn, `CREATE TABLE public.inh_grandchild () INHERITS ("Arch"."Inh Child")`)
	exec(t, conn, `CREATE VIEW public.v AS SELECT * FROM public.outbox`)
	ctx := context.Background()

	rels, err := loadRelations(ctx, conn, []string{"public.outbox", "public.pout", "inh"})
	if err != nil {
		t.Fatal(err)
	}
	var wal string
	conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&wal)
	if now, err := pglogrepl.ParseLSN(wal); err != nil || rels.LoadedAt == 0 || rels.LoadedAt > now {
		t.Errorf("LoadedAt %s, server now at %s", rels.LoadedAt, wal)
	}
	if len(rels.Tables) != 3 {
		t.Fatalf("tables %+v", rels.Tables)
	}
	plain, part, inh := rels.Tables[0], rels.Tables[1], rels.Tables[2]
	if plain.OID != regclass(t, conn, "public.outbox") || plain.Kind != 'r' || len(plain.Descendants) != 0 || plain.Name != "public.outbox" {
		t.Errorf("public.outbox: %+v", plain)
	}
	if part.OID != regclass(t, conn, "public.pout") || part.Kind != 'p' {
		t.Errorf("public.pout: %+v", part)
	}
	if got, want := descNames(part.Descendants), []string{"public.pout_2024", "public.pout_2024_h0", "public.pout_2024_h1", "public.pout_2025"}; !slices.Equal(got, want) {
		t.Errorf("public.pout descendants %v, want %v", got, want)
	}
	for _, d := range part.Descendants {
		if d.OID != regclass(t, conn, d.String()) {
			t.Errorf("%s: OID %d", d, d.OID)
		}
	}
	if inh.Name != "inh" || inh.Schema != "public" || inh.Table != "inh" || inh.Kind != 'r' {
		t.Errorf("inh: %+v", inh)
	}
	if got, want := descNames(inh.Descendants), []string{"Arch.Inh Child", "public.inh_grandchild"}; !slices.Equal(got, want) {
		t.Errorf("inh descendants %v, want %v", got, want)
	}

	for _, c := range []struct{ table, want string }{
		{"public.missing", "does not exist"},
		{"public.OUTBOX", "does not exist"}, // catalog names are case-sensitive
		{"public.v", "relkind"},
	} {
		if _, err := loadRelations(ctx, conn, []string{"public.outbox", c.table}); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.table) {
			t.Errorf("loadRelations(%s): %v, want an error naming it with %q", c.table, err, c.want)
		}
	}
}

// TestLookupRelation: a partition created after the load is found with its ancestors and
// attributed by Resolve; a relation that is gone is reported as such.
func TestLookupRelation(t *testing.T) {
	_, conn := testDB(t, "lookuprels")
	ctx := context.Background()
	exec(t, conn, `CREATE TABLE public.pout (id uuid, created_at timestamptz NOT NULL) PARTITION BY RANGE (created_at)`)
	exec(t, conn, `CREATE TABLE public.pout_a PARTITION OF public.pout FOR VALUES FROM ('2024-01-01') TO ('2025-01-01') PARTITION BY HASH (id)`)
	rels, err := loadRelations(ctx, conn, []string{"public.pout"})
	if err != nil {
		t.Fatal(err)
	}
	exec(t, conn, `CREATE TABLE public.pout_a_0 PARTITION OF public.pout_a FOR VALUES WITH (MODULUS 1, REMAINDER 0)`)
	leaf := regclass(t, conn, "public.pout_a_0")
	cr, err := lookupRelation(ctx, conn, leaf)
	if err != nil {
		t.Fatal(err)
	}
	if !cr.Exists || cr.Name.String() != "public.pout_a_0" || !slices.Contains(cr.Ancestors, regclass(t, conn, "public.pout")) ||
		!slices.Contains(cr.Ancestors, regclass(t, conn, "public.pout_a")) {
		t.Fatalf("lookup of the new leaf: %+v", cr)
	}
	d := NewDecoderFor(*rels)
	d.Resolve(leaf, cr)
	if got := d.attributedTo(leaf); got != "public.pout" {
		t.Errorf("new leaf attributed to %q, want public.pout", got)
	}
	other := regclass(t, conn, "public.other")
	cr, err = lookupRelation(ctx, conn, other)
	if err != nil || !cr.Exists || len(cr.Ancestors) != 0 {
		t.Fatalf("lookup of public.other: %+v, %v", cr, err)
	}
	d.Resolve(other, cr)
	if got := d.attributedTo(other); got != "" {
		t.Errorf("public.other attributed to %q", got)
	}
	exec(t, conn, `DROP TABLE public.other`)
	if cr, err = lookupRelation(ctx, conn, other); err != nil || cr.Exists {
		t.Errorf("lookup of a dropped table: %+v, %v", cr, err)
	}
}

// TestStreamAttributesPartitionsAndStopsOnOtherTables runs a Source on a partitioned outbox
// published via its root: rows of every partition, one created while streaming included (its
// Relation message is looked up), come as the configured table; once the publication also
// streams a table that is not an outbox, an INSERT into it ends the stream with an error naming
// it. (publish_via_partition_root = false is refused at Open by the coverage checks; the
// decoder's side of it is TestDecodePartitionLeavesReportTheParent.)
func TestStreamAttributesPartitionsAndStopsOnOtherTables(t *testing.T) {
	dsn, conn := testDB(t, "partstream")
	exec(t, conn, `CREATE TABLE public.pout (id uuid NOT NULL, created_at timestamptz NOT NULL, payload jsonb) PARTITION BY RANGE (created_at)`)
	exec(t, conn, `CREATE TABLE public.pout_2024 PARTITION OF public.pout FOR VALUES FROM ('2024-01-01') TO ('2025-01-01')`)
	exec(t, conn, `CREATE TABLE public.pout_2025 PARTITION OF public.pout FOR VALUES FROM ('2025-01-01') TO ('2026-01-01')`)
	exec(t, conn, `CREATE PUBLICATION partstream FOR TABLE public.pout WITH (publish = 'insert', publish_via_partition_root = true)`)
	s := newTestSource(dsn, "partstream", "public.pout")
	var lookups []uint32
	s.rel.lookup = func(ctx context.Context, oid uint32) (CatalogRelation, error) {
		lookups = append(lookups, oid) // the stream loop's goroutine only
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return CatalogRelation{}, err
		}
		defer c.Close(context.Background())
		return lookupRelation(ctx, c, oid)
	}
	open(t, s, "")
	exec(t, conn, `INSERT INTO public.pout VALUES (gen_random_uuid(), '2024-06-01', '{"n": 1}'), (gen_random_uuid(), '2025-06-01', '{"n": 2}')`)
	exec(t, conn, `CREATE TABLE public.pout_2026 PARTITION OF public.pout FOR VALUES FROM ('2026-01-01') TO ('2027-01-01')`)
	exec(t, conn, `INSERT INTO public.pout VALUES (gen_random_uuid(), '2026-06-01', '{"n": 3}')`)
	var got []string
	for len(got) < 3 {
		for _, r := range nextRows(t, s).Rows {
			if r.Table != "public.pout" {
				t.Errorf("row reported as %q, want public.pout", r.Table)
			}
			v, _ := r.Get("payload")
			got = append(got, string(v.Bytes))
		}
	}
	if strings.Join(got, " ") != `{"n": 1} {"n": 2} {"n": 3}` {
		t.Errorf("payloads %v", got)
	}
	if !slices.Contains(lookups, regclass(t, conn, "public.pout_2026")) {
		t.Errorf("lookups %v: the new partition was not looked up", lookups)
	}

	exec(t, conn, `ALTER PUBLICATION partstream ADD TABLE public.other`)
	exec(t, conn, `INSERT INTO public.other (note) VALUES ('not an event')`)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var err error
	for err == nil {
		var tx source.Tx
		if tx, err = s.Next(ctx); err == nil && len(tx.Rows) > 0 {
			t.Fatalf("a row of public.other was delivered: %+v", tx.Rows)
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatal("an INSERT into public.other did not end the stream")
	}
	if !strings.Contains(err.Error(), "INSERT into public.other") || !strings.Contains(err.Error(), "source.tables") {
		t.Errorf("error %v, want one naming public.other and source.tables", err)
	}
}

// TestStreamRecreatedTableStops: with a FOR TABLES IN SCHEMA publication the re-created outbox
// table is streamed at once, under the configured name with a new OID: the stream stops with an
// error naming both OIDs (a stop the pipeline does not retry), and hands out nothing of it.
func TestStreamRecreatedTableStops(t *testing.T) {
	dsn, conn := testDB(t, "recreated")
	exec(t, conn, `CREATE SCHEMA ob`)
	exec(t, conn, `CREATE TABLE ob.outbox (LIKE public.outbox INCLUDING ALL)`)
	exec(t, conn, `CREATE PUBLICATION recreated FOR TABLES IN SCHEMA ob WITH (publish = 'insert')`)
	old := regclass(t, conn, "ob.outbox")
	s := newTestSource(dsn, "recreated", "ob.outbox")
	open(t, s, "")
	exec(t, conn, `INSERT INTO ob.outbox (id, type) VALUES (gen_random_uuid(), 'before')`)
	if r := nextRows(t, s).Rows[0]; r.Table != "ob.outbox" {
		t.Fatalf("row of %q", r.Table)
	}
	inTx(t, conn, false, func(tx pgx.Tx) {
		for _, q := range []string{`DROP TABLE ob.outbox`, `CREATE TABLE ob.outbox (LIKE public.outbox INCLUDING ALL)`,
			`INSERT INTO ob.outbox (id, type) VALUES (gen_random_uuid(), 'after')`} {
			if _, err := tx.Exec(context.Background(), q); err != nil {
				t.Fatal(err)
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var err error
	for err == nil {
		var tx source.Tx
		if tx, err = s.Next(ctx); err == nil && len(tx.Rows) > 0 {
			t.Fatalf("a row of the re-created table was handed out: %+v", tx.Rows)
		}
	}
	wantErr(t, err, "ob.outbox", fmt.Sprintf("OID %d", old), fmt.Sprintf("OID %d", regclass(t, conn, "ob.outbox")), "re-created")
}

// TestStreamForeignMessages: logical decoding messages of another application (with heartbeats
// on, pgoutput sends every message of the database) are counted and ignored, inside and outside
// transactions; the outbox row of the same transaction is delivered.
func TestStreamForeignMessages(t *testing.T) {
	dsn, conn := testDB(t, "foreignmsg")
	s := newTestSource(dsn, "foreignmsg")
	s.cfg.HeartbeatInterval = time.Hour // messages 'true', no heartbeat during the test
	open(t, s, "")
	if !s.ext.messages.Load() {
		t.Skip("server without pgoutput messages (PostgreSQL < 14)")
	}
	exec(t, conn, `SELECT pg_logical_emit_message(false, 'app.audit', 'outside')`)
	inTx(t, conn, false, func(tx pgx.Tx) {
		for _, q := range []string{`SELECT pg_logical_emit_message(true, 'app.audit', 'inside')`,
			`SELECT pg_logical_emit_message(true, 'outboxd.heartbeat', 'transactional: not ours')`,
			`INSERT INTO public.outbox (id, type) VALUES (gen_random_uuid(), 'with messages')`} {
			if _, err := tx.Exec(context.Background(), q); err != nil {
				t.Fatal(err)
			}
		}
	})
	tx := nextRows(t, s)
	if len(tx.Rows) != 1 {
		t.Fatalf("rows %+v", tx.Rows)
	}
	wantValue(t, tx.Rows[0], "type", "with messages")
	if n := s.ForeignMessages(); n != 3 {
		t.Errorf("ForeignMessages = %d, want 3", n)
	}
	if _, seen := s.Heartbeats(); seen != 0 {
		t.Errorf("%d heartbeats seen: a message that is not outboxd's was taken for one", seen)
	}
}
