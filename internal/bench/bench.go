// Package bench is outboxd's benchmark harness (cmd/outboxd-bench): it starts a private
// PostgreSQL, a private MariaDB and the embedded Kafka-protocol broker (or uses given servers),
// runs scenarios against them and reports a Markdown table plus JSON. Each server is started
// only when a selected scenario needs it.
//
// Scenarios (names for -only):
//
//	drain-pg-1     PostgreSQL drain, single-row transactions: pg_recvlogical, a bare Go
//	               pglogrepl reader and outboxd, each on its own slot at the same LSN, Rounds
//	               rounds with the order rotating; DrainN rows; the walsender's CPU (drain_cpu.go)
//	drain-pg-1000  the same with 1000-row transactions
//	drain-pg-messages  drain-pg-1's workload as pg_logical_emit_message events (messages.go)
//	latency-pg     steady inserts (Rate/s for LatencyDuration), commit → consumed percentiles
//	memory-pg      peak RSS of an outboxd process draining min(10*N, 1M) rows, and 10 MB payloads
//	poll-pg        baseline: a polling worker (SELECT ... FOR UPDATE SKIP LOCKED, produce, mark sent)
//	drain-mariadb  MariaDB drain: a bare go-mysql BinlogSyncer (decoding the rows events) and
//	               outboxd, each reading the same binlog range from the GTID position captured
//	               before the backlog with its own server_id, Rounds rounds with the order
//	               rotating; single-row transactions (reported as drain-mariadb-1), then
//	               1000-row transactions (drain-mariadb-1000)
//	memory-large-tx  peak RSS of an outboxd process while ONE huge transaction flows through:
//	               LargeTxRows rows (~300 B payloads), and LargeTxBig rows of ~1 MB payloads, on
//	               PostgreSQL and MariaDB, at_least_once and exactly_once (8 figures, MiB); not
//	               part of -short (memory_large.go)
//	republish-pg   `outboxd republish` (in process) over a 1M-row PostgreSQL outbox table (~300 B
//	               jsonb payloads; -short: N rows), and the same as --dry-run (republish.go)
//	vs-debezium-pg       outboxd beside Debezium (Kafka Connect, Outbox Event Router) on PostgreSQL
//	vs-debezium-mariadb  the same on MariaDB (Debezium's MariaDB connector); both on Apache Kafka,
//	                     not part of -short (debezium.go)
//	cleanup-pg     the outbox table's size after CleanupDuration of steady load, outbox.cleanup on
//	               and off side by side (cleanup.go)
//
// Sources are behind the Backend interface (backend.go): the drain scenario is written against
// it (PostgreSQL: postgres.go, MariaDB: mariadb.go).
package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
)

