package app

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/source/mysql"
	"github.com/outboxd/outboxd/source/postgres"
)

func noEnv(string) (string, bool) { return "", false }

// TestLoadSourceErrorsNameTheKey: a source setting the adapter refuses is a config error (exit
// 2) naming its key, with config.Load's message form, through Parse (= Load) as the commands
// load configs; Run, Check and the offsets commands refuse it too (their config may come from
// config.Parse, as the bench's does).
func TestLoadSourceErrorsNameTheKey(t *testing.T) {
	pg := func(extra string) string {
		return "source: {type: postgres, dsn: 'postgres://x@h/db', tables: [public.outbox]" + extra + "}\nkafka: {brokers: ['k:9092']}\n"
	}
	for _, c := range []struct{ yaml, key, msg string }{
		{"source: {type: oracle, dsn: x, tables: [a.b]}\nkafka: {brokers: ['k:9092']}", "source.type", `"oracle" is not one of postgres | mysql`},
		{"source: {dsn: x, tables: [a.b]}\nkafka: {brokers: ['k:9092']}", "source.type", `"" is not one of postgres | mysql`},
		{pg(", postgres: {slot: Bad-Slot}"), "source.postgres.slot", `"Bad-Slot": slot names use lower-case letters, digits and _ only`},
		{pg(", postgres: {heartbeat_interval: -1s}"), "source.postgres.heartbeat_interval", "must be 0 (off) or positive"},
		{pg(", postgres: {status_interval: -1s}"), "source.postgres.status_interval", "must be positive"},
		{"source: {type: postgres, dsn: 'host=h password=''hunter2', tables: [a.b]}\nkafka: {brokers: ['k:9092']}", "source.dsn", "PostgreSQL's driver cannot parse it"},
		{"source: {type: postgres, dsn: 'sslrootcert=/nonexistent/ca.pem sslmode=verify-full host=h', tables: [a.b]}\nkafka: {brokers: ['k:9092']}", "source.dsn", "a file it names cannot be read"},
		{"source: {type: mysql, dsn: 'mysql://root@h:3306/app', tables: [app.outbox], mysql: {start: latest}}\nkafka: {brokers: ['k:9092']}", "source.mysql.start", "(use current, earliest, or a position such as 0-1-42 or mysql-bin.000003:1234)"},
		{"source: {type: mysql, dsn: 'mysql://root@h:3306/app?bogus=1', tables: [app.outbox]}\nkafka: {brokers: ['k:9092']}", "source.dsn", "unsupported parameter"},
	} {
		_, err := Parse([]byte(c.yaml), noEnv)
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Key != c.key || !strings.Contains(ce.Msg, c.msg) || !strings.HasPrefix(err.Error(), "config: "+c.key+": ") {
			t.Errorf("%s: err = %v, want a config error naming %s with %q", c.yaml, err, c.key, c.msg)
		}
		// The same config loaded without the adapter's checks is refused by every command.
		cfg, err := config.Parse([]byte(c.yaml), noEnv)
		if err != nil {
			t.Fatalf("config.Parse: %v", err)
		}
		for name, err := range map[string]error{"run": Run(t.Context(), cfg, nil), "offsets show": OffsetsShow(t.Context(), cfg, &strings.Builder{}),
			"offsets set": OffsetsSet(t.Context(), cfg, "0/0", &strings.Builder{})} {
			if !errors.As(err, &ce) || ce.Key != c.key {
				t.Errorf("%s of %s: err = %v, want the config error naming %s", name, c.yaml, err, c.key)
			}
		}
		var out strings.Builder
		if Check(t.Context(), cfg, &out) || !strings.Contains(out.String(), "FAIL config: "+c.key) {
			t.Errorf("check of %s: %q, want a FAIL naming %s", c.yaml, out.String(), c.key)
		}
	}
}

// TestUnparseableDSNIsAConfigError: a DSN the driver's parser refuses is refused at load, naming
// source.dsn, without any fragment of the raw string (pgconn's own error would echo parts of a
// password holding '@' or '?').
func TestUnparseableDSNIsAConfigError(t *testing.T) {
	for _, c := range []struct{ typ, dsn string }{
		{"postgres", "postgres://u:Alpha@Bravo:Charlie/Delta%Echo#Foxtrot?Golf@127.0.0.1:5432/app"},
		{"postgres", "host=127.0.0.1 password='Alpha@Bravo:Charlie/Delta%Echo#Foxtrot?Golf"},
		{"mysql", "mysql://u:Alpha@Bravo:Charlie/Delta%Echo#Foxtrot?Golf@127.0.0.1:3306/app"},
		{"mysql", "u:Alpha@Bravo:Charlie/Delta%Echo#Foxtrot?Golf@tcp(127.0.0.1:3306/app"},
	} {
		tables := "[public.outbox]"
		if c.typ == "mysql" {
			tables = "[app.outbox]"
		}
		doc := "source: {type: " + c.typ + ", dsn: '" + strings.ReplaceAll(c.dsn, "'", "''") + "', tables: " + tables + ", mysql: {server_id: 7, start: current}}\nkafka: {brokers: ['k:9092']}\n"
		_, err := Parse([]byte(doc), noEnv)
		if err == nil || !config.IsConfigError(err) || !strings.Contains(err.Error(), "source.dsn") {
			t.Errorf("%s %q: err = %v, want a source.dsn config error", c.typ, c.dsn, err)
			continue
		}
		if l := leaks(err.Error()); l != nil {
			t.Errorf("%s: the error shows %v: %v", c.typ, l, err)
		}
	}
	if _, err := Parse([]byte("source: {type: postgres, dsn: 'postgres://u:Alpha%40Bravo@127.0.0.1/app', tables: [public.outbox]}\nkafka: {brokers: ['k:9092']}\n"), noEnv); err != nil {
		t.Errorf("an encoded password: %v", err)
	}
}

