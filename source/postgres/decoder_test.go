package postgres

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outboxd/outboxd/source"
	"github.com/outboxd/outboxd/source/postgres/pgoutputtest"
)

var (
	t0 = time.Date(2024, 5, 6, 7, 8, 9, 123456000, time.UTC)
	t1 = t0.Add(time.Second)
)

// feed decodes msgs in order and returns the transactions they complete.
func feed(t *testing.T, d *Decoder, msgs ...[]byte) []source.Tx {
	t.Helper()
	var txs []source.Tx
	for i, m := range msgs {
		tx, done, err := d.Decode(m)
		if err != nil {
			t.Fatalf("message %d (%q): %v", i, m[0], err)
		}
		if done {
			txs = append(txs, tx)
		}
	}
	return txs
}

func one(t *testing.T, txs []source.Tx) source.Tx {
	t.Helper()
	if len(txs) != 1 {
		t.Fatalf("got %d transactions, want 1: %+v", len(txs), txs)
	}
	return txs[0]
}

func wantValue(t *testing.T, r source.Row, col string, want string) {
	t.Helper()
	v, ok := r.Get(col)
	if !ok {
		t.Fatalf("row lacks column %q (has %v)", col, r.Columns)
	}
	if v.Null || string(v.Bytes) != want {
		t.Errorf("%s = %q (null=%v), want %q", col, v.Bytes, v.Null, want)
	}
}

// TestFixturesMatchPglogrepl checks the hand-built fixtures against pglogrepl's parser, so the
// decoder tests exercise the real wire format.
func TestFixturesMatchPglogrepl(t *testing.T) {
	m, err := pglogrepl.Parse(relMsg(16384, "public", "outbox", outboxCols...))
	if err != nil {
		t.Fatal(err)
	}
	rel := m.(*pglogrepl.RelationMessage)
	if rel.RelationID != 16384 || rel.Namespace != "public" || rel.RelationName != "outbox" || len(rel.Columns) != 6 ||
		rel.Columns[4].Name != "payload" || rel.Columns[4].DataType != oidJSONB || rel.Columns[0].TypeModifier != -1 {
		t.Errorf("relation: %+v", rel)
	}
	m, _ = pglogrepl.Parse(beginMsg(0x16B3700, t0, 733))
	if b := m.(*pglogrepl.BeginMessage); b.FinalLSN != 0x16B3700 || !b.CommitTime.Equal(t0) || b.Xid != 733 {
		t.Errorf("begin: %+v", b)
	}
	m, _ = pglogrepl.Parse(commitMsg(0x16B3700, 0x16B3748, t0))
	if c := m.(*pglogrepl.CommitMessage); c.CommitLSN != 0x16B3700 || c.TransactionEndLSN != 0x16B3748 || !c.CommitTime.Equal(t0) {
		t.Errorf("commit: %+v", c)
	}
	m, _ = pglogrepl.Parse(insertMsg(16384, txt("a"), null, txt("")))
	ins := m.(*pglogrepl.InsertMessage)
	if ins.RelationID != 16384 || len(ins.Tuple.Columns) != 3 || string(ins.Tuple.Columns[0].Data) != "a" ||
		ins.Tuple.Columns[1].DataType != 'n' || ins.Tuple.Columns[2].Length != 0 {
		t.Errorf("insert: %+v", ins.Tuple.Columns)
	}
	m, _ = pglogrepl.Parse(updateMsg(7, txt("x"), null))
	if u := m.(*pglogrepl.UpdateMessage); u.RelationID != 7 || u.OldTuple != nil || len(u.NewTuple.Columns) != 2 ||
		string(u.NewTuple.Columns[0].Data) != "x" || u.NewTuple.Columns[1].DataType != 'n' {
		t.Errorf("update: %+v", u)
	}
	m, _ = pglogrepl.Parse(deleteMsg(7, txt("k")))
	if d := m.(*pglogrepl.DeleteMessage); d.RelationID != 7 || d.OldTupleType != 'K' || len(d.OldTuple.Columns) != 1 ||
		string(d.OldTuple.Columns[0].Data) != "k" {
		t.Errorf("delete: %+v", d)
	}
	m, _ = pglogrepl.Parse(truncateMsg(1, 2))
	if tr := m.(*pglogrepl.TruncateMessage); tr.RelationNum != 2 || len(tr.RelationIDs) != 2 || tr.RelationIDs[1] != 2 {
		t.Errorf("truncate: %+v", tr)
	}
	m, _ = pglogrepl.Parse(typeMsg(oidEnum, "public", "mood"))
	if ty := m.(*pglogrepl.TypeMessage); ty.DataType != oidEnum || ty.Namespace != "public" || ty.Name != "mood" {
		t.Errorf("type: %+v", ty)
	}
	m, _ = pglogrepl.Parse(originMsg(5, "o"))
	if o := m.(*pglogrepl.OriginMessage); o.CommitLSN != 5 || o.Name != "o" {
		t.Errorf("origin: %+v", o)
	}
	for _, transactional := range []bool{true, false} {
		m, _ = pglogrepl.Parse(pgoutputtest.Message(transactional, 0x90, "app.audit", "hi"))
		if lm := m.(*pglogrepl.LogicalDecodingMessage); lm.Transactional != transactional || lm.LSN != 0x90 ||
			lm.Prefix != "app.audit" || string(lm.Content) != "hi" {
			t.Errorf("message (transactional %v): %+v", transactional, lm)
		}
	}
	if !bytes.Equal(logicalMsg(5, "p", "c"), pgoutputtest.Message(true, 5, "p", "c")) {
		t.Error("logicalMsg is not a transactional message")
	}
	if l := len(insertMsg(1, tv{Kind: 'u'}, tv{Kind: 'b', Data: "\x01"})); l != 1+4+1+2+1+1+4+1 {
		t.Errorf("insert with unchanged and binary columns: %d bytes", l)
	}

	// The streaming replication protocol's framing.
	data := insertMsg(1, txt("a"))
	x, err := pglogrepl.ParseXLogData(pgoutputtest.XLogData(0x10, 0x20, data)[1:])
	if err != nil || x.WALStart != 0x10 || x.ServerWALEnd != 0x20 || !bytes.Equal(x.WALData, data) {
		t.Errorf("XLogData: %+v, %v", x, err)
	}
	if xb := pgoutputtest.XLogData(0x10, 0x20, data); xb[0] != pglogrepl.XLogDataByteID || len(xb) != pgoutputtest.XLogDataHeaderLen+len(data) {
		t.Errorf("XLogData: type %q, %d bytes", xb[0], len(xb))
	}
	for _, reply := range []bool{true, false} {
		kb := pgoutputtest.AppendKeepalive(nil, 0x30, reply)
		k, err := pglogrepl.ParsePrimaryKeepaliveMessage(kb[1:])
		if err != nil || kb[0] != pglogrepl.PrimaryKeepaliveMessageByteID || len(kb) != pgoutputtest.KeepaliveLen ||
			k.ServerWALEnd != 0x30 || k.ReplyRequested != reply {
			t.Errorf("keepalive (reply %v): %+v, %v", reply, k, err)
		}
	}
	if h := pgoutputtest.AppendCopyDataHeader([]byte{'x'}, 25); !bytes.Equal(h, []byte{'x', 'd', 0, 0, 0, 29}) {
		t.Errorf("CopyData header %v", h)
	}
}

