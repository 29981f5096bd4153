package bench

import (
	"fmt"
	"slices"
	"strings"
)

// The drain scenarios' CPU lines (issue 18): per tool, how busy the server's reader (walsender,
// binlog dump thread) was over the drain; per outboxd run, outboxd's CPU per event over the
// server reader's, and on MariaDB over the bare go-mysql reader's.

// minDrainSeconds is the drain length below which start-up (connecting, the first batches, the
// process's start) weighs in the rate.
const minDrainSeconds = 5

// drainLabel is a drain's tool in the CPU lines.
type drainLabel struct {
	text    string // "pg_recvlogical drain", "outboxd own process drain"
	outboxd bool
	own     bool // outboxd as its own process
}

// labels names the drain's tools: the references, then outboxd in-process and as its own process.
func labels(names []string, refs int) []drainLabel {
	var l []drainLabel
	for k, n := range names {
		switch {
		case k < refs:
			l = append(l, drainLabel{text: n + " drain"})
		case strings.Contains(n, "own process"):
			l = append(l, drainLabel{text: "outboxd own process drain", outboxd: true, own: true})
		default:
			l = append(l, drainLabel{text: "outboxd in-process drain", outboxd: true})
		}
	}
	return l
}

// shortDrains notes drains under minDrainSeconds ("" if none).
func shortDrains(secs []float64) string {
	if len(secs) == 0 || slices.Min(secs) >= minDrainSeconds {
		return ""
	}
	return fmt.Sprintf("drains of %s s, under %d s: start-up weighs in the rate (raise -drain-n)", fmtFloats(secs, "%.1f"), minDrainSeconds)
}

// serverCPUResults builds the CPU lines of a drain scenario: rows per drain, secs[k][r] and
// cpus[k][r] (CPU µs per event) of tool k in round r, srv[k][r] its server reader's figures,
// idle[k][r] the machine's idle CPU meanwhile.
// machineIdle is the share of the machine's CPU time that was idle (iowait included) and stolen
// by the hypervisor over a drain (/proc/stat): a reader busy well under 100% while the machine
// had no idle CPU was starved, not waiting for its client.
type machineIdle struct {
	idle, steal float64
	ok          bool
}

