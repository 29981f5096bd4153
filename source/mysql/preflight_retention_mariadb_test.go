package mysql

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	waitfor "github.com/outboxd/outboxd/internal/testenv/harness"
)

type checkOut struct {
	ok          bool
	reason, fix string
}

// preflightLines runs the adapter's preflight and returns its lines by name.
func preflightLines(t *testing.T, s Settings) map[string]checkOut {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out := map[string]checkOut{}
	NewAdapter(s, nil).Preflight(ctx, nil, func(name string, ok bool, reason, fix string) { out[name] = checkOut{ok, reason, fix} })
	return out
}

// rdsStandIn creates mysql.rds_show_configuration returning RDS's result set (name, value,
// description) with the given value of `binlog retention hours` ("NULL" for RDS's default).
func rdsStandIn(t *testing.T, m *testenv.MariaDB, value string) {
	t.Helper()
	if err := m.Exec(context.Background(), "", "DROP PROCEDURE IF EXISTS mysql.rds_show_configuration",
		"CREATE PROCEDURE mysql.rds_show_configuration() SELECT 'binlog retention hours' AS name, "+value+" AS value, "+
			"'binlog retention hours specifies the duration in hours before binary logs are automatically deleted.' AS description "+
			"UNION ALL SELECT 'source delay', '0', 'source delay specifies how many seconds replication should be delayed from source.'"); err != nil {
		t.Fatal(err)
	}
}