// Options configure a bench run. Zero values get the defaults of Defaults.
type Options struct {
	N                int           // backlog size (rows) of the baseline scenarios (poll-pg, vs-debezium-*, republish-pg -short)
	DrainN           int           // backlog of the drain scenarios (default 1000000: ≥ 5 s of drain; N when N is given; 10000 with Short)
	Short            bool          // CI mode: tiny sizes, one round, 5 s latency run
	Rounds           int           // drain rounds: each tool drains once per round, the order rotating
	Only             []string      // scenario names to run (empty: all)
	PGDSN            string        // use this PostgreSQL (database URL, superuser or REPLICATION+CREATE) instead of a private one
	MySQLDSN         string        // use this MariaDB (mysql://user:pass@host:port/db; REPLICATION SLAVE, BINLOG MONITOR, CREATE) instead of a private one
	Brokers          []string      // use these Kafka brokers instead of the embedded one
	LatencyRate      int           // inserts/s of the latency scenario
	LatencyDuration  time.Duration // length of the latency scenario
	MemoryRows       int           // backlog of the memory scenario (default min(10*N, 1M))
	BigPayloads      int           // number of 10 MB payloads in the memory scenario
	PollBatch        int           // LIMIT of the baseline poller
	OutboxdBin       string        // prebuilt outboxd binary for the memory scenario ("" = go build ./cmd/outboxd)
	CPUProfile       string        // write CPU profiles of the in-process outboxd drains to <CPUProfile>.<scenario>.<round>.pprof
	HeapProfile      string        // write heap profiles taken 1 s into the in-process drains to <HeapProfile>.<scenario>.<round>.pprof
	BlockProfile     string        // write block (wait) profiles of the same drains to <BlockProfile>.<scenario>.<round>.pprof
	LargeTxRows      int           // memory-large-tx: rows of the one ~300 B-payload transaction (default 1000000)
	LargeTxBig       int           // memory-large-tx: rows of the one big-payload transaction (default 1000)
	LargeTxPayload   int           // memory-large-tx: payload bytes of its big rows (default 999000: under Kafka's 1 MiB default)
	LargeTxPerTx     int           // memory-large-tx comparison: the same rows in transactions of this many rows (big rows: as many as make ~300 KB); 0 = one transaction
	LargeTxCases     []string      // memory-large-tx: case ids to run, path.Match globs ("pg-rows-alo", "mariadb-*-eos"; empty: all)
	LargeTxRSSCapMiB int           // memory-large-tx: kill outboxd above this VmRSS (default 4096; the figure is then a lower bound)
	LargeTxTimeout   time.Duration // memory-large-tx: give up on a case after this long (default 10m)
	OutboxdEnv       []string      // extra KEY=VALUE environment of every outboxd process the bench starts (experiments: GOMEMLIMIT, GOGC, GOMAXPROCS)
	KafkaExtra       []string      // extra "key: value" lines for the outboxd config's kafka section (experiments)
	CleanupDuration  time.Duration // cleanup-pg: length of the steady load (default 10m)
	CleanupRate      int           // cleanup-pg: inserts/s of the steady load (default 500)
	OffsetsDir       string        // where outboxd's offsets files go ("" = os.TempDir(); e.g. /dev/shm to take fsync out)
	Out              io.Writer     // the report (Markdown); progress goes to Log
	Log              *slog.Logger  // bench progress
	OutboxdLog       *slog.Logger  // outboxd's own logs (in-process runs)
}

// Scenarios lists every scenario name in run order.
var Scenarios = []string{"drain-pg-1", "drain-pg-1000", "drain-pg-messages", "latency-pg", "memory-pg", "poll-pg", "drain-mariadb",
	"memory-large-tx", "republish-pg", "vs-debezium-pg", "vs-debezium-mariadb", cleanupScenario}

