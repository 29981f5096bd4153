package postgres

// Decoder attribution tests: partitions, inheritance children, renamed and re-created tables,
// replay after a restart, logical messages (attribution.go).

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/source"
	"github.com/outboxd/outboxd/source/postgres/pgoutputtest"
)

// loaded is the relation map of a partitioned public.outbox (OID 100) with leaves 101 and 102,
// and a plain public.audit_outbox (OID 200) with an inheritance child public.audit_outbox_2024
// (OID 201), loaded at LSN 0/1000.
func loaded() Relations {
	return Relations{LoadedAt: 0x1000, Tables: []TableRelation{
		{Name: "public.outbox", Schema: "public", Table: "outbox", OID: 100, Kind: 'p',
			Descendants: []RelationName{{101, "public", "outbox_p1"}, {102, "public", "outbox_p2"}}},
		{Name: "audit_outbox", Schema: "public", Table: "audit_outbox", OID: 200, Kind: 'r',
			Descendants: []RelationName{{201, "public", "audit_outbox_2024"}}},
	}}
}

// decodeAll decodes msgs and returns the transactions completed and the first error.
func decodeAll(d *Decoder, msgs ...[]byte) ([]source.Tx, error) {
	var txs []source.Tx
	for _, m := range msgs {
		tx, done, err := d.Decode(m)
		if err != nil {
			return txs, err
		}
		if done {
			txs = append(txs, tx)
		}
	}
	return txs, nil
}

// wantErr checks err is an attribution stop (never retried: it matches source.ErrPositionLost)
// containing every part.
func wantErr(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one containing %q", parts)
	}
	if !errors.Is(err, source.ErrPositionLost) {
		t.Errorf("error does not match source.ErrPositionLost (the pipeline would reconnect): %v", err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error lacks %q:\n%v", p, err)
		}
	}
}

func TestDecodePartitionLeavesReportTheParent(t *testing.T) {
	d := NewDecoderFor(loaded())
	// publish_via_partition_root = false: each leaf under its own OID and name.
	txs := feed(t, d,
		beginMsg(0x2000, t0, 1),
		relMsg(101, "public", "outbox_p1", outboxCols...),
		insertMsg(101, outboxRow("id-1", "a", `{}`)...),
		relMsg(102, "public", "outbox_p2", outboxCols...),
		insertMsg(102, outboxRow("id-2", "b", `{}`)...),
		commitMsg(0x2000, 0x2100, t0),
	)
	tx := one(t, txs)
	if len(tx.Rows) != 2 || tx.Rows[0].Table != "public.outbox" || tx.Rows[1].Table != "public.outbox" {
		t.Fatalf("rows %+v, want 2 rows of public.outbox", tx.Rows)
	}
	wantValue(t, tx.Rows[1], "id", "id-2")

	// publish_via_partition_root = true: the root's Relation, then the leaf's, rows under the root.
	d = NewDecoderFor(loaded())
	tx = one(t, feed(t, d,
		beginMsg(0x2000, t0, 1),
		relMsg(100, "public", "outbox", outboxCols...),
		relMsg(101, "public", "outbox_p1", outboxCols...),
		insertMsg(100, outboxRow("id-3", "a", `{}`)...),
		commitMsg(0x2000, 0x2100, t0),
	))
	if len(tx.Rows) != 1 || tx.Rows[0].Table != "public.outbox" {
		t.Fatalf("rows %+v", tx.Rows)
	}
}

func TestDecodeNewPartitionIsLookedUp(t *testing.T) {
	d := NewDecoderFor(loaded())
	feed(t, d, beginMsg(0x2000, t0, 1))
	rel := relMsg(103, "public", "outbox_p3", outboxCols...)
	_, _, err := d.Decode(rel)
	var unknown *UnknownRelationError
	if !errors.As(err, &unknown) || unknown.OID != 103 || unknown.Schema != "public" || unknown.Table != "outbox_p3" {
		t.Fatalf("Decode(new partition's Relation) = %v, want *UnknownRelationError for 103 public.outbox_p3", err)
	}
	// The catalog says: a partition of a sub-partitioned table (OID 150) of public.outbox.
	d.Resolve(103, CatalogRelation{Exists: true, Name: RelationName{103, "public", "outbox_p3"}, Ancestors: []uint32{150, 100}})
	tx := one(t, feed(t, d, rel, insertMsg(103, outboxRow("id-1", "a", `{}`)...), commitMsg(0x2000, 0x2100, t0)))
	if len(tx.Rows) != 1 || tx.Rows[0].Table != "public.outbox" {
		t.Fatalf("rows %+v, want the new partition's row as public.outbox", tx.Rows)
	}
}

