package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// failoverChecks is the failover slot line on PostgreSQL 17+ (issue 17: does the primary's
// synchronized_standby_slots name the slot). Placeholder of the skeleton.
func failoverChecks(ctx context.Context, conn *pgx.Conn, cfg Config, vnum int) []CheckResult {
	return nil
}
