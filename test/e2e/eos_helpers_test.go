package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
	"github.com/outboxd/outboxd/sink/kafka"
)

// Helpers of the exactly_once end-to-end tests (eos_e2e_test.go).

const eventsPattern = `outbox\.event\..*`

// newEOSEnv is newEnv with exactly_once delivery and the Kafka offsets store.
func newEOSEnv(t *testing.T) *env { return eosEnv(newEnv(t, "")) }

// eosEnv switches e to exactly_once delivery and the Kafka offsets store.
func eosEnv(e *env) *env {
	e.editConfig("kafka:\n", "kafka:\n  delivery: exactly_once\n")
	e.editConfig("offsets:\n", "offsets:\n  store: kafka\n")
	return e
}

// startWith starts outboxd with extra environment variables and, when wait is set, waits until
// it streams from the slot.
func (e *env) startWith(wait bool, extraEnv ...string) *harness.Proc {
	e.t.Helper()
	return e.startConfig(e.cfgPath, "outboxd", wait, extraEnv...)
}

// startConfig starts `outboxd run -c cfgPath`; with wait, it waits until that process streams
// from slot.
func (e *env) startConfig(cfgPath, slot string, wait bool, extraEnv ...string) *harness.Proc {
	e.t.Helper()
	p := harness.Start(e.t, binPath, []string{"run", "-c", cfgPath}, harness.Options{Name: "outboxd (" + cfgPath + ")", Env: extraEnv})
	if wait {
		c := e.conn()
		harness.WaitFor(e.t, 30*time.Second, "slot streamed by this outboxd", func() bool {
			select {
			case <-p.Done:
				e.t.Fatalf("outboxd exited with %d:\n%s", p.Code, p.Out.String())
			default:
			}
			var active bool
			c.QueryRow(context.Background(), "SELECT active FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&active)
			return active && strings.Contains(p.Out.String(), "replication started")
		})
	}
	return p
}

// committedPosition reads the position in offsets.topic as outboxd does (read_committed).
func (e *env) committedPosition() string {
	e.t.Helper()
	s := &kafka.OffsetStore{Kafka: kafka.Config{Brokers: []string{e.broker.Addr()}}, Topic: "outboxd.offsets", Key: "postgres:outboxd"}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := s.Load(ctx)
	if err != nil {
		e.t.Fatalf("read the committed position: %v", err)
	}
	return string(p)
}

// visiblePosition is the last position in offsets.topic visible to a read_committed consumer
// now, without waiting for open transactions (committedPosition waits for them, as outboxd does).
func (e *env) visiblePosition() string {
	e.t.Helper()
	pos := ""
	for _, r := range testenv.ConsumeAll(e.t, e.broker.Addr(), `outboxd\.offsets`) {
		if string(r.Key) == "postgres:outboxd" {
			var d struct{ Position string }
			if err := json.Unmarshal(r.Value, &d); err != nil {
				e.t.Fatalf("offsets record %s: %v", r.Value, err)
			}
			pos = d.Position
		}
	}
	return pos
}

// expectExactlyOnce waits until every id in want was consumed (read_committed), then checks that
// nothing else and nothing twice arrived. The last row written is among them, and outboxd
// delivers in commit order in one transaction after the other: whatever it delivers (again)
// before that row is committed or aborted by the time that row is visible, so reading the
// topics to their end then sees every duplicate.
func (e *env) expectExactlyOnce(want []string, d time.Duration) {
	e.t.Helper()
	harness.WaitFor(e.t, d, fmt.Sprintf("%d events delivered", len(want)), func() bool {
		return len(hasAll(testenv.ConsumeAll(e.t, e.broker.Addr(), eventsPattern), want)) == 0
	})
	got := testenv.ConsumeAll(e.t, e.broker.Addr(), eventsPattern)
	n, dups := countDistinct(got)
	e.t.Logf("read_committed: %d records, %d distinct, %d duplicates; %d written", len(got), n, dups, len(want))
	if missing := hasAll(got, want); len(missing) > 0 {
		e.t.Fatalf("%d lost: %v", len(missing), missing[:min(5, len(missing))])
	}
	if dups != 0 || n != len(want) {
		e.t.Fatalf("%d distinct (want %d), %d duplicates (want 0)", n, len(want), dups)
	}
}

// uncommittedIDs reads every event topic with read_uncommitted: records of aborted and open
// transactions included. It returns how many times each id was seen.
func (e *env) uncommittedIDs() map[string]int {
	e.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.broker.Addr()), kgo.ConsumeRegex(), kgo.ConsumeTopics(eventsPattern),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadUncommitted()),
		kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	out := map[string]int{}
	for ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key == "id" {
					out[string(h.Value)]++
				}
			}
		})
	}
	return out
}

// writer commits outbox rows in small transactions until stopped.
type writer struct {
	stop chan struct{}
	done chan []string
}

func (e *env) startWriter() *writer {
	w := &writer{stop: make(chan struct{}), done: make(chan []string, 1)}
	c := e.conn()
	go func() {
		var ids []string
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				w.done <- ids
				return
			default:
			}
			ids = append(ids, e.insert(c, fmt.Sprintf("k%d", i%7), 1+i%3)...)
			harness.Hold(3*time.Millisecond, "paces the writer")
		}
	}()
	return w
}

func (w *writer) finish() []string { close(w.stop); return <-w.done }

func (e *env) slotConfirmedLSN(c *pgx.Conn) string { return e.slotConfirmed(c) }
