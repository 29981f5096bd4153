package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
)

// TestEOSTransactionTimeoutStops: exactly_once with kafka.transaction_timeout 2s (outboxd aborts a
// Kafka transaction whose source transaction is still arriving after 1s) and one 200,000-row
// source transaction, which takes longer than that to deliver (kfake answers produce requests
// 25ms late; without that a quiet machine delivers it within 1s): outboxd aborts its Kafka
// transaction and exits 1 naming kafka.transaction_timeout and the fix; read_committed sees none
// of the transaction and the committed position stays before it. Never silently, never partial.
func TestEOSTransactionTimeoutStops(t *testing.T) {
	kfakeOnly(t, "slows every produce request with a kfake control function, so that the transaction surely takes longer than 1s")
	e := newEOSEnv(t)
	e.editConfig("kafka:\n", "kafka:\n  transaction_timeout: 2s\n")
	c := e.conn()
	p := e.startWith(true)
	pre := e.insert(c, "pre", 2)
	e.expectExactlyOnce(pre, 30*time.Second)
	before := e.visiblePosition()
	// Every produce request takes 25ms more: delivering the transaction takes well over 1s (about
	// 50,000 of its records are acked after 1s).
	e.broker.Cluster().ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		harness.Hold(25*time.Millisecond, "the fault: kfake answers every produce request 25 ms late")
		return nil, nil, false
	})
	if before == "" {
		t.Fatal("no committed position after the first transaction")
	}
	big, in := e.insertInTx(c, "big", 200_000)
	if code := p.WaitExit(t, 2*time.Minute, "the transaction timeout"); code != 1 {
		t.Fatalf("exit %d, want 1; output:\n%s", code, p.Out.String())
	}
	out := p.Out.String()
	for _, want := range []string{"kafka.transaction_timeout (2s)", "raise kafka.transaction_timeout", "kafka.delivery: at_least_once"} {
		if !strings.Contains(out, want) {
			t.Fatalf("the error does not say %q:\n%s", want, out)
		}
	}
	// It may have moved to idle progress inside the big transaction's WAL (a keepalive before its
	// commit), from which the transaction is read again; it must not cover the transaction.
	if after := e.visiblePosition(); after == "" || lsn(t, after) > lsn(t, in) {
		t.Fatalf("the committed position %q (was %q) covers the aborted transaction (inside it: %s)", after, before, in)
	}
	got := testenv.ConsumeAll(t, e.broker.Addr(), eventsPattern)
	if missing := hasAll(got, big); len(missing) != len(big) {
		t.Fatalf("read_committed sees %d of the aborted transaction's %d records", len(big)-len(missing), len(big))
	}
	if len(hasAll(got, pre)) != 0 {
		t.Fatalf("the transaction before it is not visible")
	}
	t.Logf("stopped with: %s", lastLine(out, "kafka.transaction_timeout"))
}

// lastLine is the last line of out containing s.
func lastLine(out, s string) string {
	l := ""
	for _, x := range strings.Split(out, "\n") {
		if strings.Contains(x, s) {
			l = x
		}
	}
	return l
}
