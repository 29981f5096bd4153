package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/offsets"
	"github.com/outboxd/outboxd/source"
)

// CheckResult is one preflight line: OK name, WARN name: reason — fix (OK with a Fix: the check
// passes, but a setting should change), or FAIL name: reason — fix.
type CheckResult struct {
	Name   string
	OK     bool
	Reason string
	Fix    string
}

func (r CheckResult) String() string {
	if r.OK && r.Fix != "" {
		return fmt.Sprintf("WARN %s: %s — %s", r.Name, r.Reason, r.Fix)
	}
	if r.OK {
		if r.Reason != "" {
			return fmt.Sprintf("OK   %s (%s)", r.Name, r.Reason)
		}
		return "OK   " + r.Name
	}
	return fmt.Sprintf("FAIL %s: %s — %s", r.Name, r.Reason, r.Fix)
}

// preflight runs the same checks as `outboxd check` and returns an error naming every FAIL.
// run refuses to start on a FAIL.
func preflight(ctx context.Context, c *config.Config, ad adapter, log *slog.Logger) error {
	var buf strings.Builder
	if check(ctx, c, ad, &buf) {
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
// returns false when any check failed. A config the source adapter refuses (see Validate) is
// one FAIL line.
func Check(ctx context.Context, c *config.Config, w io.Writer) bool {
	ad, err := adapterFor(c, nil)
	if err != nil {
		fmt.Fprintln(w, CheckResult{Name: "config", Reason: strings.TrimPrefix(err.Error(), "config: "), Fix: "fix the config file"})
		return false
	}
	return check(ctx, c, ad, w)
}

func check(ctx context.Context, c *config.Config, ad adapter, w io.Writer) bool {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var results []CheckResult
	// Positions in offsets.store kafka are not read here: reading them may wait for a
	// transaction of a crashed exactly_once producer, which only the pipeline's own producer ends.
	var stored func(context.Context) (source.Position, error)
	if c.Offsets.Store == "file" {
		stored = (&offsets.FileStore{Path: c.Offsets.Path, Source: ad.Name()}).Load
	}
	ad.Preflight(ctx, stored, func(name string, ok bool, reason, fix string) {
		results = append(results, CheckResult{Name: name, OK: ok, Reason: reason, Fix: fix})
	})
	results = append(results, checkOutbox(ctx, c, ad)...) // checkoutbox.go
	results = append(results, checkKafka(ctx, c)...)
	ok := true
	secrets := secretsOf(c, ad)
	for _, r := range results {
		r.Reason = Scrub(r.Reason, secrets...)
		r.Fix = Scrub(r.Fix, secrets...) // fixes quote config values too
		fmt.Fprintln(w, r.String())
		ok = ok && r.OK
	}
	return ok
}
