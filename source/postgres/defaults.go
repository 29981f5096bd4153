package postgres

import (
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/outboxd/outboxd/source"
)

// Column defaults as Debezium 3.6's PostgreSQL connector puts them into a column's Connect
// schema (PostgresDefaultValueConverter, applied to pgjdbc's COLUMN_DEF, which is
// pg_get_expr(adbin, adrelid)): the type's mapper extracts a value from the expression and the
// column's value converter turns it into the schema's default. columnDefault does the same for
// the types whose Connect schema outboxd reproduces (types.go); the others get no default:
//
//   - bool, int2/int4/int8, float4/float8, numeric(p,s), uuid, date, timestamp, timestamptz:
//     the expression is trimmed; "NULL::…" is no default (bool and the numbers).
//   - text, varchar, bpchar, json, jsonb: not trimmed; "NULL::…" is no default.
//   - The value is the first '…' literal of the expression when it has a quote (Debezium's
//     `'(.*?)'`, so 'it''s' gives "it", as in 3.6.1), else the expression itself: 5 and '5'::bigint
//     give 5, '-1.5'::numeric gives -1.5, and CURRENT_USER on a text column gives the string
//     "CURRENT_USER".
//   - A function call (`name(…)` at the start, e.g. now(), nextval('t_id_seq'::regclass) of a
//     serial, gen_random_uuid()) or CURRENT_TIMESTAMP, CURRENT_TIME, CURRENT_DATE, LOCALTIME,
//     LOCALTIMESTAMP gives the type's placeholder: false, 0, 0.0, "" (text), "{}" (json), the
//     nil uuid, 1970-01-01 (date and timestamps: the epoch).
//   - A value the mapper cannot parse (an operator expression, NaN for numeric, a numeric with
//     more fraction digits than its scale, a non-ISO date) is no default, as Debezium logs
//     "Cannot parse column default value" and leaves it out. Debezium also leaves out the default
//     of a numeric without a typmod (VariableScaleDecimal is a Struct: KAFKA-12694).
//
// Types without a Debezium mapper (oid, name, money, bytea, time, interval, inet, enums, …) get
// none. The catalog is read at Open with the NOT NULL columns (Relations.Defaults), so an ALTER
// … SET DEFAULT made while outboxd runs shows from the next start.

// Built-in type OIDs that only matter for defaults (types.go has the rest).
const (
	typeText    = 25
	typeBpchar  = 1042
	typeVarchar = 1043
)

