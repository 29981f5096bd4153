package outbox

// Header values of the number and bytes Kinds as Kafka Connect's Values.append writes Debezium's
// Connect values (renderHeader in headers.go dispatches here).

import (
	"encoding/base64"
	"fmt"
	"math"
	"strconv"

	"github.com/outboxd/outboxd/source"
	"github.com/outboxd/outboxd/transform/connectjson"
)

// renderInt64 is Long.toString of a Connect int64. The text is decimal already; an unsigned
// MySQL BIGINT above 2^63-1 wraps to a negative long, as Debezium's default
// bigint.unsigned.handling.mode=long gives it.
func renderInt64(b []byte) []byte {
	if len(b) < 19 || b[0] == '-' {
		return b
	}
	u, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil || u <= math.MaxInt64 {
		return b
	}
	return strconv.AppendInt(nil, int64(u), 10)
}

// renderFloat is Float.toString (bits 32) or Double.toString (bits 64) of the column's value,
// read from the database's number text (PostgreSQL also prints NaN, Infinity, -Infinity, which
// Go reads too and Java prints the same).
func renderFloat(b []byte, bits int) ([]byte, error) {
	f, err := strconv.ParseFloat(string(b), bits)
	if err != nil {
		return nil, fmt.Errorf("%q is not a float%d", b, bits)
	}
	if bits == 32 {
		return connectjson.AppendFloat(make([]byte, 0, 16), float32(f)), nil
	}
	return connectjson.AppendDouble(make([]byte, 0, 24), f), nil
}

// renderBase64 is Values.append of a byte[]: java.util.Base64's basic encoder (padded, no line
// breaks).
func renderBase64(b []byte) []byte {
	return base64.StdEncoding.AppendEncode(make([]byte, 0, base64.StdEncoding.EncodedLen(len(b))), b)
}

// decimalText splits exact decimal text ("-12.50", "0.0000001", "7") into its sign, its digits
// without the point and leading zeros ("0" for zero), and its scale (fraction digits).
func decimalText(b []byte) (neg bool, digits []byte, scale int, err error) {
	s := b
	if len(s) > 0 && (s[0] == '-' || s[0] == '+') {
		neg, s = s[0] == '-', s[1:]
	}
	point, n := -1, 0
	digits = make([]byte, 0, len(s))
	for i, c := range s {
		switch {
		case c == '.' && point < 0:
			point = i
		case c >= '0' && c <= '9':
			n++
			if len(digits) > 0 || c != '0' {
				digits = append(digits, c)
			}
		default:
			return false, nil, 0, decimalError(b)
		}
	}
	if n == 0 {
		return false, nil, 0, decimalError(b)
	}
	if point >= 0 {
		scale = len(s) - point - 1
	}
	if len(digits) == 0 {
		digits, neg = append(digits, '0'), false // BigDecimal has no negative zero
	}
	return neg, digits, scale, nil
}

func decimalError(b []byte) error {
	switch string(b) {
	case "NaN", "Infinity", "-Infinity":
		// SpecialValueDecimal.fromLogical: decimal.handling.mode=precise cannot carry them and
		// Debezium's task fails ("Got a special value (NaN/Infinity) for Decimal type").
		return fmt.Errorf("%s cannot be a Debezium precise decimal (Debezium's task fails on it)", b)
	}
	return fmt.Errorf("%q is not a decimal number", b)
}

// renderBigDecimal is BigDecimal.toString of the column's exact decimal text (Debezium's
// decimal.handling.mode=precise value has the text's scale: the column's): plain notation,
// except scientific "d.dddE-n" when the adjusted exponent (-scale + digits - 1) is below -6
// (0.0000001 is "1E-7", 0.00000010 is "1.0E-7", 0.0000000 is "0E-7").
func renderBigDecimal(b []byte) ([]byte, error) {
	if plainDecimal(b) {
		return b, nil // the common case: the database's text is BigDecimal's already
	}
	neg, digits, scale, err := decimalText(b)
	if err != nil {
		return nil, err
	}
	adjusted := -scale + len(digits) - 1
	out := make([]byte, 0, len(b)+8)
	if neg {
		out = append(out, '-')
	}
	if adjusted >= -6 { // toPlainString's form (scale >= 0: text never has an exponent)
		switch {
		case scale == 0:
			out = append(out, digits...)
		case len(digits) > scale:
			out = append(out, digits[:len(digits)-scale]...)
			out = append(out, '.')
			out = append(out, digits[len(digits)-scale:]...)
		default:
			out = append(out, '0', '.')
			for i := len(digits); i < scale; i++ {
				out = append(out, '0')
			}
			out = append(out, digits...)
		}
		return out, nil
	}
	out = append(out, digits[0])
	if len(digits) > 1 {
		out = append(out, '.')
		out = append(out, digits[1:]...)
	}
	out = append(out, 'E')
	return strconv.AppendInt(out, int64(adjusted), 10), nil // adjusted < -6: the sign is '-'
}

