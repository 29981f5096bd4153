package outbox

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/outboxd/outboxd/source"
	"github.com/outboxd/outboxd/transform/connectjson"
)

// Connect's logical type names and Debezium's, as JsonConverter writes them in "name".
const (
	nameJSON          = "io.debezium.data.Json"
	nameUUID          = "io.debezium.data.Uuid"
	nameTimestamp     = "io.debezium.time.Timestamp"
	nameMicroTS       = "io.debezium.time.MicroTimestamp"
	nameZonedTS       = "io.debezium.time.ZonedTimestamp"
	nameDate          = "io.debezium.time.Date"
	nameVariableScale = "io.debezium.data.VariableScaleDecimal"
)

// columnSchema is the Kafka Connect schema Debezium's connector gives a column of type t
// (nil Types: an optional string).
func columnSchema(t source.Type) *connectjson.Schema {
	s := &connectjson.Schema{Optional: t.Optional}
	named := func(typ connectjson.Type, name string) {
		s.Type, s.Name, s.Version, s.VersionSet = typ, name, 1, true
	}
	switch t.Kind {
	case source.KindJSON:
		named(connectjson.TypeString, nameJSON)
	case source.KindUUID:
		named(connectjson.TypeString, nameUUID)
	case source.KindBool:
		s.Type = connectjson.TypeBoolean
	case source.KindInt16:
		s.Type = connectjson.TypeInt16
	case source.KindInt32:
		s.Type = connectjson.TypeInt32
	case source.KindInt64:
		s.Type = connectjson.TypeInt64
	case source.KindFloat32:
		s.Type = connectjson.TypeFloat32
	case source.KindFloat64:
		s.Type = connectjson.TypeFloat64
	case source.KindDecimal:
		if variableScale(t) {
			// Debezium's VariableScaleDecimal.builder(): a struct {scale int32, value bytes}.
			named(connectjson.TypeStruct, nameVariableScale)
			s.Doc = "Variable scaled decimal"
			s.Fields = []connectjson.Field{
				{Name: "scale", Schema: &connectjson.Schema{Type: connectjson.TypeInt32}},
				{Name: "value", Schema: &connectjson.Schema{Type: connectjson.TypeBytes}},
			}
		} else {
			// Decimal.builder(scale) and Debezium's "connect.decimal.precision" parameter.
			named(connectjson.TypeBytes, connectjson.DecimalName)
			s.Parameters = []connectjson.Param{{Key: "scale", Value: strconv.Itoa(t.Scale)}}
			if t.Precision > 0 {
				s.Parameters = append(s.Parameters, connectjson.Param{Key: "connect.decimal.precision", Value: strconv.Itoa(t.Precision)})
			}
		}
	case source.KindBytes:
		s.Type = connectjson.TypeBytes
	case source.KindTimestamp:
		named(connectjson.TypeInt64, nameTimestamp)
	case source.KindMicroTimestamp:
		named(connectjson.TypeInt64, nameMicroTS)
	case source.KindZonedTimestamp:
		named(connectjson.TypeString, nameZonedTS)
	case source.KindDate:
		named(connectjson.TypeInt32, nameDate)
	default: // KindString and anything unknown
		s.Type = connectjson.TypeString
	}
	if t.HasDefault {
		// The column's DEFAULT as the source gives Debezium's (source.Type.Default): JsonConverter
		// writes it as "default" and in place of a NULL value. A default that is not valid text
		// for the Kind is left out, as Debezium leaves out one it cannot convert.
		if v, err := columnValue("", source.Value{Bytes: []byte(t.Default)}, t); err == nil {
			s.Default = &v
		}
	}
	return s
}

// variableScale: PostgreSQL's unconstrained numeric, which Debezium maps to VariableScaleDecimal.
func variableScale(t source.Type) bool { return t.Precision == 0 && t.Scale == 0 }

