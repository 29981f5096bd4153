package mysql

// The retention lines of `outboxd check` (issue 17): how long the server keeps its binlogs
// against source.mysql.min_binlog_retention (WARN, not FAIL: a short retention loses the
// position only when outboxd is stopped or lags for longer), Amazon RDS / Aurora's `binlog
// retention hours`, which supersedes the server variables there, and the replica-side filters
// of preflight_replica.go. readRetention does the I/O; retentionLine and replicaLines decide.

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"
)

// DefaultMinBinlogRetention is source.mysql.min_binlog_retention when the key is absent (or 0).
const DefaultMinBinlogRetention = 24 * time.Hour

// RDS's limits on `binlog retention hours` (mysql.rds_set_configuration): RDS for MySQL keeps
// at most 7 days, Aurora MySQL (2.11+, 3) 90 days.
const (
	rdsMaxRetentionHours    = 168
	auroraMaxRetentionHours = 2160
)

// retentionVars are the server variables the retention line reads, lower-cased names.
var retentionVars = []string{"binlog_expire_logs_seconds", "expire_logs_days", "binlog_expire_logs_auto_purge",
	"max_binlog_total_size", "aurora_version", "basedir", "log_slave_updates", "log_replica_updates"}

// rdsConfig is what mysql.rds_show_configuration says of `binlog retention hours`.
type rdsConfig struct {
	Found bool   // the procedure returned a `binlog retention hours` row
	Hours string // its value; "" for NULL (RDS's default)
	Null  bool
}

// retention is what readRetention learns.
type retention struct {
	MariaDB bool
	Vars    map[string]string // retentionVars present on the server (absent: not there)
	RDS     *rdsConfig        // nil: no mysql.rds_show_configuration (not RDS / Aurora)
	RDSErr  error             // the procedure exists but could not be called or read
	// Host is source.dsn's host name ("" for a socket); AzureProcs and CloudSQL say the server
	// is Azure Database for MySQL (mysql.az_* procedures) or Cloud SQL (cloudsql_* variables):
	// see preflight_managed.go.
	Host                 string
	AzureProcs, CloudSQL bool
}

// aurora reports whether the server is Aurora MySQL (it has @@aurora_version).
func (r retention) aurora() bool { _, ok := r.Vars["aurora_version"]; return ok }

// looksRDS reports whether the server says it is RDS or Aurora without the procedure: Aurora's
// @@aurora_version, RDS's @@basedir under /rdsdbbin/, an RDS endpoint as source.dsn's host.
func (r retention) looksRDS() bool {
	return r.aurora() || strings.HasPrefix(r.Vars["basedir"], "/rdsdbbin") ||
		strings.HasSuffix(r.Host, ".rds.amazonaws.com") || strings.HasSuffix(r.Host, ".rds.amazonaws.com.cn")
}

// nullRow is a result row keyed by lower-cased column name.
type nullRow map[string]sql.NullString

// queryNamed runs a query and returns its rows by column name, NULL kept apart from "".
func queryNamed(c *client.Conn, q string, args ...any) ([]nullRow, error) {
	r, err := c.Execute(q, args...)
	if err != nil {
		return nil, cause(err)
	}
	defer r.Close()
	if r.Resultset == nil {
		return nil, nil
	}
	return namedRows(r.Resultset), nil
}

// namedRows returns a result set's rows by lower-cased column name, NULL kept apart from "".
func namedRows(r *gomysql.Resultset) []nullRow {
	out := make([]nullRow, r.RowNumber())
	for i := range out {
		out[i] = nullRow{}
		for j, f := range r.Fields {
			name := strings.ToLower(string(f.Name))
			if null, _ := r.IsNull(i, j); null {
				out[i][name] = sql.NullString{}
				continue
			}
			v, _ := r.GetString(i, j)
			out[i][name] = sql.NullString{String: strings.Clone(v), Valid: true}
		}
	}
	return out
}

// callNamed CALLs a procedure and returns the rows of its first result set (the connection
// must have CLIENT_MULTI_RESULTS: see connectMulti).
func callNamed(c *client.Conn, q string) ([]nullRow, error) {
	var rows []nullRow
	var first error
	seen := false
	_, err := c.ExecuteMultiple(q, func(r *gomysql.Result, err error) {
		switch {
		case err != nil:
			if first == nil {
				first = err
			}
		case !seen && r != nil && r.Resultset != nil && len(r.Fields) > 0:
			rows, seen = namedRows(r.Resultset), true
		}
	})
	if err == nil {
		err = first
	}
	if err != nil {
		return nil, cause(err)
	}
	return rows, nil
}

