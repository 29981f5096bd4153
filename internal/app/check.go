package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/source/postgres"
)

// CheckResult is one preflight line: OK name, or FAIL name: reason — fix.
type CheckResult struct {
	Name   string
	OK     bool
	Reason string
	Fix    string
}

func (r CheckResult) String() string {
	if r.OK {
		if r.Reason != "" {
			return fmt.Sprintf("OK   %s (%s)", r.Name, r.Reason)
		}
		return "OK   " + r.Name
	}
	return fmt.Sprintf("FAIL %s: %s — %s", r.Name, r.Reason, r.Fix)
}

// Preflight runs the same checks as `outboxd check` and returns an error naming every FAIL.
// run refuses to start on a FAIL.
func Preflight(ctx context.Context, c *config.Config, log *slog.Logger) error {
	var buf strings.Builder
	if Check(ctx, c, &buf) {
		return nil
	}
	var fails []string
	for _, line := range strings.Split(buf.String(), "\n") {
		if strings.HasPrefix(line, "FAIL ") {
			fails = append(fails, strings.TrimPrefix(line, "FAIL "))
			log.Error("preflight check failed", "check", strings.TrimPrefix(line, "FAIL "))
		}
	}
	return fmt.Errorf("preflight failed (%d check(s)); see `outboxd check`: %s", len(fails), strings.Join(fails, "; "))
}

// Check runs every preflight check of the contract and writes one line per check to w. It
// returns false when any check failed.
func Check(ctx context.Context, c *config.Config, w io.Writer) bool {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var results []CheckResult
	switch c.Source.Type {
	case "postgres":
		results = append(results, checkPostgres(ctx, c)...)
	case "mysql":
		results = append(results, checkMySQL(ctx, c)...)
		results = append(results, checkMySQLStart(ctx, c)...) // mysqlstart.go
	}
	results = append(results, checkKafka(ctx, c)...)
	ok := true
	secrets := secretsOf(c)
	for _, r := range results {
		r.Reason = Scrub(r.Reason, secrets...)
		r.Fix = Scrub(r.Fix, secrets...) // fixes quote config values too
		fmt.Fprintln(w, r.String())
		ok = ok && r.OK
	}
	return ok
}

func checkPostgres(ctx context.Context, c *config.Config) []CheckResult {
	var out []CheckResult
	for _, r := range postgres.Preflight(ctx, postgres.Config{DSN: c.Source.DSN, Tables: c.Source.Tables,
		Slot: c.Source.Postgres.Slot, Publication: c.Source.Postgres.Publication, Columns: postgresColumns(c)}) {
		out = append(out, CheckResult{Name: r.Name, OK: r.OK, Reason: r.Reason, Fix: r.Fix})
	}
	return out
}

// postgresColumns are the outbox columns outboxd reads: id, aggregate id, payload, the aggregate
// type when the topic is routed by it, and the header columns.
func postgresColumns(c *config.Config) []string {
	cols := []string{c.Outbox.Columns.ID, c.Outbox.Columns.AggregateID, c.Outbox.Columns.Payload}
	if strings.Contains(c.Outbox.Topic, "${routedByValue}") {
		cols = append(cols, c.Outbox.Columns.AggregateType)
	}
	for _, h := range c.Outbox.Headers {
		cols = append(cols, h.Column)
	}
	return cols
}
