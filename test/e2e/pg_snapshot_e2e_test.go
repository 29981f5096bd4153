package e2e

// source.postgres.snapshot: initial, black-box: the outbox rows written before the first start,
// while outboxd takes its snapshot and after it are all delivered, each once; a restart with a
// stored position takes no snapshot.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
)

// bgWriter commits small transactions of outbox rows on its own connection until stopped.
type bgWriter struct {
	mu   sync.Mutex
	ids  []string
	err  error
	stop chan struct{}
	done chan struct{}
}

func (e *env) startBgWriter() *bgWriter {
	e.t.Helper()
	c, err := pgx.Connect(context.Background(), e.pg.DSN("app"))
	if err != nil {
		e.t.Fatal(err)
	}
	w := &bgWriter{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer c.Close(context.Background())
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			var id string
			err := c.QueryRow(context.Background(), `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
				VALUES (gen_random_uuid(), 'order', 'agg-live', 'created', jsonb_build_object('i', $1::int)) RETURNING id::text`, i).Scan(&id)
			w.mu.Lock()
			if err != nil {
				w.err = err
				w.mu.Unlock()
				return
			}
			w.ids = append(w.ids, id)
			w.mu.Unlock()
		}
	}()
	e.t.Cleanup(w.halt)
	return w
}

func (w *bgWriter) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.ids)
}

func (w *bgWriter) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// tableIDs are the ids in public.outbox.
func tableIDs(t *testing.T, c *pgx.Conn) []string {
	t.Helper()
	rows, err := c.Query(context.Background(), `SELECT id::text FROM public.outbox`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func TestPGSnapshotInitial(t *testing.T) {
	for _, eos := range []bool{false, true} {
		t.Run(map[bool]string{false: "at_least_once", true: "exactly_once"}[eos], func(t *testing.T) { pgSnapshot(t, eos) })
	}
}

func pgSnapshot(t *testing.T, eos bool) {
	e := newEnv(t, "")
	if eos {
		eosEnv(e)
	}
	e.editConfig("    status_interval: 1s\n", "    status_interval: 1s\n    snapshot: initial\n")
	c := e.conn()
	for i := 0; i < 20; i++ {
		e.insert(c, fmt.Sprintf("agg-%d", i%5), 100) // 2000 rows before the first start
	}
	w := e.startBgWriter() // before, during and after the snapshot
	harness.WaitFor(t, 20*time.Second, "rows written before the start", func() bool { return w.count() >= 10 })
	p := e.start()
	harness.WaitFor(t, 60*time.Second, "the snapshot handed out", func() bool {
		return strings.Contains(p.Out.String(), "snapshot handed out")
	})
	n := w.count()
	harness.WaitFor(t, 20*time.Second, "rows written after the snapshot", func() bool { return w.count() >= n+20 })
	w.halt()
	if w.err != nil {
		t.Fatal(w.err)
	}
	want := tableIDs(t, c)
	after := walLSN(t, c)
	got := testenv.Consume(t, e.broker.Addr(), `outbox\.event\..*`, len(want), 60*time.Second)
	if missing := hasAll(got, want); len(missing) > 0 {
		t.Fatalf("%d of %d rows missing (first: %v)\noutput:\n%s", len(missing), len(want), missing[:min(3, len(missing))], p.Out.String())
	}
	if distinct, dups := countDistinct(got); distinct != len(want) || dups != 0 {
		t.Errorf("%d distinct ids (%d duplicates), want %d", distinct, dups, len(want))
	}
	harness.WaitFor(t, 30*time.Second, "the slot confirmed past the last insert", func() bool {
		return lsn(t, e.slotConfirmed(c)) >= lsn(t, after)
	})
	if !strings.Contains(p.Out.String(), "snapshot: table read") {
		t.Errorf("no snapshot log line:\n%s", p.Out.String())
	}
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("exit code %d after SIGTERM:\n%s", code, p.Out.String())
	}

	// A restart with a stored position takes no snapshot: only the new rows follow.
	p = e.start()
	more := e.insert(c, "agg-after", 3)
	got = testenv.Consume(t, e.broker.Addr(), `outbox\.event\..*`, len(want)+len(more), 30*time.Second)
	if missing := hasAll(got, append(want, more...)); len(missing) > 0 {
		t.Fatalf("%d rows missing after the restart (first %v)", len(missing), missing[0])
	}
	if distinct, dups := countDistinct(got); distinct != len(want)+len(more) || dups != 0 {
		t.Errorf("after the restart: %d distinct ids, %d duplicates; want %d, none", distinct, dups, len(want)+len(more))
	}
	if out := p.Out.String(); strings.Contains(out, "snapshot imported") || strings.Contains(out, "slot dropped") {
		t.Errorf("the restart with a stored position mentions a snapshot:\n%s", p.Out.String())
	}
	t.Logf("%d rows delivered once: %d before the start, %d written by the writer around the snapshot", len(want), 2000, len(w.ids))
}

// TestPGSnapshotCrashRedo: outboxd killed in the middle of its snapshot (Kafka refusing its
// records, so nothing of it is acknowledged and no position stored) drops the slot at the next
// start and takes the snapshot again: every row, the ones written in between too, is delivered.
func TestPGSnapshotCrashRedo(t *testing.T) {
	kfakeOnly(t, "the produce fault must refuse the snapshot's records from outboxd's start; a paused Apache Kafka keeps outboxd from starting at all")
	e := newEnv(t, "")
	e.editConfig("    status_interval: 1s\n", "    status_interval: 1s\n    snapshot: initial\n")
	c := e.conn()
	for i := 0; i < 30; i++ { // 3000 rows: a snapshot of several chunks (1024 rows each)
		e.insert(c, fmt.Sprintf("agg-%d", i%5), 100)
	}
	st := e.stallProduce("outbox.event.order")
	p := e.start()
	harness.WaitFor(t, 30*time.Second, "the snapshot's records held back by Kafka", st.reached)
	p.Kill()
	if pos := e.storedPosition(); pos != "" {
		t.Fatalf("a position (%s) was stored before the snapshot was delivered", pos)
	}
	more := e.insert(c, "agg-between", 5)
	st.release()
	p = e.start()
	want := tableIDs(t, c)
	got := testenv.Consume(t, e.broker.Addr(), `outbox\.event\..*`, len(want), 60*time.Second)
	if missing := hasAll(got, append(want, more...)); len(missing) > 0 {
		t.Fatalf("%d of %d rows missing after the redone snapshot (first %v)\noutput:\n%s", len(missing), len(want), missing[0], p.Out.String())
	}
	if !strings.Contains(p.Out.String(), "Dropping the slot and taking the snapshot again") {
		t.Errorf("the restart did not say it takes the snapshot again:\n%s", p.Out.String())
	}
	after := walLSN(t, c)
	harness.WaitFor(t, 30*time.Second, "the stored position past the last insert", func() bool {
		s := e.storedPosition()
		return s != "" && lsn(t, s) >= lsn(t, after)
	})
}
