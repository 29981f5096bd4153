package connectjson

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
)

// AppendDouble appends f as Java's Double.toString(f) (JDK 19 and later) and returns the extended
// buffer; it is how Jackson writes a double (JsonConverter float64, Kafka Connect's Values and
// SimpleHeaderConverter too):
//   - the shortest decimal that rounds to f (when one digit suffices, the closest one- or two-digit
//     decimal: Double.MIN_VALUE is "4.9E-324"), closest to f among those;
//   - 10^-3 <= |f| < 10^7: plain notation with at least one fraction digit ("100.0", "0.001",
//     "39.98", "9999999.0"); otherwise d.dddE±n with at least one fraction digit ("1.0E7",
//     "1.0E-4", "1.7976931348623157E308");
//   - "0.0", "-0.0", "NaN", "Infinity", "-Infinity" (bare: as a JSON value Jackson quotes the
//     non-finite ones, see AppendJSONDouble).
//
// JDK 17 and earlier (FloatingDecimal; the e2e Debezium harness runs on OpenJDK 17) print some
// large values and subnormals differently: more digits ("2.82879384806159008E17" for JDK 19's
// "2.82879384806159E17"), a neighbour ("9.999999999999999E22" for "1.0E23"), or the other 2-digit
// pick ("1.0E-323" for "9.9E-324"). Measured on 7178 doubles (testdata/doubles.golden): 78 differ,
// 75 of them >= 1e16 in magnitude and 3 subnormal; none of the normal doubles below 1e16 (62 of
// 3000 random decimals of 1–17 digits differ, all of them >= 1e16).
func AppendDouble(dst []byte, f float64) []byte {
	return appendJava(dst, f, 64)
}

// AppendFloat appends f as Java's Float.toString(f) (JDK 19 and later): the rules of AppendDouble
// with float precision ("1.0E10", "12.34", Float.MIN_VALUE "1.4E-45"). JDK 17 differs much more
// often for floats >= 1e7 in magnitude ("2.94499994E13" for "2.945E13"): 366 of 2905 measured
// (testdata/floats.golden), and 739 of 3000 random decimals of 1–9 digits with exponents -12..12;
// every difference measured is a float >= 1e7 (or Float.MIN_NORMAL / a subnormal).
func AppendFloat(dst []byte, f float32) []byte {
	return appendJava(dst, float64(f), 32)
}

// AppendJSONDouble appends f as Jackson writes a double JSON value: AppendDouble's text, but the
// non-finite values as the JSON strings "NaN", "Infinity", "-Infinity" (QUOTE_NON_NUMERIC_NUMBERS,
// on by default).
func AppendJSONDouble(dst []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		dst = append(dst, '"')
		dst = AppendDouble(dst, f)
		return append(dst, '"')
	}
	return AppendDouble(dst, f)
}

// AppendJSONFloat is AppendJSONDouble for a float32 (Jackson's writeNumber(float)).
func AppendJSONFloat(dst []byte, f float32) []byte {
	if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
		dst = append(dst, '"')
		dst = AppendFloat(dst, f)
		return append(dst, '"')
	}
	return AppendFloat(dst, f)
}

func appendJava(dst []byte, f float64, bits int) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, "NaN"...)
	case math.IsInf(f, 1):
		return append(dst, "Infinity"...)
	case math.IsInf(f, -1):
		return append(dst, "-Infinity"...)
	case f == 0:
		if math.Signbit(f) {
			return append(dst, "-0.0"...)
		}
		return append(dst, "0.0"...)
	}
	var buf [32]byte
	e := strconv.AppendFloat(buf[:0], f, 'e', -1, bits)
	if f < 0 {
		dst = append(dst, '-')
		e = e[1:]
	}
	// e is "d[.ddd]e±XX".
	var db [24]byte
	digits, exp := splitE(db[:0], e)
	if len(digits) == 1 {
		// Java: when one digit suffices, the closest decimal of length one or two.
		var b2 [32]byte
		e2 := strconv.AppendFloat(b2[:0], math.Abs(f), 'e', 1, bits)
		if v, err := strconv.ParseFloat(string(e2), bits); err == nil && v == math.Abs(f) {
			var d2b [24]byte
			if d2, x2 := splitE(d2b[:0], e2); len(d2) == 2 {
				digits = append(db[:0], d2...)
				exp = x2
			}
		}
	}
	d := digits
	if exp >= -3 && exp < 7 {
		if exp < 0 {
			dst = append(dst, '0', '.')
			for i := exp; i < -1; i++ {
				dst = append(dst, '0')
			}
			return append(dst, d...)
		}
		if len(d) <= exp+1 {
			dst = append(dst, d...)
			for i := len(d); i <= exp; i++ {
				dst = append(dst, '0')
			}
			return append(dst, '.', '0')
		}
		dst = append(dst, d[:exp+1]...)
		dst = append(dst, '.')
		return append(dst, d[exp+1:]...)
	}
	dst = append(dst, d[0], '.')
	if len(d) == 1 {
		dst = append(dst, '0')
	} else {
		dst = append(dst, d[1:]...)
	}
	dst = append(dst, 'E')
	return strconv.AppendInt(dst, int64(exp), 10)
}