func (o *Options) defaults() {
	if o.DrainN <= 0 {
		// ≥ 5 s of drain at the 80k–200k events/s of 2 cores: start-up does not dominate.
		switch {
		case o.N > 0:
			o.DrainN = o.N
		case o.Short:
			o.DrainN = 10000
		default:
			o.DrainN = 1000000
		}
	}
	if o.N <= 0 {
		o.N = 100000
		if o.Short {
			o.N = 10000
		}
	}
	if o.Rounds <= 0 {
		o.Rounds = 3
		if o.Short {
			o.Rounds = 1
		}
	}
	if o.LatencyRate <= 0 {
		o.LatencyRate = 2000
	}
	if o.LatencyDuration <= 0 {
		o.LatencyDuration = 30 * time.Second
		if o.Short {
			o.LatencyDuration = 5 * time.Second
		}
	}
	if o.MemoryRows <= 0 {
		o.MemoryRows = min(10*o.N, 1000000)
	}
	if o.BigPayloads <= 0 {
		o.BigPayloads = 4
		if o.Short {
			o.BigPayloads = 2
		}
	}
	if o.PollBatch <= 0 {
		o.PollBatch = 1000
	}
	if o.LargeTxRows <= 0 {
		o.LargeTxRows = 1000000
	}
	if o.LargeTxBig <= 0 {
		o.LargeTxBig = 1000
	}
	if o.LargeTxPayload <= 0 {
		o.LargeTxPayload = 999000
	}
	if o.LargeTxRSSCapMiB <= 0 {
		o.LargeTxRSSCapMiB = 4096
	}
	if o.LargeTxTimeout <= 0 {
		o.LargeTxTimeout = 10 * time.Minute
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if o.OutboxdLog == nil {
		o.OutboxdLog = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("from", "outboxd")
	}
}

// Result is one measured line of the report.
type Result struct {
	Scenario string             `json:"scenario"`
	Name     string             `json:"name"`            // what was measured
	Value    float64            `json:"value"`           // the headline number
	Unit     string             `json:"unit"`            // of Value
	Detail   string             `json:"detail"`          // human-readable extra (runs, settings)
	Extra    map[string]float64 `json:"extra,omitempty"` // machine-readable extras (per-run rates, percentiles)
	Error    string             `json:"error,omitempty"` // the scenario failed or was skipped
	// Config is a tool's full configuration (vs-debezium: Debezium's), also in Detail.
	Config map[string]string `json:"config,omitempty"`
}

// Report is the JSON document of a run.
type Report struct {
	Started  time.Time `json:"started"`
	Duration string    `json:"duration"`
	Machine  Machine   `json:"machine"`
	Options  struct {
		N               int      `json:"n"`
		DrainN          int      `json:"drain_n"`
		Short           bool     `json:"short"`
		Rounds          int      `json:"rounds"`
		LatencyRate     int      `json:"latency_rate"`
		LatencyDuration string   `json:"latency_duration"`
		MemoryRows      int      `json:"memory_rows"`
		PollBatch       int      `json:"poll_batch"`
		KafkaExtra      []string `json:"kafka_extra,omitempty"`
		LargeTxRows     int      `json:"large_tx_rows,omitempty"`
		LargeTxBig      int      `json:"large_tx_big,omitempty"`
		LargeTxPayload  int      `json:"large_tx_payload,omitempty"`
		LargeTxPerTx    int      `json:"large_tx_per_tx,omitempty"`
		OffsetsDir      string   `json:"offsets_dir,omitempty"`
	} `json:"options"`
	Results []Result `json:"results"`
}

// Machine describes where the run happened.
type Machine struct {
	CPU      string `json:"cpu"`
	Cores    int    `json:"cores"`
	MemMiB   int    `json:"mem_mib"`
	OS       string `json:"os"`
	Go       string `json:"go"`
	Postgres string `json:"postgres,omitempty"`
	MariaDB  string `json:"mariadb,omitempty"`
	Kafka    string `json:"kafka"`
	// Load averages (1 min) at start and end: other work on the machine skews the rates.
	LoadStart string `json:"load_start"`
	LoadEnd   string `json:"load_end"`
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return "?"
}

// env holds the servers of a run.
type env struct {
	o        *Options
	pgDSN    string // database "app" (or the given DSN)
	brokers  []string
	runID    string // distinguishes topics, slots of this run on shared servers
	stopPG   func()
	stopKafk func()
	machine  Machine
	pg       *pgBackend

	binOnce    sync.Once
	bin        string
	binErr     error
	binCleanup func()
}

// outboxdBin returns the outboxd binary for separate-process runs (built once per bench run).
func (e *env) outboxdBin(ctx context.Context) (string, error) {
	e.binOnce.Do(func() { e.bin, e.binCleanup, e.binErr = outboxdBinary(ctx, e.o.OutboxdBin) })
	return e.bin, e.binErr
}

// Run runs the selected scenarios and writes the report.
func Run(ctx context.Context, o Options) (*Report, error) {
	o.defaults()
	for _, s := range o.Only {
		if !slices.Contains(Scenarios, s) {
			return nil, fmt.Errorf("-only: unknown scenario %q (have %s)", s, strings.Join(Scenarios, ", "))
		}
	}
	rep := &Report{Started: time.Now()}
	rep.Options.N, rep.Options.Short, rep.Options.Rounds = o.N, o.Short, o.Rounds
	rep.Options.DrainN = o.DrainN
	rep.Options.LatencyRate, rep.Options.LatencyDuration = o.LatencyRate, o.LatencyDuration.String()
	rep.Options.MemoryRows, rep.Options.PollBatch, rep.Options.KafkaExtra = o.MemoryRows, o.PollBatch, o.KafkaExtra
	rep.Options.OffsetsDir = o.OffsetsDir
	if len(o.Only) == 0 || slices.Contains(o.Only, largeScenario) {
		rep.Options.LargeTxRows, rep.Options.LargeTxBig, rep.Options.LargeTxPayload = o.LargeTxRows, o.LargeTxBig, o.LargeTxPayload
		rep.Options.LargeTxPerTx = o.LargeTxPerTx
	}

	e, err := startEnv(ctx, &o)
	if err != nil {
		return nil, err
	}
	defer e.stop()

	var failed []string
	run := func(name string, f func(context.Context, *env) ([]Result, error)) {
		if len(o.Only) > 0 && !slices.Contains(o.Only, name) {
			return
		}
		if ctx.Err() != nil {
			return
		}
		o.Log.Info("scenario start", "scenario", name)
		t0 := time.Now()
		rs, err := f(ctx, e)
		if err != nil {
			o.Log.Error("scenario failed", "scenario", name, "err", err)
			rs = append(rs, Result{Scenario: name, Name: "error", Error: err.Error()})
			failed = append(failed, name)
		}
		o.Log.Info("scenario done", "scenario", name, "took", time.Since(t0).Round(time.Millisecond))
		rep.Results = append(rep.Results, rs...)
	}
	pg := &pgBackend{e: e}
	e.pg = pg
	run("drain-pg-1", func(ctx context.Context, e *env) ([]Result, error) { return drain(ctx, e, pg, "drain-pg-1", 1) })
	run("drain-pg-1000", func(ctx context.Context, e *env) ([]Result, error) {
		return drain(ctx, e, pg, "drain-pg-1000", 1000)
	})
	run("drain-pg-messages", drainPGMessages) // messages.go
	run("latency-pg", latencyPG)
	run("memory-pg", memoryPG)
	run("poll-pg", pollPG)
	run("drain-mariadb", drainMariaDB)
	run("memory-large-tx", memoryLargeTx)
	run("republish-pg", republishPG)
	run("vs-debezium-pg", vsDebeziumPG)
	run("vs-debezium-mariadb", vsDebeziumMariaDB)
	run(cleanupScenario, cleanupPG)
	rep.Duration = time.Since(rep.Started).Round(time.Millisecond).String()
	rep.Machine = e.machine // scenarios add the servers they started (MariaDB)
	rep.Machine.LoadEnd = loadAvg()
	WriteMarkdown(o.Out, rep)
	if ctx.Err() != nil {
		return rep, ctx.Err()
	}
	if len(failed) > 0 {
		// A scenario that could not complete (the harness or outboxd broke): the report has the
		// error. Findings that are measurements (an outboxd exit in memory-pg) do not count.
		return rep, fmt.Errorf("scenarios failed: %s", strings.Join(failed, ", "))
	}
	return rep, nil
}

func startEnv(ctx context.Context, o *Options) (*env, error) {
	e := &env{o: o, runID: fmt.Sprintf("r%d", time.Now().Unix()%100000), stopPG: func() {}, stopKafk: func() {}}
	e.machine = machineInfo()
	if !o.needsPG() {
		// Only MariaDB scenarios: no PostgreSQL.
	} else if o.PGDSN != "" {
		e.pgDSN = o.PGDSN
	} else {
		o.Log.Info("starting a private PostgreSQL")
		pg, err := testenv.StartPostgres("max_wal_size=4GB", "checkpoint_timeout=30min", "autovacuum=off")
		if err != nil {
			return nil, err
		}
		e.stopPG = pg.Destroy
		if err := pg.Exec(ctx, "postgres", "CREATE DATABASE app"); err != nil {
			pg.Destroy()
			return nil, err
		}
		e.pgDSN = pg.DSN("app")
	}
	if len(o.Brokers) > 0 {
		e.brokers = o.Brokers
		e.machine.Kafka = "given: " + strings.Join(o.Brokers, ",")
	} else {
		b, err := testenv.StartBroker()
		if err != nil {
			e.stopPG()
			return nil, err
		}
		e.stopKafk = b.Stop
		e.brokers = []string{b.Addr()}
		e.machine.Kafka = "kfake (franz-go embedded broker, in the bench process, TCP)"
	}
	if !o.needsPG() {
		return e, nil
	}
	v, err := pgVersion(ctx, e.pgDSN)
	if err != nil {
		e.stop()
		return nil, fmt.Errorf("PostgreSQL at -pg-dsn: %w", err)
	}
	e.machine.Postgres = v
	if o.PGDSN == "" {
		e.machine.Postgres += " (private: fsync=off, autovacuum=off)"
	}
	return e, nil
}

// needsPG reports whether a selected scenario runs on PostgreSQL.
func (o *Options) needsPG() bool {
	if len(o.Only) == 0 {
		return true
	}
	for _, s := range o.Only {
		if s != "drain-mariadb" && s != "vs-debezium-mariadb" {
			return true
		}
	}
	return false
}

// dropTopics deletes a finished run's topics (a failure is only logged).
func (e *env) dropTopics(prefix string) {
	if err := deleteTopics(e.brokers, prefix); err != nil {
		e.o.Log.Warn("could not delete the bench's topics", "prefix", prefix, "err", err)
	}
}

func (e *env) stop() {
	if e.binCleanup != nil {
		e.binCleanup()
	}
	e.stopKafk()
	e.stopPG()
}

func machineInfo() Machine {
	m := Machine{Cores: runtime.NumCPU(), OS: runtime.GOOS + "/" + runtime.GOARCH, Go: runtime.Version(), LoadStart: loadAvg()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int
		fmt.Sscanf(string(b), "MemTotal: %d kB", &kb)
		m.MemMiB = kb / 1024
	}
	return m
}

// WriteMarkdown writes the report as Markdown.
func WriteMarkdown(w io.Writer, r *Report) {
	m := r.Machine
	fmt.Fprintf(w, "\n### outboxd bench — %s\n\n", r.Started.UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(w, "Machine: %s, %d cores, %d MiB RAM, %s, %s, load average %s at start, %s at end.",
		m.CPU, m.Cores, m.MemMiB, m.OS, m.Go, m.LoadStart, m.LoadEnd)
	if m.Postgres != "" {
		fmt.Fprintf(w, " PostgreSQL: %s.", m.Postgres)
	}
	if m.MariaDB != "" {
		fmt.Fprintf(w, " MariaDB: %s.", m.MariaDB)
	}
	fmt.Fprintf(w, " Kafka: %s.\n", m.Kafka)
	fmt.Fprintf(w, "Options: N=%d, drain backlog %d rows, rounds=%d, latency %d/s for %s, memory backlog %d rows, poll batch %d%s. Took %s.\n\n",
		r.Options.N, r.Options.DrainN, r.Options.Rounds, r.Options.LatencyRate, r.Options.LatencyDuration, r.Options.MemoryRows,
		r.Options.PollBatch, map[bool]string{true: " (-short)"}[r.Options.Short], r.Duration)
	if r.Options.OffsetsDir != "" {
		fmt.Fprintf(w, "outboxd offsets files in %s.\n\n", r.Options.OffsetsDir)
	}
	if len(r.Options.KafkaExtra) > 0 {
		fmt.Fprintf(w, "outboxd kafka settings added: %s.\n\n", strings.Join(r.Options.KafkaExtra, "; "))
	}
	fmt.Fprintln(w, "| scenario | measurement | result | details |")
	fmt.Fprintln(w, "|---|---|---:|---|")
	for _, x := range r.Results {
		val := formatValue(x.Value, x.Unit)
		detail := x.Detail
		if x.Error != "" {
			val = "—"
			detail = strings.TrimSpace(detail + " **" + x.Error + "**")
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", x.Scenario, x.Name, val, strings.ReplaceAll(detail, "|", "\\|"))
	}
	fmt.Fprintln(w)
}

func formatValue(v float64, unit string) string {
	switch unit {
	case "": // a line without a number (a configuration)
		return ""
	case "events/s":
		return fmt.Sprintf("%.0f events/s", v)
	case "ratio":
		return fmt.Sprintf("%.2f", v)
	case "fraction":
		return fmt.Sprintf("%.0f%%", 100*v)
	case "ms":
		return fmt.Sprintf("%.1f ms", v)
	case "MiB":
		return fmt.Sprintf("%.1f MiB", v)
	}
	return fmt.Sprintf("%g %s", v, unit)
}

// WriteJSON writes the report as indented JSON to path.
func WriteJSON(path string, r *Report) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// errSkipped marks a scenario that cannot run here (reported, not a failure).
var errSkipped = errors.New("skipped")

// parallel runs jobs concurrently; the first error cancels the others and is returned.
func parallel(ctx context.Context, jobs ...func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(jobs))
	for _, j := range jobs {
		go func() { errs <- j(ctx) }()
	}
	var first error
	for range jobs {
		if err := <-errs; err != nil && first == nil {
			first = err
			cancel()
		}
	}
	return first
}
