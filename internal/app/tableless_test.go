package app

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/internal/config"
)

// TestRepublishNoTables: with the tableless outbox and no source.tables there is no table to
// republish from: a config error (exit 2) naming source.tables, before any connection.
func TestRepublishNoTables(t *testing.T) {
	c, err := Parse([]byte(`source: {type: postgres, dsn: 'postgres://x@127.0.0.1:1/db', postgres: {messages: {}}}
kafka: {brokers: ['127.0.0.1:1']}
`), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []RepublishOptions{{}, {DryRun: true}, {Table: "public.outbox"}} {
		var out, errw bytes.Buffer
		err := Republish(context.Background(), c, o, &out, &errw)
		if !config.IsConfigError(err) || !strings.Contains(err.Error(), "source.tables") || !strings.Contains(err.Error(), "no table to republish from") {
			t.Errorf("%+v: err = %v, want a config error naming source.tables (no table to republish from)", o, err)
		}
	}
}

// TestNoTablesOnlyWithMessages: Parse (config and the adapter's checks) accepts no
// source.tables only for an adapter carrying events as messages: PostgreSQL with
// source.postgres.messages; MySQL, even with a source.postgres.messages block, is refused
// naming source.tables.
func TestNoTablesOnlyWithMessages(t *testing.T) {
	k := "\nkafka: {brokers: ['k:9092']}\n"
	if _, err := Parse([]byte("source: {type: postgres, dsn: 'postgres://x@h/db', postgres: {messages: {}}}"+k), noEnv); err != nil {
		t.Errorf("postgres with messages and no table: %v", err)
	}
	for _, y := range []string{
		"source: {type: postgres, dsn: 'postgres://x@h/db'}",
		"source: {type: mysql, dsn: 'u:p@tcp(h:3306)/'}",
		"source: {type: mysql, dsn: 'u:p@tcp(h:3306)/', postgres: {messages: {}}}",
		"source: {type: mysql, dsn: 'u:p@tcp(h:3306)/', tables: [], postgres: {messages: {prefix: a.b}}}",
	} {
		_, err := Parse([]byte(y+k), noEnv)
		if !config.IsConfigError(err) || !strings.Contains(err.Error(), "source.tables") {
			t.Errorf("%s: err = %v, want a config error naming source.tables", y, err)
		}
	}
}
