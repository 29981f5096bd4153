package app

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// write prints the summary: one line of totals, then one per topic (most rows first).
//
//	republished 1000 rows of public.outbox (1000 selected): 998 delivered, 2 dead-lettered to outboxd.dlq (missing_column 2; see outboxd dlq tail)
//	  outbox.event.order     600 rows
//
// A dry run says what would be produced, with each topic's distinct keys.
func (s *RepublishSummary) write(w io.Writer) {
	tables := strings.Join(s.Tables, ", ")
	switch {
	case s.Selected == 0 && s.Read == 0:
		fmt.Fprintf(w, "nothing to republish: no row of %s is selected\n", tables)
		return
	case s.Failed && s.DryRun:
		fmt.Fprintf(w, "dry run stopped: %d rows of %s read (%d selected), nothing produced\n", s.Read, tables, s.Selected)
	case s.Failed:
		fmt.Fprintf(w, "republish stopped: %d rows of %s read (%d selected): %d delivered, %d dead-lettered to %s%s\n",
			s.Read, tables, s.Selected, s.Delivered, s.DeadLettered, s.DLQTopic, s.reasons("see outboxd dlq tail"))
	case s.DryRun:
		fmt.Fprintf(w, "dry run: %d rows of %s (%d selected), nothing produced: %d would be delivered, %d dead-lettered%s\n",
			s.Read, tables, s.Selected, s.Delivered, s.DeadLettered, s.reasons(""))
	default:
		fmt.Fprintf(w, "republished %d rows of %s (%d selected): %d delivered, %d dead-lettered to %s%s\n",
			s.Read, tables, s.Selected, s.Delivered, s.DeadLettered, s.DLQTopic, s.reasons("see outboxd dlq tail"))
	}
	names := slices.Collect(maps.Keys(s.Topics))
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Or(cmp.Compare(s.Topics[b].Rows, s.Topics[a].Rows), strings.Compare(a, b))
	})
	width := 0
	for _, n := range names {
		width = max(width, len(n))
	}
	for _, n := range names {
		tc := s.Topics[n]
		if s.DryRun {
			fmt.Fprintf(w, "  %-*s %8d rows %8d keys\n", width, n, tc.Rows, len(tc.keys))
		} else {
			fmt.Fprintf(w, "  %-*s %8d rows\n", width, n, tc.Rows)
		}
	}
}

// reasons is " (missing_column 1, record_too_large 2; hint)" or "" without dead letters.
func (s *RepublishSummary) reasons(hint string) string {
	if len(s.Reasons) == 0 {
		return ""
	}
	var parts []string
	for _, r := range slices.Sorted(maps.Keys(s.Reasons)) {
		parts = append(parts, fmt.Sprintf("%s %d", r, s.Reasons[r]))
	}
	if hint != "" {
		return " (" + strings.Join(parts, ", ") + "; " + hint + ")"
	}
	return " (" + strings.Join(parts, ", ") + ")"
}
