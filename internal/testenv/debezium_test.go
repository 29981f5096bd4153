package testenv

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestPropertiesEscaping(t *testing.T) {
	got := properties(map[string]string{
		"a.b":   `outbox.event.${routedByValue}`,
		"f":     ConnectDirVar + "/h.dat",
		"u":     "é😀",
		"sp":    " lead\\x\n",
		"k:e=y": "v=w:x",
	}, "/d")
	want := "a.b=outbox.event.${routedByValue}\n" +
		"f=/d/h.dat\n" +
		"k\\:e\\=y=v=w:x\n" +
		"sp=\\ lead\\\\x\\n\n" +
		"u=\\u00e9\\ud83d\\ude00\n"
	if got != want {
		t.Fatalf("properties:\n%s\nwant:\n%s", got, want)
	}
}

// TestConnectPostgresOutbox runs Debezium's PostgreSQL connector with the Outbox Event Router on
// Kafka Connect standalone against a private PostgreSQL and an Apache Kafka node: one row
// inserted after StartConnect returned arrives with the router's topic, key, value and headers.
func TestConnectPostgresOutbox(t *testing.T) {
	pg := NewPostgres(t)
	ctx := context.Background()
	if err := pg.Exec(ctx, "app", OutboxDDL); err != nil {
		t.Fatal(err)
	}
	k := NewApacheKafka(t, ApacheOpts{})
	cfg := DebeziumPostgresOutbox(pg.Conn("app"), "dbz_slot", "dbz_pub", "public.outbox", nil)
	c := NewConnect(t, ConnectOpts{Bootstrap: k.Addr(), Connector: cfg})
	t.Logf("Connect streaming %v after exec (pid %d, REST %d)", c.Started, c.Pid(), c.RESTPort)
	if err := pg.Exec(ctx, "app", `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
		VALUES ('8c6f1b7e-2a39-4a43-9d4e-0b3a1c7f5e21', 'Order', 'o-1', 'OrderCreated', '{"b": [1, 2], "a": "x"}')`); err != nil {
		t.Fatal(err)
	}
	got := Consume(t, k.Addr(), `outbox\.event\..*`, 1, 90*time.Second)
	if len(got) != 1 {
		t.Fatalf("read %d records from outbox.event.*, want 1; Connect log:\n%s", len(got), c.Log())
	}
	r := got[0]
	if r.Topic != "outbox.event.Order" || string(r.Key) != "o-1" || string(r.Value) != `{"a": "x", "b": [1, 2]}` ||
		r.Header("id") != "8c6f1b7e-2a39-4a43-9d4e-0b3a1c7f5e21" || r.Header("eventType") != "OrderCreated" || len(r.Headers) != 2 {
		t.Fatalf("record %+v (value %s, key %s)", r, r.Value, r.Key)
	}
	if conn, task, trace, err := c.Status(); err != nil || conn != "RUNNING" || task != "RUNNING" {
		t.Fatalf("status after delivery: connector %s task %s (%v) %s", conn, task, err, trace)
	}
	c.Stop()
	if c.Pid() != 0 || !strings.Contains(c.fullLog(), streamingMark) {
		t.Fatalf("after Stop: pid %d", c.Pid())
	}
}

// The MariaDB connector's harness is exercised by test/e2e's TestDebeziumByteForByteMariaDB.
