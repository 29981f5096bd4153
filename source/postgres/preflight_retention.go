package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// retentionChecks are the WAL retention WARN lines (issue 17: max_slot_wal_keep_size = -1, the
// slot's safe_wal_size below source.postgres.min_safe_wal_size). Placeholder of the skeleton.
func retentionChecks(ctx context.Context, conn *pgx.Conn, cfg Config, vnum int) []CheckResult {
	return nil
}
