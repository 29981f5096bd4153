package mysql

import (
	"context"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/source"
)

func typ(k source.Kind) source.Type { return source.Type{Kind: k, Optional: true} }

// typesKinds is the Type Debezium's MariaDB connector gives each column of typesDDL
// (types_test.go); all nullable but id.
var typesKinds = map[string]source.Type{
	"id": {Kind: source.KindUUID}, "uid": typ(source.KindString),
	"ti": typ(source.KindInt16), "tu": typ(source.KindInt16), "si": typ(source.KindInt32), "mi": typ(source.KindInt32),
	"i": typ(source.KindInt64), "bi": typ(source.KindInt64), "bs": typ(source.KindInt64),
	"dc": {Kind: source.KindDecimal, Optional: true, Precision: 10, Scale: 2},
	"f":  typ(source.KindFloat32), "d": typ(source.KindFloat64), "bt": typ(source.KindString), "y": typ(source.KindInt32),
	"dt": typ(source.KindMicroTimestamp), "ts": {Kind: source.KindZonedTimestamp, Optional: true, Scale: 3}, "da": typ(source.KindDate),
	"tm": typ(source.KindString), "vc": typ(source.KindString), "l1": typ(source.KindString), "tx": typ(source.KindString),
	"l1t": typ(source.KindString), "vb": typ(source.KindBytes), "bl": typ(source.KindBytes), "b4": typ(source.KindBytes),
	"e": typ(source.KindString), "st": typ(source.KindString), "j": typ(source.KindString), "n": typ(source.KindString),
}

func expectTypes(t *testing.T, r source.Row, want map[string]source.Type) {
	t.Helper()
	if len(r.Types) != len(r.Columns) {
		t.Fatalf("len(Types) = %d, len(Columns) = %d", len(r.Types), len(r.Columns))
	}
	for i, c := range r.Columns {
		w, ok := want[c]
		if !ok {
			t.Errorf("column %s: no expected type", c)
			continue
		}
		if r.Types[i] != w {
			t.Errorf("column %s: %+v, want %+v", c, r.Types[i], w)
		}
	}
}

// TestDecodeFixtureTypes: the recorded MariaDB 10.11 binlog (FULL and MINIMAL row metadata) gives
// the same Types, one slice shared by the description's rows.
func TestDecodeFixtureTypes(t *testing.T) {
	for _, name := range []string{"full", "minimal"} {
		t.Run(name, func(t *testing.T) {
			f := loadFixture(t, filepath.Join("testdata", "mariadb_types_"+name+".json"))
			dec := fixtureDecoder(t, f)
			first, again := dec(), dec()
			r := first[0].Rows[0]
			expectTypes(t, r, typesKinds)
			if &again[0].Rows[0].Types[0] != &r.Types[0] {
				t.Error("a second row of the same layout has its own Types slice: want the description's, shared")
			}
		})
	}
}

func TestColumnType(t *testing.T) {
	for _, c := range []struct {
		what     string
		col      column
		meta     uint16
		known    bool
		nullable bool
		want     source.Type
	}{
		{"MySQL JSON", column{typ: gomysql.MYSQL_TYPE_JSON}, 4, true, true, typ(source.KindJSON)},
		{"BIT(1)", column{typ: gomysql.MYSQL_TYPE_BIT}, 1, true, false, source.Type{Kind: source.KindBool}},
		{"BIT(9)", column{typ: gomysql.MYSQL_TYPE_BIT}, 1<<8 | 1, true, true, typ(source.KindString)},
		{"DATETIME(3)", column{typ: gomysql.MYSQL_TYPE_DATETIME2}, 3, true, true, typ(source.KindTimestamp)},
		{"DATETIME(4)", column{typ: gomysql.MYSQL_TYPE_DATETIME2}, 4, true, true, typ(source.KindMicroTimestamp)},
		{"DATETIME (5.5)", column{typ: gomysql.MYSQL_TYPE_DATETIME}, 0, true, true, typ(source.KindTimestamp)},
		{"SMALLINT", column{typ: gomysql.MYSQL_TYPE_SHORT}, 0, true, true, typ(source.KindInt16)},
		{"INT", column{typ: gomysql.MYSQL_TYPE_LONG}, 0, true, true, typ(source.KindInt32)},
		{"DECIMAL(65,30)", column{typ: gomysql.MYSQL_TYPE_NEWDECIMAL}, 65<<8 | 30, true, true,
			source.Type{Kind: source.KindDecimal, Optional: true, Precision: 65, Scale: 30}},
		{"GEOMETRY", column{typ: gomysql.MYSQL_TYPE_GEOMETRY, charset: csBinary}, 4, true, true, typ(source.KindBytes)},
		{"CHAR(16) utf8", column{typ: gomysql.MYSQL_TYPE_STRING, length: 64, charset: csUTF8}, 0, true, true, typ(source.KindString)},
		{"no NULL bitmap", column{typ: gomysql.MYSQL_TYPE_LONG}, 0, false, false, typ(source.KindInt32)},
	} {
		if got := columnType(&c.col, c.meta, c.known, c.nullable); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.what, got, c.want)
		}
	}
}

