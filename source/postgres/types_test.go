package postgres

import (
	"testing"

	"github.com/outboxd/outboxd/source"
	"github.com/outboxd/outboxd/source/postgres/pgoutputtest"
)

func TestTypeOIDsMatchFixtures(t *testing.T) {
	for _, c := range []struct{ ours, fixture uint32 }{
		{oidBool, pgoutputtest.OIDBool}, {oidBytea, pgoutputtest.OIDBytea}, {oidInt8, pgoutputtest.OIDInt8},
		{oidInt2, pgoutputtest.OIDInt2}, {oidInt4, pgoutputtest.OIDInt4}, {oidOID, pgoutputtest.OIDOID},
		{oidJSON, pgoutputtest.OIDJSON}, {oidFloat4, pgoutputtest.OIDFloat4}, {oidFloat8, pgoutputtest.OIDFloat8},
		{oidDate, pgoutputtest.OIDDate}, {oidTimestamp, pgoutputtest.OIDTimestamp},
		{oidTimestamptz, pgoutputtest.OIDTimestamptz}, {oidNumeric, pgoutputtest.OIDNumeric},
		{oidUUID, pgoutputtest.OIDUUID}, {oidJSONB, pgoutputtest.OIDJSONB},
	} {
		if c.ours != c.fixture {
			t.Errorf("OID %d in types.go, %d in pgoutputtest", c.ours, c.fixture)
		}
	}
}

// typeCase is one column of the type table: its Relation message column and the Type Debezium's
// PostgreSQL connector gives it (PostgresValueConverter, default modes). The server test
// (TestColumnTypesEndToEnd) declares the same columns with SQL.
type typeCase struct {
	sql  string // the column's SQL type
	col  pgoutputtest.Column
	want source.Type // Optional as for a nullable column
}

func typeCases() []typeCase {
	c := func(name string, oid uint32) pgoutputtest.Column { return pgoutputtest.Column{Name: name, OID: oid} }
	cm := func(name string, oid uint32, typmod int32) pgoutputtest.Column {
		return pgoutputtest.Column{Name: name, OID: oid, Typmod: typmod, TypmodSet: true}
	}
	k := func(kind source.Kind) source.Type { return source.Type{Kind: kind, Optional: true} }
	dec := func(p, s int) source.Type {
		return source.Type{Kind: source.KindDecimal, Optional: true, Precision: p, Scale: s}
	}
	return []typeCase{
		{"bool", c("c_bool", pgoutputtest.OIDBool), k(source.KindBool)},
		{"int2", c("c_int2", pgoutputtest.OIDInt2), k(source.KindInt16)},
		{"int4", c("c_int4", pgoutputtest.OIDInt4), k(source.KindInt32)},
		{"int8", c("c_int8", pgoutputtest.OIDInt8), k(source.KindInt64)},
		{"oid", c("c_oid", pgoutputtest.OIDOID), k(source.KindInt64)},
		{"float4", c("c_float4", pgoutputtest.OIDFloat4), k(source.KindFloat32)},
		{"float8", c("c_float8", pgoutputtest.OIDFloat8), k(source.KindFloat64)},
		{"numeric(10,2)", cm("c_num_10_2", pgoutputtest.OIDNumeric, pgoutputtest.NumericTypmod(10, 2)), dec(10, 2)},
		{"numeric(5)", cm("c_num_5", pgoutputtest.OIDNumeric, pgoutputtest.NumericTypmod(5, 0)), dec(5, 0)},
		{"numeric(4,-2)", cm("c_num_neg", pgoutputtest.OIDNumeric, pgoutputtest.NumericTypmod(4, -2)), dec(4, -2)},
		{"numeric", c("c_num", pgoutputtest.OIDNumeric), dec(0, 0)}, // VariableScaleDecimal
		{"text", c("c_text", pgoutputtest.OIDText), k(source.KindString)},
		{"varchar(20)", cm("c_varchar", pgoutputtest.OIDVarchar, 24), k(source.KindString)},
		{"char(3)", cm("c_bpchar", pgoutputtest.OIDBpchar, 7), k(source.KindString)},
		{"name", c("c_name", pgoutputtest.OIDName), k(source.KindString)},
		{"uuid", c("c_uuid", pgoutputtest.OIDUUID), k(source.KindUUID)},
		{"json", c("c_json", pgoutputtest.OIDJSON), k(source.KindJSON)},
		{"jsonb", c("c_jsonb", pgoutputtest.OIDJSONB), k(source.KindJSON)},
		{"bytea", c("c_bytea", pgoutputtest.OIDBytea), k(source.KindBytes)},
		{"timestamp(0)", cm("c_ts0", pgoutputtest.OIDTimestamp, 0), k(source.KindTimestamp)},
		{"timestamp(3)", cm("c_ts3", pgoutputtest.OIDTimestamp, 3), k(source.KindTimestamp)},
		{"timestamp(4)", cm("c_ts4", pgoutputtest.OIDTimestamp, 4), k(source.KindMicroTimestamp)},
		{"timestamp(6)", cm("c_ts6", pgoutputtest.OIDTimestamp, 6), k(source.KindMicroTimestamp)},
		{"timestamp", c("c_ts", pgoutputtest.OIDTimestamp), k(source.KindMicroTimestamp)},
		{"timestamptz", c("c_tstz", pgoutputtest.OIDTimestamptz), source.Type{Kind: source.KindZonedTimestamp, Optional: true, Scale: 6}},
		{"timestamptz(3)", cm("c_tstz3", pgoutputtest.OIDTimestamptz, 3), source.Type{Kind: source.KindZonedTimestamp, Optional: true, Scale: 3}},
		{"date", c("c_date", pgoutputtest.OIDDate), k(source.KindDate)},
		// Fallbacks: the text, KindString (Debezium: MicroTime, MicroDuration, Decimal, Xml, Enum).
		{"time", c("c_time", pgoutputtest.OIDTime), k(source.KindString)},
		{"interval", c("c_interval", pgoutputtest.OIDInterval), k(source.KindString)},
		{"money", c("c_money", pgoutputtest.OIDMoney), k(source.KindString)},
		{"xml", c("c_xml", pgoutputtest.OIDXML), k(source.KindString)},
		{"inet", c("c_inet", pgoutputtest.OIDInet), k(source.KindString)},
		{"mood", c("c_enum", 0), k(source.KindString)}, // the enum's OID is set per database
	}
}

