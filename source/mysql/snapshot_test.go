package mysql

import (
	"errors"
	"strings"
	"testing"
)

// fakeSnapSQL records the statements openSnapshot runs and answers from a table of canned
// results (a statement not in it fails when fail lists it, else answers no rows).
type fakeSnapSQL struct {
	ran     []string
	answers map[string][][]string
	fail    map[string]bool
}

func (f *fakeSnapSQL) exec(q string) error {
	f.ran = append(f.ran, q)
	if f.fail[q] {
		return errors.New("denied: " + q)
	}
	return nil
}

func (f *fakeSnapSQL) rows(q string, _ ...any) ([][]string, error) {
	f.ran = append(f.ran, q)
	if f.fail[q] {
		return nil, errors.New("denied: " + q)
	}
	return f.answers[q], nil
}

// TestOpenSnapshotMySQL: the MySQL branch (no MySQL server runs in the tests) takes the global
// read lock, starts the snapshot, reads the binlog position under the lock and always unlocks;
// without RELOAD it fails naming the privilege.
func TestOpenSnapshotMySQL(t *testing.T) {
	status := [][]string{{"binlog.000007", "1234", "", "", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-42"}}
	f := &fakeSnapSQL{answers: map[string][][]string{"SHOW MASTER STATUS": status}, fail: map[string]bool{"SHOW BINARY LOG STATUS": true}}
	p, err := openSnapshot(f, false, kindMySQLGTID)
	if err != nil {
		t.Fatal(err)
	}
	want := "FLUSH TABLES WITH READ LOCK|" + startSnapshot + "|SHOW BINARY LOG STATUS|SHOW MASTER STATUS|UNLOCK TABLES"
	if got := strings.Join(f.ran, "|"); got != want {
		t.Errorf("statements %s\nwant       %s", got, want)
	}
	if p.kind != kindMySQLGTID || p.String() != "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-42;binlog=binlog.000007:1234" {
		t.Errorf("position %s (kind %v)", p, p.kind)
	}
	f = &fakeSnapSQL{answers: map[string][][]string{"SHOW BINARY LOG STATUS": status}}
	if p, err = openSnapshot(f, false, kindFile); err != nil || p.String() != "binlog.000007:1234" {
		t.Errorf("file position %s, %v", p, err)
	}

	f = &fakeSnapSQL{fail: map[string]bool{"FLUSH TABLES WITH READ LOCK": true}}
	if _, err := openSnapshot(f, false, kindFile); err == nil || !strings.Contains(err.Error(), "RELOAD") || len(f.ran) != 1 {
		t.Errorf("without RELOAD: %v after %v; want an error naming RELOAD, nothing else run", err, f.ran)
	}
	f = &fakeSnapSQL{fail: map[string]bool{startSnapshot: true}}
	if _, err := openSnapshot(f, false, kindFile); err == nil || f.ran[len(f.ran)-1] != "UNLOCK TABLES" {
		t.Errorf("failed START TRANSACTION: %v after %v; want an error and UNLOCK TABLES last", err, f.ran)
	}
}

// TestOpenSnapshotMariaDBStatements: MariaDB needs no lock: the snapshot's own binlog position,
// turned into a GTID position with BINLOG_GTID_POS.
func TestOpenSnapshotMariaDBStatements(t *testing.T) {
	f := &fakeSnapSQL{answers: map[string][][]string{
		"SHOW STATUS LIKE 'binlog_snapshot_%'":     {{"binlog_snapshot_file", "mariadb-bin.000003"}, {"binlog_snapshot_position", "777"}},
		"SELECT IFNULL(BINLOG_GTID_POS(?, ?), '')": {{"0-1-42,1-2-7"}},
	}}
	p, err := openSnapshot(f, true, kindMariaGTID)
	if err != nil || p.String() != "0-1-42,1-2-7;binlog=mariadb-bin.000003:777" {
		t.Fatalf("position %s, %v", p, err)
	}
	if got := strings.Join(f.ran, "|"); strings.Contains(got, "FLUSH") || !strings.HasPrefix(got, startSnapshot+"|") {
		t.Errorf("statements %s", got)
	}
	if _, _, err := parseSnapshotStatus([][]string{{"binlog_snapshot_file", ""}, {"binlog_snapshot_position", "0"}}); err == nil {
		t.Error("an empty binlog_snapshot_file was accepted")
	}
}

func TestSnapshotSetting(t *testing.T) {
	for v, want := range map[string]bool{"": false, "never": false, "Initial": true, " initial ": true} {
		if got, err := snapshotInitial(v); err != nil || got != want {
			t.Errorf("snapshotInitial(%q) = %v, %v", v, got, err)
		}
	}
	err := NewAdapter(Settings{DSN: "mysql://u@h/app", Tables: []string{"app.outbox"}, Snapshot: "always"}, nil).Validate()
	var se *SettingError
	if !errors.As(err, &se) || se.Key != "source.mysql.snapshot" || !strings.Contains(se.Msg, "initial") {
		t.Errorf("Validate(snapshot: always) = %v; want a SettingError on source.mysql.snapshot", err)
	}
	if err := New(Config{DSN: "mysql://u@h/app", Tables: []string{"app.outbox"}, ServerID: 1, Snapshot: "x"}, nil).Open(t.Context(), ""); err == nil ||
		!strings.Contains(err.Error(), "source.mysql.snapshot") {
		t.Errorf("Open with snapshot x: %v", err)
	}
}

func TestHasReload(t *testing.T) {
	for g, want := range map[string]bool{
		"GRANT RELOAD, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `outboxd`@`%`": true,
		"GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost` WITH GRANT OPTION":         true,
		"GRANT SELECT, RELOAD ON `app`.* TO `outboxd`@`%`":                            false,
		"GRANT REPLICATION SLAVE ON *.* TO `outboxd`@`%`":                             false,
		"GRANT SELECT ON `app`.`reload` TO `outboxd`@`%`":                             false,
	} {
		if got := hasReload([][]string{{g}}); got != want {
			t.Errorf("hasReload(%q) = %v", g, got)
		}
	}
}
