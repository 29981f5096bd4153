package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The server's side of a drain: the database process or thread that reads the log for the tool
// (PostgreSQL: the walsender backend of the slot, decoding the WAL with pgoutput; MariaDB: the
// binlog dump thread, binlogdump.go). Its CPU over the drain says whether the database or the
// tool was the limit: a walsender busy ~100% of the drain's wall time is the ceiling, one busy
// 57% waited for its reader.

// serverReader is a Backend whose server-side reader the bench can watch.
type serverReader interface {
	// serverReaderName names it in the report ("walsender").
	serverReaderName() string
	// serverReaderHow says how its CPU is read, for the report.
	serverReaderHow() string
	// cpuRatioTarget is the target of outboxd's CPU per event over the reader's ("" none).
	cpuRatioTarget(rowsPerTx int) string
	// cpuRefName names the reference reader (the drain's first) that outboxd's CPU per event
	// is also set against ("" none): where the server's reader does other work than decoding.
	cpuRefName() string
	// watchServerReader starts sampling the CPU of the server's reader serving reader i of b;
	// it is called just before the drain's tool starts, and its stop just after the tool
	// returns. A watch that cannot measure says why in its result's err.
	watchServerReader(ctx context.Context, b *Backlog, i int) *cpuWatch
}

// cpuTarget is one process or thread a cpuWatch samples.
type cpuTarget struct {
	id   int           // pid (walsender) or thread id (binlog dump thread)
	stat string        // its /proc stat file
	base time.Duration // its CPU time when the drain started (0: it started within the drain)
}

// cpuFinder looks up the server's reader now: ok false while it is not there (not connected
// yet, or gone); an error ends the search (the reader cannot be measured: it is said why).
type cpuFinder func(ctx context.Context) (t cpuTarget, ok bool, err error)

// serverCPU is what a cpuWatch measured over one drain.
type serverCPU struct {
	cpu time.Duration // CPU time of the server's reader(s) within the drain
	ids []int         // the processes / threads seen, in order (more than one: the tool reconnected)
	err error         // not measured: why
}

// cpuWatch samples the CPU time of a server-side reader: it looks the reader up with its finder
// every findLost while not seen (the reader connects after the drain started), then every
// findEvery (a reconnect changes it: each one's CPU counts), and reads the current one's stat
// file every sampleEvery and once more at the end. A reader that exits between two samples
// loses at most sampleEvery of CPU.
type cpuWatch struct {
	find    cpuFinder
	closeFn func()
	stopCh  chan struct{}
	doneCh  chan struct{}
	res     serverCPU
}

const (
	findLost    = 2 * time.Millisecond
	findEvery   = 250 * time.Millisecond
	sampleEvery = 10 * time.Millisecond
)

// startCPUWatch starts a watch; closeFn (may be nil) releases the finder's resources at stop.
func startCPUWatch(ctx context.Context, find cpuFinder, closeFn func()) *cpuWatch {
	w := &cpuWatch{find: find, closeFn: closeFn, stopCh: make(chan struct{}), doneCh: make(chan struct{})}
	go w.run(context.WithoutCancel(ctx))
	return w
}

// failedWatch is a watch that cannot measure, for err.
func failedWatch(err error) *cpuWatch {
	w := &cpuWatch{stopCh: make(chan struct{}), doneCh: make(chan struct{}), res: serverCPU{err: err}}
	close(w.doneCh)
	return w
}

// stop ends the watch and returns what it measured.
func (w *cpuWatch) stop() serverCPU {
	select {
	case <-w.stopCh:
	default:
		close(w.stopCh)
	}
	<-w.doneCh
	return w.res
}

func (w *cpuWatch) run(ctx context.Context) {
	defer close(w.doneCh)
	if w.closeFn != nil {
		defer w.closeFn()
	}
	var (
		cur       *cpuTarget
		last      time.Duration // cur's CPU time at its latest sample
		total     time.Duration // CPU of the earlier targets
		lastFind  time.Time
		searching = true
	)
	sample := func() {
		if cur != nil {
			if c, err := statCPU(cur.stat); err == nil {
				last = c
			}
		}
	}
	look := func() {
		lastFind = time.Now()
		t, ok, err := w.find(ctx)
		if err != nil {
			searching = false
			w.res.err = err
			return
		}
		if !ok || (cur != nil && t.id == cur.id) {
			return
		}
		sample() // the previous target's last figure
		if cur != nil {
			total += max(0, last-cur.base)
		}
		cur, last = &t, t.base
		w.res.ids = append(w.res.ids, t.id)
		sample()
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-w.stopCh:
			sample()
			if searching {
				look() // a reader seen only now (a tiny drain; MariaDB's dump thread outlives its reader)
			}
			if cur != nil {
				total += max(0, last-cur.base)
			}
			w.res.cpu = total
			if cur == nil && w.res.err == nil {
				w.res.err = errors.New("not seen during the drain (it ended within the lookups' interval)")
			}
			return
		case <-timer.C:
		}
		if searching && (cur == nil || time.Since(lastFind) >= findEvery) {
			look()
		}
		sample()
		if cur == nil && searching {
			timer.Reset(findLost)
		} else {
			timer.Reset(sampleEvery)
		}
	}
}