// connectMulti is connect with CLIENT_MULTI_RESULTS, which a CALL of a procedure that
// returns a result set needs (the server refuses it otherwise: ERROR 1312).
func connectMulti(ctx context.Context, d dsn) (*client.Conn, error) {
	dialer := &net.Dialer{Timeout: d.Timeout}
	c, err := client.ConnectWithDialer(ctx, d.Net, d.Addr, d.User, d.Password, d.DB, dialer.DialContext,
		func(c *client.Conn) error {
			if t := d.TLSConfig(); t != nil {
				c.SetTLSConfig(t)
			}
			return c.SetCapability(gomysql.CLIENT_MULTI_RESULTS)
		})
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", d.Redacted(), cause(err))
	}
	return c, nil
}

// readRetention reads the retention variables and, where mysql.rds_show_configuration exists,
// RDS's `binlog retention hours`.
func readRetention(c *client.Conn, mariadb bool, host string) (retention, error) {
	r := retention{MariaDB: mariadb, Vars: map[string]string{}, Host: strings.ToLower(host)}
	rows, err := query(c, "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('"+strings.Join(retentionVars, "','")+"')")
	if err != nil {
		return r, fmt.Errorf("read the binlog expiry variables: %w", err)
	}
	for _, row := range rows {
		r.Vars[strings.ToLower(row[0])] = strings.TrimSpace(row[1])
	}
	r.RDS, r.RDSErr = readRDSConfig(c, r.looksRDS())
	readManaged(c, &r)
	return r, nil
}

// readRDSConfig calls mysql.rds_show_configuration when information_schema.ROUTINES lists it
// (it lists the routines the user may execute). When it does not, the call is tried anyway:
// "does not exist" means not RDS, and so does a refusal (MySQL checks EXECUTE before
// existence) unless rdsHint (looksRDS) says the server is RDS. nil, nil: not RDS.
func readRDSConfig(c *client.Conn, rdsHint bool) (*rdsConfig, error) {
	listed, err := query(c, "SELECT 1 FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = 'mysql' "+
		"AND ROUTINE_NAME = 'rds_show_configuration' AND ROUTINE_TYPE = 'PROCEDURE'")
	if err != nil {
		listed = nil
	}
	rows, err := callNamed(c, "CALL mysql.rds_show_configuration")
	if err != nil {
		if me := myError(err); me != nil && len(listed) == 0 && (me.Code == gomysql.ER_SP_DOES_NOT_EXIST || !rdsHint &&
			(me.Code == gomysql.ER_PROCACCESS_DENIED_ERROR || me.Code == gomysql.ER_DBACCESS_DENIED_ERROR || me.Code == gomysql.ER_TABLEACCESS_DENIED_ERROR)) {
			return nil, nil
		}
		return &rdsConfig{}, fmt.Errorf("CALL mysql.rds_show_configuration: %w", err)
	}
	cfg := &rdsConfig{}
	for _, row := range rows {
		if name := row["name"]; strings.EqualFold(strings.TrimSpace(name.String), "binlog retention hours") {
			v := row["value"]
			cfg.Found, cfg.Null, cfg.Hours = true, !v.Valid || strings.EqualFold(v.String, "NULL"), strings.TrimSpace(v.String)
		}
	}
	return cfg, nil
}

// serverRetention is how long the server keeps binlogs by its own variables: keep is false
// when it never expires them (then d is 0); by names the variable that decides. MySQL 8: a
// non-zero binlog_expire_logs_seconds wins over expire_logs_days (they cannot both be non-zero
// at runtime), binlog_expire_logs_auto_purge=OFF (8.0.29+) turns expiry off. MariaDB 10.6+:
// the two are one setting in two units; older MariaDB and MySQL 5.7 have expire_logs_days only.
func serverRetention(vars map[string]string) (d time.Duration, keep bool, by string, err error) {
	if strings.EqualFold(vars["binlog_expire_logs_auto_purge"], "OFF") {
		return 0, false, "binlog_expire_logs_auto_purge=OFF", nil
	}
	if s, ok := vars["binlog_expire_logs_seconds"]; ok {
		secs, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, false, "", fmt.Errorf("binlog_expire_logs_seconds %q: %w", s, err)
		}
		if secs > 0 {
			return time.Duration(secs) * time.Second, true, "binlog_expire_logs_seconds=" + s, nil
		}
	}
	if s, ok := vars["expire_logs_days"]; ok {
		days, err := strconv.ParseFloat(s, 64)
		if err != nil || days < 0 {
			return 0, false, "", fmt.Errorf("expire_logs_days %q: not a number of days", s)
		}
		if days > 0 {
			return time.Duration(days * float64(24*time.Hour)).Round(time.Second), true, "expire_logs_days=" + s, nil
		}
	}
	return 0, false, "binlog_expire_logs_seconds and expire_logs_days are 0", nil
}

