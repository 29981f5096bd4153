package bench

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
)

// cmpResults turns the measurements into the report's lines.
func cmpResults(scenario, dbzDesc, kafkaDesc string, b *Backlog, m cmpData, o *Options) []Result {
	runs, lats, dbz := m.runs, m.lats, m.dbz
	var res []Result
	add := func(name string, v float64, unit, detail string, extra map[string]float64) {
		if unit == "s" {
			v = math.Round(v*1000) / 1000
		}
		res = append(res, Result{Scenario: scenario, Name: name, Value: finite(v), Unit: unit, Detail: detail, Extra: extra})
	}
	order := fmt.Sprintf("%d rounds, round 1 outboxd first, then alternating; the broker was warmed up with %d records before round 1", o.Rounds, brokerWarmup)
	desc := [2]string{
		"outboxd own process, default config (at_least_once, acks=all idempotent, snappy, adaptive linger, max_inflight 4096)",
		dbzDesc + ", Kafka Connect " + "standalone, one task",
	}
	type agg struct{ rate, steady, cpu, steadyCPU, rss []float64 }
	var a [2]agg
	for t := range 2 {
		for _, d := range runs[t] {
			a[t].rate = append(a[t].rate, d.rate(b.Rows))
			a[t].steady = append(a[t].steady, finite(d.steadyRate()))
			a[t].cpu = append(a[t].cpu, d.cpuPer100k(b.Rows))
			a[t].steadyCPU = append(a[t].steadyCPU, finite(d.steadyCPUPer100k()))
			a[t].rss = append(a[t].rss, d.hwmKiB/1024)
		}
	}
	for t := range 2 {
		detail := fmt.Sprintf("%s; %d single-row transactions, from the tool's start (exec) until Kafka holds every record, nothing subtracted (Kafka: %s); runs: %s; %s",
			desc[t], b.Rows, kafkaDesc, fmtRates(a[t].rate), order)
		if t == toolDebezium {
			var st []float64
			for _, d := range runs[t] {
				st = append(st, d.startup.Seconds())
			}
			detail += "; JVM exec → Debezium streaming: " + fmtFloats(st, "%.1f") + " s"
		}
		add(toolNames[t]+" drain (start → Kafka holds every record)", mean(a[t].rate), "events/s", detail, runsExtra(a[t].rate))
	}
	for t := range 2 {
		add(toolNames[t]+" drain, steady state (first → last record, LogAppendTime)", mean(a[t].steady), "events/s",
			"(records-1) / (last - first LogAppendTime): the drain without the tool's start-up; runs: "+fmtRates(a[t].steady), runsExtra(a[t].steady))
	}
	for t := range 2 {
		ex := runsExtra(a[t].cpu)
		for i, v := range a[t].steadyCPU {
			ex[fmt.Sprintf("steady_run%d", i+1)] = v
		}
		detail := fmt.Sprintf("utime+stime of the process and its children (/proc/<pid>/stat; JVM threads count in the process), start-up included; runs: %s; steady state only (first record seen → end, per record appended then): %s s",
			fmtFloats(a[t].cpu, "%.2f"), fmtFloats(a[t].steadyCPU, "%.2f"))
		detail += probesDetail(runs[t], b.Rows, ex)
		add(toolNames[t]+" CPU s per 100k events (process tree, start → all in Kafka)", mean(a[t].cpu), "s", detail, ex)
	}
	for t := range 2 {
		add(toolNames[t]+" peak RSS (VmHWM, process tree)", slices.Max(a[t].rss), "MiB",
			"highest of the runs' VmHWM (summed over the tree) during the drain; runs: "+fmtFloats(a[t].rss, "%.1f")+" MiB", runsExtra(a[t].rss))
	}
	for t := range 2 {
		l := lats[t]
		warm := latencyRun{lat: l.warm}
		detail := fmt.Sprintf("p50 %.1f ms, p95 %.1f ms, p99 %.1f ms, max %.1f ms over %d records committed in %s at %.0f/s (target %d/s) by %d writers, after a %s warm-up at the same rate (its p50 %.1f ms, p99 %.1f ms, not counted); commit time = when the writer saw COMMIT return, Kafka time = broker LogAppendTime (1 ms resolution)",
			l.quantile(0.5), l.quantile(0.95), l.quantile(0.99), l.quantile(1), len(l.lat), o.LatencyDuration, l.rate, o.LatencyRate,
			latencyWriters, latencyWarmup, warm.quantile(0.5), warm.quantile(0.99))
		detail += fmt.Sprintf("; Kafka held every row %.0f ms after the last commit", ms(l.catchUp))
		if l.missing > 0 {
			detail += fmt.Sprintf("; %d rows without a record", l.missing)
		}
		if l.negative > 0 {
			detail += fmt.Sprintf("; %d records stamped in the millisecond before the writer's clock read", l.negative)
		}
		add(fmt.Sprintf("%s commit → Kafka p99 at %d inserts/s", toolNames[t], o.LatencyRate), l.quantile(0.99), "ms", detail,
			map[string]float64{"p50_ms": finite(l.quantile(0.5)), "p95_ms": finite(l.quantile(0.95)), "p99_ms": finite(l.quantile(0.99)),
				"max_ms": finite(l.quantile(1)), "rate": l.rate,
				"warmup_p50_ms": finite(warm.quantile(0.5)), "warmup_p99_ms": finite(warm.quantile(0.99))})
	}
	if m.ceilingName != "" {
		add(m.ceilingName+" drain of the same backlog (no Kafka: the server's ceiling)", m.ceiling, "events/s",
			fmt.Sprintf("one run after the rounds, %s; outboxd reached %.0f%% of it, Debezium %.0f%% (steady state: %.0f%%, %.0f%%)",
				"the log read from the backlog's start as fast as the server sends it",
				100*mean(a[0].rate)/m.ceiling, 100*mean(a[1].rate)/m.ceiling, 100*mean(a[0].steady)/m.ceiling, 100*mean(a[1].steady)/m.ceiling), nil)
	}
	if m.profile != "" {
		add("outboxd in-process drain (CPU profile)", m.profiled, "events/s", "go tool pprof "+m.profile+" (one extra drain of the same backlog, outboxd in the bench process)", nil)
	}
	type rdef struct {
		name, goal  string
		num, den    float64
		goalAtLeast float64
	}
	var perRound, steadyRatios []float64
	for r := range min(len(a[0].rate), len(a[1].rate)) {
		v, _ := ratio(a[0].rate[r], a[1].rate[r])
		perRound = append(perRound, v)
		s, _ := ratio(a[0].steady[r], a[1].steady[r])
		steadyRatios = append(steadyRatios, s)
	}
	steadyCPU, _ := ratio(mean(a[1].steadyCPU), mean(a[0].steadyCPU))
	for _, d := range []rdef{
		{"ratio drain outboxd / debezium", fmt.Sprintf("per round: %s; steady state: %s", fmtFloats(perRound, "%.2f"), fmtFloats(steadyRatios, "%.2f")),
			mean(a[0].rate), mean(a[1].rate), 3},
		{"ratio cpu debezium / outboxd", fmt.Sprintf("CPU per event, start-up included; steady state only: %.2f", steadyCPU),
			mean(a[1].cpu), mean(a[0].cpu), 3},
		{"ratio rss debezium / outboxd", "peak RSS", slices.Max(a[1].rss), slices.Max(a[0].rss), 5},
		{"ratio p99 debezium / outboxd", fmt.Sprintf("commit → Kafka at %d/s; p50: %.1f / %.1f ms", o.LatencyRate, lats[1].quantile(0.5), lats[0].quantile(0.5)),
			lats[1].quantile(0.99), lats[0].quantile(0.99), 5},
	} {
		v, ok := ratio(d.num, d.den)
		x := Result{Scenario: scenario, Name: d.name, Value: v, Unit: "ratio",
			Detail: fmt.Sprintf("%s (goal ≥ %g: %s)", d.goal, d.goalAtLeast, map[bool]string{true: "met", false: "NOT met"}[v >= d.goalAtLeast])}
		if !ok {
			x.Error = fmt.Sprintf("no ratio: %g / %g", d.num, d.den)
		}
		res = append(res, x)
	}
	text, cfg := describeDbz(dbz)
	res = append(res, Result{Scenario: scenario, Name: "Debezium configuration", Detail: text, Config: cfg})
	return res
}

// probesDetail describes the other processes' CPU during a tool's drains (per 100k events) and
// adds them to ex.
func probesDetail(runs []drainRun, rows int, ex map[string]float64) string {
	names := map[string]bool{}
	for _, d := range runs {
		for n := range d.probes {
			names[n] = true
		}
	}
	var out []string
	for _, n := range slices.Sorted(maps.Keys(names)) {
		var v []float64
		for _, d := range runs {
			v = append(v, d.probes[n].Seconds()*100000/float64(rows))
		}
		key := strings.ReplaceAll(strings.ToLower(n), " ", "_") + "_cpu_s_per_100k"
		ex[key] = mean(v)
		out = append(out, fmt.Sprintf("%s %s s", n, fmtFloats(v, "%.2f")))
	}
	if len(out) == 0 {
		return ""
	}
	return "; meanwhile, CPU s per 100k events of " + strings.Join(out, ", of ")
}