func TestDecodeInheritanceChildReportsTheParent(t *testing.T) {
	d := NewDecoderFor(loaded())
	childCols := append(append([]col{}, outboxCols...), col{"archived", oidBool})
	tx := one(t, feed(t, d,
		beginMsg(0x2000, t0, 1),
		relMsg(201, "public", "audit_outbox_2024", childCols...),
		insertMsg(201, append(outboxRow("id-1", "a", `{}`), txt("f"))...),
		relMsg(200, "public", "audit_outbox", outboxCols...),
		insertMsg(200, outboxRow("id-2", "a", `{}`)...),
		commitMsg(0x2000, 0x2100, t0),
	))
	if len(tx.Rows) != 2 || tx.Rows[0].Table != "audit_outbox" || tx.Rows[1].Table != "audit_outbox" {
		t.Fatalf("rows %+v, want both as audit_outbox (the configured spelling)", tx.Rows)
	}
	wantValue(t, tx.Rows[0], "archived", "f")
}

func TestDecodeUnattributedInsert(t *testing.T) {
	for _, c := range []struct {
		name string
		cr   CatalogRelation
		want string
	}{
		{"other table", CatalogRelation{Exists: true, Name: RelationName{300, "public", "orders"}}, "neither a table in source.tables nor a partition"},
		{"child of another table", CatalogRelation{Exists: true, Name: RelationName{300, "public", "orders"}, Ancestors: []uint32{299}}, "neither a table in source.tables nor a partition"},
		{"dropped", CatalogRelation{}, "no longer exists"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := NewDecoderFor(loaded())
			rel := relMsg(300, "public", "orders", col{"id", oidInt4})
			feed(t, d, beginMsg(0x2000, t0, 7))
			if _, _, err := d.Decode(rel); err == nil {
				t.Fatal("unknown relation: no error")
			}
			d.Resolve(300, c.cr)
			// Updates and deletes of it are not outbox inserts: no error.
			feed(t, d, rel, updateMsg(300, txt("1")), deleteMsg(300, txt("1")))
			txs, err := decodeAll(d, insertMsg(300, txt("1")), commitMsg(0x2000, 0x2100, t0))
			if len(txs) != 0 {
				t.Errorf("a transaction was returned: %+v", txs)
			}
			wantErr(t, err, "INSERT into public.orders", "OID 300", c.want, "source.tables", "DROP TABLE public.orders", "0/2000")
		})
	}
}

func TestDecodeAmbiguousDescendant(t *testing.T) {
	r := loaded()
	r.Tables[1].Descendants = append(r.Tables[1].Descendants, RelationName{101, "public", "outbox_p1"})
	d := NewDecoderFor(r)
	_, err := decodeAll(d, beginMsg(0x2000, t0, 1), relMsg(101, "public", "outbox_p1", outboxCols...),
		insertMsg(101, outboxRow("id-1", "a", `{}`)...))
	wantErr(t, err, "OID 101", "both")
}

func TestDecodeRecreatedTableStops(t *testing.T) {
	d := NewDecoderFor(loaded())
	txs, err := decodeAll(d,
		beginMsg(0x2000, t0, 1),
		relMsg(100, "public", "outbox", outboxCols...),
		insertMsg(100, outboxRow("id-1", "a", `{}`)...),
		commitMsg(0x2000, 0x2100, t0),
		// DROP TABLE outbox; CREATE TABLE outbox (...): a new OID under the configured name.
		beginMsg(0x3000, t1, 2),
		relMsg(555, "public", "outbox", outboxCols...),
		insertMsg(555, outboxRow("id-2", "a", `{}`)...),
		commitMsg(0x3000, 0x3100, t1),
	)
	if len(txs) != 1 {
		t.Errorf("%d transactions returned, want only the one before the re-creation", len(txs))
	}
	wantErr(t, err, "public.outbox", "OID 555", "OID 100", "re-created", "0/3000", "re-publish")
}