// plainDecimal reports whether b is canonical decimal text ("-12.50", "0.001", "7": no "+", no
// leading zeros, no negative zero) whose BigDecimal.toString is b itself (adjusted exponent >= -6).
func plainDecimal(b []byte) bool {
	s := b
	neg := len(s) > 0 && s[0] == '-'
	if neg {
		s = s[1:]
	}
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	intLen := i
	if intLen == 0 || intLen > 1 && s[0] == '0' {
		return false
	}
	if intLen == len(s) {
		return !(neg && s[0] == '0')
	}
	if s[i] != '.' || i+1 == len(s) {
		return false
	}
	frac := s[i+1:]
	for _, c := range frac {
		if c < '0' || c > '9' {
			return false
		}
	}
	if s[0] != '0' {
		return true // adjusted exponent intLen-1 >= 0
	}
	z := 0 // leading fraction zeros of 0.xxx
	for z < len(frac) && frac[z] == '0' {
		z++
	}
	if z == len(frac) { // zero: digits "0", adjusted -scale
		return !neg && len(frac) <= 6
	}
	return z+1 <= 6
}

// renderVariableScaleDecimal is Values.append of Debezium's io.debezium.data.VariableScaleDecimal
// (PostgreSQL numeric without precision and scale, decimal.handling.mode=precise): the Struct
// {scale int32, value bytes} of the value with trailing fraction zeros stripped
// (PostgresValueConverter.convertDecimal: stripTrailingZeros, a negative scale set back to 0),
// written {"scale":1,"value":"fQ=="} (value = BigInteger.toByteArray of the unscaled value, in
// Base64).
func renderVariableScaleDecimal(b []byte) ([]byte, error) {
	neg, digits, scale, err := decimalText(b)
	if err != nil {
		return nil, err
	}
	// Strip trailing fraction zeros (never below scale 0); zero has scale 0.
	for scale > 0 && len(digits) > 0 && digits[len(digits)-1] == '0' {
		digits, scale = digits[:len(digits)-1], scale-1
	}
	if string(digits) == "0" || len(digits) == 0 {
		digits, scale, neg = []byte("0"), 0, false
	}
	text := digits
	if neg {
		text = append([]byte{'-'}, digits...)
	}
	unscaled, err := connectjson.DecimalUnscaled(text, 0)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, 32+base64.StdEncoding.EncodedLen(len(unscaled)))
	out = append(out, `{"scale":`...)
	out = strconv.AppendInt(out, int64(scale), 10)
	out = append(out, `,"value":"`...)
	out = base64.StdEncoding.AppendEncode(out, unscaled)
	return append(out, `"}`...), nil
}

// kindName names a Kind in messages.
func kindName(k source.Kind) string {
	switch k {
	case source.KindString:
		return "string"
	case source.KindJSON:
		return "json (io.debezium.data.Json)"
	case source.KindUUID:
		return "uuid (io.debezium.data.Uuid)"
	case source.KindBool:
		return "boolean"
	case source.KindInt16:
		return "int16"
	case source.KindInt32:
		return "int32"
	case source.KindInt64:
		return "int64"
	case source.KindFloat32:
		return "float32"
	case source.KindFloat64:
		return "float64"
	case source.KindDecimal:
		return "decimal"
	case source.KindBytes:
		return "bytes"
	case source.KindTimestamp:
		return "io.debezium.time.Timestamp"
	case source.KindMicroTimestamp:
		return "io.debezium.time.MicroTimestamp"
	case source.KindZonedTimestamp:
		return "io.debezium.time.ZonedTimestamp"
	case source.KindDate:
		return "io.debezium.time.Date"
	}
	return fmt.Sprintf("kind %d", k)
}