// TestMySQLStart: source.mysql.start takes current, earliest or a position; anything else is
// a config error naming the key.
func TestMySQLStart(t *testing.T) {
	parse := func(start string) (*config.Config, error) {
		doc := "source:\n  type: mysql\n  dsn: mysql://root@127.0.0.1:3306/app\n  tables: [app.outbox]\n  mysql:\n    start: '" + start + "'\n" +
			"kafka:\n  brokers: [127.0.0.1:9092]\n"
		return Parse([]byte(doc), noEnv)
	}
	for _, ok := range []string{"", "current", "earliest", "0-1-42", "0-1-42;binlog=mysql-bin.000003:1234;server_id=1", "mysql-bin.000003:4"} {
		c, err := parse(ok)
		if err != nil {
			t.Errorf("start %q: %v", ok, err)
		} else if a, _ := newAdapter(c, nil); a.(*mysql.Adapter).Config().Start != ok {
			t.Errorf("start %q read as %q", ok, a.(*mysql.Adapter).Config().Start)
		}
	}
	for _, bad := range []string{"latest", "beginning", "0-1", "mysql-bin.000003:x", "0-1-42;host=a"} {
		_, err := parse(bad)
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Key != "source.mysql.start" || !strings.Contains(err.Error(), "current, earliest") {
			t.Errorf("start %q: %v, want a config error naming source.mysql.start", bad, err)
		}
	}
}

// TestSourceDefaults: the defaults README documents for source.postgres.* and source.mysql.*
// are the adapters' (config leaves the keys zero), and they name the stored offsets.
func TestSourceDefaults(t *testing.T) {
	load := func(doc string) adapter {
		t.Helper()
		c, err := Parse([]byte(doc+"kafka: {brokers: ['k:9092']}\n"), noEnv)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := newAdapter(c, nil)
		return a
	}
	a := load("source: {type: postgres, dsn: 'postgres://x@h/db', tables: [public.outbox]}\n")
	pc := a.(*postgres.Adapter).Config()
	if pc.Slot != "outboxd" || pc.Publication != "outboxd" || pc.HeartbeatInterval != 30*time.Second || pc.StandbyTimeout != 10*time.Second ||
		pc.CoverageCheckInterval != time.Second || a.Name() != "postgres:outboxd" {
		t.Errorf("postgres defaults: %+v, name %s", pc, a.Name())
	}
	for yaml, want := range map[string]time.Duration{"0": 0, "": 0, "0s": 0, "5s": 5 * time.Second} {
		a := load("source: {type: postgres, dsn: 'postgres://x@h/db', tables: [public.outbox], postgres: {slot: s1, heartbeat_interval: " + yaml + "}}\n")
		if got := a.(*postgres.Adapter).Config().HeartbeatInterval; got != want || a.Name() != "postgres:s1" {
			t.Errorf("heartbeat_interval: %s gives %v (name %s), want %v (0 disables)", yaml, got, a.Name(), want)
		}
	}
	a = load("source: {type: mysql, dsn: 'mysql://root@h:3306/app', tables: [app.outbox]}\n")
	if mc := a.(*mysql.Adapter).Config(); mc.ServerID != 4242 || a.Name() != "mysql:4242" ||
		mc.OffsetsStore != "offsets file /var/lib/outboxd/offsets.json (offsets.path)" {
		t.Errorf("mysql defaults: %+v, name %s", mc, a.Name())
	}
	a = load("source: {type: mysql, dsn: 'mysql://root@h:3306/app', tables: [app.outbox], mysql: {server_id: 7}}\noffsets: {store: kafka}\n")
	if mc := a.(*mysql.Adapter).Config(); mc.ServerID != 7 || mc.OffsetsStore != "offsets topic outboxd.offsets, key mysql:7 (offsets.topic)" {
		t.Errorf("mysql server_id 7, offsets in kafka: %+v", mc)
	}
}