func TestDecodeRenamedTableStops(t *testing.T) {
	d := NewDecoderFor(loaded())
	txs, err := decodeAll(d,
		beginMsg(0x2000, t0, 1),
		relMsg(200, "public", "audit_outbox", outboxCols...),
		insertMsg(200, outboxRow("id-1", "a", `{}`)...),
		commitMsg(0x2000, 0x2100, t0),
		// ALTER TABLE audit_outbox RENAME TO audit_outbox_old
		beginMsg(0x3000, t1, 2),
		relMsg(200, "public", "audit_outbox_old", outboxCols...),
		insertMsg(200, outboxRow("id-2", "a", `{}`)...),
		commitMsg(0x3000, 0x3100, t1),
	)
	if len(txs) != 1 {
		t.Errorf("%d transactions returned, want only the one before the rename", len(txs))
	}
	wantErr(t, err, "OID 200", "public.audit_outbox ", "public.audit_outbox_old", "renamed", "0/3000", "source.tables")
}

// TestDecodeReplayBeforeLoad: after a restart, transactions committed before the relations were
// loaded show the catalog as it was then (an older name or OID of the table): their rows belong
// to the table, and only a change after the load stops.
func TestDecodeReplayBeforeLoad(t *testing.T) {
	d := NewDecoderFor(loaded()) // loaded at 0/1000
	txs := feed(t, d,
		beginMsg(0x500, t0, 1),
		relMsg(200, "public", "outbox_before_rename", outboxCols...), // OID 200 had another name
		insertMsg(200, outboxRow("id-1", "a", `{}`)...),
		relMsg(77, "public", "outbox", outboxCols...), // public.outbox was another table then
		insertMsg(77, outboxRow("id-2", "a", `{}`)...),
		commitMsg(0x500, 0x600, t0),
	)
	tx := one(t, txs)
	if len(tx.Rows) != 2 || tx.Rows[0].Table != "audit_outbox" || tx.Rows[1].Table != "public.outbox" {
		t.Fatalf("rows %+v", tx.Rows)
	}
	// The same after the load is a change while running.
	_, err := decodeAll(d, beginMsg(0x1000, t1, 2), relMsg(200, "public", "outbox_before_rename", outboxCols...))
	wantErr(t, err, "renamed")
}

// TestDecodeUnloadedNamesFixOIDs: NewDecoder (names only) takes the first Relation message's OID
// for a configured name, and then treats another OID or name as it treats loaded ones.
func TestDecodeUnloadedNamesFixOIDs(t *testing.T) {
	d := NewDecoder([]string{"public.outbox"})
	feed(t, d, relMsg(9, "public", "outbox", outboxCols...))
	_, err := decodeAll(d, relMsg(10, "public", "outbox", outboxCols...))
	wantErr(t, err, "OID 10", "OID 9")
	d = NewDecoder([]string{"public.outbox"})
	feed(t, d, relMsg(9, "public", "outbox", outboxCols...))
	_, err = decodeAll(d, relMsg(9, "public", "outbox2", outboxCols...))
	wantErr(t, err, "renamed")
}

