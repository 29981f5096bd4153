package bench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
)

// idleSettle is how long after /readyz first answers 200 the idle RSS is read: long enough for
// the start-up's garbage to be collected or not (the runtime's forced GC runs every 2 minutes,
// so it is not waited for) and for the first metadata refresh and keepalives to have happened.
const idleSettle = 3 * time.Second

// idleRun is the memory of an outboxd process at idle after start-up.
type idleRun struct {
	readyAfter               time.Duration // from the process start to /readyz 200
	rssKiB, anonKiB, fileKiB float64       // VmRSS, RssAnon, RssFile idleSettle after ready
	hwmKiB                   float64       // VmHWM at that moment (the start-up's peak)
	exit, logTail            string
	ready                    bool
	cpu                      time.Duration // its CPU time up to the reading
	binKiB, libKiB           float64       // resident pages of the binary's file, of other files (libc, ld.so)
}

// memoryIdle runs `outboxd run` on an empty slot with an HTTP listener, waits for /readyz to
// answer 200 (source and Kafka connected), lets it idle for idleSettle and reads its memory.
func memoryIdle(ctx context.Context, e *env, bin string) (Result, error) {
	const scenario = "memory-pg"
	x := Result{Scenario: scenario, Name: "outboxd RSS at idle after start-up", Unit: "MiB"}
	tag := e.runID + "_memidle"
	slot := slotName(tag, 0)
	if err := pgExec(ctx, e.pgDSN, fmt.Sprintf(`SELECT pg_create_logical_replication_slot('%s', 'pgoutput')`, slot)); err != nil {
		return x, err
	}
	defer pgDropSlots(ctx, e.pgDSN, slot)
	port, err := testenv.FreePort()
	if err != nil {
		return x, err
	}
	listen := fmt.Sprintf("127.0.0.1:%d", port)
	topicPrefix := "outboxd-bench." + tag + "."
	defer e.dropTopics(topicPrefix)
	r, err := runOutboxdIdle(ctx, bin, outboxdYAML(e, pgSourceYAML(e.pgDSN, slot), topicPrefix, listen), "http://"+listen+"/readyz", e.o.OutboxdEnv)
	if err != nil {
		return x, err
	}
	if !r.ready {
		x.Error = fmt.Sprintf("outboxd did not become ready: %s; log: %s", r.exit, r.logTail)
		return x, nil
	}
	x.Value = r.rssKiB / 1024
	x.Extra = map[string]float64{"vmrss_kib": r.rssKiB, "rss_anon_kib": r.anonKiB, "rss_file_kib": r.fileKiB,
		"vmhwm_kib": r.hwmKiB, "ready_after_s": r.readyAfter.Seconds(), "cpu_s": r.cpu.Seconds(),
		"rss_binary_kib": r.binKiB, "rss_other_files_kib": r.libKiB}
	x.Detail = fmt.Sprintf("VmRSS %s after /readyz first answered 200 (%s after start; empty slot, HTTP server on): "+
		"anonymous %.1f MiB (heap, stacks), file-backed %.1f MiB (the binary's pages %.1f MiB, shared libraries %.1f MiB); "+
		"start-up peak VmHWM %.1f MiB",
		idleSettle, r.readyAfter.Round(time.Millisecond), r.anonKiB/1024, r.fileKiB/1024, r.binKiB/1024, r.libKiB/1024, r.hwmKiB/1024)
	return x, nil
}

// runOutboxdIdle starts `bin run -c <cfg>`, polls readyURL until it answers 200, waits
// idleSettle, reads the process's memory and stops it (SIGTERM). The child dies with the bench.
func runOutboxdIdle(ctx context.Context, bin, cfgText, readyURL string, env []string) (r idleRun, _ error) {
	_, cfgPath, cleanup, err := writeOutboxdConfig(cfgText)
	if err != nil {
		return r, err
	}
	defer cleanup()
	var logBuf syncBuffer
	cmd := outboxdCommand(bin, cfgPath, env, &logBuf)
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return r, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	pid := cmd.Process.Pid
	defer func() {
		if r.exit != "" {
			return
		}
		_ = syscall.Kill(pid, syscall.SIGTERM)
		select {
		case err := <-exited:
			r.exit = exitString(err)
		case <-time.After(45 * time.Second):
			_ = syscall.Kill(pid, syscall.SIGKILL)
			r.exit = exitString(<-exited)
		}
	}()

	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(time.Minute)
	for !r.ready {
		select {
		case err := <-exited:
			r.exit, r.logTail = exitString(err), lastError(logBuf.String())
			return r, nil
		case <-ctx.Done():
			return r, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			r.logTail = lastError(logBuf.String())
			return r, fmt.Errorf("outboxd did not answer 200 on %s within a minute; log: %s", readyURL, r.logTail)
		}
		resp, err := client.Get(readyURL)
		if err != nil {
			continue
		}
		resp.Body.Close()
		r.ready = resp.StatusCode == http.StatusOK
	}
	r.readyAfter = time.Since(t0)
	select {
	case err := <-exited:
		r.exit, r.logTail = exitString(err), lastError(logBuf.String())
		r.ready = false
		return r, nil
	case <-ctx.Done():
		return r, ctx.Err()
	case <-time.After(idleSettle):
	}
	r.rssKiB, r.hwmKiB, _ = procMem(pid)
	r.anonKiB, r.fileKiB = procStatusKiB(pid, "RssAnon"), procStatusKiB(pid, "RssFile")
	r.cpu = pidCPU(pid)
	r.binKiB, r.libKiB = fileRSS(pid, bin)
	return r, nil
}

// fileRSS sums the Rss of pid's file mappings (/proc/pid/smaps): those of the file bin, and
// those of every other file (shared libraries of a cgo build).
func fileRSS(pid int, bin string) (binKiB, otherKiB float64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return 0, 0
	}
	abs, _ := filepath.Abs(bin)
	var path string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		if strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			path = "" // a mapping's first line: range perms offset dev inode [path]
			if len(f) >= 6 && strings.HasPrefix(f[5], "/") {
				path = f[5]
			}
			continue
		}
		if f[0] != "Rss:" || path == "" || len(f) < 2 {
			continue
		}
		n, _ := strconv.ParseFloat(f[1], 64)
		if path == abs {
			binKiB += n
		} else {
			otherKiB += n
		}
	}
	return binKiB, otherKiB
}
