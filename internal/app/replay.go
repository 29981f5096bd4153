package app

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
	"github.com/outboxd/outboxd/transform/outbox"
)

// ReplayRoute is the route `dlq replay` uses for row-as-JSON dead letters (the transform failed,
// so the dead letter holds the row's text values, not their types): it gives each row its
// table's column types, read once per table from the source with the adapter's catalog query
// (as `outboxd check` reads them), and routes it with router. So a replayed row is encoded as
// the pipeline encodes it (an int key under outbox.encoding json is 42, not "42"; a boolean
// header is true, not t). A table whose types cannot be read fails the row's replay with the
// reason, rather than replaying other bytes than the pipeline would have sent.
func ReplayRoute(ctx context.Context, c *config.Config, router *outbox.Router, log *slog.Logger) (func(*source.Row, time.Time) (sink.Record, error), error) {
	ad, err := adapterFor(c, log)
	if err != nil {
		return nil, err
	}
	l, ok := ad.(outboxLister)
	if !ok {
		return router.Route, nil
	}
	type tableTypes struct {
		byName map[string]source.Type
		err    error
	}
	var mu sync.Mutex
	tables := map[string]*tableTypes{}
	lookup := func(table string) *tableTypes {
		mu.Lock()
		defer mu.Unlock()
		if tt, ok := tables[table]; ok {
			return tt
		}
		tt := &tableTypes{}
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		cols, types, ok, err := l.OutboxTableColumns(lctx, table)
		switch {
		case err != nil:
			tt.err = fmt.Errorf("cannot read the column types of %s from the source (needed to encode the row as the pipeline does): %w; check source.dsn and the role's catalog access", table, err)
		case !ok:
			tt.err = fmt.Errorf("table %s no longer exists in the source, so its column types are unknown: recreate it or write a new outbox row", table)
		case types != nil:
			tt.byName = make(map[string]source.Type, len(cols))
			for i, col := range cols {
				tt.byName[col] = types[i]
			}
		}
		tables[table] = tt
		return tt
	}
	return func(row *source.Row, commit time.Time) (sink.Record, error) {
		if row.Message {
			// A message row (tableless outbox): no table, no column types to read; the router
			// parses the content and types its members as the pipeline did.
			return router.Route(row, commit)
		}
		tt := lookup(row.Table)
		if tt.err != nil {
			return sink.Record{}, tt.err
		}
		if tt.byName != nil {
			row.Types = make([]source.Type, len(row.Columns))
			for i, col := range row.Columns {
				t, ok := tt.byName[col]
				if !ok {
					t = source.Type{Kind: source.KindString, Optional: true} // a column dropped since: its text
				}
				row.Types[i] = t
			}
		}
		return router.Route(row, commit)
	}, nil
}