// kindText is the text form each Kind's doc comment (source/source.go) promises for MySQL.
var kindText = map[source.Kind]*regexp.Regexp{
	source.KindBool:           regexp.MustCompile(`^[01]$`),
	source.KindInt16:          regexp.MustCompile(`^-?[0-9]+$`),
	source.KindInt32:          regexp.MustCompile(`^-?[0-9]+$`),
	source.KindInt64:          regexp.MustCompile(`^-?[0-9]+$`),
	source.KindFloat32:        regexp.MustCompile(`^-?[0-9.]+(e[+-][0-9]+)?$`),
	source.KindFloat64:        regexp.MustCompile(`^-?[0-9.]+(e[+-][0-9]+)?$`),
	source.KindDecimal:        regexp.MustCompile(`^-?[0-9]+(\.[0-9]+)?$`),
	source.KindUUID:           regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`),
	source.KindTimestamp:      regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,3})?$`),
	source.KindMicroTimestamp: regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?$`),
	source.KindZonedTimestamp: regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?$`),
	source.KindDate:           regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}$`),
}

// colTypesDDL is a table of every mapped type, with the Type Debezium's MariaDB connector gives
// each column and a sample literal.
var colTypes = []struct {
	name, sql, lit string
	want           source.Type
}{
	{"c_id", "INT NOT NULL PRIMARY KEY", "1", source.Type{Kind: source.KindInt32}},
	{"c_bool", "BOOLEAN NOT NULL", "TRUE", source.Type{Kind: source.KindInt16}},
	{"c_ti1", "TINYINT(1)", "1", typ(source.KindInt16)},
	{"c_tiu", "TINYINT UNSIGNED", "255", typ(source.KindInt16)},
	{"c_si", "SMALLINT", "-32768", typ(source.KindInt16)},
	{"c_siu", "SMALLINT UNSIGNED", "65535", typ(source.KindInt32)},
	{"c_mi", "MEDIUMINT", "-8388608", typ(source.KindInt32)},
	{"c_miu", "MEDIUMINT UNSIGNED", "16777215", typ(source.KindInt32)},
	{"c_i", "INT", "-2147483648", typ(source.KindInt32)},
	{"c_iu", "INT UNSIGNED", "4294967295", typ(source.KindInt64)},
	{"c_bi", "BIGINT", "-9223372036854775808", typ(source.KindInt64)},
	{"c_biu", "BIGINT UNSIGNED", "18446744073709551615", typ(source.KindInt64)},
	{"c_f", "FLOAT", "1.5", typ(source.KindFloat32)},
	{"c_d", "DOUBLE", "1e20", typ(source.KindFloat64)},
	{"c_dec", "DECIMAL(12,3) NOT NULL", "-12.5", source.Type{Kind: source.KindDecimal, Precision: 12, Scale: 3}},
	{"c_dec0", "DECIMAL", "12", source.Type{Kind: source.KindDecimal, Optional: true, Precision: 10}},
	{"c_bit1", "BIT(1)", "b'1'", typ(source.KindBool)},
	{"c_bit4", "BIT(4)", "b'1010'", typ(source.KindString)},
	{"c_year", "YEAR", "2024", typ(source.KindInt32)},
	{"c_dt", "DATETIME", "'2024-01-02 03:04:05.6'", typ(source.KindTimestamp)},
	{"c_dt3", "DATETIME(3)", "'2024-01-02 03:04:05.123456'", typ(source.KindTimestamp)},
	{"c_dt4", "DATETIME(4) NOT NULL", "'2024-01-02 03:04:05.123456'", source.Type{Kind: source.KindMicroTimestamp}},
	{"c_dt6", "DATETIME(6)", "'2024-01-02 03:04:05.123456'", typ(source.KindMicroTimestamp)},
	{"c_ts", "TIMESTAMP NULL", "'2024-01-02 03:04:05'", typ(source.KindZonedTimestamp)},
	{"c_ts6", "TIMESTAMP(6) NULL", "'2024-01-02 03:04:05.123456'", source.Type{Kind: source.KindZonedTimestamp, Optional: true, Scale: 6}},
	{"c_date", "DATE", "'2024-02-29'", typ(source.KindDate)},
	{"c_time", "TIME", "'12:34:56'", typ(source.KindString)},
	{"c_char", "CHAR(3)", "'abc'", typ(source.KindString)},
	{"c_vc", "VARCHAR(20) NOT NULL", "'v'", source.Type{Kind: source.KindString}},
	{"c_text", "TEXT", "'t'", typ(source.KindString)},
	{"c_enum", "ENUM('a','b')", "'b'", typ(source.KindString)},
	{"c_set", "SET('a','b')", "'a,b'", typ(source.KindString)},
	{"c_json", "JSON", `'{"a": 1}'`, typ(source.KindString)}, // MariaDB: LONGTEXT
	{"c_uuid", "UUID", "'0a1b2c3d-4e5f-4061-8273-94a5b6c7d8e9'", typ(source.KindUUID)},
	{"c_bin16", "BINARY(16)", "UNHEX('00112233445566778899AABBCCDDEEFF')", typ(source.KindUUID)},
	{"c_bin", "BINARY(4)", "0x61", typ(source.KindBytes)},
	{"c_vb", "VARBINARY(8)", "0x0102", typ(source.KindBytes)},
	{"c_blob", "BLOB", "0x03", typ(source.KindBytes)},
}

// TestColumnTypesMariaDB: on a real MariaDB 10.11, in both column-name modes, every column of
// colTypes has the Type Debezium gives it (Kind, Optional from NOT NULL, Scale and Precision),
// and each value has its Kind's text form; TIMESTAMP values are UTC whatever the session's
// time zone.
func TestColumnTypesMariaDB(t *testing.T) {
	t.Parallel()
	var defs, lits []string
	for _, c := range colTypes {
		defs = append(defs, c.name+" "+c.sql)
		lits = append(lits, c.lit)
	}
	for _, full := range []bool{true, false} {
		t.Run(map[bool]string{true: "full", false: "minimal"}[full], func(t *testing.T) {
			t.Parallel()
			m := testenv.NewMariaDB(t, testenv.MariaDBOptions{RowMetadata: full})
			c := db(t, m)
			mustExec(t, c, `CREATE TABLE coltypes (`+strings.Join(defs, ", ")+`) DEFAULT CHARSET=utf8mb4`)
			s := open(t, m, "", nil, "app.coltypes")
			mustExec(t, c, "SET time_zone = '+02:00'")
			mustExec(t, c, `INSERT INTO coltypes VALUES (`+strings.Join(lits, ", ")+`)`)
			r := nextRows(t, s).Rows[0]
			if len(r.Types) != len(r.Columns) || len(r.Columns) != len(colTypes) {
				t.Fatalf("%d columns, %d types, want %d", len(r.Columns), len(r.Types), len(colTypes))
			}
			for i, ct := range colTypes {
				v := r.Values[i]
				if r.Columns[i] != ct.name || r.Types[i] != ct.want {
					t.Errorf("column %s %s: %s %+v, want %+v", ct.name, ct.sql, r.Columns[i], r.Types[i], ct.want)
				}
				if re := kindText[ct.want.Kind]; re != nil && !re.Match(v.Bytes) {
					t.Errorf("column %s %s: value %q is not its Kind's text form %s", ct.name, ct.sql, v.Bytes, re)
				}
				t.Logf("%-8s %-26s kind=%-2d optional=%-5v scale=%d precision=%d value=%q", ct.name, ct.sql,
					r.Types[i].Kind, r.Types[i].Optional, r.Types[i].Scale, r.Types[i].Precision, v.Bytes)
			}
			// `outboxd check` lists the same columns and Types from information_schema.
			ad := NewAdapter(Settings{DSN: m.DSN("app"), Tables: []string{"app.coltypes", "app.nope"}}, nil)
			cols, types, ok, err := ad.OutboxTableColumns(context.Background(), "app.coltypes")
			if err != nil || !ok || !slices.Equal(cols, r.Columns) {
				t.Fatalf("OutboxTableColumns = %v %v %v, want the row's columns %v", cols, ok, err, r.Columns)
			}
			for i := range cols {
				if types[i] != r.Types[i] {
					t.Errorf("OutboxTableColumns: column %s %+v, the row's %+v", cols[i], types[i], r.Types[i])
				}
			}
			if _, _, ok, err := ad.OutboxTableColumns(context.Background(), "app.nope"); ok || err != nil {
				t.Errorf("OutboxTableColumns(missing table) = ok %v, err %v; want false, nil", ok, err)
			}
			got := rowMap(r)
			for col, want := range map[string]string{"c_ts": "2024-01-02 01:04:05", "c_ts6": "2024-01-02 01:04:05.123456",
				"c_dt": "2024-01-02 03:04:05", "c_dt3": "2024-01-02 03:04:05.123", "c_bool": "1", "c_bit1": "1",
				"c_uuid": "0a1b2c3d-4e5f-4061-8273-94a5b6c7d8e9", "c_d": "1e+20"} {
				if got[col] != want {
					t.Errorf("column %s = %q, want %q", col, got[col], want)
				}
			}
		})
	}
}