func TestDecodeSingleInsert(t *testing.T) {
	d := NewDecoder([]string{"public.outbox"})
	tx := one(t, feed(t, d,
		relMsg(16384, "public", "outbox", outboxCols...),
		beginMsg(0x16B3700, t0, 733),
		insertMsg(16384, outboxRow("00000000-0000-4000-8000-000000000001", "a", `{"n": 1}`)...),
		commitMsg(0x16B3700, 0x16B3748, t1),
	))
	if tx.Position != "0/16B3748" {
		t.Errorf("position %q, want 0/16B3748", tx.Position)
	}
	if !tx.CommitTime.Equal(t1) {
		t.Errorf("commit time %v, want %v", tx.CommitTime, t1)
	}
	if len(tx.Rows) != 1 {
		t.Fatalf("%d rows", len(tx.Rows))
	}
	r := tx.Rows[0]
	if r.Table != "public.outbox" || strings.Join(r.Columns, ",") != "id,aggregatetype,aggregateid,type,payload,created_at" {
		t.Errorf("row %s %v", r.Table, r.Columns)
	}
	wantValue(t, r, "id", "00000000-0000-4000-8000-000000000001")
	wantValue(t, r, "aggregateid", "a")
	wantValue(t, r, "payload", `{"n": 1}`)
	wantValue(t, r, "created_at", "2024-05-06 07:08:09.123456+00")
	if d.InTx() {
		t.Error("decoder still in a transaction after Commit")
	}
}

