package mysql

// Binlog retention on managed MySQL services whose variables do not mean what they mean on a
// self-hosted server (issue 17). Azure Database for MySQL: binlog_expire_logs_seconds=0, its
// default, deletes a binlog as soon as the service's backup and replicas are done with it.
// Cloud SQL for MySQL: binlogs on disk are also purged after the instance's
// transactionLogRetentionDays (not visible over SQL), whatever the flags say. RDS and Aurora
// purge by `binlog retention hours` instead (preflight_retention.go).

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
)

// Service names of the lines.
const (
	azureMySQL = "Azure Database for MySQL"
	cloudSQL   = "Cloud SQL for MySQL"
)

// azureHostSuffixes are Azure Database for MySQL server endpoints (public, China, US Gov).
var azureHostSuffixes = []string{".mysql.database.azure.com", ".mysql.database.chinacloudapi.cn", ".mysql.database.usgovcloudapi.net"}

// readManaged records what tells Azure and Cloud SQL apart from a self-hosted server:
// Azure's mysql.az_* procedures (mysql.az_load_timezone and others), Cloud SQL's cloudsql_*
// variables. A query refused is no evidence either way.
func readManaged(c *client.Conn, r *retention) {
	if rows, err := query(c, `SELECT 1 FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = 'mysql' AND ROUTINE_NAME LIKE 'az\_%' LIMIT 1`); err == nil {
		r.AzureProcs = len(rows) > 0
	}
	if rows, err := query(c, `SHOW GLOBAL VARIABLES LIKE 'cloudsql\_%'`); err == nil {
		r.CloudSQL = len(rows) > 0
	}
}

// managed names the service when retention there is not what the variables alone say; "" for
// a self-hosted server (and for RDS, which has its own line).
func (r retention) managed() string {
	switch {
	case r.AzureProcs || hasAnySuffix(r.Host, azureHostSuffixes):
		return azureMySQL
	case r.CloudSQL:
		return cloudSQL
	}
	return ""
}

func hasAnySuffix(s string, suffixes []string) bool {
	for _, x := range suffixes {
		if strings.HasSuffix(s, x) {
			return true
		}
	}
	return false
}

// managedRetentionLine is retentionLine for svc, given what the variables say (serverRetention).
func managedRetentionLine(r retention, svc string, d time.Duration, keep bool, by string, min time.Duration, horizon string) (reason, fix string) {
	secs := int64(math.Ceil(min.Seconds()))
	switch svc {
	case azureMySQL:
		fix = fmt.Sprintf("set the server parameter binlog_expire_logs_seconds to %d (portal: Server parameters; or az mysql flexible-server "+
			"parameter set --resource-group <rg> --server-name <server> --name binlog_expire_logs_seconds --value %d)", secs, secs)
		switch {
		case !keep:
			return fmt.Sprintf("%s: %s, which there means a binlog is deleted as soon as the service's backup and replicas are done with it, "+
				"not kept: a stopped outboxd loses its position; %s", svc, by, horizon), fix
		case d < min:
			return fmt.Sprintf("%s: binlogs are purged after %s (%s), shorter than %s: an outboxd stopped or disconnected for longer "+
				"loses its position", svc, fmtDuration(d), by, horizon), fix
		}
		return fmt.Sprintf("%s: binlogs are kept %s (%s); %s", svc, fmtDuration(d), by, horizon), ""
	}
	// Cloud SQL: the flags bound retention only when non-zero, transactionLogRetentionDays
	// (1 to 7 days, Enterprise Plus 35) always.
	days := int64(math.Ceil(min.Hours() / 24))
	tlrd := fmt.Sprintf("gcloud sql instances patch <instance> --retained-transaction-log-days=%d", days)
	flag := fmt.Sprintf("gcloud sql instances patch <instance> --database-flags=binlog_expire_logs_seconds=%d "+
		"(the list replaces all of the instance's flags: repeat the others)", secs)
	limit := fmt.Sprintf("binlogs on disk are also purged after the instance's transactionLogRetentionDays, which SQL cannot read "+
		"(at least 1 day; keep it at %d or more)", days)
	what := "binlog_expire_logs_seconds / expire_logs_days set no limit (" + by + ")"
	if keep {
		what = fmt.Sprintf("binlogs are kept at most %s (%s)", fmtDuration(d), by)
	}
	switch {
	case keep && d < min:
		fix = flag
		if min > 24*time.Hour {
			fix += "; and " + tlrd
		}
		return fmt.Sprintf("%s: binlogs are purged after %s (%s), shorter than %s: an outboxd stopped or disconnected for longer "+
			"loses its position; %s", svc, fmtDuration(d), by, horizon, limit), fix
	case min > 24*time.Hour:
		return fmt.Sprintf("%s: %s; %s; %s", svc, what, limit, horizon), "make sure of it: " + tlrd
	}
	return fmt.Sprintf("%s: %s; %s; %s", svc, what, limit, horizon), ""
}
