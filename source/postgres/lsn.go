package postgres

import (
	"fmt"
	"strings"

	"github.com/jackc/pglogrepl"

	"github.com/outboxd/outboxd/offsets"
)

// ParseLSN parses a position in PostgreSQL's LSN text form ("0/16B3748", hex digits in either
// case). The empty position is an error: callers decide what "no position" means.
func ParseLSN(p offsets.Position) (pglogrepl.LSN, error) {
	s := string(p)
	hi, lo, ok := strings.Cut(s, "/")
	if !ok || !isHex(hi) || !isHex(lo) || len(hi) > 8 || len(lo) > 8 {
		return 0, fmt.Errorf("position %q is not a PostgreSQL LSN (want the form 0/16B3748)", s)
	}
	lsn, err := pglogrepl.ParseLSN(s)
	if err != nil {
		return 0, fmt.Errorf("position %q is not a PostgreSQL LSN (want the form 0/16B3748): %w", s, err)
	}
	return lsn, nil
}

func isHex(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if _, ok := unhex(s[i]); !ok {
			return false
		}
	}
	return true
}

// CompareLSN compares two LSN positions: -1 if a is before b, 0 if equal, +1 if after. An empty
// or malformed position counts as 0/0 (before every real position); validate with ParseLSN
// where that matters.
func CompareLSN(a, b offsets.Position) int {
	la, _ := ParseLSN(a)
	lb, _ := ParseLSN(b)
	switch {
	case la < lb:
		return -1
	case la > lb:
		return 1
	}
	return 0
}

// lsnPosition is the position of an LSN.
func lsnPosition(l pglogrepl.LSN) offsets.Position { return offsets.Position(l.String()) }

// mustLSN parses a position this package produced (always valid).
func mustLSN(p offsets.Position) pglogrepl.LSN {
	l, _ := ParseLSN(p)
	return l
}