func TestDecodeMultiRowAndOrder(t *testing.T) {
	d := NewDecoder([]string{"public.outbox"})
	txs := feed(t, d,
		relMsg(1, "public", "outbox", outboxCols...),
		beginMsg(0x100, t0, 1),
		insertMsg(1, outboxRow("id-1", "a", `{}`)...),
		insertMsg(1, outboxRow("id-2", "a", `{}`)...),
		insertMsg(1, outboxRow("id-3", "b", `{}`)...),
		commitMsg(0x100, 0x1_0000_0200, t0),
		beginMsg(0x300, t1, 2),
		insertMsg(1, outboxRow("id-4", "c", `{}`)...),
		commitMsg(0x300, 0x1_0000_0400, t1),
	)
	if len(txs) != 2 {
		t.Fatalf("%d transactions", len(txs))
	}
	if txs[0].Position != "1/200" || txs[1].Position != "1/400" {
		t.Errorf("positions %s, %s", txs[0].Position, txs[1].Position)
	}
	var ids []string
	for _, tx := range txs {
		for _, r := range tx.Rows {
			v, _ := r.Get("id")
			ids = append(ids, string(v.Bytes))
		}
	}
	if got := strings.Join(ids, " "); got != "id-1 id-2 id-3 id-4" {
		t.Errorf("ids %s", got)
	}
	if len(txs[0].Rows) != 3 || len(txs[1].Rows) != 1 {
		t.Errorf("rows per tx %d, %d", len(txs[0].Rows), len(txs[1].Rows))
	}
}

func TestDecodeValueTypes(t *testing.T) {
	cols := []col{{"b", oidBytea}, {"b_empty", oidBytea}, {"b_escape", oidBytea}, {"n", oidText},
		{"empty", oidText}, {"inet", oidInet}, {"mood", oidEnum}, {"v", oidVarchar}, {"j", oidJSON},
		{"i4", oidInt4}, {"i8", oidInt8}, {"ok", oidBool}}
	d := NewDecoder([]string{"public.t"})
	tx := one(t, feed(t, d,
		relMsg(7, "public", "t", cols...),
		typeMsg(oidEnum, "public", "mood"),
		beginMsg(0x10, t0, 1),
		insertMsg(7, txt(`\x00ff4142`), txt(`\x`), txt(`a\\b\001\377`), null, txt(""), txt("192.168.0.1/24"),
			txt("happy"), txt("vc"), txt(`{"a": [1, 2]}`), txt("-42"), txt("9223372036854775807"), txt("t")),
		commitMsg(0x10, 0x20, t0),
	))
	r := tx.Rows[0]
	if v, _ := r.Get("b"); v.Null || !bytes.Equal(v.Bytes, []byte{0, 0xff, 'A', 'B'}) {
		t.Errorf("bytea hex = %v", v)
	}
	if v, _ := r.Get("b_empty"); v.Null || v.Bytes == nil || len(v.Bytes) != 0 {
		t.Errorf("empty bytea = %#v, want non-nil empty", v)
	}
	if v, _ := r.Get("b_escape"); !bytes.Equal(v.Bytes, []byte{'a', '\\', 'b', 1, 0xff}) {
		t.Errorf("bytea escape = %v", v.Bytes)
	}
	if v, _ := r.Get("n"); !v.Null || v.Bytes != nil {
		t.Errorf("NULL = %#v", v)
	}
	if v, _ := r.Get("empty"); v.Null || v.Bytes == nil || len(v.Bytes) != 0 {
		t.Errorf("empty text = %#v, want non-nil empty", v)
	}
	wantValue(t, r, "inet", "192.168.0.1/24")
	wantValue(t, r, "mood", "happy")
	wantValue(t, r, "v", "vc")
	wantValue(t, r, "j", `{"a": [1, 2]}`)
	wantValue(t, r, "i4", "-42")
	wantValue(t, r, "i8", "9223372036854775807")
	wantValue(t, r, "ok", "t")
}