// retentionLine decides the "binlog retention" line: ok is false never (short retention is a
// WARN: ok with a fix); fix is "" when retention is long enough.
func retentionLine(r retention, min time.Duration) (reason, fix string) {
	if min <= 0 {
		min = DefaultMinBinlogRetention
	}
	horizon := fmt.Sprintf("source.mysql.min_binlog_retention is %s", fmtDuration(min))
	if r.RDS != nil {
		return rdsRetentionLine(r, min, horizon)
	}
	d, keep, by, err := serverRetention(r.Vars)
	if err != nil {
		return "cannot tell how long the server keeps binlogs: " + err.Error(),
			"check the server's binlog_expire_logs_seconds / expire_logs_days, then check again"
	}
	if svc := r.managed(); svc != "" {
		return managedRetentionLine(r, svc, d, keep, by, min, horizon) // preflight_managed.go
	}
	if !keep {
		reason = "binlogs are kept until purged by hand (" + by + ")"
		if n, _ := strconv.ParseUint(r.Vars["max_binlog_total_size"], 10, 64); n > 0 {
			return reason + ", but max_binlog_total_size=" + r.Vars["max_binlog_total_size"] +
					" purges the oldest binlogs once they exceed that size, however recent",
				"SET GLOBAL max_binlog_total_size = 0 (and in my.cnf), or size it for the longest time outboxd may be stopped"
		}
		return reason, ""
	}
	if d >= min {
		return fmt.Sprintf("binlogs are kept %s (%s); %s", fmtDuration(d), by, horizon), ""
	}
	reason = fmt.Sprintf("binlogs are purged after %s (%s), shorter than %s: an outboxd stopped or disconnected for longer "+
		"loses its position (the run then refuses to start until offsets are set again)", fmtDuration(d), by, horizon)
	return reason, serverRetentionFix(r, min)
}

// serverRetentionFix is the statement that keeps binlogs for min, per flavor and version.
func serverRetentionFix(r retention, min time.Duration) string {
	secs := int64(math.Ceil(min.Seconds()))
	days := int64(math.Ceil(min.Hours() / 24))
	managed := " (on a managed service set the same parameter in its parameter group / database flags / server parameters)"
	_, hasSecs := r.Vars["binlog_expire_logs_seconds"]
	switch {
	case r.MariaDB && hasSecs:
		return fmt.Sprintf("SET GLOBAL binlog_expire_logs_seconds = %d, and binlog_expire_logs_seconds = %d under [mariadb] in my.cnf%s", secs, secs, managed)
	case r.MariaDB, !hasSecs: // MariaDB < 10.6, MySQL 5.7
		return fmt.Sprintf("SET GLOBAL expire_logs_days = %d, and expire_logs_days = %d in my.cnf%s", days, days, managed)
	case r.Vars["expire_logs_days"] != "" && r.Vars["expire_logs_days"] != "0":
		// MySQL 8 refuses a non-zero binlog_expire_logs_seconds while expire_logs_days is non-zero.
		return fmt.Sprintf("SET PERSIST expire_logs_days = 0; SET PERSIST binlog_expire_logs_seconds = %d%s", secs, managed)
	default:
		return fmt.Sprintf("SET PERSIST binlog_expire_logs_seconds = %d%s", secs, managed)
	}
}

