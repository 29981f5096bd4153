package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/outboxd/outboxd/internal/app"
	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/source"
)

// aggTypes are the aggregate types the loader writes (one topic each).
var aggTypes = []string{"order", "customer", "payment", "shipment"}

// drain runs one drain scenario on backend be: a backlog of N rows in rowsPerTx-row
// transactions and, per round, one reader (slot) for each tool, all starting at the same
// position. The tools are the backend's reference readers, outboxd in-process (app.Run; the CPU
// profile covers it) and outboxd as its own process (`outboxd run`, like a deployment, without
// the bench and the embedded broker in its heap and scheduler). The order rotates per round.
func drain(ctx context.Context, e *env, be Backend, scenario string, rowsPerTx int) ([]Result, error) {
	o := e.o
	refs := be.References()
	const (
		inProcess = "outboxd drain, in-process (acked by Kafka)"
		process   = "outboxd drain, own process (acked by Kafka)"
	)
	names := append(slices.Clone(refs), inProcess, process)
	tools := len(names)
	bin, err := e.outboxdBin(ctx)
	if err != nil {
		return nil, err
	}
	tag := e.runID + "_" + strings.TrimPrefix(scenario, "drain-")
	b, err := be.PrepareDrain(ctx, tag, o.DrainN, rowsPerTx, tools*o.Rounds)
	if err != nil {
		return nil, err
	}
	defer be.Cleanup(ctx, b)
	o.Log.Info("backlog loaded", "rows", b.Rows, "rows_per_tx", rowsPerTx, "took", b.LoadTime.Round(time.Millisecond),
		"rows/s", int(float64(b.Rows)/b.LoadTime.Seconds()))

	covers := func(p source.Position) (bool, error) { return be.Covers(b, p) }
	rates := make([][]float64, tools)     // per tool, per round
	dups := make([]int64, tools)          // records beyond the backlog, per tool
	cpus := make([][]float64, tools)      // CPU µs per event, per tool, per round (see cpuNow)
	storedLag := make([][]float64, tools) // ms from all acked to the stored position covering it
	secs := make([][]float64, tools)      // drain wall time (s), per tool, per round
	benchCPUs := make([][]float64, tools) // own process: the bench process's own CPU µs per event beside it (broker, watches)
	srvCPU := make([]serverCPUs, tools)   // the server's reader (walsender, binlog dump thread), per tool, per round
	idle := make([][]machineIdle, tools)  // the machine's idle CPU over each drain
	sr, watchServer := be.(serverReader)
	for r := range o.Rounds {
		for k := range tools {
			tool := (k + r) % tools
			i := r*tools + tool // reader
			topicPrefix := fmt.Sprintf("outboxd-bench.%s.%d.", tag, i)
			var d time.Duration
			cfgText := ""
			if tool >= len(refs) {
				cfgText = outboxdYAML(e, be.SourceYAML(b, i), topicPrefix, "")
				if pos := be.StartPosition(b, i); pos != "" {
					if err := seedOffsets(ctx, cfgText, pos); err != nil {
						return nil, err
					}
				}
			}
			// outboxd's drain ends when Kafka holds every record (all acked); the time until the
			// stored position also covers the backlog's end is checked, and reported apart: it
			// adds up to offsets.commit_interval.
			var watch *ackWatch
			var ackedAt time.Time
			done := covers
			if tool >= len(refs) {
				if watch, err = newAckWatch(e.brokers, topicsOf(topicPrefix), int64(b.Rows)); err != nil {
					return nil, err
				}
				done = func(p source.Position) (bool, error) {
					if ackedAt.IsZero() {
						ok, err := watch.complete()
						if err != nil {
							return false, err
						}
						if ok {
							ackedAt = time.Now()
						}
					}
					stored, err := covers(p)
					return stored && !ackedAt.IsZero(), err
				}
			}
			var sw *cpuWatch
			if watchServer {
				sw = sr.watchServerReader(ctx, b, i)
			}
			m0, merr := readMachineCPU()
			cpu0, self0 := cpuNow(), selfCPU()
			t0 := time.Now()
			var pr procRun
			switch names[tool] {
			case inProcess:
				var prof profiles
				if o.CPUProfile != "" {
					prof.cpu = fmt.Sprintf("%s.%s.%d.pprof", o.CPUProfile, scenario, r+1)
				}
				if o.BlockProfile != "" {
					prof.block = fmt.Sprintf("%s.%s.%d.pprof", o.BlockProfile, scenario, r+1)
				}
				if o.HeapProfile != "" {
					prof.heap = fmt.Sprintf("%s.%s.%d.pprof", o.HeapProfile, scenario, r+1)
				}
				d, err = runOutboxdInProcess(ctx, e, cfgText, done, prof)
			case process:
				pr, err = runOutboxdProc(ctx, bin, cfgText, done, procOpts{env: o.OutboxdEnv})
				if err == nil && !pr.drained {
					err = fmt.Errorf("outboxd process stopped before draining the backlog: %s: %s", pr.exit, pr.logTail)
				}
				d = pr.elapsed
			default:
				d, err = be.RunReference(ctx, b, tool, i)
			}
			if sw != nil {
				srvCPU[tool] = append(srvCPU[tool], sw.stop())
			}
			if h, ok := be.(interface{ releaseReference() }); ok {
				h.releaseReference() // a reference reader held open until its server thread was seen
			}
			var mi machineIdle
			if m1, err := readMachineCPU(); err == nil && merr == nil {
				mi.idle, mi.steal, mi.ok = idleSince(m0, m1)
			}
			idle[tool] = append(idle[tool], mi)
			if watch != nil {
				watch.Close()
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", names[tool], err)
			}
			if !ackedAt.IsZero() {
				storedLag[tool] = append(storedLag[tool], float64(t0.Add(d).Sub(ackedAt).Milliseconds()))
				d = ackedAt.Sub(t0)
			}
			cpu := cpuNow() - cpu0
			if names[tool] == process {
				// outboxd's own figure: its /proc/<pid>/stat when drained; the bench process
				// (the embedded broker, the ack watch) is reported beside it.
				benchCPUs[tool] = append(benchCPUs[tool], float64((selfCPU()-self0).Microseconds())/float64(b.Rows))
				cpu = pr.cpu
			}
			if tool >= len(refs) {
				n, err := countRecords(e.brokers, topicsOf(topicPrefix))
				if err != nil {
					return nil, fmt.Errorf("count produced records: %w", err)
				}
				if n < int64(b.Rows) {
					return nil, fmt.Errorf("%s: the backlog's end was stored but Kafka holds %d records of %d", names[tool], n, b.Rows)
				}
				if n > int64(b.Rows) {
					// At-least-once allows it, but a drain from a clean start should not repeat.
					o.Log.Warn("Kafka holds more records than the backlog (duplicates)", "tool", names[tool], "round", r+1,
						"records", n, "rows", b.Rows)
					dups[tool] += n - int64(b.Rows)
				}
				e.dropTopics(topicPrefix)
			}
			o.Log.Info("drained", "tool", names[tool], "round", r+1, "took", d.Round(time.Millisecond),
				"events/s", int(float64(b.Rows)/d.Seconds()), "cpu", cpu.Round(time.Millisecond))
			rates[tool] = append(rates[tool], float64(b.Rows)/d.Seconds())
			secs[tool] = append(secs[tool], d.Seconds())
			cpus[tool] = append(cpus[tool], float64(cpu.Microseconds())/float64(b.Rows))
		}
	}
	shape := "single-row transactions"
	if rowsPerTx > 1 {
		shape = fmt.Sprintf("%d-row transactions", rowsPerTx)
	}
	var res []Result
	for k, name := range names {
		detail := "runs: " + fmtRates(rates[k]) + "; CPU µs/event: " + fmtFloats(cpus[k], "%.1f")
		switch {
		case k == 0:
			detail = fmt.Sprintf("%s, %d events, backlog loaded at %.0f rows/s; %s", shape, b.Rows,
				float64(b.Rows)/b.LoadTime.Seconds(), detail)
		case k >= len(refs):
			cfg := "default config (snappy, max_inflight 4096, adaptive linger)"
			if len(o.KafkaExtra) > 0 {
				cfg = "default config but kafka " + strings.Join(o.KafkaExtra, "; ")
			}
			detail = cfg + ", until Kafka holds every record (all acked); " +
				"the stored position covered the last row " + fmtFloats(storedLag[k], "%.0f") + " ms later (offsets.commit_interval 100ms); " + detail
			if dups[k] > 0 {
				detail += fmt.Sprintf("; %d duplicate records in Kafka", dups[k])
			}
			if names[k] == process && len(o.OutboxdEnv) > 0 {
				detail += "; outboxd environment: " + strings.Join(o.OutboxdEnv, " ")
			}
		}
		if k < len(refs) {
			name = refs[k] + " drain"
		}
		extra := runsExtra(rates[k])
		for r, c := range cpus[k] {
			extra[fmt.Sprintf("cpu_us_per_event_run%d", r+1)] = c
			extra[fmt.Sprintf("drain_s_run%d", r+1)] = secs[k][r]
		}
		for r, c := range benchCPUs[k] {
			extra[fmt.Sprintf("bench_cpu_us_per_event_run%d", r+1)] = c
		}
		if names[k] == process {
			detail += " (outboxd's own /proc/<pid>/stat, start to drained; the bench process alone beside it, the embedded broker's work for it included: " +
				fmtFloats(benchCPUs[k], "%.1f") + ")"
		}
		if short := shortDrains(secs[k]); short != "" {
			detail += "; " + short
		}
		res = append(res, Result{Scenario: scenario, Name: name, Value: mean(rates[k]), Unit: "events/s",
			Detail: detail, Extra: extra})
	}
	for k := len(refs); k < tools; k++ {
		which := "in-process"
		if names[k] == process {
			which = "own process"
		}
		var ratios []float64
		for r := range rates[k] {
			ratios = append(ratios, rates[k][r]/rates[0][r])
		}
		detail := "per round: " + fmtFloats(ratios, "%.2f")
		if t := be.RatioTarget(rowsPerTx); t > 0 {
			detail += fmt.Sprintf(" (target ≥ %.2g)", t)
		} else {
			detail += " (no target for this shape)"
		}
		for j := 1; j < len(refs); j++ {
			detail += fmt.Sprintf("; vs %s: %.2f", refs[j], mean(rates[k])/mean(rates[j]))
		}
		detail += fmt.Sprintf("; CPU per event %.1f× %s's", mean(cpus[k])/mean(cpus[0]), refs[0])
		res = append(res, Result{Scenario: scenario, Name: fmt.Sprintf("ratio outboxd (%s) / %s", which, refs[0]),
			Value: mean(rates[k]) / mean(rates[0]), Unit: "ratio", Detail: detail})
	}
	if watchServer {
		res = append(res, serverCPUResults(scenario, sr, labels(names, len(refs)), b.Rows, rowsPerTx, secs, cpus, srvCPU, idle)...)
	}
	return res, nil
}

