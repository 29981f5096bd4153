// Command outboxd tails a database's log and delivers each outbox INSERT to Kafka.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/outboxd/outboxd/internal/app"
	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/gcfloor"
	"github.com/outboxd/outboxd/internal/pipeline"
	"github.com/outboxd/outboxd/internal/pipeline/delivery"
	"github.com/outboxd/outboxd/source"
)

// Set by the build (-ldflags "-X main.version=... -X main.commit=...").
var (
	version = "dev"
	commit  = ""
)

const usage = `outboxd — transactional outbox to Kafka

Usage:
  outboxd run -c FILE       run the pipeline until SIGINT, SIGTERM, SIGHUP or SIGQUIT
  outboxd check -c FILE     preflight: one OK/FAIL line per prerequisite
  outboxd offsets show -c FILE
                            stored position and where the source is now
  outboxd offsets set -c FILE --position POS
                            replace the stored position (replay); refuses what the source cannot serve
  outboxd dlq tail -c FILE [--follow] [--json]
                            print dead-lettered records with their error headers
  outboxd dlq replay -c FILE [--id EVENT_ID]... [--all]
                            re-produce dead-lettered records to their original topic
  outboxd republish -c FILE [--table NAME] [--since TIME] [--until TIME] [--time-column COL]
                    [--where SQL] [--batch N] [--dry-run]
                            publish the rows already in the outbox tables again (same records,
                            same DLQ); safe beside a running outboxd run
  outboxd version           print version, commit and Go version

Exit status: 0 clean stop, 1 runtime failure, 2 bad configuration or usage.
Signals: SIGINT, SIGTERM, SIGHUP and SIGQUIT (which first writes goroutine stacks to stderr)
stop gracefully: in-flight records drained within shutdown_timeout, position stored, exit 0 (1
when shutdown_timeout passed with records unacked). SIGPIPE is ignored.
`

// gcFloorMiB is the heap goal floor of outboxd run (see internal/gcfloor): small live heaps
// collect when the heap reaches it instead of at twice their size. Measured with outboxd-bench
// (own process): 32 MiB cuts GC CPU enough for the MariaDB drain and keeps peak RSS on the 1M-row
// backlog under 64 MiB; 40 MiB passed it (65.6-68.0 MiB).
const gcFloorMiB = 32

func main() {
	ignoreSIGPIPE()
	// stdout is a command's output: a write to a gone reader fails (EPIPE) and ends the command
	// (dlq tail | head). stderr carries the logs: lines to a gone reader are dropped.
	os.Exit(Main(os.Args[1:], os.Stdout, &dropWriter{w: os.Stderr}))
}

// Main runs one command and returns its exit status.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "version", "--version", "-v":
		c := commit
		if c == "" {
			if bi, ok := debug.ReadBuildInfo(); ok {
				for _, s := range bi.Settings {
					if s.Key == "vcs.revision" {
						c = s.Value
					}
				}
			}
		}
		fmt.Fprintf(stdout, "outboxd %s commit %s %s %s/%s\n", version, c, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return 0
	case "run":
		return runCmd(args[1:], stderr)
	case "check":
		return checkCmd(args[1:], stdout, stderr)
	case "offsets":
		return offsetsCmd(args[1:], stdout, stderr)
	case "dlq":
		return dlqCmd(args[1:], stdout, stderr)
	case "republish":
		return republishCmd(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "outboxd: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}

func loadConfig(name string, args []string, stderr io.Writer) (*config.Config, int) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return parseAndLoad(fs, name, args, stderr)
}

// parseAndLoad parses fs (which gets a -c flag added) and loads the config it names.
func parseAndLoad(fs *flag.FlagSet, name string, args []string, stderr io.Writer) (*config.Config, int) {
	path := fs.String("c", "", "config file (YAML)")
	if err := fs.Parse(args); err != nil {
		return nil, 2
	}
	if *path == "" || fs.NArg() > 0 {
		fmt.Fprintf(stderr, "outboxd %s: need -c FILE and no other arguments\n", name)
		return nil, 2
	}
	cfg, err := app.Load(*path) // config.Load, then the source adapter's checks
	if err != nil {
		fmt.Fprintf(stderr, "outboxd: %v\n", err)
		return nil, 2
	}
	return cfg, 0
}

func runCmd(args []string, stderr io.Writer) int {
	cfg, code := loadConfig("run", args, stderr)
	if cfg == nil {
		return code
	}
	log := app.NewLogger(cfg.Log, stderr)
	limit := gcfloor.Limit(gcFloorMiB<<20, gcfloor.Caps{InflightRecords: cfg.Kafka.MaxInflight, MaxRecordBytes: cfg.Kafka.MaxRecordBytes,
		InflightBytes: delivery.DefaultMaxInflightBytes, ReadAheadBytes: pipeline.DefaultReadAheadBytes})
	if stopGC, ok := gcfloor.StartWithLimit(gcFloorMiB<<20, limit); ok {
		defer stopGC()
		log.Debug("garbage collector: heap goal kept at or above a floor, soft memory limit from the caps (set GOGC or GOMEMLIMIT to manage it yourself)", "floor_mib", gcFloorMiB, "limit_mib", limit>>20)
	}
	ctx, stop := signalContext(stderr)
	defer stop()
	if err := app.Run(ctx, cfg, log); err != nil {
		log.Error("outboxd stopped with an error", "err", err)
		if config.IsConfigError(err) {
			return 2
		}
		return 1
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		log.Info("outboxd stopped")
	}
	return 0
}

func checkCmd(args []string, stdout, stderr io.Writer) int {
	cfg, code := loadConfig("check", args, stderr)
	if cfg == nil {
		return code
	}
	ctx, stop := signalContext(stderr)
	defer stop()
	if !app.Check(ctx, cfg, stdout) {
		return 1
	}
	return 0
}

func offsetsCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "show" && args[0] != "set") {
		fmt.Fprintf(stderr, "outboxd offsets: need show or set\n\n%s", usage)
		return 2
	}
	fs := flag.NewFlagSet("offsets "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	var pos *string
	if args[0] == "set" {
		pos = fs.String("position", "", "position to store: an LSN, GTID set or binlog-file:pos")
	}
	cfg, code := parseAndLoad(fs, "offsets "+args[0], args[1:], stderr)
	if cfg == nil {
		return code
	}
	ctx, stop := signalContext(stderr)
	defer stop()
	var err error
	if args[0] == "show" {
		err = app.OffsetsShow(ctx, cfg, stdout)
	} else {
		if *pos == "" {
			fmt.Fprintln(stderr, "outboxd offsets set: --position is required")
			return 2
		}
		err = app.OffsetsSet(ctx, cfg, source.Position(*pos), stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "outboxd offsets %s: %v\n", args[0], err)
		if config.IsConfigError(err) {
			return 2
		}
		return 1
	}
	return 0
}
