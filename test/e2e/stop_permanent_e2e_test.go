package e2e

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
)

// TestStopOnPermanentError: kafka.on_permanent_error: stop with the real binary, a private
// PostgreSQL and the test broker, in both delivery modes. A row whose record is over
// kafka.max_record_bytes (record_too_large: Kafka would refuse it for good) makes outboxd exit 1
// with an error naming the row (event id, table, position, reason) and the fix; nothing is
// dead-lettered; the stored (at_least_once: offsets file; exactly_once: offsets.topic) position
// covers the transactions before it and not its own; the rows before it are delivered. With the
// config fixed (max_record_bytes raised), the restart resumes at the bad transaction and
// delivers it and everything after it.
func TestStopOnPermanentError(t *testing.T) {
	for _, mode := range []string{"at_least_once", "exactly_once"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, "")
			e.editConfig("kafka:\n", "kafka:\n  on_permanent_error: stop\n  max_record_bytes: 4096\n")
			stored := e.storedPosition
			if mode == "exactly_once" {
				eosEnv(e)
				stored = e.committedPosition
			}
			p := e.start()
			c := e.conn()

			blob := make([]byte, 9000)
			rand.Read(blob)
			big := dlqRow{sp("order"), sp("k"), fmt.Sprintf(`{"blob": "%s"}`, base64.StdEncoding.EncodeToString(blob))} // ~12 kB
			var before []string
			before = append(before, e.insertTx(c, goodRow(1), goodRow(2), goodRow(3))...)
			before = append(before, e.insertTx(c, goodRow(4), goodRow(5))...)
			walBefore := e.walLSN(c)
			bad := e.insertTx(c, goodRow(6), big, goodRow(7))
			walBad := e.walLSN(c)
			after := e.insertTx(c, goodRow(8), goodRow(9))
			walEnd := e.walLSN(c)

			if code := p.WaitExit(t, 60*time.Second, "the record over max_record_bytes"); code != 1 {
				t.Fatalf("exit %d, want 1; output:\n%s", code, p.Out.String())
			}
			out := p.Out.String()
			if i := strings.Index(out, "outboxd stopped with an error"); i >= 0 {
				t.Logf("%s", strings.SplitN(out[i:], "\n", 2)[0])
			}
			for _, want := range []string{"kafka.on_permanent_error: stop", "event id " + bad[1], "table public.outbox", "reason record_too_large",
				"It was not dead-lettered", "on_permanent_error: dlq", "outboxd offsets set"} {
				if !strings.Contains(out, want) {
					t.Errorf("the error lacks %q; output:\n%s", want, out)
				}
			}
			if strings.Contains(out, "dead-lettering record") {
				t.Errorf("a dead letter was logged under stop:\n%s", out)
			}
			pos := stored()
			if lsn(t, pos) < lsn(t, walBefore) || lsn(t, pos) >= lsn(t, walBad) {
				t.Fatalf("stored position %s: want at or past %s (the transactions before the bad one) and before %s (its end)", pos, walBefore, walBad)
			}
			t.Logf("stopped with stored position %s (transactions before the bad one end by %s, the bad one by %s)", pos, walBefore, walBad)
			if dlq := testenv.ConsumeAll(t, e.broker.Addr(), `outboxd\.dlq`); len(dlq) != 0 {
				t.Fatalf("%d records in the DLQ topic under stop", len(dlq))
			}
			got := testenv.ConsumeAll(t, e.broker.Addr(), eventsPattern)
			if missing := hasAll(got, before); len(missing) != 0 {
				t.Fatalf("rows before the bad one not delivered: %v", missing)
			}
			for _, r := range got {
				if r.Header("id") == bad[1] {
					t.Fatalf("the refused record was delivered")
				}
				if mode == "exactly_once" && !slices.Contains(before, r.Header("id")) {
					t.Fatalf("exactly_once: record %s of the bad transaction or after it is visible", r.Header("id"))
				}
			}

			// The fix: a config change; the restart resumes at the bad transaction.
			e.editConfig("max_record_bytes: 4096", "max_record_bytes: 1048576")
			p2 := e.start()
			all := append(append(append([]string{}, before...), bad...), after...)
			if mode == "exactly_once" {
				e.expectExactlyOnce(all, 60*time.Second)
			} else {
				e.waitStored(walEnd, 60*time.Second)
				if missing := hasAll(testenv.ConsumeAll(t, e.broker.Addr(), eventsPattern), all); len(missing) != 0 {
					t.Fatalf("not delivered after the fix: %v", missing)
				}
			}
			if !strings.Contains(p2.Out.String(), "resuming from") {
				t.Errorf("the restart did not resume from a stored position:\n%s", p2.Out.String())
			}
			if code := p2.Stop(t, syscall.SIGTERM); code != 0 {
				t.Fatalf("exit %d after SIGTERM; output:\n%s", code, p2.Out.String())
			}
		})
	}
}
