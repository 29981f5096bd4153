package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/testenv"
)

// toolProc is a running tool of a vs-debezium scenario: the outboxd process or the Kafka
// Connect JVM.
type toolProc struct {
	pid     int
	started time.Duration // Debezium: from exec to the connector streaming (the harness waits for it)
	stop    func()        // graceful stop; waits
	exited  func() bool   // the process has exited on its own
	log     func() string // its log's tail
}

// startOutboxdTool runs `bin run -c FILE` with cfgText; the config's offsets dir is removed by
// stop.
func startOutboxdTool(bin, cfgText string) (*toolProc, error) {
	cfg, err := config.Parse([]byte(cfgText), os.LookupEnv)
	if err != nil {
		return nil, fmt.Errorf("bench config: %w\n%s", err, cfgText)
	}
	dir := filepath.Dir(cfg.Offsets.Path)
	cfgPath := filepath.Join(dir, "outboxd.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfgText), 0o600); err != nil {
		return nil, err
	}
	var logBuf syncBuffer
	cmd := exec.Command(bin, "run", "-c", cfgPath)
	cmd.Stdout, cmd.Stderr = &logBuf, &logBuf
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start outboxd: %w", err)
	}
	var done atomic.Bool
	exited := make(chan struct{})
	go func() { cmd.Wait(); done.Store(true); close(exited) }()
	pid := cmd.Process.Pid
	return &toolProc{pid: pid,
		stop: func() {
			_ = syscall.Kill(pid, syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(45 * time.Second):
				_ = syscall.Kill(pid, syscall.SIGKILL)
				<-exited
			}
			os.RemoveAll(dir)
		},
		exited: done.Load,
		log:    func() string { return lastError(logBuf.String()) },
	}, nil
}

// startDebeziumTool starts Kafka Connect standalone with the connector (testenv.StartConnect,
// which returns once Debezium streams).
func startDebeziumTool(brokers []string, s dbzSetup) (*toolProc, error) {
	c, err := testenv.StartConnect(testenv.ConnectOpts{Bootstrap: joinComma(brokers), Connector: s.connector,
		Worker: s.worker, JVM: s.jvm, Dir: s.dir})
	if err != nil {
		return nil, err
	}
	pid := c.Pid()
	return &toolProc{pid: pid, started: c.Started,
		stop: func() {
			c.Stop()
			if s.dir != "" {
				os.RemoveAll(s.dir)
			} else {
				c.Destroy()
			}
		},
		exited: func() bool { return c.Pid() == 0 || syscall.Kill(pid, 0) != nil },
		log:    c.Log,
	}, nil
}

// cpuProbe is another process whose CPU a drain reports (where the time goes): the Kafka
// broker, the PostgreSQL walsender serving the tool's slot. pid returns 0 when there is none.
type cpuProbe struct {
	name string
	pid  func() int
}

// procCPU is the CPU time of one process (its own threads and reaped children); 0 if gone.
func procCPU(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s, err := parseProcStat(b)
	if err != nil {
		return 0
	}
	return s.cpu()
}

// drainRun is one tool's drain of the backlog.
type drainRun struct {
	probes    map[string]time.Duration // CPU of each probe's process during the drain
	total     time.Duration            // from the tool's start until Kafka holds every record
	cpu       time.Duration            // CPU of the tool's process tree over total
	hwmKiB    float64                  // peak RSS (VmHWM) of the tree
	startup   time.Duration            // Debezium: exec → streaming, as the harness measured it
	steadyCPU time.Duration            // CPU from the first sample after the first record to the end
	steadyN   int                      // records appended in that window
	check     backlogCheck
}

func (d drainRun) rate(rows int) float64 { return float64(rows) / d.total.Seconds() }

// steadyRate is the rate from the first to the last record (LogAppendTime): the drain without
// the tool's start-up.
func (d drainRun) steadyRate() float64 {
	w := d.check.last.Sub(d.check.first).Seconds()
	if w <= 0 || d.check.records < 2 {
		return math.NaN()
	}
	return float64(d.check.records-1) / w
}

func (d drainRun) cpuPer100k(rows int) float64 { return d.cpu.Seconds() * 100000 / float64(rows) }

