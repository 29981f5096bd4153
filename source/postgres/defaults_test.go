package postgres

import (
	"testing"

	"github.com/outboxd/outboxd/source"
)

// TestColumnDefault: Debezium 3.6.1's PostgresDefaultValueConverter rules on pg_get_expr texts,
// including shapes a test table cannot easily produce.
func TestColumnDefault(t *testing.T) {
	dec := source.Type{Kind: source.KindDecimal, Scale: 2, Precision: 10}
	cases := []struct {
		oid  uint32
		t    source.Type
		expr string
		want string // noDefault: none
	}{
		{oidInt4, source.Type{}, "nextval('t_id_seq'::regclass)", "0"},
		{oidInt4, source.Type{}, " 7 ", "7"}, // int4 is trimmed
		{oidInt4, source.Type{}, "NULL::integer", noDefault},
		{oidInt4, source.Type{}, "'+5'::integer", "5"},
		{oidInt2, source.Type{}, "'99999'::integer", noDefault}, // Short.parseShort overflows
		{oidInt8, source.Type{}, "'9223372036854775808'::numeric", noDefault},
		{oidInt4, source.Type{}, "(1 + 2)", noDefault},
		{oidBool, source.Type{}, "TRUE", "true"},
		{oidBool, source.Type{}, "yes", "false"}, // Boolean.parseBoolean
		{oidBool, source.Type{}, "NULL::boolean", noDefault},
		{oidBool, source.Type{}, "is_on()", "false"},
		{oidFloat8, source.Type{}, "'NaN'::double precision", "NaN"},
		{oidFloat8, source.Type{}, "'1e300'::double precision", "1e+300"},
		{oidFloat4, source.Type{}, "random()", "0"},
		{oidNumeric, dec, "'NaN'::numeric", noDefault},
		{oidNumeric, dec, "1.234", noDefault}, // more fraction digits than the scale
		{oidNumeric, dec, "0.5", "0.5"},
		{oidNumeric, dec, "now()", "0.0"},
		{oidNumeric, source.Type{Kind: source.KindDecimal}, "1.5", noDefault}, // VariableScaleDecimal
		{typeText, source.Type{}, "'it''s'::text", "it"},                      // 3.6.1's '(.*?)'
		{typeText, source.Type{}, "(gen_random_uuid())::text", ""},
		{typeText, source.Type{}, "NULL::text", noDefault},
		{typeText, source.Type{}, "'a", noDefault}, // a lone quote: Java's matcher throws
		{typeText, source.Type{}, "CURRENT_USER", "CURRENT_USER"},
		{typeVarchar, source.Type{}, "' padded '::character varying", " padded "},
		{oidJSONB, source.Type{}, "'[]'::jsonb", "[]"},
		{oidJSON, source.Type{}, "json_build_object('a', 1)", "{}"},
		{oidUUID, source.Type{}, "'not-a-uuid'::uuid", noDefault},
		{oidDate, source.Type{}, "'infinity'::date", noDefault},
		{oidDate, source.Type{}, "current_date", "1970-01-01"},
		{oidTimestamp, source.Type{}, "LOCALTIMESTAMP", "1970-01-01 00:00:00"},
		{oidTimestamp, source.Type{}, "'2026-01-02 03:04:05.123456'::timestamp without time zone", "2026-01-02 03:04:05.123456"},
		{oidTimestamptz, source.Type{}, "'2026-01-02 03:04:05.5+05:30'::timestamp with time zone", "2026-01-01 21:34:05.5+00"},
		{oidTimestamptz, source.Type{}, "(now() + '1 day'::interval)", "1970-01-01 00:00:00+00"}, // FUNCTION_DEFAULT_PATTERN matches "(now("
		{oidTimestamptz, source.Type{}, "statement_timestamp()", "1970-01-01 00:00:00+00"},
		{oidOID, source.Type{}, "1", noDefault}, // no mapper
		{oidBytea, source.Type{}, "'\\x00'::bytea", noDefault},
	}
	for _, c := range cases {
		got, ok := columnDefault(c.oid, c.t, c.expr)
		if want := c.want != noDefault; ok != want || (want && got != c.want) {
			t.Errorf("columnDefault(%d, %q) = %q, %v; want %q", c.oid, c.expr, got, ok, c.want)
		}
	}
}
