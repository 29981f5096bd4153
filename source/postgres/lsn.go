package postgres

import (
	"fmt"

	"github.com/jackc/pglogrepl"
	"github.com/outboxd/outboxd/source"
)

// LSN text form: PostgreSQL's "%X/%X" (upper-case hex, no leading zeros, high and low 32 bits).
// Formatting and parsing are hand-written: pglogrepl's LSN.String (fmt.Sprintf) and ParseLSN
// (fmt.Sscanf) cost more than the rest of the per-transaction work of the stream loop.

// ParseLSN parses a position in PostgreSQL's LSN text form ("0/16B3748", hex digits in either
// case). The empty position is an error: callers decide what "no position" means.
func ParseLSN(p source.Position) (pglogrepl.LSN, error) {
	if l, ok := parseLSN(string(p)); ok {
		return l, nil
	}
	return 0, fmt.Errorf("position %q is not a PostgreSQL LSN (want the form 0/16B3748)", string(p))
}

// parseLSN parses "hi/lo", each 1 to 8 hex digits in either case.
func parseLSN(s string) (pglogrepl.LSN, bool) {
	var hi, lo uint64
	i := 0
	for ; i < len(s) && s[i] != '/'; i++ {
		d, ok := unhex(s[i])
		if !ok {
			return 0, false
		}
		hi = hi<<4 | uint64(d)
	}
	if i == 0 || i > 8 || i == len(s) {
		return 0, false // no or too many high digits, or no slash
	}
	i++ // the slash
	if n := len(s) - i; n == 0 || n > 8 {
		return 0, false
	}
	for ; i < len(s); i++ {
		d, ok := unhex(s[i])
		if !ok {
			return 0, false
		}
		lo = lo<<4 | uint64(d)
	}
	return pglogrepl.LSN(hi<<32 | lo), true
}

// formatLSN returns l in PostgreSQL's text form, identical to pglogrepl's LSN.String.
func formatLSN(l pglogrepl.LSN) string {
	var b [17]byte
	return string(appendLSN(b[:0], l))
}

// appendLSN appends l's text form ("%X/%X") to b.
func appendLSN(b []byte, l pglogrepl.LSN) []byte {
	b = appendHex32(b, uint32(l>>32))
	b = append(b, '/')
	return appendHex32(b, uint32(l))
}

const upperHex = "0123456789ABCDEF"

// appendHex32 appends v in upper-case hex without leading zeros ("0" for 0).
func appendHex32(b []byte, v uint32) []byte {
	shift := 28
	for shift > 0 && v>>shift == 0 {
		shift -= 4
	}
	for ; shift >= 0; shift -= 4 {
		b = append(b, upperHex[v>>shift&0xF])
	}
	return b
}

// CompareLSN compares two LSN positions: -1 if a is before b, 0 if equal, +1 if after. An empty
// or malformed position counts as 0/0 (before every real position); validate with ParseLSN
// where that matters.
func CompareLSN(a, b source.Position) int {
	la, _ := parseLSN(string(a))
	lb, _ := parseLSN(string(b))
	switch {
	case la < lb:
		return -1
	case la > lb:
		return 1
	}
	return 0
}

// lsnPosition is the position of an LSN.
func lsnPosition(l pglogrepl.LSN) source.Position { return source.Position(formatLSN(l)) }
