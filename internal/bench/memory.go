package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/outboxd/outboxd/internal/app"
	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/source"
)

// memoryPG runs outboxd as its own process (`outboxd run -c FILE`, with Options.OutboxdEnv in
// its environment) and reports its RSS at idle after start-up (memoryIdle), then its peak RSS
// (VmHWM, and the highest VmRSS sampled every 2 ms) while it drains a backlog of MemoryRows rows
// in single-row transactions, the same in 1000-row transactions, and BigPayloads rows with 10 MB
// payloads (one per transaction). Each drain also reports its CPU per event and, from
// GODEBUG=gctrace=1, the Go heap's largest live size and the number of GC cycles.
func memoryPG(ctx context.Context, e *env) ([]Result, error) {
	o := e.o
	const scenario = "memory-pg"
	if err := e.pg.ensureSchema(ctx); err != nil {
		return nil, err
	}
	bin, err := e.outboxdBin(ctx)
	if err != nil {
		return nil, err
	}

	var res []Result
	idle, err := memoryIdle(ctx, e, bin)
	if err != nil {
		return nil, err
	}
	res = append(res, idle)
	type part struct {
		name           string
		rows, per, big int
	}
	parts := []part{
		{fmt.Sprintf("%d-row backlog (single-row transactions)", o.MemoryRows), o.MemoryRows, 1, 0},
		{fmt.Sprintf("%d-row backlog (1000-row transactions)", o.MemoryRows), o.MemoryRows, 1000, 0},
		{fmt.Sprintf("%d rows with 10 MB payloads", o.BigPayloads), o.BigPayloads, 1, 10 << 20},
	}
	for pi, p := range parts {
		tag := fmt.Sprintf("%s_mem%d", e.runID, pi)
		slot := slotName(tag, 0)
		if err := pgExec(ctx, e.pgDSN, fmt.Sprintf(`SELECT pg_create_logical_replication_slot('%s', 'pgoutput')`, slot)); err != nil {
			return res, err
		}
		t0 := time.Now()
		beforeLast, _, err := pgLoad(ctx, e.pgDSN, 1, p.rows, p.per, p.big)
		if err != nil {
			pgDropSlots(ctx, e.pgDSN, slot)
			return res, err
		}
		o.Log.Info("memory backlog loaded", "part", p.name, "took", time.Since(t0).Round(time.Millisecond))
		topicPrefix := "outboxd-bench." + tag + "."
		cfg := outboxdYAML(e, pgSourceYAML(e.pgDSN, slot), topicPrefix, "")
		r, err := runOutboxdProc(ctx, bin, cfg, func(p source.Position) (bool, error) { return lsnAfter(p, beforeLast) },
			procOpts{gctrace: true, env: o.OutboxdEnv})
		pgDropSlots(ctx, e.pgDSN, slot)
		pgTruncate(ctx, e.pgDSN)
		if err != nil {
			return res, err
		}
		x := Result{Scenario: scenario, Name: "outboxd peak RSS, " + p.name, Value: r.hwmKiB / 1024, Unit: "MiB",
			Extra: map[string]float64{"vmhwm_kib": r.hwmKiB, "max_sampled_rss_kib": r.maxRSSKiB, "max_rss_anon_kib": r.maxAnonKiB,
				"gc_cycles": float64(r.gc.Cycles), "gc_live_mib": r.gc.LiveMiB, "gc_peak_mib": r.gc.PeakMiB, "gc_goal_mib": r.gc.GoalMiB,
				"gc_cpu_s": r.gc.CPUms / 1000}}
		if r.drained {
			cpuPerEvent := float64(r.cpu.Microseconds()) / float64(p.rows)
			x.Extra["cpu_s"], x.Extra["cpu_us_per_event"] = r.cpu.Seconds(), cpuPerEvent
			x.Extra["events_per_s"] = float64(p.rows) / r.elapsed.Seconds()
			x.Detail = fmt.Sprintf("VmHWM; drained in %s (%.0f events/s, separate process; %.2f µs CPU per event from start to drained); "+
				"max sampled VmRSS %.1f MiB, of it anonymous (heap, stacks) %.1f MiB; Go heap (gctrace): live ≤ %.1f MiB, peak %.1f MiB, %d GC cycles using %.2f s CPU (%.2f µs per event)",
				r.elapsed.Round(time.Millisecond), float64(p.rows)/r.elapsed.Seconds(), cpuPerEvent, r.maxRSSKiB/1024, r.maxAnonKiB/1024,
				r.gc.LiveMiB, r.gc.PeakMiB, r.gc.Cycles, r.gc.CPUms/1000, r.gc.CPUms*1000/float64(p.rows))
			if p.big == 0 {
				x.Detail += " (target ≤ 48 MiB)"
			}
			if len(o.OutboxdEnv) > 0 {
				x.Detail += fmt.Sprintf("; environment %s", strings.Join(o.OutboxdEnv, " "))
			}
		} else {
			x.Detail = fmt.Sprintf("max sampled VmRSS %.1f MiB", r.maxRSSKiB/1024)
			x.Error = fmt.Sprintf("outboxd did not deliver the backlog: %s; log: %s", r.exit, r.logTail)
		}
		if p.big > 0 {
			n, _ := countRecords(e.brokers, []string{topicPrefix + "big"})
			dl, _ := countRecords(e.brokers, []string{topicPrefix + "dlq"})
			x.Detail += fmt.Sprintf("; records in the topic: %d, in the DLQ: %d", n, dl)
		}
		res = append(res, x)
		e.dropTopics(topicPrefix)
	}
	return res, nil
}

