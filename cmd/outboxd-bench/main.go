// Command outboxd-bench measures outboxd against the database's own log reader and a polling
// worker: drain rates, commit-to-consume latency, peak memory. It starts a private PostgreSQL, a
// private MariaDB (drain-mariadb) and the embedded Kafka-protocol broker unless -pg-dsn /
// -mysql-dsn / -brokers name servers to use, and prints a Markdown table (and JSON with -json).
//
//	go run ./cmd/outboxd-bench                 # full run (drains of 1M rows, N = 100000 elsewhere), about 10 minutes on 2 cores
//	go run ./cmd/outboxd-bench -only drain-pg-1 -rounds 1  # walsender busy, ratio cpu outboxd / walsender on 1M rows
//	go run ./cmd/outboxd-bench -short          # CI: tiny sizes, about a minute
//	go run ./cmd/outboxd-bench -only drain-pg-1 -cpuprofile /tmp/ob
//	go run ./cmd/outboxd-bench -only drain-mariadb  # outboxd vs a bare go-mysql BinlogSyncer
//	go run ./cmd/outboxd-bench -only memory-large-tx -json big.json  # peak RSS with one 1M-row / 1 GB transaction
//	go run ./cmd/outboxd-bench -only vs-debezium-pg,vs-debezium-mariadb -json dbz.json  # beside Debezium on Apache Kafka
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/outboxd/outboxd/internal/bench"
)

func main() {
	var o bench.Options
	var only, brokers, jsonPath string
	var verbose bool
	flag.IntVar(&o.N, "n", 0, "backlog size in rows of poll-pg and vs-debezium-*, and of the drains when -drain-n is not given (default 100000; 10000 with -short)")
	flag.IntVar(&o.DrainN, "drain-n", 0, "backlog size in rows of the drain scenarios (default -n if given, else 1000000: ≥ 5 s of drain; 10000 with -short)")
	flag.BoolVar(&o.Short, "short", false, "CI mode: tiny backlog, one round, 5 s latency run")
	flag.IntVar(&o.Rounds, "rounds", 0, "drain rounds per tool (default 3; 1 with -short)")
	flag.StringVar(&only, "only", "", "comma-separated scenarios to run: "+strings.Join(bench.Scenarios, ","))
	flag.StringVar(&o.PGDSN, "pg-dsn", "", "use this PostgreSQL database (URL; superuser or REPLICATION+CREATE) instead of a private server")
	flag.StringVar(&o.MySQLDSN, "mysql-dsn", "", "use this MariaDB (mysql://user:pass@host:3306/db; REPLICATION SLAVE, BINLOG MONITOR, CREATE) instead of a private server (drain-mariadb)")
	flag.StringVar(&brokers, "brokers", "", "use these Kafka brokers (comma-separated host:port) instead of the embedded broker")
	flag.StringVar(&jsonPath, "json", "", "also write the report as JSON to this file")
	flag.IntVar(&o.LatencyRate, "latency-rate", 0, "inserts/s of the latency scenario (default 2000)")
	flag.DurationVar(&o.LatencyDuration, "latency-duration", 0, "length of the latency scenario (default 30s; 5s with -short)")
	flag.IntVar(&o.MemoryRows, "memory-rows", 0, "backlog of the memory scenario (default min(10*n, 1000000))")
	flag.IntVar(&o.PollBatch, "poll-batch", 0, "LIMIT of the polling baseline (default 1000)")
	flag.StringVar(&o.OutboxdBin, "outboxd", "", "outboxd binary for the memory scenario (default: go build ./cmd/outboxd)")
	flag.StringVar(&o.CPUProfile, "cpuprofile", "", "write CPU profiles of the in-process outboxd drains to PREFIX.<scenario>.<round>.pprof")
	flag.StringVar(&o.HeapProfile, "memprofile", "", "write heap profiles taken 1 s into the in-process outboxd drains to PREFIX.<scenario>.<round>.pprof")
	flag.StringVar(&o.BlockProfile, "blockprofile", "", "write block (wait) profiles of the in-process outboxd drains to PREFIX.<scenario>.<round>.pprof")
	var largeCases string
	flag.IntVar(&o.LargeTxRows, "large-tx-rows", 0, "memory-large-tx: rows of the one ~300 B-payload transaction (default 1000000)")
	flag.IntVar(&o.LargeTxBig, "large-tx-big", 0, "memory-large-tx: rows of the one big-payload transaction (default 1000)")
	flag.IntVar(&o.LargeTxPayload, "large-tx-payload", 0, "memory-large-tx: payload bytes of the big rows (default 999000, under Kafka's 1 MiB default record limit)")
	flag.IntVar(&o.LargeTxPerTx, "large-tx-per-tx", 0, "memory-large-tx comparison: the same rows in transactions of this many rows instead of one (big rows: as many as make ~300 KB)")
	flag.StringVar(&largeCases, "large-tx-cases", "", "memory-large-tx: comma-separated case globs, e.g. 'pg-rows-alo,mariadb-*-eos' (ids: {pg,mariadb}-{rows,big}-{alo,eos}; default all)")
	flag.IntVar(&o.LargeTxRSSCapMiB, "large-tx-rss-cap", 0, "memory-large-tx: kill outboxd once its VmRSS passes this many MiB (default 4096)")
	flag.DurationVar(&o.LargeTxTimeout, "large-tx-timeout", 0, "memory-large-tx: give up on a case after this long (default 10m)")
	var kafkaExtra, outboxdEnv multiFlag
	flag.Var(&outboxdEnv, "outboxd-env", "extra `KEY=VALUE` in the environment of every outboxd process (own-process drains, memory-pg, memory-large-tx), e.g. -outboxd-env GOMEMLIMIT=48MiB or GOMAXPROCS=1 (repeatable)")
	flag.Var(&kafkaExtra, "kafka", "extra `key: value` line for the outboxd config's kafka section, e.g. -kafka 'max_inflight: 50000' (repeatable)")
	flag.DurationVar(&o.CleanupDuration, "cleanup-duration", 0, "cleanup-pg: length of the steady load (default 10m)")
	flag.IntVar(&o.CleanupRate, "cleanup-rate", 0, "cleanup-pg: inserts/s of the steady load (default 500)")
	flag.StringVar(&o.OffsetsDir, "offsets-dir", "", "directory for outboxd's offsets files (default the temp dir; /dev/shm takes fsync cost out)")
	flag.BoolVar(&verbose, "v", false, "outboxd's own info logs")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "outboxd-bench: unexpected arguments:", flag.Args())
		os.Exit(2)
	}
	o.KafkaExtra = kafkaExtra
	o.OutboxdEnv = outboxdEnv
	if only != "" {
		o.Only = strings.Split(only, ",")
	}
	if largeCases != "" {
		o.LargeTxCases = strings.Split(largeCases, ",")
	}
	if brokers != "" {
		o.Brokers = strings.Split(brokers, ",")
	}
	o.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	lvl := slog.LevelWarn
	if verbose {
		lvl = slog.LevelInfo
	}
	o.OutboxdLog = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})).With("from", "outboxd")

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	t0 := time.Now()
	rep, err := bench.Run(ctx, o)
	if rep != nil && jsonPath != "" {
		if werr := bench.WriteJSON(jsonPath, rep); werr != nil {
			fmt.Fprintln(os.Stderr, "outboxd-bench: write -json:", werr)
			os.Exit(1)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "outboxd-bench:", err)
		os.Exit(1)
	}
	o.Log.Info("bench finished", "took", time.Since(t0).Round(time.Second))
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, "; ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
