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