func (d drainRun) steadyCPUPer100k() float64 {
	if d.steadyN <= 0 {
		return math.NaN()
	}
	return d.steadyCPU.Seconds() * 100000 / float64(d.steadyN)
}

// measureDrain starts a tool and polls, every 10 ms, the end offsets of topics until they hold
// rows records; the tool's process tree is sampled at the first record seen and at the end.
// Then the tool is stopped and the records are read back (every event id once?).
func measureDrain(ctx context.Context, brokers, topics []string, rows int, start func() (*toolProc, error), probes ...cpuProbe) (drainRun, error) {
	d := drainRun{probes: map[string]time.Duration{}}
	probePid := make([]int, len(probes))
	probeCPU := make([]time.Duration, len(probes))
	for i, p := range probes {
		probePid[i] = p.pid()
		probeCPU[i] = procCPU(probePid[i])
	}
	first, err := newAckWatch(brokers, topics, 1)
	if err != nil {
		return d, err
	}
	defer first.Close()
	all, err := newAckWatch(brokers, topics, int64(rows))
	if err != nil {
		return d, err
	}
	defer all.Close()
	t0 := time.Now()
	tp, err := start()
	if err != nil {
		return d, err
	}
	stopped := false
	defer func() {
		if !stopped {
			tp.stop()
		}
	}()
	d.startup = tp.started
	tw := &treeWatch{root: tp.pid, rescan: 500 * time.Millisecond}
	tw.sample()
	var t1 time.Time
	var cpu1 time.Duration
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(15 * time.Minute)
	lastSample := time.Now()
	for {
		select {
		case <-ctx.Done():
			return d, ctx.Err()
		case <-deadline:
			return d, fmt.Errorf("Kafka did not hold the %d records within 15 minutes; tool log: %s", rows, tp.log())
		case <-tick.C:
		}
		if tp.exited() {
			return d, fmt.Errorf("the tool exited before Kafka held the backlog: %s", tp.log())
		}
		if t1.IsZero() {
			ok, err := holds(first)
			if err != nil {
				return d, err
			}
			if ok && tw.sample() {
				t1, cpu1 = time.Now(), tw.last.cpu
			}
		}
		ok, err := holds(all)
		if err != nil {
			return d, err
		}
		if ok {
			d.total = time.Since(t0)
			if !tw.sample() {
				return d, errors.New("the tool's process was gone when Kafka held the backlog")
			}
			d.cpu, d.hwmKiB = tw.last.cpu, tw.last.hwmKiB
			for i, p := range probes {
				pid := p.pid()
				if pid != probePid[i] {
					probeCPU[i] = 0 // a process started during the drain (a walsender): all its CPU
				}
				if pid > 0 {
					d.probes[p.name] = procCPU(pid) - probeCPU[i]
				}
			}
			if !t1.IsZero() {
				d.steadyCPU = d.cpu - cpu1
			}
			break
		}
		if time.Since(lastSample) >= 250*time.Millisecond {
			tw.sample() // keeps the member list of the tree current
			lastSample = time.Now()
		}
	}
	stopped = true
	tp.stop()
	recs, err := readBack(ctx, brokers, topics)
	if err != nil {
		return d, err
	}
	d.check = checkBacklog(recs)
	if !t1.IsZero() {
		d.steadyN = appendedAfter(recs, t1)
	}
	if d.check.distinct < rows {
		return d, fmt.Errorf("Kafka holds %d records but only %d distinct event ids of %d", d.check.records, d.check.distinct, rows)
	}
	return d, nil
}

// latencyRun is one tool's commit → Kafka measurement.
type latencyRun struct {
	lat      []time.Duration // sorted
	warm     []time.Duration // of the warm-up rows (not in lat), sorted
	rate     float64         // inserts/s achieved
	total    int
	catchUp  time.Duration // from the last commit until Kafka held every row (polled every 20 ms)
	missing  int           // rows without a record
	negative int           // records appended (ms resolution) before the writer saw its commit return
}

func (l latencyRun) quantile(q float64) float64 {
	if len(l.lat) == 0 {
		return math.NaN()
	}
	return ms(l.lat[min(len(l.lat)-1, max(0, int(math.Ceil(q*float64(len(l.lat))))-1))])
}

// rowWriter commits one outbox row with row number k (its payload's orderId) in its own
// transaction.
type rowWriter interface {
	insert(ctx context.Context, k int) error
	close()
}