// TestRetentionPreflightMariaDB: the "binlog retention" line on a real MariaDB 10.11 as its
// variables change (0: kept; binlog_expire_logs_seconds and its linked expire_logs_days; a
// min_binlog_retention above them), then with a stand-in of RDS's mysql.rds_show_configuration
// (NULL, 12 and 168 hours; on MariaDB it stands for RDS for MariaDB), which supersedes the
// server variables, also for a user with only the documented grants; and the replica filter
// line of a server that is not a replica. The stand-in is dropped at the end.
func TestRetentionPreflightMariaDB(t *testing.T) {
	t.Parallel()
	m := testenv.NewMariaDB(t, testenv.MariaDBOptions{RowMetadata: true})
	ctx := context.Background()
	if err := m.Exec(ctx, "app", testenv.MariaDBOutboxDDL("outbox", "CHAR(36)")); err != nil {
		t.Fatal(err)
	}
	s := Settings{DSN: m.DSN("app"), Tables: []string{"app.outbox"}}
	set := func(sql ...string) {
		t.Helper()
		if err := m.Exec(ctx, "", sql...); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(what string, s Settings, warn bool, reason, fix string) {
		t.Helper()
		l, ok := preflightLines(t, s)["binlog retention"]
		if !ok || !l.ok || (l.fix != "") != warn || !strings.Contains(l.reason, reason) || !strings.Contains(l.fix, fix) {
			t.Errorf("%s: binlog retention line %+v (present %v), want warn %v, reason ~ %q, fix ~ %q", what, l, ok, warn, reason, fix)
		}
	}
	expect("default", s, false, "binlogs are kept until purged by hand (binlog_expire_logs_seconds and expire_logs_days are 0)", "")
	if l := preflightLines(t, s)["replica filters"]; !l.ok || l.fix != "" || !strings.Contains(l.reason, "not a replica") {
		t.Errorf("non-replica: %+v", l)
	}

	set("SET GLOBAL binlog_expire_logs_seconds = 3600")
	expect("1h", s, true, "binlogs are purged after 1h (binlog_expire_logs_seconds=3600), shorter than source.mysql.min_binlog_retention is 24h",
		"SET GLOBAL binlog_expire_logs_seconds = 86400, and binlog_expire_logs_seconds = 86400 under [mariadb] in my.cnf")
	set("SET GLOBAL expire_logs_days = 2") // linked: binlog_expire_logs_seconds becomes 172800
	expect("2 days", s, false, "binlogs are kept 48h (binlog_expire_logs_seconds=172800)", "")
	longer := s
	longer.MinBinlogRetention = 72 * time.Hour
	expect("2 days against 72h", longer, true, "shorter than source.mysql.min_binlog_retention is 72h", "SET GLOBAL binlog_expire_logs_seconds = 259200")

	// RDS: the procedure's value supersedes the variables (2 days here).
	t.Cleanup(func() { _ = m.Exec(context.Background(), "", "DROP PROCEDURE IF EXISTS mysql.rds_show_configuration") })
	rdsStandIn(t, m, "NULL")
	expect("rds NULL", s, true, "Amazon RDS for MariaDB: `binlog retention hours` is NULL (the default): binlogs are purged as soon as RDS no longer needs them",
		"CALL mysql.rds_set_configuration('binlog retention hours', 168);")
	rdsStandIn(t, m, "'12'")
	expect("rds 12", s, true, "binlogs are purged after 12h (`binlog retention hours` = 12)", "CALL mysql.rds_set_configuration('binlog retention hours', 168);")
	rdsStandIn(t, m, "'168'")
	expect("rds 168", s, false, "Amazon RDS for MariaDB: binlogs are kept 168h (`binlog retention hours` = 168", "")
	// A user with the documented grants only: it cannot execute the procedure (ROUTINES does
	// not list it to that user, and the server is not RDS by its variables), so the server
	// variables decide; with EXECUTE the RDS value does. Without SLAVE MONITOR the replica
	// line comes from Slaves_running.
	set("CREATE USER 'outboxd'@'%' IDENTIFIED BY 'pw'", "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'outboxd'@'%'",
		"GRANT SELECT ON app.* TO 'outboxd'@'%'")
	limited := s
	limited.DSN = fmt.Sprintf("mysql://outboxd:pw@127.0.0.1:%d/app", m.Port)
	expect("limited user, rds procedure not executable", limited, false, "binlogs are kept 48h (binlog_expire_logs_seconds=172800)", "")
	if l := preflightLines(t, limited)["replica filters"]; !l.ok || l.fix != "" ||
		!strings.Contains(l.reason, "no replication applies rows here (Slaves_running=0) (SHOW ALL SLAVES STATUS, which would name the primary and a stopped replica's filters, needs SLAVE MONITOR") {
		t.Errorf("limited user, replica filters: %+v", l)
	}
	set("GRANT EXECUTE ON PROCEDURE mysql.rds_show_configuration TO 'outboxd'@'%'")
	expect("limited user with EXECUTE", limited, false, "Amazon RDS for MariaDB: binlogs are kept 168h", "")
	set("DROP PROCEDURE mysql.rds_show_configuration")
	expect("rds gone", s, false, "binlogs are kept 48h (binlog_expire_logs_seconds=172800)", "")

	// Azure, told by its mysql.az_* procedures (a stand-in here): 0 there deletes binlogs.
	t.Cleanup(func() { _ = m.Exec(context.Background(), "", "DROP PROCEDURE IF EXISTS mysql.az_load_timezone") })
	set("CREATE PROCEDURE mysql.az_load_timezone() SELECT 1", "SET GLOBAL binlog_expire_logs_seconds = 0")
	expect("azure 0", s, true, "Azure Database for MySQL: binlog_expire_logs_seconds and expire_logs_days are 0, which there means a binlog is deleted",
		"--name binlog_expire_logs_seconds --value 86400")
	set("DROP PROCEDURE mysql.az_load_timezone")
	expect("azure gone", s, false, "binlogs are kept until purged by hand", "")
}

// TestRetentionReplicaFiltersMariaDB: a real replica (MariaDB 10.11, log_slave_updates on) of a
// private primary: no filter passes; replicate_ignore_db=app (set while the replica threads are
// stopped) FAILs with the fix, and a row inserted on the primary indeed never reaches the
// replica's table; replicate_wild_ignore_table likewise; clearing the filter passes again.
func TestRetentionReplicaFiltersMariaDB(t *testing.T) {
	t.Parallel()
	primary := testenv.NewMariaDB(t, testenv.MariaDBOptions{RowMetadata: true, ServerID: 21})
	// A GTID domain of its own: the replica's own writes (CREATE DATABASE app, CREATE USER)
	// would be out of order with the primary's in one domain under gtid_strict_mode.
	replica := testenv.NewMariaDB(t, testenv.MariaDBOptions{RowMetadata: true, ServerID: 22,
		Extra: []string{"--log-slave-updates=ON", "--gtid-domain-id=22"}})
	ctx := context.Background()
	on := func(m *testenv.MariaDB, sql ...string) {
		t.Helper()
		if err := m.Exec(ctx, "", sql...); err != nil {
			t.Fatal(err)
		}
	}
	on(replica, fmt.Sprintf("CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = %d, MASTER_USER = 'root', MASTER_USE_GTID = slave_pos", primary.Port),
		"START SLAVE")
	// caughtUp waits until the replica has applied everything the primary has logged.
	caughtUp := func() {
		t.Helper()
		rows, err := primary.Query("", "SELECT @@gtid_binlog_pos")
		if err != nil {
			t.Fatal(err)
		}
		err = waitfor.Until(60*time.Second, 50*time.Millisecond, func() error {
			r, err := replica.Query("", "SELECT MASTER_GTID_WAIT(?, 1)", rows[0][0])
			if err != nil {
				return err
			}
			if r[0][0] != "0" {
				return fmt.Errorf("replica has not applied %s yet", rows[0][0])
			}
			return nil
		})
		if err != nil {
			st, _ := replica.Query("", "SHOW SLAVE STATUS")
			t.Fatalf("%v; slave status %v", err, st)
		}
	}
	on(primary, "CREATE TABLE app.outbox (id INT PRIMARY KEY, note VARCHAR(20))")
	caughtUp()
	s := Settings{DSN: replica.DSN("app"), Tables: []string{"app.outbox"}}
	line := func() checkOut {
		t.Helper()
		return preflightLines(t, s)["replica filters"]
	}
	src := fmt.Sprintf("a replica of 127.0.0.1:%d", primary.Port)
	if l := line(); !l.ok || l.fix != "" || !strings.Contains(l.reason, src+" with log_slave_updates=ON; no replicate-* filter excludes") {
		t.Errorf("no filters: %+v", l)
	}
	on(replica, "STOP SLAVE", "SET GLOBAL replicate_ignore_db = 'app'", "START SLAVE")
	l := line()
	if l.ok || !strings.Contains(l.reason, src) ||
		!strings.Contains(l.reason, "rows of app.outbox replicated from the primary are not applied here, so they never reach this binlog (the default channel: Replicate_Ignore_DB lists app)") ||
		!strings.Contains(l.fix, "STOP SLAVE; SET GLOBAL replicate_ignore_db = ''; START SLAVE") {
		t.Errorf("replicate_ignore_db=app: %+v", l)
	}
	// What the FAIL says: a row written on the primary does not reach the replica.
	on(primary, "INSERT INTO app.outbox VALUES (1, 'lost')")
	caughtUp()
	if rows, err := replica.Query("app", "SELECT COUNT(*) FROM outbox"); err != nil || rows[0][0] != "0" {
		t.Errorf("replica rows with replicate_ignore_db=app: %v %v", rows, err)
	}
	// A user without SLAVE MONITOR: the running replication and the global variables decide.
	on(replica, "CREATE USER 'outboxd'@'%' IDENTIFIED BY 'pw'", "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'outboxd'@'%'",
		"GRANT SELECT ON app.* TO 'outboxd'@'%'")
	limited := s
	limited.DSN = fmt.Sprintf("mysql://outboxd:pw@127.0.0.1:%d/app", replica.Port)
	if l := preflightLines(t, limited)["replica filters"]; l.ok || !strings.Contains(l.reason, "this server is a replica of its primary: rows of app.outbox replicated") ||
		!strings.Contains(l.reason, "needs SLAVE MONITOR") || !strings.Contains(l.fix, "SET GLOBAL replicate_ignore_db = ''") {
		t.Errorf("limited user, replicate_ignore_db=app: %+v", l)
	}
	on(replica, "STOP SLAVE", "SET GLOBAL replicate_ignore_db = ''", "SET GLOBAL replicate_wild_ignore_table = 'app.out%'", "START SLAVE")
	if l := line(); l.ok || !strings.Contains(l.reason, "Replicate_Wild_Ignore_Table pattern app.out% matches app.outbox") ||
		!strings.Contains(l.fix, "SET GLOBAL replicate_wild_ignore_table = ''") {
		t.Errorf("replicate_wild_ignore_table: %+v", l)
	}
	on(replica, "STOP SLAVE", "SET GLOBAL replicate_wild_ignore_table = ''", "START SLAVE")
	on(primary, "INSERT INTO app.outbox VALUES (2, 'kept')")
	caughtUp()
	if rows, err := replica.Query("app", "SELECT COUNT(*) FROM outbox"); err != nil || rows[0][0] != "1" {
		t.Errorf("replica rows without filters: %v %v", rows, err)
	}
	if l := line(); !l.ok || l.fix != "" {
		t.Errorf("filters cleared: %+v", l)
	}
}
