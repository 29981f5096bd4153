package config

import (
	"errors"
	"strings"
	"testing"
)

// TestMySQLStart: source.mysql.start takes current, earliest or a position; anything else is
// a config error naming the key.
func TestMySQLStart(t *testing.T) {
	parse := func(start string) (*Config, error) {
		doc := "source:\n  type: mysql\n  dsn: mysql://root@127.0.0.1:3306/app\n  tables: [app.outbox]\n  mysql:\n    start: '" + start + "'\n" +
			"kafka:\n  brokers: [127.0.0.1:9092]\n"
		return Parse([]byte(doc), func(string) (string, bool) { return "", false })
	}
	for _, ok := range []string{"", "current", "earliest", "0-1-42", "0-1-42;binlog=mysql-bin.000003:1234;server_id=1", "mysql-bin.000003:4"} {
		c, err := parse(ok)
		if err != nil {
			t.Errorf("start %q: %v", ok, err)
		} else if c.Source.MySQL.Start != ok {
			t.Errorf("start %q read as %q", ok, c.Source.MySQL.Start)
		}
	}
	for _, bad := range []string{"latest", "beginning", "0-1", "mysql-bin.000003:x", "0-1-42;host=a"} {
		_, err := parse(bad)
		var ce *Error
		if !errors.As(err, &ce) || ce.Key != "source.mysql.start" || !strings.Contains(err.Error(), "current, earliest") {
			t.Errorf("start %q: %v, want a config error naming source.mysql.start", bad, err)
		}
	}
}
