package outbox

// The database's date and time text (the forms source.Kind's docs name) read as Debezium's
// connectors read it, for header values (renderEpoch, renderZoned) and outbox.timestamp:
// column:<name> (epochMillis).

import (
	"fmt"
	"strconv"
	"time"

	"github.com/outboxd/outboxd/source"
)

// dateTime is a parsed "[-]YYYY-MM-DD[( |T)HH:MM:SS[.f…]][±HH[:MM[:SS]]][ BC]".
type dateTime struct {
	year, month, day     int
	hour, minute, second int
	nsec                 int
	offset               int // seconds east of UTC (timestamptz); 0 when the text has none
}

// parseDateTime reads PostgreSQL's and MySQL's date, timestamp and timestamptz output (ISO
// DateStyle; a year of more than four digits; " BC" for years before 1 AD, year 0 being 1 BC as
// in java.time). withTime: a time part is required; otherwise none may follow the date.
func parseDateTime(b []byte, withTime bool) (dateTime, error) {
	var d dateTime
	bad := func() (dateTime, error) { return dateTime{}, fmt.Errorf("%q is not a date-time the source prints", b) }
	s := b
	bc := false
	if n := len(s); n > 3 && string(s[n-3:]) == " BC" {
		bc, s = true, s[:n-3]
	}
	num := func(min, max int) (int, bool) {
		i := 0
		for i < len(s) && i < max && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i < min {
			return 0, false
		}
		v, _ := strconv.Atoi(string(s[:i]))
		s = s[i:]
		return v, true
	}
	lit := func(c byte) bool {
		if len(s) > 0 && s[0] == c {
			s = s[1:]
			return true
		}
		return false
	}
	var ok bool
	if d.year, ok = num(4, 9); !ok || !lit('-') {
		return bad()
	}
	if d.month, ok = num(2, 2); !ok || !lit('-') {
		return bad()
	}
	if d.day, ok = num(2, 2); !ok {
		return bad()
	}
	if bc {
		d.year = 1 - d.year
	}
	if d.month < 1 || d.month > 12 || d.day < 1 || d.day > 31 {
		return bad()
	}
	if !withTime {
		if len(s) != 0 {
			return bad()
		}
		return d, nil
	}
	if !lit(' ') && !lit('T') {
		return bad()
	}
	if d.hour, ok = num(2, 2); !ok || !lit(':') {
		return bad()
	}
	if d.minute, ok = num(2, 2); !ok || !lit(':') {
		return bad()
	}
	if d.second, ok = num(2, 2); !ok {
		return bad()
	}
	if lit('.') {
		n := 0
		for len(s) > 0 && s[0] >= '0' && s[0] <= '9' {
			if n < 9 {
				d.nsec = d.nsec*10 + int(s[0]-'0')
			}
			n++
			s = s[1:]
		}
		if n == 0 {
			return bad()
		}
		for ; n < 9; n++ {
			d.nsec *= 10
		}
	}
	if len(s) > 0 && (s[0] == '+' || s[0] == '-') {
		sign := 1
		if s[0] == '-' {
			sign = -1
		}
		s = s[1:]
		h, ok := num(2, 2)
		if !ok {
			return bad()
		}
		off := h * 3600
		if lit(':') {
			m, ok := num(2, 2)
			if !ok {
				return bad()
			}
			off += m * 60
			if lit(':') {
				sec, ok := num(2, 2)
				if !ok {
					return bad()
				}
				off += sec
			}
		}
		d.offset = sign * off
	}
	if len(s) != 0 || d.hour > 24 || d.minute > 59 || d.second > 60 {
		return bad()
	}
	return d, nil
}

// utc is d as an instant (its offset applied; a text without one is read as UTC, as Debezium
// reads timestamp without time zone and MySQL's TIMESTAMP text).
func (d dateTime) utc() time.Time {
	return time.Date(d.year, time.Month(d.month), d.day, d.hour, d.minute, d.second, d.nsec, time.UTC).
		Add(-time.Duration(d.offset) * time.Second)
}

