package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
)

// TestDLQRowKeepsTheBytes (issue 11 case 15): a transform-stage dead letter of a row with a
// bytea payload keeps the payload's exact bytes ({"base64": ...} in the row-as-JSON value, no
// U+FFFD), `dlq tail --json` shows them, and once the config is fixed `dlq replay` delivers a
// record whose value is exactly those bytes.
func TestDLQRowKeepsTheBytes(t *testing.T) {
	e := newEnv(t, "")
	ctx := context.Background()
	if err := e.pg.Exec(ctx, "app", "ALTER TABLE public.outbox ALTER COLUMN payload TYPE bytea USING convert_to(payload::text, 'UTF8')"); err != nil {
		t.Fatal(err)
	}
	p := e.start()
	c := e.conn()
	blob := []byte{0xde, 0xad, 0xbe, 0xef, 0x00, 0xff, 0x80, 'o', 'k', 0xc3}
	var id string
	// aggregatetype NULL: the transform refuses the row, so the dead letter is the row as JSON.
	if err := c.QueryRow(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
		VALUES (gen_random_uuid(), NULL, 'k1', 'created', $1) RETURNING id::text`, blob).Scan(&id); err != nil {
		t.Fatal(err)
	}
	dlq := testenv.Consume(t, e.broker.Addr(), `outboxd\.dlq`, 1, 20*time.Second)
	if len(dlq) != 1 || dlq[0].Header("outboxd.error.stage") != "transform" {
		t.Fatalf("dead letters %+v\n%s", dlq, p.Out.String())
	}
	var row map[string]json.RawMessage
	if err := json.Unmarshal(dlq[0].Value, &row); err != nil {
		t.Fatalf("value %q: %v", dlq[0].Value, err)
	}
	var marker struct {
		Base64 string `json:"base64"`
	}
	if err := json.Unmarshal(row["payload"], &marker); err != nil || marker.Base64 == "" {
		t.Fatalf("payload in the row-as-JSON value is %s, want {\"base64\": ...} (%v)", row["payload"], err)
	}
	if got, err := base64.StdEncoding.DecodeString(marker.Base64); err != nil || !bytes.Equal(got, blob) {
		t.Fatalf("payload decodes to %x (%v), want %x", got, err, blob)
	}
	if string(row["aggregateid"]) != `"k1"` || string(row["aggregatetype"]) != "null" || string(row["id"]) != `"`+id+`"` {
		t.Errorf("text columns changed form: %s", dlq[0].Value)
	}

	// dlq tail --json shows the same value.
	stdout, stderr, code := e.dlqRun("tail", "--json")
	var j struct {
		ID    string  `json:"id"`
		Value *string `json:"value"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(stdout)), &j); code != 0 || err != nil || j.ID != id || j.Value == nil ||
		!strings.Contains(*j.Value, marker.Base64) {
		t.Fatalf("dlq tail --json: exit %d %v\n%s\n%s", code, err, stdout, stderr)
	}

	// With the same config the transform still fails: not replayed.
	if stdout, stderr, code := e.dlqRun("replay", "--id", id); code != 1 || !strings.Contains(stdout, "not replayable") {
		t.Fatalf("replay with the unchanged config: exit %d\n%s\n%s", code, stdout, stderr)
	}
	// Fix the config (one topic, no routing by the NULL aggregatetype): replayed, bytes intact.
	b, err := os.ReadFile(e.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, e.cfgPath, string(b)+"outbox:\n  topic: outbox.fixed\n")
	stdout, stderr, code = e.dlqRun("replay", "--id", id)
	if code != 0 || !strings.Contains(stdout, "1 replayed, 0 failed") {
		t.Fatalf("replay after the fix: exit %d\n%s\n%s", code, stdout, stderr)
	}
	got := testenv.Consume(t, e.broker.Addr(), `outbox\.fixed`, 1, 10*time.Second)
	if len(got) != 1 || !bytes.Equal(got[0].Value, blob) || string(got[0].Key) != "k1" || got[0].Header("id") != id {
		t.Fatalf("replayed record %+v, want value %x key k1 id %s", got, blob, id)
	}
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
}
