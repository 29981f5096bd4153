package postgres

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/source"
)

// defaultCases are columns with DEFAULTs of the shapes people write, and the default Debezium
// 3.6.1's PostgresDefaultValueConverter gives each (or noDefault), in the Kind's text form.
var defaultCases = []struct{ def, want string }{
	{"id serial", "0"}, // nextval('…'::regclass): a function, int4's placeholder
	{"b bool DEFAULT true", "true"},
	{"bf bool DEFAULT 'f'", "false"},
	{"i2 int2 DEFAULT -3", "-3"},
	{"i4 int4 NOT NULL DEFAULT 5", "5"},
	{"i4n int4 DEFAULT -1", "-1"},
	{"i8 int8 DEFAULT 9223372036854775807", "9223372036854775807"},
	{"f4 float4 DEFAULT 1.5", "1.5"},
	{"f8 float8 DEFAULT -2.25", "-2.25"},
	{"n numeric(10,2) DEFAULT 5", "5"},
	{"nn numeric(10,2) DEFAULT -1.5", "-1.5"},
	{"nv numeric DEFAULT 1", noDefault}, // VariableScaleDecimal is a Struct: KAFKA-12694, no default
	{"t text DEFAULT 'none'", "none"},
	{"tq text DEFAULT 'it''s'", "it"}, // 3.6.1's '(.*?)'
	{"te text DEFAULT ''", ""},
	{"tf text DEFAULT upper('x')", ""},
	{"tu text DEFAULT CURRENT_USER", "CURRENT_USER"},
	{"tc text DEFAULT 'a' || 'b'", "a"},
	{"v varchar(20) DEFAULT 'vv'", "vv"},
	{"c char(3) DEFAULT 'ab'", "ab"},
	{`j jsonb DEFAULT '{"a": 1}'`, `{"a": 1}`},
	{"jf jsonb DEFAULT jsonb_build_object()", "{}"},
	{"u uuid DEFAULT gen_random_uuid()", "00000000-0000-0000-0000-000000000000"},
	{"ul uuid DEFAULT 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"},
	{"d date DEFAULT CURRENT_DATE", "1970-01-01"},
	{"dl date DEFAULT '2026-01-02'", "2026-01-02"},
	{"ts timestamp DEFAULT now()", "1970-01-01 00:00:00"},
	{"tsl timestamp DEFAULT '2026-01-02 03:04:05.5'", "2026-01-02 03:04:05.5"},
	{"tsz timestamptz NOT NULL DEFAULT now()", "1970-01-01 00:00:00+00"},
	{"tszc timestamptz DEFAULT CURRENT_TIMESTAMP", "1970-01-01 00:00:00+00"},
	{"tszl timestamptz DEFAULT '2026-01-02 03:04:05+02'", "2026-01-02 01:04:05+00"},
	{"bt bytea DEFAULT '\\x00'", noDefault}, // no mapper
	{"m money DEFAULT 1", noDefault},        // no mapper
	{"nod int4", noDefault},
	{"dn int4 DEFAULT NULL", noDefault},
	{"ex int4 DEFAULT (1 + 2)", noDefault}, // not a literal, not a function: Debezium cannot parse it
}

// noDefault marks a column Debezium gives no schema default.
const noDefault = "(none)"

// TestColumnDefaultsEndToEnd: on a real PostgreSQL, the catalog read at Open (one query per
// table, with NOT NULL) gives each streamed column Debezium's default, and `outboxd check`'s
// column listing the same.
func TestColumnDefaultsEndToEnd(t *testing.T) {
	dsn, conn := testDB(t, "coldefaults")
	var defs []string
	for _, c := range defaultCases {
		defs = append(defs, c.def)
	}
	exec(t, conn, `CREATE TABLE public.defaults (`+strings.Join(defs, ", ")+`)`)
	rows, err := conn.Query(context.Background(), `SELECT a.attname, pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d
		JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum WHERE d.adrelid = 'public.defaults'::regclass ORDER BY d.adnum`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name, expr string
		if err := rows.Scan(&name, &expr); err != nil {
			t.Fatal(err)
		}
		t.Logf("pg_get_expr %-5s %s", name, expr)
	}
	rows.Close()

	s := newTestSource(dsn, "coldefaults", "public.defaults")
	open(t, s, "")
	exec(t, conn, `INSERT INTO public.defaults DEFAULT VALUES`)
	r := nextRows(t, s).Rows[0]
	if len(r.Types) != len(defaultCases) {
		t.Fatalf("%d Types, want %d", len(r.Types), len(defaultCases))
	}
	for i, c := range defaultCases {
		got := r.Types[i]
		if want := c.want != noDefault; got.HasDefault != want || (want && got.Default != c.want) || (!want && got.Default != "") {
			t.Errorf("%s: HasDefault %v Default %q, want %q", c.def, got.HasDefault, got.Default, c.want)
		}
		if got.HasDefault {
			if re := kindText[got.Kind]; re != nil && !re.MatchString(got.Default) && got.Kind != source.KindBool {
				t.Errorf("%s: default %q is not the Kind's text form %s", c.def, got.Default, re)
			}
		}
	}
	ad := NewAdapter(Settings{DSN: dsn, Tables: []string{"public.defaults"}}, nil)
	cols, types, ok, err := ad.OutboxTableColumns(context.Background(), "public.defaults")
	if err != nil || !ok || !slices.Equal(cols, r.Columns) || !slices.Equal(types, r.Types) {
		t.Errorf("OutboxTableColumns = %v %+v %v %v, want the row's %v %+v", cols, types, ok, err, r.Columns, r.Types)
	}
}
