package app

import (
	"context"
	"fmt"
	"strings"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/transform/outbox"
)

// messageSource is an adapter that may carry outbox events as messages (the tableless outbox,
// source.postgres.messages; the router parses their content): MessagePrefix is "" when off.
type messageSource interface{ MessagePrefix() string }

// checkOutbox is one `outboxd check` line per outbox table: whether its columns and their types
// (listed by the source adapter, outboxLister) fit the outbox options, as the router itself
// judges them (outbox.Router.CheckTable), so a table every row of which would be dead-lettered
// fails before the run starts. An adapter that cannot list columns gives no lines, and a table
// that does not exist none (the source's preflight fails it).
func checkOutbox(ctx context.Context, c *config.Config, ad adapter) []CheckResult {
	l, ok := ad.(outboxLister)
	if !ok {
		return nil
	}
	r, err := outbox.New(config.OutboxConfig(c))
	if err != nil {
		return []CheckResult{{Name: "outbox options", Reason: err.Error(), Fix: "fix the outbox section of the config file"}}
	}
	var out []CheckResult
	for _, t := range c.Source.Tables {
		name := "outbox table " + t
		cols, types, ok, err := l.OutboxTableColumns(ctx, t)
		switch {
		case err != nil:
			out = append(out, CheckResult{Name: name, Reason: "cannot list its columns: " + err.Error(),
				Fix: "check source.dsn and that its role may read the catalog (information_schema / pg_attribute)"})
		case !ok: // the source's own table line fails it already
		default:
			if problems := r.CheckTable(t, cols, types); len(problems) > 0 {
				out = append(out, CheckResult{Name: name, Reason: strings.Join(problems, "; "),
					Fix: "change the table or the outbox options as each problem says; until then every row of the table would be dead-lettered"})
			} else {
				out = append(out, CheckResult{Name: name, OK: true,
					Reason: fmt.Sprintf("columns %s; %s", strings.Join(r.Columns(), ", "), r.Summary())})
			}
		}
	}
	if ms, ok := ad.(messageSource); ok && ms.MessagePrefix() != "" {
		// The tableless outbox has no table to check: say what the content must hold.
		out = append(out, CheckResult{Name: "outbox messages " + ms.MessagePrefix(), OK: true,
			Reason: fmt.Sprintf("JSON object members %s; %s", strings.Join(r.Columns(), ", "), r.Summary())})
	}
	return out
}
