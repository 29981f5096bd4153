package bench

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// CPU time of processes and threads from /proc, for the tools the bench cannot measure with
// getrusage: the outboxd child while it runs, the PostgreSQL walsender and the MariaDB binlog
// dump thread that serve a drain (walsender.go, binlogdump.go).

// userHZ is USER_HZ, the unit of the CPU fields of /proc/<pid>/stat: 100 on every Linux
// architecture the bench runs on (the kernel exports them in these units whatever CONFIG_HZ
// is). It is checked once against `getconf CLK_TCK` (sysconf(_SC_CLK_TCK), which the Go
// standard library does not expose); a different answer there wins, no answer keeps 100.
var userHZ = sync.OnceValue(func() int64 { return parseClkTck(exec.Command("getconf", "CLK_TCK").Output()) })

func parseClkTck(out []byte, err error) int64 {
	if err != nil {
		return 100
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil || n <= 0 {
		return 100
	}
	return n
}

// ticksToDuration converts clock ticks of /proc/<pid>/stat to a duration.
func ticksToDuration(t uint64) time.Duration {
	return time.Duration(t) * time.Second / time.Duration(userHZ())
}

// own is the CPU time of the process (all its threads) of a /proc/<pid>/stat line, or of the
// one thread of a /proc/<pid>/task/<tid>/stat line: utime + stime, without waited-for children
// (a thread's line carries its process's cutime and cstime).
func (s procStat) own() time.Duration { return ticksToDuration(s.utime + s.stime) }

// statCPU reads the own CPU time (utime + stime) from a stat file of /proc.
func statCPU(path string) (time.Duration, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	s, err := parseProcStat(b)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return s.own(), nil
}

// pidCPU is the own CPU time of process pid so far (0 if it cannot be read).
func pidCPU(pid int) time.Duration {
	d, _ := statCPU(fmt.Sprintf("/proc/%d/stat", pid))
	return d
}

// procTGID returns the process (thread group) of thread tid, from /proc/<tid>/status.
func procTGID(tid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", tid))
	if err != nil {
		return 0, err
	}
	return parseTGID(b)
}

func parseTGID(status []byte) (int, error) {
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "Tgid:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return 0, fmt.Errorf("/proc status Tgid %q: %w", v, err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("/proc status without a Tgid line")
}

// taskCPUs reads the own CPU time of every thread of process pid (/proc/<pid>/task/*/stat), by
// thread id.
func taskCPUs(pid int) (map[int]time.Duration, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	m := make(map[int]time.Duration, len(ents))
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if d, err := statCPU(dir + "/" + e.Name() + "/stat"); err == nil {
			m[tid] = d
		}
	}
	return m, nil
}

// machineCPU is the machine's CPU time by kind (the "cpu" line of /proc/stat, clock ticks).
type machineCPU struct{ idle, steal, total uint64 }

// parseMachineCPU reads the aggregate "cpu" line of a /proc/stat text: user nice system idle
// iowait irq softirq steal (guest time is inside user). idle counts iowait too.
func parseMachineCPU(stat []byte) (machineCPU, error) {
	line, _, _ := strings.Cut(string(stat), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return machineCPU{}, fmt.Errorf("/proc/stat: no aggregate cpu line with 8 fields: %.80q", line)
	}
	var v [8]uint64
	var m machineCPU
	for i := range v {
		n, err := strconv.ParseUint(f[1+i], 10, 64)
		if err != nil {
			return machineCPU{}, fmt.Errorf("/proc/stat cpu field %d: %w", i+1, err)
		}
		v[i] = n
		m.total += n
	}
	m.idle, m.steal = v[3]+v[4], v[7]
	return m, nil
}

func readMachineCPU() (machineCPU, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineCPU{}, err
	}
	return parseMachineCPU(b)
}

// idleSince is the fraction of the machine's CPU time that was idle (and stolen by the
// hypervisor) from m0 to m1; ok false without a measurable interval.
func idleSince(m0, m1 machineCPU) (idle, steal float64, ok bool) {
	if m1.total <= m0.total {
		return 0, 0, false
	}
	d := float64(m1.total - m0.total)
	return float64(m1.idle-m0.idle) / d, float64(m1.steal-m0.steal) / d, true
}
