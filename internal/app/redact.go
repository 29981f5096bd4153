package app

import (
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/source/mysql"
)

// unparseableDSN is what a log line or error shows for a DSN the driver's parser refuses: no
// part of the raw string is printed, since nobody can tell which part is the password.
const unparseableDSN = "(unparseable DSN)"

// RedactDSN renders source.dsn for logs and errors without its password, through the parser the
// source connects with: pgconn.ParseConfig for postgres (shown as
// postgres://user:xxxxx@host:port/database), source/mysql's go-sql-driver-compatible parser for
// mysql (mysql://user:xxxxx@host:port/db?tls=...). ":xxxxx" says a password is set. A DSN the
// parser refuses is "(unparseable DSN)".
func RedactDSN(sourceType, dsn string) string {
	if sourceType == "mysql" {
		s, err := mysql.RedactDSN(dsn)
		if err != nil {
			return unparseableDSN
		}
		return s
	}
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

// Redact is RedactDSN for a DSN whose source type is not at hand: mysql:// and mariadb:// URLs
// and the go-sql-driver form (user:pass@tcp(...)/db, user:pass@unix(...)/db, user:pass@/db)
// are MySQL DSNs, everything else PostgreSQL's.
func Redact(dsn string) string { return RedactDSN(guessSourceType(dsn), dsn) }

func guessSourceType(dsn string) string {
	s := strings.ToLower(strings.TrimSpace(dsn))
	if strings.HasPrefix(s, "mysql://") || strings.HasPrefix(s, "mariadb://") {
		return "mysql"
	}
	if strings.Contains(s, "://") {
		return "postgres"
	}
	if strings.Contains(s, "@tcp(") || strings.Contains(s, "@unix(") || strings.Contains(s, "@/") {
		return "mysql"
	}
	return "postgres"
}

// DSNSecrets returns the password of source.dsn as the driver parses it and as it is written in
// the DSN (URL %XX escapes, key=value quoting), for Scrub: driver errors may echo either.
func DSNSecrets(sourceType, dsn string) []string {
	if sourceType == "mysql" {
		dec, raw, ok := mysql.DSNPassword(dsn)
		if !ok {
			return nil
		}
		return uniq(dec, raw)
	}
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil || cfg.Password == "" {
		return nil
	}
	return uniq(cfg.Password, pgWrittenPasswords(dsn)...)
}

// pgWrittenPasswords finds the password as written in a PostgreSQL DSN: the URL's userinfo, a
// password= query parameter, or a password= keyword (quoted or not).
func pgWrittenPasswords(dsn string) []string {
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

func uniq(first string, more ...string) []string {
	out := []string{first}
	for _, m := range more {
		if m != "" && m != first {
			out = append(out, m)
		}
	}
	return out
}

// Scrub removes every secret in secrets from s (errors from drivers may echo a DSN).
func Scrub(s string, secrets ...string) string {
	for _, sec := range secrets {
		if len(sec) >= 3 {
			s = strings.ReplaceAll(s, sec, "xxxxx")
		}
	}
	return s
}