// outboxdBinary returns the outboxd binary to run: bin, or a fresh build of ./cmd/outboxd made
// as the Dockerfile makes the shipped one (CGO_ENABLED=0, -trimpath, -ldflags "-s -w"): a cgo
// build maps libc and ld.so as well, about 1.5 MiB more RSS.
func outboxdBinary(ctx context.Context, bin string) (string, func(), error) {
	if bin != "" {
		return bin, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "outboxd-bench-bin-")
	if err != nil {
		return "", nil, err
	}
	out := filepath.Join(dir, "outboxd")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, "github.com/outboxd/outboxd/cmd/outboxd")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("go build ./cmd/outboxd (run the bench from the repository, or pass -outboxd BINARY): %w\n%s", err, b)
	}
	return out, func() { os.RemoveAll(dir) }, nil
}

type procRun struct {
	drained           bool
	elapsed           time.Duration
	hwmKiB, maxRSSKiB float64
	maxAnonKiB        float64 // highest RssAnon sampled (heap, stacks: VmRSS without the binary's file pages)
	exit, logTail     string
	overCap           bool    // killed by the bench: VmRSS passed procOpts.rssCapKiB
	gc                gcTrace // GODEBUG=gctrace=1 lines of the run (procOpts.gctrace)
	// cpu is the process's own CPU time (/proc/<pid>/stat utime+stime) from its start to the
	// moment done said drained, before it was stopped (0 if not drained).
	cpu time.Duration
}

// procOpts are the knobs of runOutboxdProc beyond runOutboxdProcess's defaults.
type procOpts struct {
	poll      time.Duration // between loads of the stored position (default 2ms; the Kafka store 250ms)
	timeout   time.Duration // give up after this long (default 10 minutes)
	rssCapKiB float64       // > 0: SIGKILL the process once its VmRSS passes this (protects a shared machine)
	gctrace   bool          // run it with GODEBUG=gctrace=1 and keep the Go heap figures of its GC cycles
	env       []string      // extra KEY=VALUE environment (e.g. GOMEMLIMIT=48MiB)
	sample    time.Duration // between memory samples (default 2ms; the latency run samples rarely so as not to disturb it)
}

// runOutboxdProcess starts `bin run -c <cfg>`, samples its memory until the stored position
// satisfies done or the process exits, then reads VmHWM, stops it with SIGTERM and waits.
func runOutboxdProcess(ctx context.Context, bin, cfgText string, done func(source.Position) (bool, error)) (procRun, error) {
	return runOutboxdProc(ctx, bin, cfgText, done, procOpts{})
}

