package bench

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The vs-debezium scenarios measure each tool as a process tree: the outboxd process, or the
// Kafka Connect JVM (its threads are counted in the process, as /proc/<pid>/stat sums them).

// procStat is what the bench reads from one /proc/<pid>/stat line.
type procStat struct {
	pid, ppid int
	// CPU in clock ticks: the process's own user and system time (all threads), and that of its
	// children it has waited for (cutime, cstime).
	utime, stime, cutime, cstime uint64
}

// cpu is the process's CPU time including its waited-for children.
func (s procStat) cpu() time.Duration {
	return ticksToDuration(s.utime + s.stime + s.cutime + s.cstime)
}

// parseProcStat parses a /proc/<pid>/stat line. The command name (field 2) is in parentheses
// and may itself hold spaces and parentheses, so the fields are counted from the last ')'.
func parseProcStat(b []byte) (procStat, error) {
	var s procStat
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 1 || end < open {
		return s, fmt.Errorf("/proc stat line without (comm): %.80q", b)
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return s, fmt.Errorf("/proc stat pid: %w", err)
	}
	s.pid = pid
	f := strings.Fields(string(b[end+1:]))
	// f[0] is field 3 (state): field n is f[n-3]. ppid is field 4, utime..cstime fields 14..17.
	if len(f) < 15 {
		return s, fmt.Errorf("/proc stat line of pid %d has %d fields after the command, want ≥ 15", pid, len(f))
	}
	if s.ppid, err = strconv.Atoi(f[1]); err != nil {
		return s, fmt.Errorf("/proc stat ppid of pid %d: %w", pid, err)
	}
	for i, dst := range []*uint64{&s.utime, &s.stime, &s.cutime, &s.cstime} {
		if *dst, err = strconv.ParseUint(f[11+i], 10, 64); err != nil {
			return s, fmt.Errorf("/proc stat field %d of pid %d: %w", 14+i, pid, err)
		}
	}
	return s, nil
}

// treeOf returns root and every descendant of root in stats (processes by pid).
func treeOf(stats map[int]procStat, root int) []procStat {
	children := map[int][]int{}
	for pid, s := range stats {
		children[s.ppid] = append(children[s.ppid], pid)
	}
	var out []procStat
	seen := map[int]bool{}
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		s, ok := stats[pid]
		if !ok || seen[pid] {
			continue
		}
		seen[pid] = true
		out = append(out, s)
		queue = append(queue, children[pid]...)
	}
	return out
}

// treeCPU is the CPU time of a process tree: each live member's own time plus that of the
// children it has reaped (a child that exited and was waited for is in its parent's cutime).
func treeCPU(tree []procStat) time.Duration {
	var d time.Duration
	for _, s := range tree {
		d += s.cpu()
	}
	return d
}

// readProcStats reads /proc/<pid>/stat of every process (a process that exits meanwhile is
// left out).
func readProcStats() (map[int]procStat, error) {
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return nil, err
	}
	stats := make(map[int]procStat, len(dirs))
	for _, d := range dirs {
		b, err := os.ReadFile(d + "/stat")
		if err != nil {
			continue
		}
		if s, err := parseProcStat(b); err == nil {
			stats[s.pid] = s
		}
	}
	return stats, nil
}

// parseVmHWM returns VmHWM (KiB) from a /proc/<pid>/status text.
func parseVmHWM(status []byte) (float64, bool) {
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			f := strings.Fields(v)
			if len(f) == 0 {
				return 0, false
			}
			n, err := strconv.ParseFloat(f[0], 64)
			return n, err == nil
		}
	}
	return 0, false
}

// treeSample is one look at a process tree.
type treeSample struct {
	cpu    time.Duration // CPU time of the tree so far
	hwmKiB float64       // sum of the members' VmHWM (peak RSS; an upper bound of the tree's joint peak)
	procs  int           // members seen
}

// treeWatch samples a process tree: it finds the members (root and descendants, a scan of
// /proc) at most every rescan, and reads only the members' stat and status files otherwise.
type treeWatch struct {
	root    int
	rescan  time.Duration
	members []int
	scanned time.Time
	last    treeSample
}

// sample reads the tree's CPU time and peak RSS now; false when the root is gone.
func (w *treeWatch) sample() bool {
	if w.members == nil || time.Since(w.scanned) >= w.rescan {
		stats, err := readProcStats()
		if err != nil {
			return false
		}
		w.members = w.members[:0]
		for _, s := range treeOf(stats, w.root) {
			w.members = append(w.members, s.pid)
		}
		w.scanned = time.Now()
	}
	s := treeSample{}
	for _, pid := range w.members {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue // exited since the scan
		}
		st, err := parseProcStat(b)
		if err != nil {
			continue
		}
		s.cpu += st.cpu()
		s.procs++
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
			if h, ok := parseVmHWM(b); ok {
				s.hwmKiB += h
			}
		}
	}
	if s.procs == 0 {
		return false
	}
	w.last = s
	return true
}