// TestDecodeIgnoresNonInsertChanges: updates, deletes, truncates, origins, types and messages
// are not outbox inserts; a relation that is not attributed may come and be updated, deleted or
// truncated without error (only an INSERT into it is one, see TestDecodeUnattributedInsert).
func TestDecodeIgnoresNonInsertChanges(t *testing.T) {
	d := NewDecoder([]string{"public.outbox"})
	d.Resolve(2, CatalogRelation{Exists: true, Name: RelationName{OID: 2, Schema: "public", Table: "orders"}})
	txs := feed(t, d,
		relMsg(1, "public", "outbox", outboxCols...),
		relMsg(2, "public", "orders", col{"id", oidInt4}, col{"note", oidText}),
		beginMsg(0x100, t0, 1),
		originMsg(0x50, "upstream"),
		updateMsg(2, txt("1"), txt("x")),
		insertMsg(1, outboxRow("id-1", "a", `{}`)...),
		updateMsg(1, outboxRow("id-1", "a", `{"u": 1}`)...),
		deleteMsg(1, txt("id-1")),
		deleteMsg(2, txt("1")),
		truncateMsg(2),
		logicalMsg(0x90, "outbox", "hello"),
		commitMsg(0x100, 0x200, t0),
		// A transaction that touched no outbox row still comes, with no rows.
		beginMsg(0x300, t1, 2),
		updateMsg(1, outboxRow("id-1", "a", `{}`)...),
		commitMsg(0x300, 0x400, t1),
	)
	if len(txs) != 2 {
		t.Fatalf("%d transactions", len(txs))
	}
	if len(txs[0].Rows) != 1 || txs[0].Rows[0].Table != "public.outbox" {
		t.Fatalf("first tx rows %+v", txs[0].Rows)
	}
	wantValue(t, txs[0].Rows[0], "id", "id-1")
	if len(txs[1].Rows) != 0 || txs[1].Position != "0/400" || !txs[1].CommitTime.Equal(t1) {
		t.Errorf("empty tx %+v", txs[1])
	}
}

func TestDecodeRelationCacheUpdate(t *testing.T) {
	d := NewDecoder([]string{"outbox"}) // unqualified: public.outbox, reported as configured
	txs := feed(t, d,
		relMsg(1, "public", "outbox", col{"id", oidUUID}, col{"payload", oidJSONB}),
		beginMsg(0x100, t0, 1),
		insertMsg(1, txt("id-1"), txt(`{}`)),
		commitMsg(0x100, 0x200, t0),
		// ALTER TABLE outbox ADD COLUMN trace bytea; the server sends the relation again.
		relMsg(1, "public", "outbox", col{"id", oidUUID}, col{"payload", oidJSONB}, col{"trace", oidBytea}),
		beginMsg(0x300, t1, 2),
		insertMsg(1, txt("id-2"), txt(`{}`), txt(`\x01`)),
		commitMsg(0x300, 0x400, t1),
	)
	r1, r2 := txs[0].Rows[0], txs[1].Rows[0]
	if r1.Table != "outbox" || r2.Table != "outbox" {
		t.Errorf("tables %q %q, want as configured", r1.Table, r2.Table)
	}
	if len(r1.Columns) != 2 || len(r2.Columns) != 3 {
		t.Fatalf("columns %v then %v", r1.Columns, r2.Columns)
	}
	if v, ok := r2.Get("trace"); !ok || !bytes.Equal(v.Bytes, []byte{1}) {
		t.Errorf("trace = %v (ok=%v), want bytea decoded with the new relation's types", v, ok)
	}
	// An insert with the old column count against the new relation is a protocol error.
	feed(t, d, beginMsg(0x500, t1, 3))
	if _, _, err := d.Decode(insertMsg(1, txt("id-3"), txt(`{}`))); err == nil {
		t.Error("insert with 2 columns into a 3-column relation: no error")
	}
}

func TestDecodeValuesDoNotAliasInput(t *testing.T) {
	d := NewDecoder([]string{"public.outbox"})
	feed(t, d, relMsg(1, "public", "outbox", outboxCols...), beginMsg(0x100, t0, 1))
	msg := insertMsg(1, outboxRow("id-1", "a", `{"k": "v"}`)...)
	feed(t, d, msg)
	for i := range msg {
		msg[i] = 'X' // the caller reuses its buffer
	}
	tx := one(t, feed(t, d, commitMsg(0x100, 0x200, t0)))
	wantValue(t, tx.Rows[0], "payload", `{"k": "v"}`)
	wantValue(t, tx.Rows[0], "id", "id-1")
	// Values must not overlap: appending to one must not clobber the next.
	v, _ := tx.Rows[0].Get("id")
	_ = append(v.Bytes, "ZZZZ"...)
	wantValue(t, tx.Rows[0], "aggregatetype", "order")
}