// runOutboxdProc is runOutboxdProcess with options. The stored position is read from the
// config's offsets store (file or kafka: app.Store) by a goroutine of its own, so that a slow
// load (the Kafka store waits for an open transaction) does not pause the memory sampling. The
// child dies with the bench (Pdeathsig) and is always stopped before return.
func runOutboxdProc(ctx context.Context, bin, cfgText string, done func(source.Position) (bool, error), po procOpts) (r procRun, _ error) {
	cfg, cfgPath, cleanup, err := writeOutboxdConfig(cfgText)
	if err != nil {
		return r, err
	}
	defer cleanup()
	store, err := app.Store(cfg)
	if err != nil {
		return r, err
	}
	if po.poll <= 0 {
		po.poll = 2 * time.Millisecond
		if cfg.Offsets.Store == "kafka" {
			po.poll = 250 * time.Millisecond
		}
	}
	if po.timeout <= 0 {
		po.timeout = 10 * time.Minute
	}
	var logBuf syncBuffer
	env := po.env
	if po.gctrace {
		env = append(slices.Clone(env), "GODEBUG=gctrace=1")
	}
	cmd := outboxdCommand(bin, cfgPath, env, &logBuf)
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return r, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	pid := cmd.Process.Pid
	sample := func() {
		if rss, hwm, ok := procMem(pid); ok {
			r.maxRSSKiB, r.hwmKiB = max(r.maxRSSKiB, rss), max(r.hwmKiB, hwm)
		}
		r.maxAnonKiB = max(r.maxAnonKiB, procStatusKiB(pid, "RssAnon"))
	}
	finish := func() {
		if po.gctrace {
			r.gc = parseGCTrace(logBuf.String())
		}
	}
	defer finish() // r is the named result: the figures reach the caller
	stop := func() {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		select {
		case err := <-exited:
			r.exit = exitString(err)
		case <-time.After(45 * time.Second):
			_ = syscall.Kill(pid, syscall.SIGKILL)
			<-exited
			r.exit = "killed after SIGTERM timeout"
		}
	}

	// The done checker: loads the stored position every po.poll until done says so.
	checkCtx, cancelCheck := context.WithCancel(ctx)
	defer cancelCheck()
	doneCh := make(chan error, 1) // nil: drained
	go func() {
		for {
			pos, err := store.Load(checkCtx)
			if err == nil {
				ok, derr := done(pos)
				if derr != nil || ok {
					doneCh <- derr
					return
				}
			}
			select {
			case <-checkCtx.Done():
				return
			case <-time.After(po.poll):
			}
		}
	}()

	if po.sample <= 0 {
		po.sample = 2 * time.Millisecond
	}
	tick := time.NewTicker(po.sample)
	defer tick.Stop()
	deadline := time.After(po.timeout)
	for {
		select {
		case err := <-exited:
			r.exit = exitString(err)
			r.logTail = lastError(logBuf.String())
			return r, nil
		case <-ctx.Done():
			stop()
			return r, ctx.Err()
		case <-deadline:
			sample()
			stop()
			return r, fmt.Errorf("outboxd process did not drain within %s", po.timeout)
		case err := <-doneCh:
			if err != nil {
				stop()
				return r, err
			}
			r.elapsed = time.Since(t0)
			r.drained = true
			r.cpu = pidCPU(pid)
			sample()
			stop()
			return r, nil
		case <-tick.C:
		}
		sample()
		if po.rssCapKiB > 0 && r.maxRSSKiB > po.rssCapKiB {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			r.exit = exitString(<-exited)
			r.overCap = true
			r.logTail = lastError(logBuf.String())
			return r, nil
		}
	}
}

// procMem reads VmRSS and VmHWM (KiB) of pid.
func procMem(pid int) (rss, hwm float64, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, found := strings.Cut(l, ":")
		if !found {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, _ := strconv.ParseFloat(f[0], 64)
		switch k {
		case "VmRSS":
			rss = n
		case "VmHWM":
			hwm = n
		}
	}
	return rss, hwm, hwm > 0
}

// procStatusKiB reads one "Key: N kB" line of /proc/pid/status (0 if absent).
func procStatusKiB(pid int, key string) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && k == key {
			if f := strings.Fields(v); len(f) > 0 {
				n, _ := strconv.ParseFloat(f[0], 64)
				return n
			}
		}
	}
	return 0
}

func exitString(err error) string {
	if err == nil {
		return "exit 0"
	}
	return err.Error()
}

// lastError returns the last error line of a log (else its last line), at most 500 bytes.
func lastError(log string) string {
	lines := strings.Split(strings.TrimSpace(log), "\n")
	l := lines[len(lines)-1]
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], "level=ERROR") {
			l = lines[i]
			break
		}
	}
	if i := strings.Index(l, "msg="); i >= 0 {
		l = l[i:]
	}
	if len(l) > 500 {
		l = l[:500] + "…"
	}
	return l
}

// syncBuffer is a bytes.Buffer safe for concurrent writes and reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// writeOutboxdConfig parses cfgText and writes it beside the offsets file it names, in the
// directory the cleanup removes.
func writeOutboxdConfig(cfgText string) (cfg *config.Config, cfgPath string, cleanup func(), err error) {
	cfg, err = config.Parse([]byte(cfgText), os.LookupEnv)
	if err != nil {
		return nil, "", nil, err
	}
	dir := filepath.Dir(cfg.Offsets.Path)
	cleanup = func() { os.RemoveAll(dir) }
	cfgPath = filepath.Join(dir, "outboxd.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfgText), 0o600); err != nil {
		cleanup()
		return nil, "", nil, err
	}
	return cfg, cfgPath, cleanup, nil
}

// outboxdCommand is `bin run -c cfgPath` with env added to the bench's environment and its
// output in out; the child dies with the bench (Pdeathsig).
func outboxdCommand(bin, cfgPath string, env []string, out io.Writer) *exec.Cmd {
	cmd := exec.Command(bin, "run", "-c", cfgPath)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	return cmd
}
