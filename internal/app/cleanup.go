package app

// outbox.cleanup: the wiring of the housekeeping that deletes delivered outbox rows. The
// helper building it replaces this skeleton (cleanup helper, issue 16).

import (
	"context"
	"errors"
	"log/slog"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/metrics"
	"github.com/outboxd/outboxd/source"
)

// cleanupRun is the running housekeeping of one active term; the zero value (cleanup off)
// does nothing. Its methods are the pipeline's OnAccept and OnCommit hooks.
type cleanupRun struct{}

// startCleanup starts outbox.cleanup when enabled.
func startCleanup(ctx context.Context, c *config.Config, ad adapter, log *slog.Logger, m *metrics.Metrics) (*cleanupRun, error) {
	if !c.Outbox.Cleanup.Enabled {
		return &cleanupRun{}, nil
	}
	return nil, &config.Error{Key: "outbox.cleanup.enabled", Msg: errors.New("not built yet").Error()}
}

func (r *cleanupRun) accepted(tx *source.Tx)      {}
func (r *cleanupRun) committed(p source.Position) {}
func (r *cleanupRun) close()                      {}