func TestColumnType(t *testing.T) {
	for _, tc := range typeCases() {
		typmod := int32(-1)
		if tc.col.TypmodSet {
			typmod = tc.col.Typmod
		}
		oid := tc.col.OID
		if oid == 0 {
			oid = pgoutputtest.OIDEnum
		}
		if got := columnType(oid, typmod, false); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.sql, got, tc.want)
		}
		want := tc.want
		want.Optional = false
		if got := columnType(oid, typmod, true); got != want {
			t.Errorf("%s NOT NULL: %+v, want %+v", tc.sql, got, want)
		}
	}
}

// TestDecodeTypes: rows carry their relation's Types, parallel to Columns, Optional from the
// loaded NOT NULL columns, one slice shared by every row of the relation; a new Relation message
// brings a new slice while rows decoded before keep theirs.
func TestDecodeTypes(t *testing.T) {
	var cols []pgoutputtest.Column
	var vals []pgoutputtest.Value
	for _, tc := range typeCases() {
		c := tc.col
		if c.OID == 0 {
			c.OID = pgoutputtest.OIDEnum
		}
		cols = append(cols, c)
		vals = append(vals, pgoutputtest.Null)
	}
	cols[0].Name, cols[1].Name = "id", "payload" // NOT NULL below
	d := NewDecoderFor(Relations{
		Tables:  []TableRelation{{Name: "public.types", Schema: "public", Table: "types", OID: 5}},
		NotNull: map[uint32]map[string]bool{5: {"id": true, "payload": true}},
	})
	txs := feed(t, d,
		pgoutputtest.Relation(5, "public", "types", cols...),
		beginMsg(0x100, t0, 1),
		pgoutputtest.Insert(5, vals...),
		pgoutputtest.Insert(5, vals...),
		commitMsg(0x100, 0x200, t0),
		pgoutputtest.Relation(5, "public", "types", cols[2:]...), // ALTER TABLE: another layout
		beginMsg(0x300, t1, 2),
		pgoutputtest.Insert(5, vals[2:]...),
		commitMsg(0x300, 0x400, t1),
	)
	r1, r2, r3 := txs[0].Rows[0], txs[0].Rows[1], txs[1].Rows[0]
	if len(r1.Types) != len(r1.Columns) || len(r3.Types) != len(r3.Columns) {
		t.Fatalf("len(Types) %d and %d, len(Columns) %d and %d", len(r1.Types), len(r3.Types), len(r1.Columns), len(r3.Columns))
	}
	if &r1.Types[0] != &r2.Types[0] {
		t.Error("two rows of one relation have separate Types slices: want one shared slice")
	}
	for i, tc := range typeCases() {
		want := tc.want
		if i < 2 {
			want.Optional = false
		}
		if r1.Types[i] != want {
			t.Errorf("column %s (%s): %+v, want %+v", r1.Columns[i], tc.sql, r1.Types[i], want)
		}
		if i >= 2 && r3.Types[i-2] != tc.want {
			t.Errorf("after the new Relation message, column %s: %+v, want %+v", r3.Columns[i-2], r3.Types[i-2], tc.want)
		}
	}
	if _, typ, ok := r1.Lookup("c_num_10_2"); !ok || typ.Kind != source.KindDecimal || typ.Scale != 2 {
		t.Errorf("Lookup(c_num_10_2) = %+v, %v", typ, ok)
	}
}

// Without catalog information (NewDecoder, or a relation the catalog did not describe) every
// column is Optional; a relation looked up while streaming (Resolve) brings its NOT NULL columns.
func TestDecodeTypesOptionalWithoutCatalog(t *testing.T) {
	d := NewDecoder([]string{"public.outbox"})
	tx := one(t, feed(t, d, relMsg(1, "public", "outbox", outboxCols...), beginMsg(0x100, t0, 1),
		insertMsg(1, outboxRow("id-1", "a", `{}`)...), commitMsg(0x100, 0x200, t0)))
	for i, typ := range tx.Rows[0].Types {
		if !typ.Optional {
			t.Errorf("column %s: Optional false without catalog information", tx.Rows[0].Columns[i])
		}
	}

	d = NewDecoderFor(Relations{Tables: []TableRelation{{Name: "public.parent", Schema: "public", Table: "parent", OID: 10}}})
	part := relMsg(11, "public", "parent_p1", col{"id", oidText}, col{"payload", oidJSONB})
	if _, _, err := d.Decode(part); err == nil {
		t.Fatal("unknown partition: no UnknownRelationError")
	}
	d.Resolve(11, CatalogRelation{Exists: true, Name: RelationName{OID: 11, Schema: "public", Table: "parent_p1"},
		Ancestors: []uint32{10}, NotNull: map[string]bool{"id": true}})
	tx = one(t, feed(t, d, part, beginMsg(0x300, t0, 2), insertMsg(11, txt("x"), txt("{}")), commitMsg(0x300, 0x400, t0)))
	if typ := tx.Rows[0].Types; typ[0].Optional || !typ[1].Optional {
		t.Errorf("resolved partition's Types %+v: want id NOT NULL, payload nullable", typ)
	}
}