// splitE splits strconv's "d.ddde±XX" into its digits (no dot, appended to buf) and decimal
// exponent.
func splitE(buf, e []byte) ([]byte, int) {
	digits := buf[:0]
	i := 0
	for ; i < len(e) && e[i] != 'e'; i++ {
		if e[i] != '.' {
			digits = append(digits, e[i])
		}
	}
	x, neg := 0, false
	for j := i + 1; j < len(e); j++ {
		switch c := e[j]; {
		case c == '-':
			neg = true
		case c >= '0' && c <= '9':
			x = 10*x + int(c-'0')
		}
	}
	if neg {
		x = -x
	}
	// Trailing zeros never occur in strconv's shortest form but can in the 2-digit form.
	for len(digits) > 1 && digits[len(digits)-1] == '0' {
		digits = digits[:len(digits)-1]
	}
	return digits, x
}

// AppendBase64 appends b as Jackson writes a binary value (JsonConverter bytes, and a Decimal under
// the default decimal.format=BASE64): a JSON string of standard Base64 with padding and no line
// breaks (Base64Variants.MIME_NO_LINEFEEDS).
func AppendBase64(dst, b []byte) []byte {
	dst = append(dst, '"')
	dst = base64.StdEncoding.AppendEncode(dst, b)
	return append(dst, '"')
}

// ErrDecimalScale reports a decimal text with more fraction digits than the schema's scale (Connect's
// Decimal.fromLogical throws "BigDecimal has mismatching scale value for given Decimal schema").
var ErrDecimalScale = errors.New("decimal has more fraction digits than its scale")

// DecimalUnscaled returns the bytes org.apache.kafka.connect.data.Decimal stores for the decimal
// text (e.g. "12.50", "-3", "1.5E+3" as BigDecimal's constructor reads it) at the given scale:
// BigInteger.toByteArray of the unscaled value (minimal big-endian two's complement; 1.56 at scale
// 2 is {0x00, 0x9C}). A value with fewer fraction digits is padded with zeros (a column's scale is
// fixed, so Debezium's value always has it); more fraction digits, or text that is not a decimal,
// is an error.
func DecimalUnscaled(text []byte, scale int) ([]byte, error) {
	r, ok := new(big.Rat).SetString(string(text))
	if !ok || len(text) == 0 {
		return nil, fmt.Errorf("decimal %q: not a number", text)
	}
	m := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(abs(scale))), nil)
	if scale >= 0 {
		r.Mul(r, new(big.Rat).SetInt(m))
	} else {
		r.Quo(r, new(big.Rat).SetInt(m))
	}
	if !r.IsInt() {
		return nil, fmt.Errorf("decimal %q at scale %d: %w", text, scale, ErrDecimalScale)
	}
	return twosComplement(r.Num()), nil
}

func abs(i int) int {
	if i < 0 {
		return -i
	}
	return i
}

// twosComplement is Java's BigInteger.toByteArray.
func twosComplement(x *big.Int) []byte {
	if x.Sign() >= 0 {
		b := x.Bytes()
		if len(b) == 0 || b[0]&0x80 != 0 {
			b = append([]byte{0}, b...)
		}
		return b
	}
	// -x - 1, bytes inverted.
	y := new(big.Int).Neg(x)
	y.Sub(y, big.NewInt(1))
	b := y.Bytes()
	for i := range b {
		b[i] = ^b[i]
	}
	if len(b) == 0 || b[0]&0x80 == 0 {
		b = append([]byte{0xFF}, b...)
	}
	return b
}
