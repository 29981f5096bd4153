package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
)

// Byte fixtures of /proc stat lines: a walsender (its title is set through argv, the comm
// field is the first 15 bytes of the program name), a thread of mariadbd, and command names
// holding spaces, parentheses and what looks like the fields that follow.
func TestParseProcStatFixtures(t *testing.T) {
	for _, c := range []struct {
		name               string
		line               string
		pid, ppid          int
		utime, stime, cpuT uint64 // cpuT: utime + stime
	}{
		{"walsender", "31337 (postgres) S 31001 31337 31337 0 -1 4194560 1893 0 0 0 512 88 0 0 20 0 1 0 12345 231002112 4000 18446744073709551615 1 1 0 0 0 0 0 4096 536897027 0 0 0 17 1 0 0 0 0 0\n",
			31337, 31001, 512, 88, 600},
		{"mariadbd thread", "40102 (one_connection) S 1 40001 40001 0 -1 1077936192 20 0 0 0 7 3 0 0 20 0 57 0 9000 1500000000 30000 18446744073709551615\n",
			40102, 1, 7, 3, 10},
		{"comm with a space and parentheses", "7 (a (b) c) R 2 7 7 0 -1 0 0 0 0 0 100 200 300 400 20 0 1 0 1 1 1 1\n", 7, 2, 100, 200, 300},
		{"comm mimicking the fields", "8 (x) S 1 2 3 (y) S 9 8 8 0 -1 0 0 0 0 0 11 22 33 44 20 0 1 0 1 1 1 1", 8, 9, 11, 22, 33},
		{"comm of only parentheses", "9 ()()) S 3 9 9 0 -1 0 0 0 0 0 1 2 3 4 20 0 1 0 1 1 1 1", 9, 3, 1, 2, 3},
	} {
		s, err := parseProcStat([]byte(c.line))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if s.pid != c.pid || s.ppid != c.ppid || s.utime != c.utime || s.stime != c.stime {
			t.Errorf("%s: parsed %+v, want pid %d ppid %d utime %d stime %d", c.name, s, c.pid, c.ppid, c.utime, c.stime)
		}
		if got, want := s.own(), time.Duration(c.cpuT)*time.Second/100; got != want {
			t.Errorf("%s: own CPU %v, want %v (utime+stime, not the children's)", c.name, got, want)
		}
	}
	// Truncated and garbled lines are errors, not zeros.
	for _, bad := range []string{"31337 (postgres) S 31001", "31337 (postgres", "(postgres) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15",
		"5 (p) S 1 2 3 4 5 6 7 8 9 10 -11 12 13 14 15"} {
		if _, err := parseProcStat([]byte(bad)); err == nil {
			t.Errorf("parseProcStat(%q) accepted a bad line", bad)
		}
	}
}

