package postgres

import (
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// unparseableDSN is what a log line or error shows for a DSN pgconn refuses: no part of the
// raw string is printed, since nobody can tell which part is the password.
const unparseableDSN = "(unparseable DSN)"

// RedactDSN renders source.dsn for logs and errors without its password, through pgconn's
// parser (the one the source connects with): postgres://user:xxxxx@host:port/database, a unix
// socket directory as ?host=...&port=.... ":xxxxx" says a password is set. A DSN the parser
// refuses is "(unparseable DSN)".
func RedactDSN(dsn string) string {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return unparseableDSN
	}
	u := url.URL{Scheme: "postgres", Path: "/" + cfg.Database}
	if cfg.User != "" {
		u.User = url.User(cfg.User)
		if cfg.Password != "" {
			u.User = url.UserPassword(cfg.User, "xxxxx")
		}
	}
	port := strconv.Itoa(int(cfg.Port))
	if strings.HasPrefix(cfg.Host, "/") {
		q := url.Values{"host": {cfg.Host}, "port": {port}} // a unix socket directory
		u.RawQuery = q.Encode()
	} else {
		u.Host = net.JoinHostPort(cfg.Host, port)
	}
	return u.String()
}

// DSNSecrets returns the password of source.dsn as pgconn parses it, then as it is written in
// the DSN (URL %XX escapes, key=value quoting), for scrubbing: driver errors may echo either.
// nil when there is no password (or the DSN does not parse).
func DSNSecrets(dsn string) []string {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil || cfg.Password == "" {
		return nil
	}
	out := []string{cfg.Password}
	for _, m := range writtenPasswords(dsn) {
		if m != "" && m != cfg.Password {
			out = append(out, m)
		}
	}
	return out
}

// writtenPasswords finds the password as written in a PostgreSQL DSN: the URL's userinfo, a
// password= query parameter, or a password= keyword (quoted or not).
func writtenPasswords(dsn string) []string {
	var out []string
	if i := strings.Index(dsn, "://"); i >= 0 {
		auth := dsn[i+3:]
		if j := strings.IndexAny(auth, "/?#"); j >= 0 {
			auth = auth[:j]
		}
		if at := strings.LastIndexByte(auth, '@'); at >= 0 {
			if _, pw, ok := strings.Cut(auth[:at], ":"); ok {
				out = append(out, pw)
			}
		}
		if _, q, ok := strings.Cut(dsn[i+3:], "?"); ok {
			q, _, _ = strings.Cut(q, "#")
			for _, kv := range strings.Split(q, "&") {
				if k, v, ok := strings.Cut(kv, "="); ok && k == "password" {
					out = append(out, v)
				}
			}
		}
		return out
	}
	// key=value: password=value or password='quoted value' (backslash escapes inside).
	s := dsn
	for {
		i := strings.Index(s, "password")
		if i < 0 {
			return out
		}
		rest := strings.TrimLeft(s[i+len("password"):], " \t\n")
		s = s[i+len("password"):]
		if !strings.HasPrefix(rest, "=") {
			continue
		}
		rest = strings.TrimLeft(rest[1:], " \t\n")
		if strings.HasPrefix(rest, "'") {
			end := 1
			for end < len(rest) && rest[end] != '\'' {
				if rest[end] == '\\' {
					end++
				}
				end++
			}
			out = append(out, rest[1:min(end, len(rest))])
		} else if j := strings.IndexAny(rest, " \t\n"); j >= 0 {
			out = append(out, rest[:j])
		} else {
			out = append(out, rest)
		}
	}
}
