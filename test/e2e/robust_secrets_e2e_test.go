package e2e

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
)

// The password of the secrets tests holds each of @ : / % # ? (and, for PostgreSQL's key=value
// form, a quote and a backslash) with a distinct word after each, so that a redaction stopping
// at any of them leaks a recognisable fragment.
const (
	myPassword = "Alpha@Bravo:Charlie/Delta%Echo#Foxtrot?Golf"
	pgPassword = myPassword + `'Hotel\India`
)

var secretFragments = []string{"Alpha", "Bravo", "Charlie", "Delta", "Echo", "Foxtrot", "Golf", "Hotel", "India"}

func leaked(s string) []string {
	var out []string
	for _, f := range secretFragments {
		if strings.Contains(s, f) {
			out = append(out, f)
		}
	}
	return out
}

func yamlQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// setDSN replaces the config's dsn line.
func setDSN(t *testing.T, cfgPath, dsn string) {
	t.Helper()
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^  dsn: .*$`)
	if !re.Match(b) {
		t.Fatalf("no dsn line in %s", b)
	}
	writeFile(t, cfgPath, re.ReplaceAllLiteralString(string(b), "  dsn: "+yamlQuote(dsn)))
}

// startingLine returns the "starting outboxd" log line of out.
func startingLine(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "starting outboxd") {
			return l
		}
	}
	return ""
}

// TestSecretsSpecialPasswordPostgres (issue 11 case 16): a role whose password holds
// @ : / % # ? ' \ connects (scram-sha-256 is enforced for it, so the parsed password is the real
// one) with the URL, URL-parameter and key=value DSN forms; neither `check` nor the `starting
// outboxd` line of `run` shows the password or any fragment of it.
func TestSecretsSpecialPasswordPostgres(t *testing.T) {
	e := newEnv(t, "")
	ctx := context.Background()
	if err := e.pg.Exec(ctx, "postgres", "CREATE ROLE special LOGIN SUPERUSER PASSWORD '"+strings.ReplaceAll(pgPassword, "'", "''")+"'"); err != nil {
		t.Fatal(err)
	}
	hba := filepath.Join(e.pg.Dir, "pg_hba.conf")
	old, err := os.ReadFile(hba)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, hba, "host all special 127.0.0.1/32 scram-sha-256\n"+string(old))
	if err := e.pg.Exec(ctx, "postgres", "SELECT pg_reload_conf()"); err != nil {
		t.Fatal(err)
	}
	kvQuoted := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pgPassword)
	port := e.pg.Port
	forms := []struct{ name, dsn string }{
		{"url", fmt.Sprintf("postgres://%s@127.0.0.1:%d/app?sslmode=disable", url.UserPassword("special", pgPassword).String(), port)},
		{"url parameter", fmt.Sprintf("postgresql://special@127.0.0.1:%d/app?sslmode=disable&password=%s", port, url.QueryEscape(pgPassword))},
		{"key=value", fmt.Sprintf("host=127.0.0.1 port=%d user=special password='%s' dbname=app sslmode=disable", port, kvQuoted)},
	}
	// The wrong password is refused: the server really checks it.
	setDSN(t, e.cfgPath, fmt.Sprintf("postgres://special:wrong@127.0.0.1:%d/app?sslmode=disable", port))
	if out, code := runOut(t, "check", "-c", e.cfgPath); code != 1 || !strings.Contains(out, "FAIL postgres reachable") {
		t.Fatalf("check with a wrong password: exit %d\n%s", code, out)
	}
	// A URL with the password not percent-encoded does not parse: refused as a config error
	// (exit 2) that shows no fragment of it (pgconn's own error would).
	setDSN(t, e.cfgPath, fmt.Sprintf("postgres://special:%s@127.0.0.1:%d/app?sslmode=disable", pgPassword, port))
	for _, cmd := range []string{"check", "run"} {
		if out, code := runOut(t, cmd, "-c", e.cfgPath); code != 2 || !strings.Contains(out, "source.dsn") || leaked(out) != nil {
			t.Errorf("%s with a raw special password in a URL: exit %d, leaks %v:\n%s", cmd, code, leaked(out), out)
		}
	}
	want := fmt.Sprintf("dsn=postgres://special:xxxxx@127.0.0.1:%d/app", port)
	c := e.conn()
	for _, f := range forms {
		setDSN(t, e.cfgPath, f.dsn)
		out, code := runOut(t, "check", "-c", e.cfgPath)
		if code != 0 || !strings.Contains(out, "OK   postgres reachable") || leaked(out) != nil {
			t.Errorf("%s: check exit %d, leaks %v:\n%s", f.name, code, leaked(out), out)
		}
		p := startProc(t, e.cfgPath)
		harness.WaitFor(t, 30*time.Second, f.name+": replication started", func() bool {
			select {
			case <-p.Done:
				t.Fatalf("%s: outboxd exited %d:\n%s", f.name, p.Code, p.Out.String())
			default:
			}
			return strings.Contains(p.Out.String(), "replication started")
		})
		ids := e.insert(c, f.name, 1)
		harness.WaitFor(t, 20*time.Second, f.name+": delivered", func() bool {
			return hasAll(testenv.ConsumeAll(t, e.broker.Addr(), `outbox\.event\.order`), ids) == nil
		})
		if code := p.Stop(t, syscall.SIGTERM); code != 0 {
			t.Errorf("%s: SIGTERM exit %d", f.name, code)
		}
		out = p.Out.String()
		if line := startingLine(out); !strings.Contains(line, want+" ") || leaked(out) != nil {
			t.Errorf("%s: starting line %q (want %s), leaks %v in the output:\n%s", f.name, line, want, leaked(out), out)
		}
	}
}