func topicsOf(prefix string) []string {
	var t []string
	for _, a := range aggTypes {
		t = append(t, prefix+a)
	}
	return t
}

// outboxdYAML is a bench config: the given source section, topics under topicPrefix, a fresh
// offsets file in a new temp dir, http on listen ("" disables).
func outboxdYAML(e *env, sourceYAML, topicPrefix, listen string) string {
	dir, err := os.MkdirTemp(e.o.OffsetsDir, "outboxd-bench-")
	if err != nil {
		panic(err)
	}
	return fmt.Sprintf(`shutdown_timeout: 30s
source:
%soutbox:
  topic: %s${routedByValue}
  headers:
    type: eventType
kafka:
  brokers: [%s]
  dlq_topic: %sdlq
%soffsets:
  path: %s
http:
  listen: %q
log:
  level: warn
`, sourceYAML, topicPrefix, strings.Join(e.brokers, ", "), topicPrefix, kafkaExtra(e.o.KafkaExtra), filepath.Join(dir, "offsets.json"), listen)
}

// seedOffsets stores pos in the offsets store of the config text (before outboxd starts), as
// `outboxd offsets set` would.
func seedOffsets(ctx context.Context, cfgText string, pos source.Position) error {
	cfg, err := config.Parse([]byte(cfgText), os.LookupEnv)
	if err != nil {
		return fmt.Errorf("bench config: %w\n%s", err, cfgText)
	}
	store, err := app.Store(cfg)
	if err != nil {
		return err
	}
	if err := store.Save(ctx, pos); err != nil {
		return fmt.Errorf("seed the offsets store with %s: %w", pos, err)
	}
	return nil
}

