package mysql

import (
	"strings"
	"testing"
)

func TestDMLTarget(t *testing.T) {
	captured := func(db, table string) bool { return db == "app" && table == "outbox" }
	folded := func(db, table string) bool { return strings.EqualFold(db, "app") && strings.EqualFold(table, "outbox") }
	for _, tc := range []struct {
		db, q string
		fold  bool
		want  bool
	}{
		{"app", "INSERT INTO outbox (id) VALUES (1)", false, true},
		{"app", "insert into `outbox` values (1)", false, true},
		{"", "INSERT INTO app.outbox (id) VALUES (1)", false, true},
		{"other", "INSERT INTO `app`.`outbox` SET id = 1", false, true},
		{"app", "REPLACE INTO outbox VALUES (1)", false, true},
		{"app", "INSERT INTO outbox SELECT * FROM staging", false, true},
		{"app", "INSERT INTO archive SELECT * FROM outbox", false, true}, // conservative: names it
		{"app", "LOAD DATA INFILE '/tmp/x' INTO TABLE outbox", false, true},
		{"app", "/* app */ INSERT /*!50100 IGNORE */ INTO outbox VALUES (1)", false, true},
		{"app", "(INSERT INTO outbox VALUES (1))", false, true},
		{"app", "WITH c AS (SELECT 1) INSERT INTO outbox SELECT * FROM c", false, true},
		{"app", "UPDATE outbox SET type = 'x'", false, true},
		{"app", "DELETE FROM outbox WHERE id = 1", false, true},
		{"app", "UPDATE orders o JOIN outbox ON 1 SET o.note = 'x'", false, true},
		{"app", "UPDATE orders SET outbox.x = 1", false, true}, // "outbox." qualifying a column
		{"app", "INSERT INTO Outbox VALUES (1)", false, false}, // case-sensitive names
		{"app", "INSERT INTO Outbox VALUES (1)", true, true},
		{"app", "INSERT INTO APP.OUTBOX VALUES (1)", true, true},
		{"other", "INSERT INTO outbox VALUES (1)", false, false}, // other.outbox
		{"app", "INSERT INTO orders (note) VALUES ('outbox')", false, false},
		{"app", "INSERT INTO other.outbox VALUES (1)", false, false},
		{"app", "INSERT INTO orders (note) VALUES (1) -- outbox", false, false},
		{"app", "ALTER TABLE outbox ADD COLUMN x INT", false, false}, // DDL: the schema tracker's
		{"app", "CREATE TABLE outbox2 LIKE outbox", false, false},
		{"app", "SAVEPOINT outbox", false, false},
		{"app", "", false, false},
	} {
		m := captured
		if tc.fold {
			m = folded
		}
		k, got := dmlTarget(tc.db, tc.q, m)
		if got != tc.want {
			t.Errorf("dmlTarget(%q, %q) = %v %v, want %v", tc.db, tc.q, k, got, tc.want)
		}
	}
}

func TestContainsFold(t *testing.T) {
	for _, tc := range []struct {
		s, n string
		want bool
	}{
		{"INSERT INTO OUTBOX", "outbox", true},
		{"insert into `outbox`", "outbox", true},
		{"insert into outbo", "outbox", false},
		{"", "outbox", false},
		{"ab", "", false},
	} {
		if got := containsFold([]byte(tc.s), tc.n); got != tc.want {
			t.Errorf("containsFold(%q, %q) = %v", tc.s, tc.n, got)
		}
	}
}

func TestIsDMLVerb(t *testing.T) {
	for q, want := range map[string]bool{"INSERT INTO x": true, " (update x set": true, "delete from": true, "LOAD DATA": true,
		"REPLACE x": true, "BEGIN": false, "SAVEPOINT a": false, "CREATE TABLE": false, "": false, "INSERTS": false} {
		if got := isDMLVerb([]byte(q)); got != want {
			t.Errorf("isDMLVerb(%q) = %v", q, got)
		}
	}
}
