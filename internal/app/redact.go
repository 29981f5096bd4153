package app

import "strings"

// Scrub removes every secret in secrets from s (errors from drivers may echo a DSN). The
// source's secrets come from its adapter (opener.Secrets).
func Scrub(s string, secrets ...string) string {
	for _, sec := range secrets {
		if len(sec) >= 3 {
			s = strings.ReplaceAll(s, sec, "xxxxx")
		}
	}
	return s
}