// epochMicros and epochMillis are java.time's Instant conversions (floor: the sub-unit part
// of an instant is never negative).
func epochMicros(t time.Time) int64 { return t.Unix()*1_000_000 + int64(t.Nanosecond())/1_000 }
func epochMillis(t time.Time) int64 { return t.Unix()*1_000 + int64(t.Nanosecond())/1_000_000 }

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// renderEpoch is the Connect number Debezium makes of a date or timestamp without time zone
// (time.precision.mode=adaptive): io.debezium.time.Timestamp epoch milliseconds,
// MicroTimestamp epoch microseconds, Date days since 1970-01-01, in decimal (Long/Integer
// toString). PostgreSQL's infinity and -infinity have no such number outboxd reproduces: an
// error.
func renderEpoch(b []byte, k source.Kind) ([]byte, error) {
	d, err := parseDateTime(b, k != source.KindDate)
	if err != nil {
		return nil, err
	}
	t := d.utc()
	var n int64
	switch k {
	case source.KindTimestamp:
		n = epochMillis(t)
	case source.KindMicroTimestamp:
		n = epochMicros(t)
	default:
		n = floorDiv(t.Unix(), 86400)
	}
	return strconv.AppendInt(make([]byte, 0, 20), n, 10), nil
}

// renderZoned is Debezium's io.debezium.time.ZonedTimestamp string of a timestamptz (or MySQL
// TIMESTAMP, whose text is UTC): the instant in UTC, ZonedTimestamp.toIsoString: with a fraction
// width of 1..9 (Type.Scale, the column's precision as Debezium reads it) exactly that many
// fraction digits ("2026-01-02T03:04:05.120000Z"), otherwise DateTimeFormatter
// ISO_OFFSET_DATE_TIME (trailing fraction zeros dropped, no fraction when it is zero:
// "2026-01-02T03:04:05.12Z", "2026-01-02T03:04:05Z"). Year as ISO_LOCAL_DATE prints it ("+10000",
// "-0043"). PostgreSQL's infinity and -infinity stay as they are (as Debezium passes them).
func renderZoned(b []byte, width int) ([]byte, error) {
	if s := string(b); s == "infinity" || s == "-infinity" {
		return b, nil
	}
	d, err := parseDateTime(b, true)
	if err != nil {
		return nil, err
	}
	return appendISO(make([]byte, 0, 32), d.utc(), width), nil
}

// appendISO appends t (UTC) as DateTimeFormatter.ISO_OFFSET_DATE_TIME, or with exactly width
// fraction digits when width is 1..9 (ZonedTimestamp's fixed-width formatter).
func appendISO(dst []byte, t time.Time, width int) []byte {
	y := t.Year()
	switch {
	case y > 9999:
		dst = append(dst, '+')
		dst = strconv.AppendInt(dst, int64(y), 10)
	case y < 0:
		dst = append(dst, '-')
		dst = appendPad(dst, -y, 4)
	default:
		dst = appendPad(dst, y, 4)
	}
	dst = append(dst, '-')
	dst = appendPad(dst, int(t.Month()), 2)
	dst = append(dst, '-')
	dst = appendPad(dst, t.Day(), 2)
	dst = append(dst, 'T')
	dst = appendPad(dst, t.Hour(), 2)
	dst = append(dst, ':')
	dst = appendPad(dst, t.Minute(), 2)
	dst = append(dst, ':')
	dst = appendPad(dst, t.Second(), 2)
	var frac [9]byte
	ns := t.Nanosecond()
	for i := 8; i >= 0; i-- {
		frac[i] = byte('0' + ns%10)
		ns /= 10
	}
	n := width
	if width < 1 || width > 9 {
		n = 9
		for n > 0 && frac[n-1] == '0' {
			n--
		}
	}
	if n > 0 {
		dst = append(dst, '.')
		dst = append(dst, frac[:n]...)
	}
	return append(dst, 'Z')
}

func appendPad(dst []byte, v, width int) []byte {
	var buf [20]byte
	s := strconv.AppendInt(buf[:0], int64(v), 10)
	for i := len(s); i < width; i++ {
		dst = append(dst, '0')
	}
	return append(dst, s...)
}
