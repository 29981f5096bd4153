package config

import (
	"fmt"
	"strconv"
	"strings"
)

// Rate is a parsed kafka.dlq_max_rate, "N/M": stop when more than Max of the last Window records
// were dead-lettered. The zero Rate (from "") disables the check.
type Rate struct {
	Max, Window int
}

// ParseRate parses kafka.dlq_max_rate. "" is the zero Rate.
func ParseRate(s string) (Rate, error) {
	if s == "" {
		return Rate{}, nil
	}
	a, b, ok := strings.Cut(s, "/")
	n, err1 := strconv.Atoi(strings.TrimSpace(a))
	m, err2 := strconv.Atoi(strings.TrimSpace(b))
	if !ok || err1 != nil || err2 != nil || n < 0 || m < 1 || n >= m {
		return Rate{}, fmt.Errorf("%q must be N/M with 0 <= N < M (stop when more than N of the last M records were dead-lettered)", s)
	}
	return Rate{Max: n, Window: m}, nil
}
