package mysql

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestRetentionServerVariables: which variable decides how long binlogs are kept (MySQL 8: a
// non-zero binlog_expire_logs_seconds wins, then expire_logs_days; auto_purge=OFF keeps all;
// MariaDB: fractional expire_logs_days; MySQL 5.7: days only), and the line and fix for each.
func TestRetentionServerVariables(t *testing.T) {
	day := 24 * time.Hour
	for _, tc := range []struct {
		name    string
		mariadb bool
		vars    map[string]string
		min     time.Duration
		want    time.Duration // 0: never expires
		by      string
		warn    bool
		fix     string // substring of the fix ("" with warn false)
	}{
		{"mysql8 default", false, map[string]string{"binlog_expire_logs_seconds": "2592000", "expire_logs_days": "0"}, 0, 30 * day, "binlog_expire_logs_seconds=2592000", false, ""},
		{"mysql8 seconds win over days", false, map[string]string{"binlog_expire_logs_seconds": "3600", "expire_logs_days": "10"}, 0, time.Hour, "binlog_expire_logs_seconds=3600", true,
			"SET PERSIST expire_logs_days = 0; SET PERSIST binlog_expire_logs_seconds = 86400"},
		{"mysql8 days when seconds are 0", false, map[string]string{"binlog_expire_logs_seconds": "0", "expire_logs_days": "2"}, 72 * time.Hour, 2 * day, "expire_logs_days=2", true,
			"SET PERSIST expire_logs_days = 0; SET PERSIST binlog_expire_logs_seconds = 259200"},
		{"mysql8 short seconds", false, map[string]string{"binlog_expire_logs_seconds": "7200"}, 0, 2 * time.Hour, "binlog_expire_logs_seconds=7200", true,
			"SET PERSIST binlog_expire_logs_seconds = 86400"},
		{"mysql8 both 0", false, map[string]string{"binlog_expire_logs_seconds": "0", "expire_logs_days": "0"}, 0, 0, "binlog_expire_logs_seconds and expire_logs_days are 0", false, ""},
		{"mysql8 auto purge off", false, map[string]string{"binlog_expire_logs_seconds": "60", "binlog_expire_logs_auto_purge": "OFF"}, 0, 0, "binlog_expire_logs_auto_purge=OFF", false, ""},
		{"mysql57 days only", false, map[string]string{"expire_logs_days": "0.5"}, 0, 12 * time.Hour, "expire_logs_days=0.5", true, "SET GLOBAL expire_logs_days = 1, and expire_logs_days = 1 in my.cnf"},
		{"mariadb linked", true, map[string]string{"binlog_expire_logs_seconds": "43200", "expire_logs_days": "0.500000"}, 0, 12 * time.Hour, "binlog_expire_logs_seconds=43200", true,
			"SET GLOBAL binlog_expire_logs_seconds = 86400, and binlog_expire_logs_seconds = 86400 under [mariadb] in my.cnf"},
		{"mariadb 10.5 days", true, map[string]string{"expire_logs_days": "3"}, 7 * day, 3 * day, "expire_logs_days=3", true, "SET GLOBAL expire_logs_days = 7"},
		{"mariadb long enough", true, map[string]string{"binlog_expire_logs_seconds": "604800", "expire_logs_days": "7.000000"}, 0, 7 * day, "binlog_expire_logs_seconds=604800", false, ""},
		{"mariadb never but size cap", true, map[string]string{"binlog_expire_logs_seconds": "0", "expire_logs_days": "0", "max_binlog_total_size": "1073741824"}, 0, 0,
			"binlog_expire_logs_seconds and expire_logs_days are 0", true, "SET GLOBAL max_binlog_total_size = 0"},
	} {
		d, keep, by, err := serverRetention(tc.vars)
		if err != nil || d != tc.want || keep != (tc.want != 0) || by != tc.by {
			t.Errorf("%s: serverRetention = %v %v %q %v, want %v %q", tc.name, d, keep, by, err, tc.want, tc.by)
		}
		reason, fix := retentionLine(retention{MariaDB: tc.mariadb, Vars: tc.vars}, tc.min)
		if (fix != "") != tc.warn || !strings.Contains(fix, tc.fix) || !strings.Contains(reason, tc.by) {
			t.Errorf("%s: line %q — %q, want warn %v with fix containing %q", tc.name, reason, fix, tc.warn, tc.fix)
		}
		if tc.want == 0 && !strings.HasPrefix(reason, "binlogs are kept until purged by hand") {
			t.Errorf("%s: never-expiring reason %q", tc.name, reason)
		}
		if tc.warn && tc.want != 0 && !strings.Contains(reason, "loses its position") {
			t.Errorf("%s: warn reason does not say what is at stake: %q", tc.name, reason)
		}
	}
	if _, fix := retentionLine(retention{Vars: map[string]string{"binlog_expire_logs_seconds": "soon"}}, 0); fix == "" {
		t.Error("an unparseable variable must be a WARN, not an OK")
	}
}

// TestRetentionRDS: RDS's `binlog retention hours` supersedes the server variables; NULL (the
// default) and short values WARN with the rds_set_configuration call, Aurora's limits differ.
func TestRetentionRDS(t *testing.T) {
	long := map[string]string{"binlog_expire_logs_seconds": "2592000"}
	aurora := map[string]string{"binlog_expire_logs_seconds": "2592000", "aurora_version": "3.05.2"}
	for _, tc := range []struct {
		name      string
		vars      map[string]string
		rds       rdsConfig
		rdsErr    error
		min       time.Duration
		warn      bool
		reason    string
		fixSubstr string
	}{
		{"rds null", long, rdsConfig{Found: true, Null: true}, nil, 0, true, "Amazon RDS for MySQL: `binlog retention hours` is NULL (the default): binlogs are purged as soon as RDS no longer needs them",
			"CALL mysql.rds_set_configuration('binlog retention hours', 168);"},
		{"aurora null", aurora, rdsConfig{Found: true, Null: true}, nil, 0, true, "Aurora MySQL: `binlog retention hours` is NULL (the default): binlogs are cleaned up lazily",
			"CALL mysql.rds_set_configuration('binlog retention hours', 168);"},
		{"rds 12h", long, rdsConfig{Found: true, Hours: "12"}, nil, 0, true, "binlogs are purged after 12h (`binlog retention hours` = 12)", "'binlog retention hours', 168"},
		{"rds 168h", long, rdsConfig{Found: true, Hours: "168"}, nil, 0, false, "binlogs are kept 168h (`binlog retention hours` = 168, which RDS purges by", ""},
		{"rds min over max", long, rdsConfig{Found: true, Hours: "168"}, nil, 240 * time.Hour, true, "shorter than source.mysql.min_binlog_retention is 240h",
			"'binlog retention hours', 168); (Amazon RDS for MySQL keeps at most 168 hours"},
		{"aurora 240h wanted", aurora, rdsConfig{Found: true, Hours: "24"}, nil, 240 * time.Hour, true, "Aurora MySQL: binlogs are purged after 24h", "'binlog retention hours', 240);"},
		{"rds unreadable", long, rdsConfig{}, errors.New("execute command denied"), 0, true, "cannot read `binlog retention hours`: execute command denied", "GRANT EXECUTE"},
		{"rds no row", long, rdsConfig{}, nil, 0, true, "lists no `binlog retention hours`", "rds_set_configuration"},
	} {
		rds := tc.rds
		reason, fix := retentionLine(retention{Vars: tc.vars, RDS: &rds, RDSErr: tc.rdsErr}, tc.min)
		if tc.name == "rds null" {
			if mreason, _ := retentionLine(retention{MariaDB: true, Vars: tc.vars, RDS: &rds}, tc.min); !strings.HasPrefix(mreason, "Amazon RDS for MariaDB: ") {
				t.Errorf("RDS for MariaDB: %q", mreason)
			}
		}
		if (fix != "") != tc.warn || !strings.Contains(reason, tc.reason) || !strings.Contains(fix, tc.fixSubstr) {
			t.Errorf("%s: %q — %q", tc.name, reason, fix)
		}
	}
}

// TestRetentionSetting: source.mysql.min_binlog_retention's default and its validation.
func TestRetentionSetting(t *testing.T) {
	a := NewAdapter(Settings{DSN: "mysql://root@h:3306/app"}, nil)
	if a.set.MinBinlogRetention != 24*time.Hour || a.Validate() != nil {
		t.Errorf("default %v, validate %v", a.set.MinBinlogRetention, a.Validate())
	}
	err := NewAdapter(Settings{DSN: "mysql://root@h:3306/app", MinBinlogRetention: -time.Hour}, nil).Validate()
	var se *SettingError
	if !errors.As(err, &se) || se.Key != "source.mysql.min_binlog_retention" || !strings.Contains(se.Msg, "-1h0m0s") {
		t.Errorf("negative: %v", err)
	}
	if d := fmtDuration(90 * time.Minute); d != "1h30m0s" {
		t.Errorf("fmtDuration: %s", d)
	}
}

// TestRetentionReplicaFilterRules: MySQL's evaluation order of replica filters for row events.
func TestRetentionReplicaFilterRules(t *testing.T) {
	k := tableKey{"app", "outbox"}
	for _, tc := range []struct {
		name   string
		f      replicaFilters
		fold   bool
		filter string // "" when replicated
	}{
		{"no filters", replicaFilters{}, false, ""},
		{"do-db lists it", replicaFilters{DoDB: []string{"x", "app"}}, false, ""},
		{"do-db lacks it", replicaFilters{DoDB: []string{"x"}}, false, "replicate_do_db"},
		{"do-db wins over ignore-db", replicaFilters{DoDB: []string{"app"}, IgnoreDB: []string{"app"}}, false, ""},
		{"ignore-db", replicaFilters{IgnoreDB: []string{"app"}}, false, "replicate_ignore_db"},
		{"ignore-db other case, case-sensitive", replicaFilters{IgnoreDB: []string{"APP"}}, false, ""},
		{"ignore-db other case, folded", replicaFilters{IgnoreDB: []string{"APP"}}, true, "replicate_ignore_db"},
		{"do-table lists it", replicaFilters{DoTable: []string{"app.outbox"}}, false, ""},
		{"do-table lacks it", replicaFilters{DoTable: []string{"app.other"}}, false, "replicate_do_table"},
		{"do-table beats ignore-table", replicaFilters{DoTable: []string{"app.outbox"}, IgnoreTable: []string{"app.outbox"}}, false, ""},
		{"ignore-table", replicaFilters{IgnoreTable: []string{"app.outbox"}}, false, "replicate_ignore_table"},
		{"ignore-table beats wild-do", replicaFilters{IgnoreTable: []string{"app.outbox"}, WildDoTable: []string{"app.%"}}, false, "replicate_ignore_table"},
		{"wild-do matches", replicaFilters{WildDoTable: []string{"ap_.out%"}}, false, ""},
		{"wild-do beats wild-ignore", replicaFilters{WildDoTable: []string{"app.%"}, WildIgnoreTable: []string{"%.%"}}, false, ""},
		{"wild-ignore", replicaFilters{WildIgnoreTable: []string{"APP.out%"}}, false, "replicate_wild_ignore_table"},
		{"wild-do elsewhere", replicaFilters{WildDoTable: []string{"other.%"}}, false, "replicate_do_table"},
		{"escaped underscore", replicaFilters{WildIgnoreTable: []string{`app.out\_ox`}}, false, ""},
		{"db ok then table rules", replicaFilters{DoDB: []string{"app"}, IgnoreTable: []string{"app.outbox"}}, false, "replicate_ignore_table"},
		{"only ignore-table elsewhere", replicaFilters{IgnoreTable: []string{"app.other"}}, false, ""},
	} {
		e := tc.f.excludes(k, tc.fold)
		got := ""
		if e != nil {
			got = e.Filter
			if e.Why == "" {
				t.Errorf("%s: exclusion without a reason", tc.name)
			}
		}
		if got != tc.filter {
			t.Errorf("%s: excluded by %q, want %q (%+v)", tc.name, got, tc.filter, e)
		}
	}
	for _, tc := range []struct {
		p, s string
		want bool
	}{
		{"%", "", true}, {"a%b", "ab", true}, {"a%b", "axxb", true}, {"a%b", "axxc", false}, {"a_c", "abc", true},
		{"a_c", "ac", false}, {`a\%`, "a%", true}, {`a\%`, "ab", false}, {"%.%", "app.outbox", true}, {"app.outbox%", "app.outbox", true},
	} {
		if got := likeMatch(tc.p, tc.s); got != tc.want {
			t.Errorf("likeMatch(%q, %q) = %v", tc.p, tc.s, got)
		}
	}
}

// TestRetentionReplicaLines: the "replica filters" line for a non-replica, a replica without
// log_slave_updates, a table every channel filters out (FAIL, with each channel's fix), one
// that only some channels filter (WARN).
func TestRetentionReplicaLines(t *testing.T) {
	captured := map[tableKey]string{{"app", "outbox"}: "app.outbox", {"app", "outbox2"}: "app.outbox2"}
	one := func(ls []checkLine) checkLine {
		t.Helper()
		if len(ls) != 1 || ls[0].name != "replica filters" {
			t.Fatalf("lines %+v", ls)
		}
		return ls[0]
	}
	if l := one(replicaLines(nil, "OFF", captured, false)); !l.ok || l.fix != "" || !strings.Contains(l.reason, "not a replica") {
		t.Errorf("not a replica: %+v", l)
	}
	ign := replicaFilters{Source: "10.0.0.1:3306", IgnoreDB: []string{"logs", "app"}}
	if l := one(replicaLines([]replicaFilters{ign}, "OFF", captured, false)); !l.ok || l.fix == "" || !strings.Contains(l.reason, "log_slave_updates is OFF") {
		t.Errorf("no log_slave_updates: %+v", l)
	}
	l := one(replicaLines([]replicaFilters{ign}, "ON", captured, false))
	if l.ok || !strings.Contains(l.reason, "rows of app.outbox replicated from the primary are not applied here") ||
		!strings.Contains(l.reason, "rows of app.outbox2") || !strings.Contains(l.reason, "a replica of 10.0.0.1:3306") ||
		!strings.Contains(l.fix, "STOP REPLICA SQL_THREAD; CHANGE REPLICATION FILTER REPLICATE_IGNORE_DB = (logs); START REPLICA SQL_THREAD") {
		t.Errorf("ignore-db, MySQL: %+v", l)
	}
	mdb := replicaFilters{Source: "p:3306", MariaDB: true, Channel: "east", WildIgnoreTable: []string{"app.outbox%", "tmp.%"}}
	l = one(replicaLines([]replicaFilters{mdb}, "1", captured, false))
	if l.ok || !strings.Contains(l.fix, "SET default_master_connection = 'east'; STOP SLAVE; SET GLOBAL replicate_wild_ignore_table = 'tmp.%'; START SLAVE") {
		t.Errorf("wild-ignore, MariaDB named connection: %+v", l)
	}
	do := replicaFilters{Source: "q:3306", Channel: "c2", DoTable: []string{"app.outbox"}}
	l = one(replicaLines([]replicaFilters{do}, "ON", captured, false))
	if l.ok || strings.Contains(l.reason, "rows of app.outbox replicated") || !strings.Contains(l.reason, "rows of app.outbox2 replicated") ||
		!strings.Contains(l.fix, "CHANGE REPLICATION FILTER REPLICATE_DO_TABLE = (app.outbox, app.outbox2) FOR CHANNEL 'c2'") {
		t.Errorf("do-table lacks outbox2: %+v", l)
	}
	// Two channels, one carrying app: a WARN naming the channel that filters it.
	l = one(replicaLines([]replicaFilters{{Source: "a:1", Channel: "a"}, {Source: "b:1", Channel: "b", IgnoreDB: []string{"app"}}}, "ON", captured, false))
	if !l.ok || l.fix == "" || !strings.Contains(l.reason, "channel b: Replicate_Ignore_DB lists app") || !strings.Contains(l.reason, "another channel") {
		t.Errorf("partial: %+v", l)
	}
	l = one(replicaLines([]replicaFilters{{Source: "a:1", IgnoreDB: []string{"other"}}}, "ON", captured, false))
	if !l.ok || l.fix != "" || !strings.Contains(l.reason, "no replicate-* filter excludes an outbox table") {
		t.Errorf("harmless filters: %+v", l)
	}
}

// TestRetentionManagedServices: Azure (binlog_expire_logs_seconds=0 deletes binlogs there; told
// by the endpoint or the mysql.az_* procedures), Cloud SQL (transactionLogRetentionDays caps
// retention) and the RDS hints used when the RDS procedure cannot be called.
func TestRetentionManagedServices(t *testing.T) {
	zero := map[string]string{"binlog_expire_logs_seconds": "0"}
	week := map[string]string{"binlog_expire_logs_seconds": "604800"}
	hour := map[string]string{"binlog_expire_logs_seconds": "3600"}
	for _, tc := range []struct {
		name   string
		r      retention
		min    time.Duration
		warn   bool
		reason string
		fix    string
	}{
		{"azure by host, 0", retention{Vars: zero, Host: "db1.mysql.database.azure.com"}, 0, true,
			"Azure Database for MySQL: binlog_expire_logs_seconds and expire_logs_days are 0, which there means a binlog is deleted as soon as",
			"az mysql flexible-server parameter set --resource-group <rg> --server-name <server> --name binlog_expire_logs_seconds --value 86400"},
		{"azure by procedures, 1h", retention{Vars: hour, AzureProcs: true}, 0, true, "Azure Database for MySQL: binlogs are purged after 1h", "--value 86400"},
		{"azure, a week", retention{Vars: week, Host: "x.mysql.database.chinacloudapi.cn"}, 0, false, "Azure Database for MySQL: binlogs are kept 168h", ""},
		{"cloud sql, 0, 24h", retention{Vars: zero, CloudSQL: true}, 0, false,
			"Cloud SQL for MySQL: binlog_expire_logs_seconds / expire_logs_days set no limit (binlog_expire_logs_seconds and expire_logs_days are 0); binlogs on disk are also purged after the instance's transactionLogRetentionDays", ""},
		{"cloud sql, 0, 72h", retention{Vars: zero, CloudSQL: true}, 72 * time.Hour, true, "keep it at 3 or more", "gcloud sql instances patch <instance> --retained-transaction-log-days=3"},
		{"cloud sql, 1h", retention{Vars: hour, CloudSQL: true}, 0, true, "Cloud SQL for MySQL: binlogs are purged after 1h",
			"gcloud sql instances patch <instance> --database-flags=binlog_expire_logs_seconds=86400"},
		{"cloud sql, a week, 24h", retention{Vars: week, CloudSQL: true}, 0, false, "binlogs are kept at most 168h", ""},
		{"self-hosted 0", retention{Vars: zero, Host: "db.example.com"}, 0, false, "binlogs are kept until purged by hand", ""},
	} {
		reason, fix := retentionLine(tc.r, tc.min)
		if (fix != "") != tc.warn || !strings.Contains(reason, tc.reason) || !strings.Contains(fix, tc.fix) {
			t.Errorf("%s: %q — %q", tc.name, reason, fix)
		}
	}
	for _, tc := range []struct {
		r    retention
		want bool
	}{
		{retention{Vars: map[string]string{"basedir": "/rdsdbbin/mysql-8.0.39.R2/"}}, true},
		{retention{Vars: map[string]string{"aurora_version": "3.08.0"}}, true},
		{retention{Vars: map[string]string{}, Host: "db.abc123.eu-west-1.rds.amazonaws.com"}, true},
		{retention{Vars: map[string]string{"basedir": "/usr/"}, Host: "db.example.com"}, false},
	} {
		if got := tc.r.looksRDS(); got != tc.want {
			t.Errorf("looksRDS(%+v) = %v", tc.r, got)
		}
	}
}