// TestSecretsSpecialPasswordMySQL (issue 11 case 16): a MariaDB user whose password holds
// @ : / % # ? connects with the go-sql-driver form user:PASS@tcp(host:port)/app (the last '@'
// before the address ends the password, as go-sql-driver parses it) and with the URL form; no
// log line of `run` and no line of `check` shows the password or any fragment of it.
func TestSecretsSpecialPasswordMySQL(t *testing.T) {
	e := newMySQLEnv(t)
	if err := e.db.Exec(context.Background(), "",
		"CREATE USER 'special'@'127.0.0.1' IDENTIFIED BY '"+myPassword+"'",
		"GRANT ALL PRIVILEGES ON *.* TO 'special'@'127.0.0.1'"); err != nil {
		t.Fatal(err)
	}
	port := e.db.Port // newMySQLEnv's config sets source.mysql.start: current
	forms := []struct{ name, dsn string }{
		{"driver", fmt.Sprintf("special:%s@tcp(127.0.0.1:%d)/app", myPassword, port)},
		{"url", fmt.Sprintf("mysql://%s@127.0.0.1:%d/app", url.UserPassword("special", myPassword).String(), port)},
	}
	// A wrong password is refused: the server really checks it.
	setDSN(t, e.cfgPath, fmt.Sprintf("special:Alpha@tcp(127.0.0.1:%d)/app", port))
	if out, code := runOut(t, "check", "-c", e.cfgPath); code != 1 {
		t.Fatalf("check with a wrong password: exit %d\n%s", code, out)
	}
	want := fmt.Sprintf("dsn=mysql://special:xxxxx@127.0.0.1:%d/app", port)
	for i, f := range forms {
		setDSN(t, e.cfgPath, f.dsn)
		out, code := runOut(t, "check", "-c", e.cfgPath)
		if leaked(out) != nil || !strings.Contains(out, "OK ") {
			t.Errorf("%s: check exit %d, leaks %v:\n%s", f.name, code, leaked(out), out)
		}
		p := e.start()
		id := fmt.Sprintf("%08x-0000-4000-8000-%012x", 77+i, 1)
		e.write([][]event{{{id: id, agg: "order", key: "k", typ: "created", payload: `{"n": 1}`}}})
		harness.WaitFor(t, 20*time.Second, f.name+": delivered", func() bool {
			return hasAll(testenv.ConsumeAll(t, e.broker.Addr(), `outbox\.event\.order`), []string{id}) == nil
		})
		if code := p.Stop(t, syscall.SIGTERM); code != 0 {
			t.Errorf("%s: SIGTERM exit %d", f.name, code)
		}
		out = p.Out.String()
		if line := startingLine(out); !strings.Contains(line, want+" ") || leaked(out) != nil {
			t.Errorf("%s: starting line %q (want %s), leaks %v in the output:\n%s", f.name, line, want, leaked(out), out)
		}
	}
}
