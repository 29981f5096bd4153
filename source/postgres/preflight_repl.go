package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// replicationChecks proves the role may replicate by doing what outboxd does (issue 17):
// placeholder of the skeleton, replaced by the preflight helper. It returns the
// "replication privilege" line(s).
func replicationChecks(ctx context.Context, conn *pgx.Conn, cfg Config) []CheckResult {
	return []CheckResult{{Name: "replication privilege", Reason: "not checked yet (skeleton)", Fix: "—"}}
}

// replicationProven reports whether replicationChecks proved the role may replicate.
func replicationProven(res []CheckResult) bool {
	for _, r := range res {
		if !r.OK {
			return false
		}
	}
	return len(res) > 0
}