func kafkaExtra(lines []string) string {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString("  " + strings.TrimSpace(l) + "\n")
	}
	return b.String()
}

// profiles are the profile files of one in-process run ("" = none).
type profiles struct{ cpu, block, heap string }

// runOutboxdInProcess runs app.Run with the config text until the stored position satisfies
// done, and returns the time from the call of app.Run to that moment. It then stops outboxd
// (graceful) and waits for it. The profiles of prof cover the run up to that moment.
func runOutboxdInProcess(ctx context.Context, e *env, cfgText string, done func(source.Position) (bool, error), prof profiles) (time.Duration, error) {
	cfg, err := config.Parse([]byte(cfgText), os.LookupEnv)
	if err != nil {
		return 0, fmt.Errorf("bench config: %w\n%s", err, cfgText)
	}
	defer os.RemoveAll(filepath.Dir(cfg.Offsets.Path))
	store, err := app.Store(cfg)
	if err != nil {
		return 0, err
	}
	stopProfiles := func() {}
	if prof.cpu != "" {
		f, err := os.Create(prof.cpu)
		if err != nil {
			return 0, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return 0, err
		}
		stopProfiles = pprof.StopCPUProfile
	}
	if prof.block != "" {
		runtime.SetBlockProfileRate(int(10 * time.Microsecond))
		stopCPU := stopProfiles
		stopProfiles = func() {
			stopCPU()
			if f, err := os.Create(prof.block); err == nil {
				pprof.Lookup("block").WriteTo(f, 0)
				f.Close()
			}
			runtime.SetBlockProfileRate(0)
		}
	}
	if prof.heap != "" {
		// A heap snapshot mid-drain (the in-flight set is full then), not at the end.
		runtime.MemProfileRate = 4096
		t := time.AfterFunc(time.Second, func() {
			if f, err := os.Create(prof.heap); err == nil {
				pprof.Lookup("heap").WriteTo(f, 0)
				f.Close()
			}
		})
		defer t.Stop()
	}
	var once sync.Once
	defer once.Do(stopProfiles)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	errCh := make(chan error, 1)
	t0 := time.Now()
	go func() { errCh <- app.Run(runCtx, cfg, e.o.OutboxdLog) }()
	wait := func() error {
		stop()
		select {
		case err := <-errCh:
			return err
		case <-time.After(60 * time.Second):
			return errors.New("outboxd did not stop within 60s of cancellation")
		}
	}
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Minute)
	for {
		select {
		case err := <-errCh:
			return 0, fmt.Errorf("outboxd stopped before draining the backlog: %v", err)
		case <-deadline:
			wait()
			return 0, errors.New("outboxd did not drain the backlog within 10 minutes")
		case <-ctx.Done():
			wait()
			return 0, ctx.Err()
		case <-tick.C:
		}
		pos, err := store.Load(ctx)
		if err != nil {
			continue // a concurrent rename; try again
		}
		ok, err := done(pos)
		if err != nil {
			wait()
			return 0, err
		}
		if ok {
			d := time.Since(t0)
			once.Do(stopProfiles)
			if err := wait(); err != nil {
				return d, fmt.Errorf("outboxd stop: %w", err)
			}
			return d, nil
		}
	}
}

// cpuNow is the CPU time (user + system) used so far by this process and its waited-for
// children. Per drain run it covers the tool (the bare reader, outboxd in-process, or the
// outboxd / pg_recvlogical child once waited for) plus the bench's own goroutines, the embedded
// broker included: unlike the wall time it does not count other work on the machine.
func cpuNow() time.Duration {
	var self, children syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
	tv := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return tv(self.Utime) + tv(self.Stime) + tv(children.Utime) + tv(children.Stime)
}

// selfCPU is the CPU time (user + system) of this process alone: the bench, its embedded broker
// and in-process tools, without waited-for children.
func selfCPU() time.Duration {
	var self syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	return time.Duration(self.Utime.Nano() + self.Stime.Nano())
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func fmtRates(xs []float64) string { return fmtFloats(xs, "%.0f") }

func fmtFloats(xs []float64, f string) string {
	var s []string
	for _, x := range xs {
		s = append(s, fmt.Sprintf(f, x))
	}
	return strings.Join(s, ", ")
}

func runsExtra(xs []float64) map[string]float64 {
	m := map[string]float64{}
	for i, x := range xs {
		m[fmt.Sprintf("run%d", i+1)] = x
	}
	return m
}
