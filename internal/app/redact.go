package app

import (
	"net/url"
	"regexp"
	"strings"
)

var kvPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('[^']*'|\S+)`)
var driverDSN = regexp.MustCompile(`^([^:@/]+):([^@]*)@`)

// Redact removes passwords from a DSN (URL form, key=value form, or user:pass@tcp(...) form) so
// it can appear in logs and errors.
func Redact(dsn string) string {
	if strings.Contains(dsn, "://") {
		if u, err := url.Parse(dsn); err == nil {
			if _, has := u.User.Password(); has {
				u.User = url.UserPassword(u.User.Username(), "xxxxx")
			}
			q := u.Query()
			if q.Has("password") {
				q.Set("password", "xxxxx")
				u.RawQuery = q.Encode()
			}
			return u.String()
		}
		return "(unparseable DSN)"
	}
	if driverDSN.MatchString(dsn) {
		return driverDSN.ReplaceAllString(dsn, "$1:xxxxx@")
	}
	return kvPassword.ReplaceAllString(dsn, "${1}xxxxx")
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