func (p *pgBackend) serverReaderName() string { return "walsender" }
func (p *pgBackend) serverReaderHow() string {
	return "CPU of the slot's walsender backend (/proc/<active_pid>/stat utime+stime, from its fork for the tool's connection)"
}
func (p *pgBackend) cpuRefName() string { return "" }

// cpuRatioTarget: issue 18 for single-row transactions (measured on 1M of them).
func (p *pgBackend) cpuRatioTarget(rowsPerTx int) string {
	if rowsPerTx == 1 {
		return "target ≤ 1.0, aim 0.5, with the walsender busy ≥ 90% (issue 18)"
	}
	return ""
}

// watchServerReader watches the walsender of reader i's slot: pg_replication_slots.active_pid
// (the walsender's backend pid, as pg_stat_replication.pid) while the slot is active. A
// walsender is a backend forked for the tool's replication connection, so all its CPU time
// falls within the drain (base 0). The server must run on this machine (its /proc): the
// bench's own backend is looked up first to check that.
func (p *pgBackend) watchServerReader(ctx context.Context, b *Backlog, i int) *cpuWatch {
	slot := b.Readers[i]
	c, err := pgx.Connect(ctx, p.e.pgDSN)
	if err != nil {
		return failedWatch(fmt.Errorf("connect to look up the walsender: %w", err))
	}
	if err := pgLocalBackend(ctx, c); err != nil {
		c.Close(context.Background())
		return failedWatch(err)
	}
	find := func(ctx context.Context) (cpuTarget, bool, error) {
		var pid *int32
		err := c.QueryRow(ctx, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&pid)
		if errors.Is(err, pgx.ErrNoRows) {
			return cpuTarget{}, false, fmt.Errorf("slot %s not in pg_replication_slots", slot)
		}
		if err != nil {
			return cpuTarget{}, false, fmt.Errorf("look up the walsender of slot %s: %w", slot, err)
		}
		if pid == nil {
			return cpuTarget{}, false, nil // not active (yet, or any more)
		}
		cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", *pid))
		if err != nil || len(cmd) == 0 {
			// Exited since the query: gone, or a zombie not yet reaped by the postmaster,
			// whose cmdline reads empty (CI, f18a938: a drain ending between the query and
			// the read).
			return cpuTarget{}, false, nil
		}
		if !strings.Contains(string(cmd), "walsender") {
			return cpuTarget{}, false, fmt.Errorf("slot %s's active_pid %d is not a walsender here (%.60q)", slot, *pid, cmd)
		}
		return cpuTarget{id: int(*pid), stat: fmt.Sprintf("/proc/%d/stat", *pid)}, true, nil
	}
	return startCPUWatch(ctx, find, func() { c.Close(context.Background()) })
}

// pgLocalBackend checks that the server of c runs on this machine: the process of c's own
// backend (pg_backend_pid) is a postgres backend whose title names c's client port.
func pgLocalBackend(ctx context.Context, c *pgx.Conn) error {
	var pid int
	if err := c.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		return fmt.Errorf("pg_backend_pid: %w", err)
	}
	cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	title := string(cmd)
	want := "[local]"
	if a := c.PgConn().Conn().LocalAddr().String(); strings.Contains(a, ":") {
		want = "(" + a[strings.LastIndexByte(a, ':')+1:] + ")"
	}
	if err != nil || !strings.Contains(title, "postgres") || !strings.Contains(title, want) {
		return fmt.Errorf("the PostgreSQL server is not on this machine (its backend pid %d is not a local postgres process serving %s): the walsender's CPU cannot be read", pid, want)
	}
	return nil
}

// serverCPUs is the server reader's figures of one tool's drains, one per round.
type serverCPUs []serverCPU

// measured returns the rounds that measured (their indexes) and the first error of those that
// did not.
func (s serverCPUs) measured() (rounds []int, firstErr error) {
	for r, x := range s {
		if x.err == nil {
			rounds = append(rounds, r)
		} else if firstErr == nil {
			firstErr = fmt.Errorf("round %d: %w", r+1, x.err)
		}
	}
	return rounds, firstErr
}

// reconnects describes the rounds whose tool was served by more than one reader.
func (s serverCPUs) reconnects(what string) string {
	var parts []string
	for r, x := range s {
		if len(x.ids) > 1 {
			parts = append(parts, fmt.Sprintf("round %d: %d %ss (%s; the tool reconnected)", r+1, len(x.ids), what, fmtInts(x.ids)))
		}
	}
	return strings.Join(parts, "; ")
}

func fmtInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ", ")
}
