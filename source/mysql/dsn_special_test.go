package mysql

import (
	"net/url"
	"testing"
)

// TestParseDSNSpecialPasswords: like go-sql-driver's ParseDSN, the driver form's user info ends
// at the LAST '@' before the last '/', so a password may hold @ : / % # ? as they are; the URL
// form needs %XX escapes and decodes them.
func TestParseDSNSpecialPasswords(t *testing.T) {
	const pw = "p@ss:w/rd%#?"
	for _, c := range []struct{ dsn, user, addr, db string }{
		{"user:" + pw + "@tcp(127.0.0.1:3306)/app", "user", "127.0.0.1:3306", "app"},
		{"user:" + pw + "@tcp(127.0.0.1:3306)/app?tls=false&timeout=5s", "user", "127.0.0.1:3306", "app"},
		{"user:" + pw + "@unix(/run/my.sock)/app", "user", "/run/my.sock", "app"},
		{"user:" + pw + "@/app", "user", "127.0.0.1:3306", "app"},
		{"mysql://" + url.UserPassword("user", pw).String() + "@127.0.0.1:3306/app", "user", "127.0.0.1:3306", "app"},
	} {
		d, err := parseDSN(c.dsn)
		if err != nil {
			t.Errorf("parseDSN(%q): %v", c.dsn, err)
			continue
		}
		if d.User != c.user || d.Password != pw || d.Addr != c.addr || d.DB != c.db {
			t.Errorf("parseDSN(%q) = user %q password %q addr %q db %q", c.dsn, d.User, d.Password, d.Addr, d.DB)
		}
		if r, err := RedactDSN(c.dsn); err != nil || r == "" {
			t.Errorf("RedactDSN(%q) = %q, %v", c.dsn, r, err)
		}
		if dec, _, ok := DSNPassword(c.dsn); !ok || dec != pw {
			t.Errorf("DSNPassword(%q) = %q %v", c.dsn, dec, ok)
		}
	}
}