const latencyWriters = 4

// latencyWarmup is how long the writers run at the rate before the measured rows: both tools
// get the same warm-up (the JVM's JIT compiles the hot path in it), reported apart.
const latencyWarmup = 5 * time.Second

// measureLatency starts a tool, commits one warm-up row per topic and waits until Kafka holds
// them, then has latencyWriters connections commit single-row transactions at rate/s for
// latencyWarmup + dur (row k at start + k/rate); the rows of the first latencyWarmup are
// measured apart. The writer records when each COMMIT returned; once Kafka holds every
// row the tool is stopped and each record's LogAppendTime minus its row's commit time is its
// latency.
func measureLatency(ctx context.Context, brokers, topics []string, rate int, dur time.Duration,
	newWriter func(context.Context) (rowWriter, error), start func() (*toolProc, error)) (latencyRun, error) {
	var l latencyRun
	tp, err := start()
	if err != nil {
		return l, err
	}
	defer tp.stop()
	waitFor := func(n int64, within time.Duration) error {
		w, err := newAckWatch(brokers, topics, n)
		if err != nil {
			return err
		}
		defer w.Close()
		deadline := time.Now().Add(within)
		for {
			ok, err := holds(w)
			if err != nil || ok {
				return err
			}
			if tp.exited() {
				return fmt.Errorf("the tool exited: %s", tp.log())
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("Kafka does not hold %d records %v later; tool log: %s", n, within, tp.log())
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	w, err := newWriter(ctx)
	if err != nil {
		return l, err
	}
	for i := range aggTypes {
		if err := w.insert(ctx, 1_000_000_000+i); err != nil {
			w.close()
			return l, fmt.Errorf("warm-up insert: %w", err)
		}
	}
	w.close()
	if err := waitFor(int64(len(aggTypes)), 3*time.Minute); err != nil {
		return l, fmt.Errorf("warm-up: %w", err)
	}
	warmRows := int(float64(rate) * latencyWarmup.Seconds())
	l.total = int(float64(rate) * dur.Seconds())
	all := warmRows + l.total
	commitUS := make([]atomic.Int64, all)
	begin := time.Now().Add(20 * time.Millisecond)
	interval := time.Second / time.Duration(rate)
	var jobs []func(context.Context) error
	for wi := range latencyWriters {
		jobs = append(jobs, func(ctx context.Context) error {
			w, err := newWriter(ctx)
			if err != nil {
				return err
			}
			defer w.close()
			for k := wi; k < all; k += latencyWriters {
				if d := time.Until(begin.Add(time.Duration(k) * interval)); d > 0 {
					time.Sleep(d)
				}
				if err := w.insert(ctx, k); err != nil {
					return err
				}
				commitUS[k].Store(time.Now().UnixMicro())
			}
			return nil
		})
	}
	if err := parallel(ctx, jobs...); err != nil {
		return l, fmt.Errorf("writers: %w", err)
	}
	l.rate = float64(all) / time.Since(begin).Seconds()
	wrote := time.Now()
	if err := waitFor(int64(len(aggTypes)+all), 2*time.Minute); err != nil {
		return l, err
	}
	l.catchUp = time.Since(wrote)
	tp.stop()
	tp.stop = func() {}
	recs, err := readBack(ctx, brokers, topics)
	if err != nil {
		return l, err
	}
	got := make([]bool, all)
	for _, r := range recs {
		k := r.orderID
		if k < 0 || k >= int64(all) || got[k] {
			continue // a warm-up row, or a duplicate (the first one counts)
		}
		got[k] = true
		d := r.ts.Sub(time.UnixMicro(commitUS[k].Load()))
		if k < int64(warmRows) {
			l.warm = append(l.warm, d)
			continue
		}
		if d < 0 {
			l.negative++
		}
		l.lat = append(l.lat, d)
	}
	got = got[warmRows:]
	for _, g := range got {
		if !g {
			l.missing++
		}
	}
	slices.Sort(l.lat)
	slices.Sort(l.warm)
	if len(l.lat) == 0 {
		return l, errors.New("no latencies measured")
	}
	return l, nil
}

func joinComma(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ","
		}
		out += x
	}
	return out
}
