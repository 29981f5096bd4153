package bench

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv/harness"
)

func TestParseProcStat(t *testing.T) {
	// A command name with spaces and parentheses: fields count from the last ')'.
	line := "4242 (java (Connect) x) S 17 4242 4242 0 -1 4194560 125 0 0 0 1234 567 89 10 20 0 57 0 9876 3000000000 60000 18446744073709551615\n"
	s, err := parseProcStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	want := procStat{pid: 4242, ppid: 17, utime: 1234, stime: 567, cutime: 89, cstime: 10}
	if s != want {
		t.Fatalf("parsed %+v, want %+v", s, want)
	}
	if got := s.cpu(); got != (1234+567+89+10)*10*time.Millisecond {
		t.Fatalf("cpu %v, want %v", got, (1234+567+89+10)*10*time.Millisecond)
	}
	for _, bad := range []string{"", "12 bash S 1", "x (a) S 1 2 3", "12 (a) S 1 2 3 4 5 6 7 8 9 10 11", "12 (a) S 1 2 3 4 5 6 7 8 9 10 u 1 2 3 4"} {
		if _, err := parseProcStat([]byte(bad)); err == nil {
			t.Errorf("parseProcStat(%q) accepted a bad line", bad)
		}
	}
}

func TestTreeCPUSumsDescendantsOnly(t *testing.T) {
	stats := map[int]procStat{
		1:  {pid: 1, ppid: 0, utime: 1000},
		10: {pid: 10, ppid: 1, utime: 100, stime: 50, cutime: 7, cstime: 3}, // root
		11: {pid: 11, ppid: 10, utime: 20, stime: 5},                        // child
		12: {pid: 12, ppid: 11, utime: 2},                                   // grandchild
		13: {pid: 13, ppid: 1, utime: 900},                                  // not in the tree
	}
	tree := treeOf(stats, 10)
	var pids []int
	for _, s := range tree {
		pids = append(pids, s.pid)
	}
	slices.Sort(pids)
	if !slices.Equal(pids, []int{10, 11, 12}) {
		t.Fatalf("tree of 10 = %v, want [10 11 12]", pids)
	}
	if got, want := treeCPU(tree), time.Duration(100+50+7+3+20+5+2)*10*time.Millisecond; got != want {
		t.Fatalf("tree CPU %v, want %v", got, want)
	}
	if len(treeOf(stats, 99)) != 0 {
		t.Fatal("a missing root has a tree")
	}
}

func TestParseVmHWM(t *testing.T) {
	st := "Name:\tjava\nVmPeak:\t 9000 kB\nVmHWM:\t  523412 kB\nVmRSS:\t  400000 kB\n"
	if v, ok := parseVmHWM([]byte(st)); !ok || v != 523412 {
		t.Fatalf("VmHWM %v %v, want 523412", v, ok)
	}
	if _, ok := parseVmHWM([]byte("Name:\tx\nVmRSS:\t1 kB\n")); ok {
		t.Fatal("VmHWM found where there is none")
	}
}