// columnValue is the Connect value Debezium's connector gives a column value of type t (from
// the source's text form, see source.Kind); Null for NULL. A value that is not valid text for
// its type is an invalid_value *Error naming col.
func columnValue(col string, v source.Value, t source.Type) (connectjson.Value, error) {
	if v.Null {
		return connectjson.Null(), nil
	}
	b := v.Bytes
	bad := func(why string) (connectjson.Value, error) {
		return connectjson.Null(), &Error{Reason: "invalid_value", Column: col,
			Msg: fmt.Sprintf("column %q: %q is not %s, so it cannot be encoded as Debezium does (check the column's type)", col, b, why)}
	}
	switch t.Kind {
	case source.KindBool:
		switch string(b) {
		case "t", "true", "1":
			return connectjson.Bool(true), nil
		case "f", "false", "0":
			return connectjson.Bool(false), nil
		}
		return bad("a boolean")
	case source.KindInt16, source.KindInt32, source.KindInt64:
		bits := 64
		if t.Kind == source.KindInt16 {
			bits = 16
		} else if t.Kind == source.KindInt32 {
			bits = 32
		}
		n, err := strconv.ParseInt(string(b), 10, bits)
		if err != nil {
			return bad(fmt.Sprintf("an int%d", bits))
		}
		return connectjson.Int(n), nil
	case source.KindFloat32:
		f, err := strconv.ParseFloat(string(b), 32)
		if err != nil {
			return bad("a float")
		}
		return connectjson.Float32(float32(f)), nil
	case source.KindFloat64:
		f, err := strconv.ParseFloat(string(b), 64)
		if err != nil {
			return bad("a double")
		}
		return connectjson.Float64(f), nil
	case source.KindDecimal:
		scale := t.Scale
		if variableScale(t) {
			scale = fractionDigits(b)
		}
		unscaled, err := connectjson.DecimalUnscaled(b, scale)
		if err != nil {
			return bad(fmt.Sprintf("a decimal of scale %d", t.Scale))
		}
		if variableScale(t) {
			return connectjson.Struct([]connectjson.Value{connectjson.Int(int64(scale)), connectjson.Bytes(unscaled)}), nil
		}
		return connectjson.Bytes(unscaled), nil
	case source.KindBytes:
		return connectjson.Bytes(b), nil
	case source.KindTimestamp, source.KindMicroTimestamp:
		ts, err := parseLocalTimestamp(b)
		if err != nil {
			return bad("a timestamp (YYYY-MM-DD HH:MM:SS[.ffffff])")
		}
		if t.Kind == source.KindTimestamp {
			return connectjson.Int(ts.UnixMilli()), nil
		}
		return connectjson.Int(ts.UnixMicro()), nil
	case source.KindZonedTimestamp:
		ts, err := parseZonedTimestamp(b)
		if err != nil {
			return bad("a timestamp with time zone")
		}
		return connectjson.String(zonedISO(ts, t.Scale)), nil
	case source.KindDate:
		d, err := time.Parse("2006-01-02", string(b))
		if err != nil {
			return bad("a date (YYYY-MM-DD)")
		}
		return connectjson.Int(int64(math.Floor(float64(d.Unix()) / 86400))), nil
	}
	// KindString, KindJSON, KindUUID and unknown kinds: a Connect string.
	return connectjson.String(string(b)), nil
}

// fractionDigits is BigDecimal(text).scale() for plain decimal text: its fraction digits.
func fractionDigits(b []byte) int {
	if i := bytes.IndexByte(b, '.'); i >= 0 {
		return len(b) - i - 1
	}
	return 0
}

// parseLocalTimestamp reads "YYYY-MM-DD HH:MM:SS[.ffffff]" (or with a 'T') as UTC.
func parseLocalTimestamp(b []byte) (time.Time, error) {
	s := string(b)
	if len(s) > 10 && s[10] == 'T' {
		s = s[:10] + " " + s[11:]
	}
	return time.Parse("2006-01-02 15:04:05.999999999", s)
}

// parseZonedTimestamp reads "YYYY-MM-DD HH:MM:SS[.ffffff]±HH[:MM[:SS]]" (PostgreSQL's
// timestamptz), "…Z", or an offset-less text (MySQL TIMESTAMP, which is UTC).
func parseZonedTimestamp(b []byte) (time.Time, error) {
	s := string(b)
	if len(s) > 10 && s[10] == 'T' {
		s = s[:10] + " " + s[11:]
	}
	for _, layout := range []string{"2006-01-02 15:04:05.999999999Z07:00:00", "2006-01-02 15:04:05.999999999Z07:00",
		"2006-01-02 15:04:05.999999999Z07", "2006-01-02 15:04:05.999999999"} {
		if ts, err := time.Parse(layout, s); err == nil {
			return ts.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("not a timestamp with time zone: %q", b)
}

// zonedISO is Debezium's ZonedTimestamp.toIsoString in UTC: ISO_OFFSET_DATE_TIME ("Z", the
// fraction trimmed of trailing zeros, none when zero) for width 0, else exactly width fraction
// digits.
func zonedISO(t time.Time, width int) string {
	out := t.Format("2006-01-02T15:04:05")
	if width > 0 && width <= 9 {
		frac := fmt.Sprintf("%09d", t.Nanosecond())
		out += "." + frac[:width]
	} else if ns := t.Nanosecond(); ns != 0 {
		frac := fmt.Sprintf("%09d", ns)
		for frac[len(frac)-1] == '0' {
			frac = frac[:len(frac)-1]
		}
		out += "." + frac
	}
	return out + "Z"
}
