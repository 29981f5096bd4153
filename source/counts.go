package source

import (
	"fmt"
	"strings"
)

// RowCount is "1 row", "N rows" or, for an estimate, "about N rows": the counts the adapters'
// check and offsets lines give (snapshot: initial). Pure.
func RowCount(n int64, estimate bool) string {
	s := fmt.Sprintf("%d rows", n)
	if n == 1 {
		s = "1 row"
	}
	if estimate {
		s = "about " + s
	}
	return s
}

// JoinCounts joins "N rows of T" parts as "a", "a and b", "a, b and c"; none when there is no
// part. Pure.
func JoinCounts(parts []string, none string) string {
	switch len(parts) {
	case 0:
		return none
	case 1:
		return parts[0]
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
}
