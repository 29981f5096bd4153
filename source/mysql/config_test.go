package mysql

import (
	"strings"
	"testing"
	"time"
)

func TestParseDSN(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want dsn
	}{
		{"mysql://outboxd:s3cret@db.example:3307/app",
			dsn{User: "outboxd", Password: "s3cret", Net: "tcp", Addr: "db.example:3307", DB: "app"}},
		{"mysql://outboxd:p%40ss%3Aw%2Fd@127.0.0.1/app?tls=true",
			dsn{User: "outboxd", Password: "p@ss:w/d", Net: "tcp", Addr: "127.0.0.1:3306", DB: "app", TLS: "true"}},
		{"mariadb://root@[::1]:3306/app?timeout=3s",
			dsn{User: "root", Net: "tcp", Addr: "[::1]:3306", DB: "app", Timeout: 3 * time.Second}},
		{"mysql://root@/app?socket=/run/mysqld/mysqld.sock",
			dsn{User: "root", Net: "unix", Addr: "/run/mysqld/mysqld.sock", DB: "app"}},
		{"outboxd:s3cret@tcp(db.example:3307)/app",
			dsn{User: "outboxd", Password: "s3cret", Net: "tcp", Addr: "db.example:3307", DB: "app"}},
		{"outboxd:p@ss:w@rd@tcp(127.0.0.1:3306)/app?tls=skip-verify",
			dsn{User: "outboxd", Password: "p@ss:w@rd", Net: "tcp", Addr: "127.0.0.1:3306", DB: "app", TLS: "skip-verify"}},
		{"root@unix(/tmp/m.sock)/app", dsn{User: "root", Net: "unix", Addr: "/tmp/m.sock", DB: "app"}},
		{"root@tcp(db)/", dsn{User: "root", Net: "tcp", Addr: "db:3306"}},
		{"/app", dsn{Net: "tcp", Addr: "127.0.0.1:3306", DB: "app"}},
	} {
		got, err := parseDSN(tc.in)
		if err != nil {
			t.Errorf("parseDSN(%q): %v", tc.in, err)
			continue
		}
		if tc.want.Timeout == 0 {
			tc.want.Timeout = 10 * time.Second
		}
		if got != tc.want {
			t.Errorf("parseDSN(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func TestParseDSNErrors(t *testing.T) {
	for _, in := range []string{
		"", "postgres://u:hunter2@h/db", "mysql://u:hunter2@h/app?sslmode=disable", "u:hunter2@tcp(h:3306)",
		"u:hunter2@udp(h)/app", "u:hunter2@tcp(h/app", "mysql://u:hunter2@h/app?tls=maybe",
		"mysql://u:hunter2@h/app?timeout=soon", "mysql://u:hun ter2@h:badport/app",
	} {
		_, err := parseDSN(in)
		if err == nil {
			t.Errorf("parseDSN(%q) accepted", in)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "hun ter2") {
			t.Errorf("parseDSN(%q) error leaks the password: %v", in, err)
		}
	}
}

func TestRedacted(t *testing.T) {
	d, _ := parseDSN("outboxd:hunter2@tcp(db:3306)/app?tls=true")
	r := d.Redacted()
	if strings.Contains(r, "hunter2") || !strings.Contains(r, "outboxd:xxxxx@db:3306/app") {
		t.Fatalf("Redacted() = %s", r)
	}
}

func TestParseTables(t *testing.T) {
	got, err := parseTables([]string{"app.outbox", "`other`.`events`", "bare"}, "app")
	if err != nil {
		t.Fatal(err)
	}
	want := map[tableKey]string{{"app", "outbox"}: "app.outbox", {"other", "events"}: "`other`.`events`", {"app", "bare"}: "bare"}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	for _, bad := range [][]string{nil, {"a.b.c"}, {".t"}} {
		if _, err := parseTables(bad, "app"); err == nil {
			t.Errorf("parseTables(%q) accepted", bad)
		}
	}
	if _, err := parseTables([]string{"outbox"}, ""); err == nil {
		t.Error("bare table without a DSN database accepted")
	}
}
