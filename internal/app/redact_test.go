package app

import (
	"net/url"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/internal/config"
)

// specialPassword holds each of @ : / % # ? with a distinct word after each, so that a redaction
// that stops at one of them leaks a recognisable fragment.
const specialPassword = "Alpha@Bravo:Charlie/Delta%Echo#Foxtrot?Golf"

var passwordFragments = []string{"Alpha", "Bravo", "Charlie", "Delta", "Echo", "Foxtrot", "Golf"}

func leaks(s string) []string {
	var out []string
	for _, f := range passwordFragments {
		if strings.Contains(s, f) {
			out = append(out, f)
		}
	}
	return out
}

// specialDSNs are DSNs of every form carrying specialPassword, by source type.
func specialDSNs() []struct{ typ, dsn, want string } {
	enc := url.UserPassword("outboxd", specialPassword).String() // outboxd:Alpha%40Bravo%3A...
	return []struct{ typ, dsn, want string }{
		{"postgres", "postgres://" + enc + "@127.0.0.1:5432/app?sslmode=disable", "postgres://outboxd:xxxxx@127.0.0.1:5432/app"},
		{"postgres", "postgresql://outboxd@127.0.0.1:5433/app?password=" + url.QueryEscape(specialPassword), "postgres://outboxd:xxxxx@127.0.0.1:5433/app"},
		{"postgres", "host=127.0.0.1 port=5434 user=outboxd password='" + specialPassword + "' dbname=app sslmode=disable", "postgres://outboxd:xxxxx@127.0.0.1:5434/app"},
		{"postgres", "host=127.0.0.1 port=5435 user=outboxd password=" + specialPassword + " dbname=app", "postgres://outboxd:xxxxx@127.0.0.1:5435/app"},
		{"mysql", "mysql://" + enc + "@127.0.0.1:3306/app", "mysql://outboxd:xxxxx@127.0.0.1:3306/app"},
		{"mysql", "mariadb://" + enc + "@127.0.0.1:3307/app?tls=skip-verify", "mysql://outboxd:xxxxx@127.0.0.1:3307/app?tls=skip-verify"},
		{"mysql", "outboxd:" + specialPassword + "@tcp(127.0.0.1:3308)/app", "mysql://outboxd:xxxxx@127.0.0.1:3308/app"},
		{"mysql", "outboxd:" + specialPassword + "@unix(/run/mysqld/mysqld.sock)/app", "mysql://outboxd:xxxxx@/app?socket=%2Frun%2Fmysqld%2Fmysqld.sock"},
	}
}

// dsnAdapter is the adapter of source type typ with source.dsn dsn, as the commands build it.
func dsnAdapter(t *testing.T, typ, dsn string) adapter {
	t.Helper()
	c := &config.Config{Source: config.Source{Type: typ, DSN: dsn, Tables: []string{"app.outbox"}}}
	a, ok := newAdapter(c, nil)
	if !ok {
		t.Fatalf("no adapter for source.type %q", typ)
	}
	return a
}

// TestRedactDSNSpecialPasswords: each adapter's RedactedDSN shows no fragment of a password
// holding every special character, in each DSN form; its Secrets give the password first, and
// Scrub with them removes it from any text echoing the DSN.
func TestRedactDSNSpecialPasswords(t *testing.T) {
	for _, c := range specialDSNs() {
		a := dsnAdapter(t, c.typ, c.dsn)
		got := a.RedactedDSN()
		if got != c.want || leaks(got) != nil {
			t.Errorf("RedactedDSN(%s, %q) = %q, want %q (leaks %v)", c.typ, c.dsn, got, c.want, leaks(got))
		}
		// The password, as parsed and as written, is scrubbed from any text echoing it.
		secrets := a.Secrets()
		if len(secrets) == 0 || secrets[0] != specialPassword {
			t.Errorf("Secrets(%s, %q) = %q, want the password first", c.typ, c.dsn, secrets)
		}
		echo := "connect to " + c.dsn + " failed (password " + specialPassword + ")"
		if s := Scrub(echo, secrets...); leaks(s) != nil {
			t.Errorf("Scrub left %v in %q", leaks(s), s)
		}
	}
}

func TestRedactDSN(t *testing.T) {
	for _, c := range []struct{ typ, dsn, want string }{
		{"postgres", "postgres://outboxd:hunter2@127.0.0.1:5432/app?sslmode=disable", "postgres://outboxd:xxxxx@127.0.0.1:5432/app"},
		{"postgres", "postgres://u@h/db?sslmode=disable", "postgres://u@h:5432/db"},
		{"postgres", "host=/tmp user=u password='hun\\'ter2' dbname=app", "postgres://u:xxxxx@/app?host=%2Ftmp&port=5432"},
		{"mysql", "root:hunter2@tcp(127.0.0.1:3306)/app", "mysql://root:xxxxx@127.0.0.1:3306/app"},
		{"mysql", "root@tcp(127.0.0.1)/app", "mysql://root@127.0.0.1:3306/app"},
		// Refused by the driver's parser: nothing of the raw string.
		{"postgres", "postgres://u:hunter2@host:notaport/db", "(unparseable DSN)"},
		{"postgres", "host=x password='hunter2", "(unparseable DSN)"},
		{"mysql", "mysql://root:hun/ter2@127.0.0.1/app", "(unparseable DSN)"},
		{"mysql", "root:hunter2@tcp(127.0.0.1:3306", "(unparseable DSN)"},
		{"mysql", "root:hunter2@tcp(127.0.0.1:3306)/app?bogus=1", "(unparseable DSN)"},
	} {
		if got := dsnAdapter(t, c.typ, c.dsn).RedactedDSN(); got != c.want {
			t.Errorf("RedactedDSN(%s, %q) = %q, want %q", c.typ, c.dsn, got, c.want)
		}
	}
	if s := dsnAdapter(t, "postgres", "host=/tmp user=u password='hun\\'ter2' dbname=app").Secrets(); len(s) != 2 || s[0] != "hun'ter2" || s[1] != `hun\'ter2` {
		t.Errorf("Secrets of a quoted key=value password: %q", s)
	}
	if s := dsnAdapter(t, "mysql", "root@tcp(127.0.0.1)/app").Secrets(); s != nil {
		t.Errorf("Secrets without a password: %q", s)
	}
}
