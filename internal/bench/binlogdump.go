package bench

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/go-mysql-org/go-mysql/client"
)

// MariaDB's server-side reader of a drain is the binlog dump thread of the tool's replica
// connection (COMMAND 'Binlog Dump'). MariaDB's information_schema.PROCESSLIST has its OS
// thread id (TID) without performance_schema (off in the private server), so its CPU is
// /proc/<mariadbd pid>/task/<tid>/stat. A connection may run on a cached thread that served an
// earlier one: every thread's CPU time is read when the watch starts, and the dump thread's
// counts from there.

func (p *myBackend) serverReaderName() string { return "binlog dump thread" }
func (p *myBackend) serverReaderHow() string {
	return "CPU of the binlog dump thread (/proc/<mariadbd>/task/<TID>/stat utime+stime since the drain's start; it reads and sends the binlog, the reader decodes)"
}
func (p *myBackend) cpuRatioTarget(int) string { return "" }

// cpuRefName: the dump thread only reads and sends the binlog (the rows are decoded by the
// reader), so outboxd is also set against the bare go-mysql reader, which decodes them.
func (p *myBackend) cpuRefName() string { return "go-mysql reader" }

// watchServerReader watches the binlog dump thread that appears after the call (dump threads
// already there, such as one still serving the previous round's reader until it notices that
// reader is gone, are left out).
func (p *myBackend) watchServerReader(ctx context.Context, _ *Backlog, _ int) *cpuWatch {
	c, err := p.srv.connect(ctx)
	if err != nil {
		return failedWatch(fmt.Errorf("connect to look up the binlog dump thread: %w", err))
	}
	fail := func(err error) *cpuWatch { c.Close(); return failedWatch(err) }
	tid, err := queryInt(c, `SELECT TID FROM information_schema.PROCESSLIST WHERE ID = CONNECTION_ID()`)
	if err != nil {
		return fail(fmt.Errorf("the server's thread ids (information_schema.PROCESSLIST.TID, MariaDB): %w", err))
	}
	pid, err := mariadbdPid(int(tid))
	if err != nil {
		return fail(err)
	}
	base, err := taskCPUs(pid)
	if err != nil {
		return fail(fmt.Errorf("threads of mariadbd %d: %w", pid, err))
	}
	before, err := dumpThreads(c)
	if err != nil {
		return fail(err)
	}
	find := func(context.Context) (cpuTarget, bool, error) {
		now, err := dumpThreads(c)
		if err != nil {
			return cpuTarget{}, false, err
		}
		var fresh []dumpThread
		for _, d := range now {
			if !slices.ContainsFunc(before, func(b dumpThread) bool { return b.id == d.id }) {
				fresh = append(fresh, d)
			}
		}
		if len(fresh) == 0 {
			return cpuTarget{}, false, nil
		}
		// The newest connection: after a reconnect the older dump thread may linger until it
		// notices its reader is gone. (On a shared server, another replica connecting during
		// the drain would be taken for a reconnect: the report names every thread seen.)
		newest := slices.MaxFunc(fresh, func(a, b dumpThread) int { return cmp.Compare(a.id, b.id) })
		return cpuTarget{id: newest.tid, stat: fmt.Sprintf("/proc/%d/task/%d/stat", pid, newest.tid), base: base[newest.tid]}, true, nil
	}
	return startCPUWatch(ctx, find, func() { c.Close() })
}

type dumpThread struct {
	id  int64 // connection id
	tid int   // OS thread id
}

// dumpThreads lists the server's binlog dump threads.
func dumpThreads(c *client.Conn) ([]dumpThread, error) {
	r, err := c.Execute(`SELECT ID, TID FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'`)
	if err != nil {
		return nil, fmt.Errorf("list the binlog dump threads: %w", err)
	}
	defer r.Close()
	var out []dumpThread
	for row := range r.RowNumber() {
		id, err1 := r.GetInt(row, 0)
		tid, err2 := r.GetInt(row, 1)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("binlog dump thread row %d: %v %v", row, err1, err2)
		}
		out = append(out, dumpThread{id: id, tid: int(tid)})
	}
	return out, nil
}

// mariadbdPid returns the process of the server thread tid and checks that it is a MariaDB
// server on this machine.
func mariadbdPid(tid int) (int, error) {
	notHere := func(why string) (int, error) {
		return 0, fmt.Errorf("the MariaDB server is not on this machine (its thread %d: %s): the binlog dump thread's CPU cannot be read", tid, why)
	}
	pid, err := procTGID(tid)
	if err != nil {
		return notHere(err.Error())
	}
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return notHere(err.Error())
	}
	if name := strings.TrimSpace(string(comm)); name != "mariadbd" && name != "mysqld" {
		return notHere(fmt.Sprintf("process %d is %q", pid, name))
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/task/%d", pid, tid)); err != nil {
		return notHere(err.Error())
	}
	return pid, nil
}

func queryInt(c *client.Conn, q string) (int64, error) {
	r, err := c.Execute(q)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", q, err)
	}
	defer r.Close()
	if r.RowNumber() == 0 {
		return 0, fmt.Errorf("%s: no rows", q)
	}
	return r.GetInt(0, 0)
}