func TestDecodeErrors(t *testing.T) {
	rel := relMsg(1, "public", "outbox", col{"id", oidUUID}, col{"payload", oidBytea})
	cases := []struct {
		name string
		msgs [][]byte
		want string
	}{
		{"unchanged toast in insert", [][]byte{rel, beginMsg(1, t0, 1), insertMsg(1, txt("x"), tv{Kind: 'u'})}, "unchanged-TOAST"},
		{"binary column", [][]byte{rel, beginMsg(1, t0, 1), insertMsg(1, txt("x"), tv{Kind: 'b', Data: "\x01"})}, "binary"},
		{"bad bytea", [][]byte{rel, beginMsg(1, t0, 1), insertMsg(1, txt("x"), txt(`\x0g`))}, "invalid digit"},
		{"odd bytea", [][]byte{rel, beginMsg(1, t0, 1), insertMsg(1, txt("x"), txt(`\x0`))}, "odd"},
		{"bad escape", [][]byte{rel, beginMsg(1, t0, 1), insertMsg(1, txt("x"), txt(`a\9`))}, "invalid escape"},
		{"unknown relation", [][]byte{beginMsg(1, t0, 1), insertMsg(9, txt("x"))}, "before its Relation"},
		{"insert outside tx", [][]byte{rel, insertMsg(1, txt("x"), null)}, "outside a transaction"},
		{"commit without begin", [][]byte{commitMsg(1, 2, t0)}, "without Begin"},
		{"nested begin", [][]byte{beginMsg(1, t0, 1), beginMsg(2, t0, 2)}, "inside open"},
		{"streaming message", [][]byte{{'S', 0, 0, 0, 1, 1}}, "unexpected message type"},
		{"empty message", [][]byte{{}}, "empty"},
		{"bad tuple kind", [][]byte{rel, beginMsg(1, t0, 1), insertMsg(1, txt("x"), tv{Kind: 'z'})}, "unknown tuple data kind"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := NewDecoder([]string{"public.outbox"})
			var err error
			for _, m := range c.msgs {
				if _, _, err = d.Decode(m); err != nil {
					break
				}
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

// TestDecodeTruncatedNeverPanics feeds every proper prefix of every message kind the decoder
// parses: each must be an error, not a panic or a silently short row.
func TestDecodeTruncatedNeverPanics(t *testing.T) {
	rel := relMsg(1, "public", "outbox", outboxCols...)
	full := [][]byte{rel, beginMsg(0x10, t0, 1), insertMsg(1, outboxRow("id", "a", `{}`)...), commitMsg(0x10, 0x20, t0)}
	for i, m := range full {
		for n := 1; n < len(m); n++ {
			d := NewDecoder([]string{"public.outbox"})
			for _, prev := range full[:i] {
				if _, _, err := d.Decode(prev); err != nil {
					t.Fatal(err)
				}
			}
			if _, _, err := d.Decode(m[:n]); err == nil {
				t.Errorf("message %q truncated to %d of %d bytes: no error", m[0], n, len(m))
			}
		}
	}
}

func TestLSN(t *testing.T) {
	l, err := ParseLSN("0/16B3748")
	if err != nil || l != 0x16B3748 {
		t.Fatalf("ParseLSN = %v, %v", l, err)
	}
	if l, err := ParseLSN("1A/b"); err != nil || l != 0x1A_0000_000B {
		t.Errorf("ParseLSN(1A/b) = %v, %v", l, err)
	}
	for _, bad := range []source.Position{"", "0", "0/", "/1", "x/1", "0/1/2", "123456789/0", "mysql-bin.000003:4", "0-1-42"} {
		if _, err := ParseLSN(bad); err == nil {
			t.Errorf("ParseLSN(%q): no error", bad)
		}
	}
	for _, c := range []struct {
		a, b source.Position
		want int
	}{{"0/1", "0/2", -1}, {"0/2", "0/1", 1}, {"1/0", "0/FFFFFFFF", 1}, {"0/A", "0/a", 0}, {"", "0/1", -1}} {
		if got := CompareLSN(c.a, c.b); got != c.want {
			t.Errorf("CompareLSN(%s, %s) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

// BenchmarkDecodeInsert measures decoding one outbox INSERT (one op = one row); transactions
// hold 100 rows. -benchmem's allocs/op is allocations per row.
func BenchmarkDecodeInsert(b *testing.B) {
	payload := `{"orderId": "6d3f1c2e-5a4b-4c3d-9e8f-0a1b2c3d4e5f", "amount": 12345, "currency": "EUR", "items": [1, 2, 3]}`
	benchDecodeInserts(b, NewDecoder([]string{"public.outbox"}), insertMsg(1, outboxRow("6d3f1c2e-5a4b-4c3d-9e8f-0a1b2c3d4e5f", "customer-42", payload)...), 100)
}

// benchDecodeInserts decodes ins b.N times, in transactions of txRows rows.
func benchDecodeInserts(b *testing.B, d *Decoder, ins []byte, txRows int) {
	begin, commit := beginMsg(0x10, t0, 1), commitMsg(0x10, 0x20, t0)
	if _, _, err := d.Decode(relMsg(1, "public", "outbox", outboxCols...)); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(ins)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%txRows == 0 {
			if d.InTx() {
				d.Decode(commit)
			}
			d.Decode(begin)
		}
		if _, _, err := d.Decode(ins); err != nil {
			b.Fatal(err)
		}
	}
}