// rdsRetentionLine decides the line from `binlog retention hours`, which is what RDS and Aurora
// purge by (the server variables are not).
func rdsRetentionLine(r retention, min time.Duration, horizon string) (reason, fix string) {
	service, max := "Amazon RDS for MySQL", rdsMaxRetentionHours
	if r.MariaDB {
		service = "Amazon RDS for MariaDB"
	}
	if r.aurora() {
		service, max = "Aurora MySQL", auroraMaxRetentionHours
	}
	want := int64(math.Ceil(min.Hours()))
	set := want
	if set < rdsMaxRetentionHours {
		set = rdsMaxRetentionHours // a week: the value AWS's own CDC guides use
	}
	if set > int64(max) {
		set = int64(max)
	}
	fix = fmt.Sprintf("CALL mysql.rds_set_configuration('binlog retention hours', %d);", set)
	if want > int64(max) {
		fix += fmt.Sprintf(" (%s keeps at most %d hours: lower source.mysql.min_binlog_retention to that)", service, max)
	}
	switch {
	case r.RDSErr != nil:
		return fmt.Sprintf("%s: cannot read `binlog retention hours`: %v", service, r.RDSErr),
			"GRANT EXECUTE ON PROCEDURE mysql.rds_show_configuration to the user (or check as the master user); " + fix
	case !r.RDS.Found:
		return service + ": mysql.rds_show_configuration lists no `binlog retention hours`", "check it by hand; " + fix
	case r.RDS.Null:
		what := "binlogs are purged as soon as RDS no longer needs them, often within minutes"
		if r.aurora() {
			what = "binlogs are cleaned up lazily, usually within a day"
		}
		return fmt.Sprintf("%s: `binlog retention hours` is NULL (the default): %s, so a stopped outboxd loses its position; %s",
			service, what, horizon), fix
	}
	hours, err := strconv.ParseFloat(r.RDS.Hours, 64)
	if err != nil {
		return fmt.Sprintf("%s: `binlog retention hours` is %q, not a number of hours", service, r.RDS.Hours), fix
	}
	d := time.Duration(hours * float64(time.Hour))
	if d >= min {
		return fmt.Sprintf("%s: binlogs are kept %s (`binlog retention hours` = %s, which RDS purges by rather than "+
			"binlog_expire_logs_seconds); %s", service, fmtDuration(d), r.RDS.Hours, horizon), ""
	}
	return fmt.Sprintf("%s: binlogs are purged after %s (`binlog retention hours` = %s), shorter than %s: an outboxd stopped "+
		"or disconnected for longer loses its position", service, fmtDuration(d), r.RDS.Hours, horizon), fix
}

// fmtDuration prints whole hours as "24h", else as time.Duration does.
func fmtDuration(d time.Duration) string {
	if d%time.Hour == 0 {
		return fmt.Sprintf("%dh", d/time.Hour)
	}
	return d.String()
}

// checkRetention reports the "binlog retention" line (WARN when binlogs are purged sooner than
// source.mysql.min_binlog_retention) and the replica filter lines (preflight_replica.go: FAIL
// when a replica's filters keep outbox rows replicated from its primary out of its binlog).
// A server this cannot read is a WARN saying so, never a line left out.
func (a *Adapter) checkRetention(ctx context.Context, st ServerStatus, report func(name string, ok bool, reason, fix string)) {
	s := New(a.Config(), nil)
	if s.cfgErr != nil {
		report("binlog retention", true, "not checked: "+s.cfgErr.Error(), "fix source.dsn / source.tables")
		return
	}
	c, err := connectMulti(ctx, s.dsn)
	if err != nil {
		report("binlog retention", true, "not checked: "+err.Error(), "check the server is reachable, then check again")
		return
	}
	defer c.Close()
	mariadb := st.Flavor == gomysql.MariaDBFlavor
	host := ""
	if s.dsn.Net == "tcp" {
		host, _, _ = net.SplitHostPort(s.dsn.Addr)
	}
	r, err := readRetention(c, mariadb, host)
	if err != nil {
		report("binlog retention", true, "not checked: "+err.Error(), "GRANT the user access to the global variables, then check again")
	} else {
		reason, fix := retentionLine(r, a.set.MinBinlogRetention)
		report("binlog retention", true, reason, fix)
	}
	logUpdates := r.Vars["log_replica_updates"]
	if logUpdates == "" {
		logUpdates = r.Vars["log_slave_updates"]
	}
	fold := st.LowerCaseTableNames != 0
	reps, err := readReplicas(c, mariadb)
	if err != nil && mariadb {
		// MariaDB's SHOW ALL SLAVES STATUS needs SLAVE MONITOR, which the documented grants
		// (REPLICATION SLAVE, BINLOG MONITOR) lack: judge from what any user may read.
		l, lerr := mariadbReplicaFallback(c, logUpdates, s.captured, fold)
		if lerr == nil {
			l.reason += " (SHOW ALL SLAVES STATUS, which would name the primary and a stopped replica's filters, needs SLAVE MONITOR: " + err.Error() + ")"
			report(l.name, l.ok, l.reason, l.fix)
			return
		}
	}
	if err != nil {
		report("replica filters", true, "not checked: "+err.Error(),
			"GRANT REPLICATION CLIENT (MariaDB: SLAVE MONITOR) ON *.* to the user, then check again")
		return
	}
	for _, l := range replicaLines(reps, logUpdates, s.captured, fold) {
		report(l.name, l.ok, l.reason, l.fix)
	}
}
