package app

import (
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	for _, dsn := range []string{
		"postgres://outboxd:hunter2@127.0.0.1:5432/app?sslmode=disable",
		"postgres://outboxd@127.0.0.1/app?password=hunter2",
		"host=x user=u password=hunter2 dbname=app",
		"host=x password='hunter2' dbname=app",
		"mysql://root:hunter2@127.0.0.1:3306/app",
		"root:hunter2@tcp(127.0.0.1:3306)/app",
	} {
		got := Redact(dsn)
		if strings.Contains(got, "hunter2") || !strings.Contains(got, "xxxxx") {
			t.Errorf("Redact(%q) = %q", dsn, got)
		}
	}
	if got := Redact("postgres://u@h/db"); got != "postgres://u@h/db" {
		t.Errorf("no password: %q", got)
	}
}