func serverCPUResults(scenario string, sr serverReader, lbl []drainLabel, rows, rowsPerTx int, secs, cpus [][]float64, srv []serverCPUs, idle [][]machineIdle) []Result {
	reader := sr.serverReaderName()
	key := strings.ReplaceAll(reader, " ", "_")
	var res []Result
	perEvent := make([][]float64, len(lbl)) // server reader's CPU µs per event, NaN-free: measured rounds only
	busy := make([][]float64, len(lbl))
	measured := make([][]int, len(lbl))
	for k, l := range lbl {
		rounds, firstErr := srv[k].measured()
		measured[k] = rounds
		x := Result{Scenario: scenario, Name: fmt.Sprintf("%s busy, %s", reader, l.text), Unit: "fraction", Extra: map[string]float64{}}
		if len(rounds) == 0 {
			x.Error = fmt.Sprintf("%s CPU not measured: %v", reader, firstErr)
			res = append(res, x)
			continue
		}
		var cpuS []float64
		for _, r := range rounds {
			s := srv[k][r]
			c := s.cpu.Seconds()
			cpuS = append(cpuS, c)
			busy[k] = append(busy[k], c/secs[k][r])
			perEvent[k] = append(perEvent[k], float64(s.cpu.Microseconds())/float64(rows))
			x.Extra[fmt.Sprintf("cpu_s_run%d", r+1)] = c
			x.Extra[fmt.Sprintf("busy_run%d", r+1)] = c / secs[k][r]
			x.Extra[fmt.Sprintf("cpu_us_per_event_run%d", r+1)] = float64(s.cpu.Microseconds()) / float64(rows)
			x.Extra[fmt.Sprintf("drain_s_run%d", r+1)] = secs[k][r]
			x.Extra[fmt.Sprintf("threads_run%d", r+1)] = float64(len(s.ids))
		}
		x.Value = mean(busy[k])
		var pct []string
		for _, b := range busy[k] {
			pct = append(pct, fmt.Sprintf("%.0f%%", 100*b))
		}
		x.Detail = fmt.Sprintf("%s over the drain's wall time; per round: CPU %s s, drain %s s, busy %s; %s µs/event",
			sr.serverReaderHow(), fmtFloats(cpuS, "%.2f"), fmtFloats(pick(secs[k], rounds), "%.2f"), strings.Join(pct, ", "),
			fmtFloats(perEvent[k], "%.2f"))
		var idles []string
		for r, m := range idle[k] {
			if m.ok {
				x.Extra[fmt.Sprintf("machine_idle_run%d", r+1)] = m.idle
				x.Extra[fmt.Sprintf("machine_steal_run%d", r+1)] = m.steal
				idles = append(idles, fmt.Sprintf("%.0f%%", 100*m.idle))
			}
		}
		if len(idles) > 0 {
			x.Detail += "; machine CPU idle meanwhile (/proc/stat): " + strings.Join(idles, ", ")
		}
		if rc := srv[k].reconnects(reader); rc != "" {
			x.Detail += "; " + rc
		}
		if firstErr != nil {
			x.Detail += fmt.Sprintf("; not measured in %v", firstErr)
		}
		res = append(res, x)
	}
	for k, l := range lbl {
		if !l.outboxd {
			continue
		}
		which, name := "in-process (the bench process: outboxd, the embedded broker, the ack watch)", "ratio cpu outboxd (in-process) / "
		if l.own {
			which, name = "own process (its /proc/<pid>/stat, start to drained)", "ratio cpu outboxd / "
		}
		x := Result{Scenario: scenario, Name: name + reader, Unit: "ratio"}
		mine := pick(cpus[k], measured[k])
		switch {
		case len(measured[k]) == 0:
			x.Error = fmt.Sprintf("no %s CPU measured", reader)
		case mean(perEvent[k]) <= 0:
			// /proc counts in clock ticks (10 ms): a tiny drain may show none.
			x.Error = fmt.Sprintf("the %s's CPU over the drains was under one clock tick (%v): raise -drain-n", reader, ticksToDuration(1))
		default:
			x.Value, x.Extra = cpuRatio(mine, perEvent[k], measured[k])
			x.Extra["outboxd_cpu_us_per_event"], x.Extra[key+"_cpu_us_per_event"] = mean(mine), mean(perEvent[k])
			x.Extra[key+"_busy"] = mean(busy[k])
			x.Detail = fmt.Sprintf("outboxd %s %.2f µs/event, the %s %.2f µs/event during the same drains (busy %.0f%%); per round: %s",
				which, mean(mine), reader, mean(perEvent[k]), 100*mean(busy[k]), fmtRuns(x.Extra, len(cpus[k])))
			if t := sr.cpuRatioTarget(rowsPerTx); t != "" {
				x.Detail += "; " + t
			}
		}
		res = append(res, x)
		ref := sr.cpuRefName()
		if ref == "" {
			continue
		}
		// Against the reference reader (the drain's first tool), every round.
		y := Result{Scenario: scenario, Name: name + ref, Unit: "ratio"}
		all := make([]int, len(cpus[k]))
		for r := range all {
			all[r] = r
		}
		if mean(cpus[0]) <= 0 {
			y.Error = fmt.Sprintf("no %s CPU measured", ref)
		} else {
			y.Value, y.Extra = cpuRatio(cpus[k], cpus[0], all)
			y.Extra["outboxd_cpu_us_per_event"], y.Extra["reference_cpu_us_per_event"] = mean(cpus[k]), mean(cpus[0])
			y.Detail = fmt.Sprintf("outboxd %s %.2f µs/event, the %s %.2f µs/event (the bench process while it drained, the idle embedded broker included); per round: %s",
				which, mean(cpus[k]), ref, mean(cpus[0]), fmtRuns(y.Extra, len(cpus[k])))
		}
		res = append(res, y)
	}
	return res
}

// cpuRatio is mean(num) / mean(den) with the per-round ratios as extras run<N> (rounds[j] is
// the round of num[j], den[j]; a round whose den is 0 has none). mean(den) must be > 0.
func cpuRatio(num, den []float64, rounds []int) (float64, map[string]float64) {
	extra := map[string]float64{}
	for j, r := range rounds {
		if den[j] > 0 {
			extra[fmt.Sprintf("run%d", r+1)] = num[j] / den[j]
		}
	}
	return mean(num) / mean(den), extra
}

// fmtRuns formats the run<N> extras of rounds 1..rounds in order.
func fmtRuns(extra map[string]float64, rounds int) string {
	var xs []string
	for r := 1; r <= rounds; r++ {
		if v, ok := extra[fmt.Sprintf("run%d", r)]; ok {
			xs = append(xs, fmt.Sprintf("%.2f", v))
		}
	}
	return strings.Join(xs, ", ")
}

// pick returns xs at the given indexes.
func pick(xs []float64, idx []int) []float64 {
	out := make([]float64, 0, len(idx))
	for _, i := range idx {
		out = append(out, xs[i])
	}
	return out
}