func TestDecodeMessagesAreNotData(t *testing.T) {
	d := NewDecoder([]string{"public.outbox"})
	var got []string
	d.onMessage = func(m pgMessage) { got = append(got, fmt.Sprintf("%s/%v", m.prefix, m.transactional)) }
	nonTx := func(prefix string) []byte { return pgoutputtest.Message(false, 0x90, prefix, "hi") }
	tx := one(t, feed(t, d,
		relMsg(1, "public", "outbox", outboxCols...),
		beginMsg(0x100, t0, 1),
		logicalMsg(0x90, "app.audit", "x"),
		logicalMsg(0x91, HeartbeatPrefix, "x"), // transactional: not outboxd's heartbeat
		insertMsg(1, outboxRow("id-1", "a", `{}`)...),
		commitMsg(0x100, 0x200, t0),
	))
	if len(tx.Rows) != 1 {
		t.Fatalf("rows %+v", tx.Rows)
	}
	// Outside a transaction the stream hands them to message before heartbeat handling.
	for _, m := range [][]byte{nonTx("app.audit"), nonTx(HeartbeatPrefix)} {
		if err := d.message(m); err != nil {
			t.Fatal(err)
		}
	}
	if want := "app.audit/true outboxd.heartbeat/true app.audit/false"; strings.Join(got, " ") != want {
		t.Errorf("reported %v, want %s", got, want)
	}
	if _, _, err := d.Decode(beginMsg(0x300, t1, 2)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.Decode(logicalMsg(0x90, "p", "c")[:8]); err == nil {
		t.Error("truncated Message in a transaction: no error")
	}
}

// FuzzDecode feeds arbitrary message sequences (each input split at 0xFF 0xFE) to two decoders:
// one gets each message in a buffer the caller overwrites right after Decode (as the stream
// loop reuses its read buffer), the other the bytes as they are. Decode must never panic; both
// must return the same transactions and errors (decoded values never alias the input); every
// row must match its relation's columns and come only with a completed transaction, whose
// position is a valid LSN.
func FuzzDecode(f *testing.F) {
	sep := []byte{0xFF, 0xFE}
	join := func(msgs ...[]byte) []byte { return bytes.Join(msgs, sep) }
	f.Add(join(relMsg(100, "public", "outbox", outboxCols...), beginMsg(0x2000, t0, 1),
		insertMsg(100, outboxRow("id", "a", `{}`)...), commitMsg(0x2000, 0x2100, t0)))
	f.Add(join(beginMsg(0x2000, t0, 1), relMsg(101, "public", "outbox_p1", outboxCols...),
		insertMsg(101, outboxRow("id", "a", `{}`)...), logicalMsg(1, "x", "y"), commitMsg(0x2000, 0x2100, t0)))
	f.Add(join(beginMsg(0x500, t0, 1), relMsg(200, "public", "x", col{"b", oidBytea}), insertMsg(200, txt(`\x41`)),
		truncateMsg(200), commitMsg(0x500, 0x600, t0)))
	f.Add(join(relMsg(7, "public", "t", col{"b", oidBytea}, col{"e", oidBytea}, col{"n", oidText}, col{"u", oidUUID}),
		typeMsg(oidEnum, "public", "mood"), beginMsg(0x10, t0, 1), originMsg(0x5, "up"),
		insertMsg(7, txt(`\x00ff4142`), txt(`a\\b\001\377`), null, txt("")), updateMsg(7, txt("x")), deleteMsg(7, txt("x")),
		pgoutputtest.Message(false, 0x9, HeartbeatPrefix, "x"), commitMsg(0x10, 0x20, t0)))
	f.Fuzz(func(t *testing.T, in []byte) {
		reused, pristine := NewDecoderFor(loaded()), NewDecoderFor(loaded())
		decode := func(d *Decoder, m []byte) (source.Tx, bool, error) {
			tx, done, err := d.Decode(m)
			var unknown *UnknownRelationError
			if errors.As(err, &unknown) {
				d.Resolve(unknown.OID, CatalogRelation{Exists: unknown.OID%2 == 0, Ancestors: []uint32{unknown.OID % 300}})
				tx, done, err = d.Decode(m)
				if errors.As(err, &unknown) {
					t.Fatalf("still unknown after Resolve: %v", err)
				}
			}
			return tx, done, err
		}
		var buf []byte
		for _, m := range bytes.Split(in, sep) {
			buf = append(buf[:0], m...)
			tx, done, err := decode(reused, buf)
			for i := range buf {
				buf[i] = 0xAA
			}
			tx2, done2, err2 := decode(pristine, m)
			if done != done2 || (err == nil) != (err2 == nil) || err != nil && err.Error() != err2.Error() || !reflect.DeepEqual(tx, tx2) {
				t.Fatalf("a reused input buffer changes the result: %+v %v %v, pristine %+v %v %v", tx, done, err, tx2, done2, err2)
			}
			if err != nil {
				return
			}
			if !done && len(tx.Rows) > 0 {
				t.Fatalf("rows without a completed transaction: %+v", tx)
			}
			if done {
				if _, err := ParseLSN(tx.Position); err != nil {
					t.Fatalf("completed transaction at %q: %v", tx.Position, err)
				}
			}
			for _, r := range tx.Rows {
				if len(r.Columns) != len(r.Values) || r.Table == "" {
					t.Fatalf("bad row %+v (done %v)", r, done)
				}
			}
		}
	})
}