func TestParseMachineCPU(t *testing.T) {
	m0, err := parseMachineCPU([]byte("cpu  76567 0 40400 115769 668 0 2039 139 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n"))
	if err != nil || m0.idle != 115769+668 || m0.steal != 139 || m0.total != 76567+40400+115769+668+2039+139 {
		t.Fatalf("%+v, %v", m0, err)
	}
	m1 := machineCPU{idle: m0.idle + 10, steal: m0.steal + 5, total: m0.total + 100}
	if i, st, ok := idleSince(m0, m1); !ok || i != 0.1 || st != 0.05 {
		t.Errorf("idleSince: %v %v %v", i, st, ok)
	}
	if _, _, ok := idleSince(m0, m0); ok {
		t.Error("an empty interval measured")
	}
	for _, bad := range []string{"", "cpu0 1 2 3 4 5 6 7 8", "cpu 1 2 3", "cpu 1 2 3 x 5 6 7 8"} {
		if _, err := parseMachineCPU([]byte(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
	if _, err := readMachineCPU(); err != nil {
		t.Error(err)
	}
}

func TestParseClkTckAndTgid(t *testing.T) {
	if got := parseClkTck([]byte("100\n"), nil); got != 100 {
		t.Errorf("100: got %d", got)
	}
	if got := parseClkTck([]byte("250\n"), nil); got != 250 {
		t.Errorf("250: got %d", got)
	}
	for _, bad := range []struct {
		out []byte
		err error
	}{{nil, errors.New("no getconf")}, {[]byte("undefined\n"), nil}, {[]byte("0"), nil}} {
		if got := parseClkTck(bad.out, bad.err); got != 100 {
			t.Errorf("%q, %v: got %d, want the default 100", bad.out, bad.err, got)
		}
	}
	if n, err := parseTGID([]byte("Name:\tmariadbd\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t40001\nNgid:\t0\nPid:\t40102\n")); err != nil || n != 40001 {
		t.Errorf("Tgid: %d, %v", n, err)
	}
	if _, err := parseTGID([]byte("Name:\tx\nPid:\t3\n")); err == nil {
		t.Error("a status without Tgid was accepted")
	}
	// This process: its Tgid is itself, and its threads' CPU is readable.
	if n, err := procTGID(os.Getpid()); err != nil || n != os.Getpid() {
		t.Errorf("procTGID(self): %d, %v", n, err)
	}
	if m, err := taskCPUs(os.Getpid()); err != nil || len(m) == 0 {
		t.Errorf("taskCPUs(self): %v, %v", m, err)
	}
}

// writeStat writes a stat line of pid with utime and stime ticks to path.
func writeStat(t *testing.T, path string, pid int, utime, stime uint64) {
	t.Helper()
	line := fmt.Sprintf("%d (postgres) S 1 1 1 0 -1 0 0 0 0 0 %d %d 0 0 20 0 1 0 1 1 1\n", pid, utime, stime)
	if err := os.WriteFile(path, []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The watch sums the CPU of every reader it saw (a reconnect), from each one's base, and
// names them; one that never appears is an error, not a zero.
func TestCPUWatchReconnect(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	writeStat(t, a, 11, 120, 30) // 1.5 s, base 0.5 s: 1.0 s within the drain
	writeStat(t, b, 12, 20, 10)  // 0.3 s, started within the drain
	var step atomic.Int32        // 0: not there yet, 1: a, 2: b
	var sawA atomic.Bool
	find := func(context.Context) (cpuTarget, bool, error) {
		switch step.Load() {
		case 1:
			sawA.Store(true)
			return cpuTarget{id: 11, stat: a, base: 500 * time.Millisecond}, true, nil
		case 2:
			return cpuTarget{id: 12, stat: b}, true, nil
		}
		return cpuTarget{}, false, nil
	}
	w := startCPUWatch(context.Background(), find, nil)
	step.Store(1)
	waitFor(t, sawA.Load)
	step.Store(2) // found by the periodic lookup or the final one at stop
	r := w.stop()
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.cpu != 1300*time.Millisecond || len(r.ids) != 2 || r.ids[0] != 11 || r.ids[1] != 12 {
		t.Fatalf("cpu %v ids %v, want 1.3s over [11 12]", r.cpu, r.ids)
	}
	if s := (serverCPUs{r}).reconnects("walsender"); !strings.Contains(s, "2 walsenders (11, 12") {
		t.Errorf("reconnects: %q", s)
	}

	never := startCPUWatch(context.Background(), func(context.Context) (cpuTarget, bool, error) { return cpuTarget{}, false, nil }, nil)
	if r := never.stop(); r.err == nil || r.cpu != 0 {
		t.Errorf("a reader never seen: %+v, want an error", r)
	}
	gone := errors.New("server elsewhere")
	if r := failedWatch(gone).stop(); !errors.Is(r.err, gone) {
		t.Errorf("failedWatch: %+v", r)
	}
	broken := startCPUWatch(context.Background(), func(context.Context) (cpuTarget, bool, error) { return cpuTarget{}, false, gone }, nil)
	if r := broken.stop(); !errors.Is(r.err, gone) {
		t.Errorf("a finder error: %+v", r)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestServerCPUResults(t *testing.T) {
	lbl := labels([]string{"pg_recvlogical", "bare pglogrepl reader", "outboxd drain, in-process (acked by Kafka)", "outboxd drain, own process (acked by Kafka)"}, 2)
	const rows = 1000000
	secs := [][]float64{{10, 12}, {9, 9}, {8, 8}, {8, 10}}
	cpus := [][]float64{{3, 3}, {2, 2}, {9, 9}, {7, 8}}
	ok := func(s ...time.Duration) serverCPUs {
		var out serverCPUs
		for i, d := range s {
			out = append(out, serverCPU{cpu: d, ids: []int{100 + i}})
		}
		return out
	}
	srv := []serverCPUs{ok(9900*time.Millisecond, 11*time.Second), ok(9*time.Second, 9*time.Second),
		{{err: errors.New("not seen")}, {err: errors.New("not seen")}}, ok(4*time.Second, 6*time.Second)}
	idle := [][]machineIdle{{{0.02, 0.01, true}, {}}, {}, {}, {}}
	res := serverCPUResults("drain-pg-1", &pgBackend{}, lbl, rows, 1, secs, cpus, srv, idle)
	by := map[string]Result{}
	for _, r := range res {
		by[r.Name] = r
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if r := by["walsender busy, pg_recvlogical drain"]; !near(r.Value, (0.99+11.0/12)/2) || r.Unit != "fraction" || r.Error != "" ||
		!near(r.Extra["cpu_us_per_event_run1"], 9.9) || !strings.Contains(r.Detail, "busy 99%, 92%") ||
		!near(r.Extra["machine_idle_run1"], 0.02) || !strings.Contains(r.Detail, "idle meanwhile (/proc/stat): 2%") {
		t.Errorf("pg_recvlogical line: %+v", r)
	}
	if r := by["walsender busy, outboxd in-process drain"]; r.Error == "" {
		t.Errorf("an unmeasured walsender has no error: %+v", r)
	}
	if r := by["ratio cpu outboxd (in-process) / walsender"]; r.Error == "" {
		t.Errorf("a ratio without the walsender's figure has no error: %+v", r)
	}
	// own process: outboxd 7.5 µs/event, walsender (4+6)/2 = 5 µs/event.
	r := by["ratio cpu outboxd / walsender"]
	if !near(r.Value, 7.5/5) || r.Unit != "ratio" || !near(r.Extra["run1"], 7.0/4) || !near(r.Extra["run2"], 8.0/6) ||
		!near(r.Extra["walsender_busy"], (0.5+0.6)/2) || !strings.Contains(r.Detail, "target ≤ 1.0") {
		t.Errorf("own-process ratio: %+v", r)
	}
	if _, ok := by["ratio cpu outboxd / go-mysql reader"]; ok {
		t.Error("PostgreSQL has no go-mysql reader ratio")
	}

	// MariaDB: the binlog dump thread, and the go-mysql reader (the drain's first tool).
	lbl = labels([]string{"go-mysql BinlogSyncer", "outboxd drain, in-process (acked by Kafka)", "outboxd drain, own process (acked by Kafka)"}, 1)
	res = serverCPUResults("drain-mariadb-1", &myBackend{}, lbl, rows, 1, secs[1:], [][]float64{{4, 4}, {6, 6}, {5, 7}}, srv[1:], idle[1:])
	by = map[string]Result{}
	for _, r := range res {
		by[r.Name] = r
	}
	if r := by["ratio cpu outboxd / go-mysql reader"]; !near(r.Value, 6.0/4) || r.Error != "" {
		t.Errorf("go-mysql ratio: %+v", r)
	}
	if r := by["ratio cpu outboxd / binlog dump thread"]; !near(r.Value, 6.0/5) {
		t.Errorf("dump thread ratio: %+v", r)
	}
	if r := by["binlog dump thread busy, go-mysql BinlogSyncer drain"]; r.Error != "" || r.Value <= 0 {
		t.Errorf("dump thread busy: %+v", r)
	}
	if got := formatValue(0.573, "fraction"); got != "57%" {
		t.Errorf("formatValue fraction: %q", got)
	}
	if shortDrains([]float64{5, 6}) != "" || !strings.Contains(shortDrains([]float64{4.2, 6}), "4.2") {
		t.Error("shortDrains")
	}
}

// A small drain-pg-1 end to end (private PostgreSQL, embedded broker, outboxd built): every
// tool's walsender is found on this machine and its CPU read.
func TestDrainPGWalsenderCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and builds outboxd")
	}
	if _, err := testenv.PostgresBinDir(); err != nil {
		testenv.Unavailable(t, "PostgreSQL", err)
	}
	var out bytes.Buffer
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Options{N: 3000, Rounds: 1, Short: true, Only: []string{"drain-pg-1"}, Out: &out, Log: quiet, OutboxdLog: quiet})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	busy, ratio := 0, 0
	for _, r := range rep.Results {
		if r.Error != "" {
			t.Errorf("%s / %s: %s", r.Scenario, r.Name, r.Error)
		}
		if strings.HasPrefix(r.Name, "walsender busy, ") {
			busy++
			// Over a whole drain the walsender did some work, and cannot be busier than the
			// drain was long (10% slack: its last sample and the wall clock's ends).
			if r.Value <= 0 || r.Value > 1.1 || r.Extra["cpu_s_run1"] <= 0 || r.Extra["threads_run1"] != 1 {
				t.Errorf("%s: %+v", r.Name, r)
			}
		}
		if r.Name == "ratio cpu outboxd / walsender" {
			ratio++
			if r.Value <= 0 || r.Extra["outboxd_cpu_us_per_event"] <= 0 {
				t.Errorf("%s: %+v", r.Name, r)
			}
		}
	}
	if busy != 4 || ratio != 1 || !strings.Contains(out.String(), "ratio cpu outboxd (in-process) / walsender") {
		t.Fatalf("walsender lines %d, own-process ratio lines %d; report:\n%s", busy, ratio, out.String())
	}
}