// TestTreeWatchCountsAChild samples the test process's own tree while a child burns CPU: the
// child is a member and its CPU is in the tree's.
func TestTreeWatchCountsAChild(t *testing.T) {
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	childCPU := func() time.Duration {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/stat")
		if err != nil {
			t.Fatal(err)
		}
		s, err := parseProcStat(b)
		if err != nil {
			t.Fatal(err)
		}
		return s.cpu()
	}
	err := harness.Until(30*time.Second, 20*time.Millisecond, func() error {
		if c := childCPU(); c < 200*time.Millisecond {
			return fmt.Errorf("the busy child used %v CPU, want 200ms", c)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	w := &treeWatch{root: os.Getpid(), rescan: time.Hour}
	if !w.sample() {
		t.Fatal("no sample of the test's own tree")
	}
	if !slices.Contains(w.members, cmd.Process.Pid) {
		t.Fatalf("the child %d is not in the tree %v", cmd.Process.Pid, w.members)
	}
	if c := childCPU(); w.last.cpu < c-20*time.Millisecond {
		t.Fatalf("tree CPU %v is below the child's own %v", w.last.cpu, c)
	}
	if w.last.hwmKiB <= 0 || w.last.procs < 2 {
		t.Fatalf("sample %+v: want a peak RSS and ≥ 2 processes", w.last)
	}
}

func TestJSONIntField(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{`{"ts": 1700000000000000, "note": "ab", "orderId": 42, "status": "CREATED"}`, 42, true}, // jsonb text
		{`{"orderId": 7, "customerId": "customer-7"}`, 7, true},                                  // MariaDB JSON_OBJECT
		{`{"orderId":-3}`, -3, true},
		{`{"a": "orderId", "orderId" : 9}`, 9, true}, // the key as a value first
		{`{"orderIdx": 5}`, 0, false},
		{`{"orderId": "5"}`, 0, false},
		{`{"orderId": -}`, 0, false},
		{``, 0, false},
	} {
		got, ok := jsonIntField([]byte(c.in), "orderId")
		if got != c.want || ok != c.ok {
			t.Errorf("jsonIntField(%s) = %d, %v; want %d, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestRatio(t *testing.T) {
	if r, ok := ratio(30000, 10000); !ok || r != 3 {
		t.Fatalf("ratio 30000/10000 = %v %v", r, ok)
	}
	for _, c := range [][2]float64{{1, 0}, {0, 0}, {math.NaN(), 1}, {1, math.NaN()}, {-1, 2}, {1, -2}} {
		if r, ok := ratio(c[0], c[1]); ok {
			t.Errorf("ratio(%v, %v) = %v: accepted", c[0], c[1], r)
		}
	}
}

func TestBacklogCheckAndSteadyWindow(t *testing.T) {
	t0 := time.UnixMilli(1_700_000_000_000)
	recs := []kafkaRecord{
		{id: "a", ts: t0.Add(10 * time.Millisecond)},
		{id: "b", ts: t0},
		{id: "c", ts: t0.Add(2 * time.Second)},
		{id: "b", ts: t0.Add(time.Second)}, // a duplicate
		{id: "d", ts: t0.Add(time.Second)},
	}
	c := checkBacklog(recs)
	if c.records != 5 || c.distinct != 4 || !c.first.Equal(t0) || !c.last.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("check %+v", c)
	}
	d := drainRun{total: 4 * time.Second, cpu: 2 * time.Second, check: c, steadyCPU: time.Second,
		steadyN: appendedAfter(recs, t0.Add(time.Second+300*time.Microsecond))}
	if d.steadyN != 3 { // the two at +1 s (same millisecond) and the one at +2 s
		t.Fatalf("appended after +1s: %d, want 3", d.steadyN)
	}
	if got := d.steadyRate(); got != 2 { // 4 intervals over 2 s
		t.Fatalf("steady rate %v, want 2", got)
	}
	if got := d.rate(100000); got != 25000 {
		t.Fatalf("rate %v, want 25000", got)
	}
	if got := d.cpuPer100k(100000); got != 2 {
		t.Fatalf("cpu per 100k %v, want 2", got)
	}
	if got := d.steadyCPUPer100k(); math.Abs(got-100000.0/3) > 1e-6 {
		t.Fatalf("steady cpu per 100k %v, want %v", got, 100000.0/3)
	}
	if !math.IsNaN((drainRun{}).steadyRate()) || !math.IsNaN((drainRun{}).steadyCPUPer100k()) {
		t.Fatal("an empty run has a steady rate")
	}
}

func TestLatencyQuantile(t *testing.T) {
	var l latencyRun
	for i := 1; i <= 100; i++ {
		l.lat = append(l.lat, time.Duration(i)*time.Millisecond)
	}
	if l.quantile(0.5) != 50 || l.quantile(0.99) != 99 || l.quantile(1) != 100 || l.quantile(0) != 1 {
		t.Fatalf("quantiles %v %v %v %v", l.quantile(0.5), l.quantile(0.99), l.quantile(1), l.quantile(0))
	}
	if !math.IsNaN((latencyRun{}).quantile(0.99)) {
		t.Fatal("empty run has a p99")
	}
}

// TestCmpResults checks the report lines: the four ratios by their exact names (the JSON
// contract), their values, the configuration line with its password masked, and that the whole
// report encodes as JSON (no NaN or Inf).
func TestCmpResults(t *testing.T) {
	t0 := time.UnixMilli(1_700_000_000_000)
	mk := func(total, cpu time.Duration, rssMiB float64) drainRun {
		return drainRun{total: total, cpu: cpu, hwmKiB: rssMiB * 1024,
			check: backlogCheck{records: 1000, distinct: 1000, first: t0, last: t0.Add(total / 2)}}
	}
	var runs [2][]drainRun
	runs[toolOutboxd] = []drainRun{mk(time.Second, 500*time.Millisecond, 40), mk(time.Second, 500*time.Millisecond, 50)}
	runs[toolDebezium] = []drainRun{mk(4*time.Second, 3*time.Second, 500), mk(4*time.Second, 3*time.Second, 600)}
	lat := func(p99 time.Duration) latencyRun {
		l := latencyRun{total: 100, rate: 2000}
		for i := 0; i < 100; i++ {
			l.lat = append(l.lat, p99)
		}
		return l
	}
	lats := [2]latencyRun{lat(8 * time.Millisecond), lat(40 * time.Millisecond)}
	dbz := newDbzSetup(map[string]string{"name": "dbz", "database.password": "secret", "max.batch.size": "16384"})
	o := &Options{Rounds: 2, LatencyRate: 2000, LatencyDuration: 30 * time.Second}
	runs[toolOutboxd][0].probes = map[string]time.Duration{"Kafka broker": 20 * time.Millisecond}
	m := cmpData{runs: runs, lats: lats, dbz: dbz, ceilingName: "pg_recvlogical", ceiling: 2000}
	res := cmpResults("vs-debezium-pg", "Debezium", "Kafka", &Backlog{Rows: 1000}, m, o)
	got := map[string]Result{}
	for _, r := range res {
		got[r.Name] = r
	}
	for name, want := range map[string]float64{
		"ratio drain outboxd / debezium": 4,  // 1000/s vs 250/s
		"ratio cpu debezium / outboxd":   6,  // 3 s vs 0.5 s
		"ratio rss debezium / outboxd":   12, // 600 vs 50 MiB
		"ratio p99 debezium / outboxd":   5,  // 40 vs 8 ms
	} {
		r, ok := got[name]
		if !ok {
			t.Fatalf("no result %q in %v", name, res)
		}
		if math.Abs(r.Value-want) > 1e-9 || r.Unit != "ratio" || r.Error != "" || r.Scenario != "vs-debezium-pg" {
			t.Errorf("%s = %+v, want %v", name, r, want)
		}
	}
	if r := got["outboxd CPU s per 100k events (process tree, start → all in Kafka)"]; r.Value != 50 ||
		r.Extra["kafka_broker_cpu_s_per_100k"] != 1 || !strings.Contains(r.Detail, "Kafka broker 2.00, 0.00 s") {
		t.Errorf("outboxd CPU per 100k = %+v, want 50 and the broker's 2 s, 0 s per 100k (mean 1)", r)
	}
	if r := got["pg_recvlogical drain of the same backlog (no Kafka: the server's ceiling)"]; r.Value != 2000 ||
		!strings.Contains(r.Detail, "outboxd reached 50% of it, Debezium 12%") {
		t.Errorf("ceiling line %+v", r)
	}
	cfg := got["Debezium configuration"]
	if cfg.Config["connector.database.password"] != "****" || strings.Contains(cfg.Detail, "secret") ||
		cfg.Config["connector.max.batch.size"] != "16384" || cfg.Config["worker.producer.acks"] != "all" {
		t.Errorf("configuration line %+v", cfg)
	}
	if _, err := json.Marshal(res); err != nil {
		t.Fatalf("results do not encode as JSON: %v", err)
	}
	// An unmeasured denominator gives an error line, not an Inf that JSON cannot carry.
	m.lats[toolOutboxd] = latencyRun{}
	res = cmpResults("vs-debezium-pg", "Debezium", "Kafka", &Backlog{Rows: 1000}, m, o)
	if _, err := json.Marshal(res); err != nil {
		t.Fatalf("results without outboxd latencies do not encode: %v", err)
	}
	for _, r := range res {
		if r.Name == "ratio p99 debezium / outboxd" && r.Error == "" {
			t.Errorf("p99 ratio without outboxd latencies has no error: %+v", r)
		}
	}
}

// TestShortSkip: -short leaves the comparison out unless -only names it; a full run has it.
func TestShortSkip(t *testing.T) {
	for _, c := range []struct {
		short bool
		only  []string
		skip  bool
	}{
		{true, nil, true},
		{true, []string{"drain-pg-1"}, true},
		{true, []string{"vs-debezium-pg"}, false},
		{false, nil, false},
	} {
		e := &env{o: &Options{Short: c.short, Only: c.only}}
		r := shortSkip(e, "vs-debezium-pg")
		if (r != nil) != c.skip || (r != nil && !strings.HasPrefix(r[0].Error, "skipped")) {
			t.Errorf("short=%v only=%v: %+v, want skipped=%v", c.short, c.only, r, c.skip)
		}
	}
}
