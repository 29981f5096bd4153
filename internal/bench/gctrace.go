package bench

import (
	"strconv"
	"strings"
)

// gcTrace sums up the GODEBUG=gctrace=1 lines of a Go process: per GC cycle the runtime prints
// "gc N @T s P%: … ms clock, … ms cpu, A->B->C MB, G MB goal, S MB stacks, …", where A is the
// heap when the cycle started, B when it ended, C the live (marked) heap and G the heap goal
// (the runtime's "MB" is MiB). The maxima show how much of the process's RSS the Go heap is, and
// how much of that heap is live data versus GOGC headroom.
type gcTrace struct {
	Cycles  int     // GC cycles seen
	PeakMiB float64 // largest heap at a cycle's start or end (A, B)
	LiveMiB float64 // largest live heap (C)
	GoalMiB float64 // largest heap goal (G)
	CPUms   float64 // the cycles' CPU ("ms cpu" without idle marking: STW sweep termination + assist + background marking + STW mark termination)
}

// parseGCTrace reads the gctrace lines of a log (other lines are ignored).
func parseGCTrace(log string) gcTrace {
	var t gcTrace
	for _, l := range strings.Split(log, "\n") {
		if !strings.HasPrefix(l, "gc ") || !strings.Contains(l, " MB goal") {
			continue
		}
		for _, f := range strings.Split(l, ", ") {
			switch {
			case strings.HasSuffix(f, " ms cpu"):
				t.CPUms += sumGCCPU(strings.TrimSuffix(f, " ms cpu"))
			case strings.HasSuffix(f, " MB goal"):
				if g, ok := parseMiB(strings.TrimSuffix(f, " MB goal")); ok {
					t.GoalMiB = max(t.GoalMiB, g)
				}
			case strings.HasSuffix(f, " MB") && strings.Contains(f, "->"):
				parts := strings.Split(strings.TrimSuffix(f, " MB"), "->")
				if len(parts) != 3 {
					continue
				}
				a, ok1 := parseMiB(parts[0])
				b, ok2 := parseMiB(parts[1])
				c, ok3 := parseMiB(parts[2])
				if !ok1 || !ok2 || !ok3 {
					continue
				}
				t.Cycles++
				t.PeakMiB = max(t.PeakMiB, a, b)
				t.LiveMiB = max(t.LiveMiB, c)
			}
		}
	}
	return t
}

// sumGCCPU adds up a gctrace cpu field, "A+B/C/D+E": the stop-the-world phases A and E, assist
// B and background C marking. D, marking on otherwise idle Ps, is left out: it only uses CPU
// nothing else wanted (the runtime counts it as P time; summed it can exceed the process's CPU).
func sumGCCPU(s string) float64 {
	parts := strings.FieldsFunc(s, func(r rune) bool { return r == '+' || r == '/' })
	if len(parts) != 5 {
		return 0
	}
	var sum float64
	for i, part := range parts {
		if v, ok := parseMiB(part); ok && i != 3 {
			sum += v
		}
	}
	return sum
}

func parseMiB(s string) (float64, bool) {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	return v, err == nil
}
