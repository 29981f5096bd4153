package config

import (
	"strings"
	"testing"
)

// TestUnparseableDSNIsAConfigError: a DSN the driver's parser refuses is refused at load, naming
// source.dsn, without any fragment of the raw string (pgconn's own error would echo parts of a
// password holding '@' or '?').
func TestUnparseableDSNIsAConfigError(t *testing.T) {
	fragments := []string{"Alpha", "Bravo", "Charlie", "Delta", "Echo", "Foxtrot", "Golf"}
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
		if err == nil || !IsConfigError(err) || !strings.Contains(err.Error(), "source.dsn") {
			t.Errorf("%s %q: err = %v, want a source.dsn config error", c.typ, c.dsn, err)
			continue
		}
		for _, f := range fragments {
			if strings.Contains(err.Error(), f) {
				t.Errorf("%s: the error shows %q: %v", c.typ, f, err)
			}
		}
	}
	if _, err := Parse([]byte("source: {type: postgres, dsn: 'postgres://u:Alpha%40Bravo@127.0.0.1/app', tables: [public.outbox]}\nkafka: {brokers: ['k:9092']}\n"), noEnv); err != nil {
		t.Errorf("an encoded password: %v", err)
	}
}
