package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/outboxd/outboxd/internal/app"
	"github.com/outboxd/outboxd/internal/config"
)

const republishUsage = `Usage:
  outboxd republish -c FILE [--table NAME] [--since TIME] [--until TIME] [--time-column COLUMN]
                    [--where SQL] [--batch N] [--dry-run]
      publish the rows already in the outbox tables (source.tables) again, through the same
      transform, producer and DLQ as outboxd run: each record has the id header, key, value and
      headers the stream gave its row, so consumers deduplicate by id. Rows come in the scan's
      order (outbox.order_column, else the order the table keeps), table by table, from one
      consistent snapshot per table. Safe beside a running outboxd run: the stored position,
      the replication slot and the standby lock are never touched.
  --table NAME        one of source.tables (default: all of them, in order)
  --since TIME        rows whose time column is at or after TIME (RFC 3339, or a date: UTC midnight)
  --until TIME        rows whose time column is before TIME
  --time-column COL   the column --since/--until bound (default: outbox.timestamp's column:<name>)
  --where SQL         an SQL condition ANDed to the scan's (e.g. "aggregatetype = 'order'")
  --batch N           rows per scan batch (default 1000)
  --dry-run           count and route every row (topic, key) without producing; a summary per topic
Progress: a bar on stderr when it is a terminal, else a line every 5s. The summary goes to stdout.

Exit status: 0 every row delivered or dead-lettered (the summary says how many were
dead-lettered), 1 a runtime failure (with kafka.on_permanent_error: stop, the first record that
cannot be delivered), 2 bad configuration or usage.
`

// timeFlag is a --since/--until value: RFC 3339 or a date (UTC midnight).
type timeFlag struct{ t *time.Time }

func (f timeFlag) String() string {
	if f.t == nil || f.t.IsZero() {
		return ""
	}
	return f.t.Format(time.RFC3339Nano)
}

func (f timeFlag) Set(s string) error {
	t, err := parseTime(s)
	if err != nil {
		return err
	}
	*f.t = t
	return nil
}

// parseTime reads an RFC 3339 time (2026-12-01T10:00:00Z, with a fraction or an offset) or a
// date (2026-12-01, UTC midnight).
func parseTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%q is not an RFC 3339 time (2026-12-01T10:00:00Z, 2026-12-01T10:00:00.5+02:00) or a date (2026-12-01)", s)
}

func republishCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("republish", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, republishUsage) }
	var o app.RepublishOptions
	fs.StringVar(&o.Table, "table", "", "one of source.tables (default: all)")
	fs.Var(timeFlag{&o.Since}, "since", "rows at or after this time (RFC 3339 or a date)")
	fs.Var(timeFlag{&o.Until}, "until", "rows before this time (RFC 3339 or a date)")
	fs.StringVar(&o.TimeColumn, "time-column", "", "the column --since/--until bound (default: outbox.timestamp's column:<name>)")
	fs.StringVar(&o.Where, "where", "", "SQL condition ANDed to the scan's")
	fs.IntVar(&o.Batch, "batch", 0, "rows per scan batch (default 1000)")
	fs.BoolVar(&o.DryRun, "dry-run", false, "count and route without producing")
	cfg, code := parseAndLoad(fs, "republish", args, stderr)
	if cfg == nil {
		return code
	}
	if o.Batch == 0 && flagSet(fs, "batch") {
		fmt.Fprintf(stderr, "outboxd republish: --batch: 0: must be between 1 and 100000 rows\n")
		return 2
	}
	o.Terminal = isTerminal(stderr)
	ctx, stop := signalContext(stderr)
	defer stop()
	err := app.Republish(ctx, cfg, o, stdout, stderr)
	var ue *app.UsageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "outboxd republish: %v\n\n%s", err, republishUsage)
		return 2
	case config.IsConfigError(err):
		fmt.Fprintf(stderr, "outboxd republish: %v\n", err)
		return 2
	default:
		fmt.Fprintf(stderr, "outboxd republish: %s\n", scrubKafka(cfg, err))
		return 1
	}
}

// flagSet tells whether the flag name was given.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// isTerminal tells whether w (the command's stderr, maybe wrapped in a dropWriter) is a
// terminal (a character device; TERM=dumb is not one for a bar).
func isTerminal(w io.Writer) bool {
	if d, ok := w.(*dropWriter); ok {
		w = d.w
	}
	f, ok := w.(*os.File)
	if !ok || os.Getenv("TERM") == "dumb" {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