var (
	// functionDefault is Debezium's FUNCTION_DEFAULT_PATTERN (matched at the start).
	functionDefault = regexp.MustCompile(`^[(]?[A-Za-z0-9_.]+\((?:.+(?:, ?.+)*)?\)`)
	// literalDefault is Debezium 3.6.1's LITERAL_DEFAULT_PATTERN.
	literalDefault = regexp.MustCompile(`'(.*?)'`)
	// javaInt is what Java's Integer.parseInt and friends accept (ASCII digits).
	javaInt = regexp.MustCompile(`^[+-]?[0-9]+$`)
	// plainDecimal is the BigDecimal text outboxd accepts (no exponent: PostgreSQL prints none).
	plainDecimal = regexp.MustCompile(`^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)$`)
	isoDate      = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}$`)
)

var currentDateTimes = map[string]bool{"current_timestamp": true, "current_time": true,
	"current_date": true, "localtime": true, "localtimestamp": true}

// columnDefault returns the default Debezium gives a column of type oid (its Type t, from
// columnType) whose DEFAULT is expr (pg_get_expr's text), in the text form of t.Kind; ok false
// when Debezium gives none.
func columnDefault(oid uint32, t source.Type, expr string) (string, bool) {
	var placeholder string
	trim, nullable := true, true
	switch oid {
	case oidBool:
		placeholder = "false"
	case oidInt2, oidInt4, oidInt8:
		placeholder = "0"
	case oidFloat4, oidFloat8, oidNumeric:
		placeholder = "0.0"
	case oidUUID:
		placeholder, nullable = "00000000-0000-0000-0000-000000000000", false
	case oidDate, oidTimestamp, oidTimestamptz:
		placeholder, nullable = "1970-01-01", false
	case typeText, typeVarchar, typeBpchar:
		trim, nullable = false, false
	case oidJSON, oidJSONB:
		placeholder, trim, nullable = "{}", false, false
	default:
		return "", false
	}
	if trim {
		expr = strings.TrimSpace(expr)
	}
	if nullable && strings.HasPrefix(expr, "NULL::") { // parseNullDefault
		return "", false
	}
	v, ok := placeholder, true
	if !functionDefault.MatchString(expr) && !currentDateTimes[strings.ToLower(expr)] {
		v, ok = extractDefault(expr)
		if !ok {
			return "", false
		}
	}
	switch oid {
	case oidBool:
		return strconv.FormatBool(strings.EqualFold(v, "true")), true // Boolean.parseBoolean
	case oidInt2, oidInt4, oidInt8:
		bits := map[uint32]int{oidInt2: 16, oidInt4: 32, oidInt8: 64}[oid]
		if !javaInt.MatchString(v) {
			return "", false
		}
		n, err := strconv.ParseInt(v, 10, bits)
		if err != nil {
			return "", false
		}
		return strconv.FormatInt(n, 10), true
	case oidFloat4, oidFloat8:
		return javaFloat(v, oid == oidFloat4)
	case oidNumeric:
		return decimalDefault(v, t)
	case oidUUID:
		return uuidDefault(v)
	case oidDate:
		if !isoDate.MatchString(v) {
			return "", false
		}
		if _, err := time.Parse(time.DateOnly, v); err != nil {
			return "", false
		}
		return v, true
	case oidTimestamp:
		ts, ok := parseTimestampDefault(v, false)
		if !ok {
			return "", false
		}
		return ts.Format("2006-01-02 15:04:05.999999"), true
	case oidTimestamptz:
		ts, ok := parseTimestampDefault(v, true)
		if !ok {
			return "", false
		}
		return ts.UTC().Format("2006-01-02 15:04:05.999999-07"), true
	}
	return v, true // text and json: the string itself
}

// extractDefault is Debezium's extractDefault without a placeholder: the first quoted literal,
// or the expression itself when it has no quote ("NULL::…" without a quote: no value).
func extractDefault(expr string) (string, bool) {
	if !strings.Contains(expr, "'") {
		if strings.HasPrefix(expr, "NULL::") {
			return "", false
		}
		return expr, true
	}
	m := literalDefault.FindStringSubmatch(expr)
	if m == nil { // a lone quote: Java's matcher.group after a failed find throws
		return "", false
	}
	return m[1], true
}

// javaFloat parses v as Float.parseFloat / Double.parseDouble do for the forms PostgreSQL
// prints, and returns it as PostgreSQL's number text.
func javaFloat(v string, single bool) (string, bool) {
	switch v {
	case "NaN", "Infinity", "-Infinity":
		return v, true
	}
	if !plainDecimalOrExp(v) {
		return "", false
	}
	bits := 64
	if single {
		bits = 32
	}
	f, err := strconv.ParseFloat(v, bits)
	if err != nil { // out of range: Java gives Infinity, PostgreSQL never prints such a constant
		return "", false
	}
	return strconv.FormatFloat(f, 'g', -1, bits), true
}

var decimalExp = regexp.MustCompile(`^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$`)

func plainDecimalOrExp(v string) bool { return decimalExp.MatchString(v) }

// decimalDefault is new BigDecimal(v) set to the column's scale (Debezium raises a smaller
// scale; a larger one fails JsonConverter's Decimal and is left out here).
func decimalDefault(v string, t source.Type) (string, bool) {
	if t.Kind != source.KindDecimal || t.Precision == 0 || !plainDecimal.MatchString(v) {
		return "", false
	}
	v = strings.TrimPrefix(v, "+")
	if neg := strings.HasPrefix(v, "-"); strings.HasPrefix(strings.TrimPrefix(v, "-"), ".") {
		v = "0" + strings.TrimPrefix(v, "-")
		if neg {
			v = "-" + v
		}
	}
	if i := strings.IndexByte(v, '.'); i >= 0 && len(v)-i-1 > t.Scale {
		return "", false
	}
	return v, true
}

// uuidDefault is UUID.fromString(v).toString() for the canonical form.
func uuidDefault(v string) (string, bool) {
	parts := strings.Split(v, "-")
	if len(parts) != 5 {
		return "", false
	}
	for i, want := range []int{8, 4, 4, 4, 12} {
		if len(parts[i]) != want {
			return "", false
		}
		if _, err := strconv.ParseUint(parts[i], 16, 64); err != nil {
			return "", false
		}
	}
	return strings.ToLower(v), true
}

// parseTimestampDefault reads PostgreSQL's ISO text of a timestamp (date only is midnight), as
// pgjdbc's TimestampUtils.toOffsetDateTime does for it: without an offset the value is UTC.
func parseTimestampDefault(v string, zoned bool) (time.Time, bool) {
	layouts := []string{"2006-01-02 15:04:05.999999", "2006-01-02"}
	if zoned {
		layouts = []string{"2006-01-02 15:04:05.999999-07", "2006-01-02 15:04:05.999999-07:00",
			"2006-01-02 15:04:05.999999-07:00:00", "2006-01-02 15:04:05.999999", "2006-01-02"}
	}
	for _, l := range layouts {
		if ts, err := time.Parse(l, v); err == nil {
			return ts, true
		}
	}
	return time.Time{}, false
}
