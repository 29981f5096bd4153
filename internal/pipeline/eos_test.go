package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
)

// Batches hold whole source transactions, each Kafka transaction ends with its position, and
// the source is confirmed only with committed positions.
func TestEOSBatchesWholeTransactions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &fakeCluster{}
		src := &fakeSource{txs: txs("a b", "c", "", "d e f g h i", "j", "k l")}
		if err := runEOS(t, eosOptions(c, src), "06"); err != nil {
			t.Fatal(err)
		}
		got := ids(c.committed(), "")
		if strings.Join(got, " ") != "a b c d e f g h i j k l" {
			t.Fatalf("committed %v", got)
		}
		var ends []string
		for _, txn := range c.txns {
			last := txn[len(txn)-1]
			if last.Topic != "offsets" {
				t.Fatalf("a Kafka transaction does not end with its position: %+v", txn)
			}
			n := len(txn) - 1
			if n > 4 && n != 6 { // the 6-row source transaction goes whole
				t.Errorf("Kafka transaction with %d records (MaxRecords 4)", n)
			}
			ends = append(ends, string(last.Value))
		}
		src.mu.Lock()
		confirmed := fmt.Sprint(src.confirmed)
		src.mu.Unlock()
		if confirmed != "["+strings.Join(ends, " ")+"]" {
			t.Fatalf("confirmed %s, committed positions %v", confirmed, ends)
		}
		if ends[len(ends)-1] != "06" {
			t.Fatalf("last position %v", ends)
		}
	})
}

// A record the broker refuses poisons its whole request: the runner re-sends the records that
// failed together one by one, dead-letters the culprit, and delivers the rest once, in order.
func TestEOSPoisonRecordIsolated(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &fakeCluster{tooLarge: func(r *sink.Record) bool { return r.Topic == "outbox.event.big" }}
		src := &fakeSource{txs: txs("a b", "c big@big d", "e", "f")}
		o := eosOptions(c, src)
		o.MaxRecords = 100
		o.Linger = 50 * time.Millisecond
		if err := runEOS(t, o, "04"); err != nil {
			t.Fatal(err)
		}
		if got := ids(c.committed(), ""); strings.Join(got, " ") != "a b c big d e f" {
			t.Fatalf("committed %v", got)
		}
		dlq := ids(c.committed(), "dlq")
		if strings.Join(dlq, " ") != "big" {
			t.Fatalf("dead letters %v", dlq)
		}
		for _, r := range c.committed() {
			if r.Topic == "dlq" && (h(r, sink.HeaderReason) != "record_too_large" || h(r, sink.HeaderStage) != "produce" || h(r, sink.HeaderOriginalTopic) != "outbox.event.big") {
				t.Fatalf("dead letter headers %+v", r.Headers)
			}
		}
		if ids := ids(c.committed(), "outbox.event.order"); strings.Join(ids, " ") != "a b c d e f" {
			t.Fatalf("order %v", ids)
		}
	})
}

// Poison rows of the transform stage go to the DLQ in the same Kafka transaction.
func TestEOSTransformPoison(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &fakeCluster{}
		bad := row("x", "order")
		bad.Values[1].Null, bad.Values[1].Bytes = true, nil
		src := &fakeSource{txs: []source.Tx{{Position: "01", Rows: []source.Row{row("a", "order"), bad, row("b", "order")}}}}
		if err := runEOS(t, eosOptions(c, src), "01"); err != nil {
			t.Fatal(err)
		}
		got := c.committed()
		if len(got) != 4 || got[1].Topic != "dlq" || h(got[1], sink.HeaderStage) != "transform" || got[3].Topic != "offsets" {
			t.Fatalf("committed %+v", got)
		}
	})
}

func TestEOSDLQUnwritableStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &fakeCluster{dlqDenied: true, tooLarge: func(r *sink.Record) bool { return r.Topic == "outbox.event.big" }}
		src := &fakeSource{txs: txs("a", "big@big b")}
		o := eosOptions(c, src)
		o.MaxRecords = 1
		err := runEOS(t, o, "99")
		if err == nil || !strings.Contains(err.Error(), "dead-letter topic dlq cannot be written") {
			t.Fatalf("err = %v", err)
		}
		if pos, _ := (fakePosStore{c}).Load(context.Background()); pos != "01" {
			t.Fatalf("committed past the poison row: %s", pos)
		}
	})
}

// Transient failures abort and redo the batch; nothing is committed twice.
func TestEOSTransientRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &fakeCluster{transientLeft: 3, failInit: 0}
		src := &fakeSource{txs: txs("a b", "c", "d")}
		if err := runEOS(t, eosOptions(c, src), "03"); err != nil {
			t.Fatal(err)
		}
		if got := ids(c.committed(), ""); strings.Join(got, " ") != "a b c d" {
			t.Fatalf("committed %v", got)
		}
		if c.aborts < 3 {
			t.Fatalf("%d aborts", c.aborts)
		}
	})
}

// A commit whose outcome is unknown is settled by re-initialising and reading the position.
func TestEOSAmbiguousCommit(t *testing.T) {
	for _, mode := range []string{"before", "after"} {
		t.Run(mode, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := &fakeCluster{commitFails: []string{"", mode}, failInit: 0}
				src := &fakeSource{txs: txs("a", "b", "c")}
				o := eosOptions(c, src)
				o.MaxRecords = 1
				if err := runEOS(t, o, "03"); err != nil {
					t.Fatal(err)
				}
				if got := ids(c.committed(), ""); strings.Join(got, " ") != "a b c" {
					t.Fatalf("committed %v", got)
				}
				if c.inits != 2 {
					t.Fatalf("%d initialisations, want 2", c.inits)
				}
			})
		})
	}
}

// A zombie: its commit fails with an unknown outcome (not PRODUCER_FENCED) after another
// instance took over and committed. It stops with ErrFenced without initialising the
// transactional id again, which would fence the instance that took over.
func TestEOSAmbiguousCommitAfterTakeover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &fakeCluster{commitFails: []string{"", "taken"}}
		src := &fakeSource{txs: txs("a", "b", "c")}
		o := eosOptions(c, src)
		o.MaxRecords = 1
		err := runEOS(t, o, "99")
		if !errors.Is(err, ErrFenced) || !strings.Contains(err.Error(), "77") || !strings.Contains(err.Error(), "kafka.transactional_id") {
			t.Fatalf("err = %v, want ErrFenced naming the position 77 and kafka.transactional_id", err)
		}
		if c.inits != 1 {
			t.Fatalf("%d initialisations, want 1: a zombie must not initialise the transactional id again", c.inits)
		}
		if got := ids(c.committed(), ""); strings.Join(got, " ") != "a" {
			t.Fatalf("committed %v", got)
		}
	})
}

// Another producer with the same transactional id fences the running one: it stops with
// ErrFenced, committing nothing more.
func TestEOSFenced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &fakeCluster{}
		src := &fakeSource{txs: txs("a", "b")}
		o := eosOptions(c, src)
		o.MaxRecords = 1
		first := true
		o.OnCommit = func(source.Position) {
			if first {
				first = false
				c.newProducer() // the other instance starts
			}
		}
		err := runEOS(t, o, "99")
		if !errors.Is(err, ErrFenced) || !strings.Contains(err.Error(), "outboxd-test") {
			t.Fatalf("err = %v", err)
		}
		if got := ids(c.committed(), ""); strings.Join(got, " ") != "a" {
			t.Fatalf("committed %v", got)
		}
	})
}

// A restart resumes from the committed position: nothing twice.
func TestEOSResumes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &fakeCluster{}
		all := txs("a", "b", "c", "d")
		if err := runEOS(t, eosOptions(c, &fakeSource{txs: all[:2]}), "02"); err != nil {
			t.Fatal(err)
		}
		src := &fakeSource{txs: all}
		if err := runEOS(t, eosOptions(c, src), "04"); err != nil {
			t.Fatal(err)
		}
		if src.from != "02" {
			t.Fatalf("opened from %q", src.from)
		}
		if got := ids(c.committed(), ""); strings.Join(got, " ") != "a b c d" {
			t.Fatalf("committed %v", got)
		}
	})
}

// A stop commits the batch being collected, even before its linger.
func TestEOSStopCommitsCurrentBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &fakeCluster{}
		src := &fakeSource{txs: txs("a", "b")}
		o := eosOptions(c, src)
		o.Linger = time.Hour
		o.MaxRecords = 100
		m := &countMetrics{}
		o.Metrics = m
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- RunExactlyOnce(ctx, o) }()
		waitFor(t, "transactions read", func() bool { return m.read.Load() == 2 })
		settle(20 * time.Millisecond)
		if len(c.committed()) != 0 {
			t.Fatal("committed before the linger")
		}
		cancel()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if got := ids(c.committed(), ""); strings.Join(got, " ") != "a b" {
			t.Fatalf("committed %v", got)
		}
	})
}

// A source error: what was read is committed, the source is reopened from there.
func TestEOSSourceErrorReopens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &fakeCluster{}
		src := &fakeSource{txs: txs("a", "b", "c"), failAfter: 2}
		opens := 0
		o := eosOptions(c, src)
		o.NewSource = func() source.Source {
			src.n = 0 // a fresh connection replays from the committed position
			return src
		}
		o.OnOpen = func() { opens++ }
		if err := runEOS(t, o, "03"); err != nil {
			t.Fatal(err)
		}
		if got := ids(c.committed(), ""); strings.Join(got, " ") != "a b c" || opens != 2 {
			t.Fatalf("committed %v, %d opens", got, opens)
		}
	})
}

// Idle progress (transactions without rows) is committed, at most every IdleInterval.
func TestEOSIdleProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &fakeCluster{}
		src := &fakeSource{txs: txs("", "", "")}
		if err := runEOS(t, eosOptions(c, src), "03"); err != nil {
			t.Fatal(err)
		}
		if got := c.committed(); len(got) == 0 || len(got) > 3 || string(got[len(got)-1].Value) != "03" {
			t.Fatalf("committed %+v", got)
		}
	})
}

func TestEOSBreakerStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &fakeCluster{}
		bad := func(id string) source.Row {
			r := row(id, "order")
			r.Values[1].Null, r.Values[1].Bytes = true, nil
			return r
		}
		src := &fakeSource{txs: []source.Tx{{Position: "01", Rows: []source.Row{row("a", "order")}},
			{Position: "02", Rows: []source.Row{bad("x"), bad("y"), row("b", "order")}}}}
		o := eosOptions(c, src)
		o.MaxRecords = 1
		o.DLQBreaker = Breaker{Max: 1, Window: 10}
		err := runEOS(t, o, "99")
		if err == nil || !strings.Contains(err.Error(), "kafka.dlq_max_rate exceeded") {
			t.Fatalf("err = %v", err)
		}
		if pos, _ := (fakePosStore{c}).Load(context.Background()); pos != "01" {
			t.Fatalf("committed %s past the tripping record", pos)
		}
	})
}

func TestCrashHook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := slog.New(slog.DiscardHandler)
		if f, err := CrashHook("", log, nil); f != nil || err != nil {
			t.Fatal("empty spec armed the hook")
		}
		if f, err := CrashHook("mid_batch:3", log, nil); f == nil || err != nil {
			t.Fatalf("mid_batch refused: %v", err)
		}
		for _, bad := range []string{"nope", "after_commit:0", "before_commit:x", "mid_batch:-1"} {
			if _, err := CrashHook(bad, log, nil); err == nil {
				t.Errorf("%q accepted", bad)
			}
		}
		exits := 0
		f, err := CrashHook("after_commit:2", log, func() { exits++ })
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"before_commit", "after_commit", "before_commit", "after_commit", "after_commit"} {
			f(p)
		}
		if exits != 1 {
			t.Fatalf("%d exits", exits)
		}
	})
}

// The mid_batch crash point passes inside an open Kafka transaction: some of the batch's records
// are acked there, none is committed, and the position is not stored.
func TestEOSCrashMidBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &fakeCluster{reqSize: 2}
		src := &fakeSource{txs: txs("a b c", "d e f")}
		o := eosOptions(c, src)
		o.MaxRecords = 100
		passes := 0
		o.Crash = func(p string) {
			if p != "mid_batch" {
				return
			}
			passes++
			c.mu.Lock()
			open, committed := len(c.open), len(c.log)
			c.mu.Unlock()
			if open == 0 || committed != 0 {
				t.Errorf("mid_batch: %d records acked in the open transaction, %d committed; want some and none", open, committed)
			}
		}
		if err := runEOS(t, o, "02"); err != nil {
			t.Fatal(err)
		}
		if passes == 0 {
			t.Fatal("mid_batch never passed")
		}
		if got := ids(c.committed(), ""); strings.Join(got, " ") != "a b c d e f" {
			t.Fatalf("committed %v", got)
		}
	})
}

// While Kafka refuses every batch, the runner reads ahead no more than ReadAheadRows rows (plus
// the open batch and the transaction the reader holds): a backlog is not pulled into memory.
func TestEOSReadAheadBoundedByRows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &fakeCluster{transientLeft: 1 << 30}
		var spec []string
		for i := range 300 {
			spec = append(spec, fmt.Sprintf("r%d", i))
		}
		src := &countingSource{fakeSource: &fakeSource{txs: txs(spec...)}}
		o := eosOptions(c, src.fakeSource)
		o.NewSource = func() source.Source { return src }
		o.ReadAheadRows = 10
		o.ShutdownTimeout = 100 * time.Millisecond // the open batch cannot commit: do not wait for it
		o.Log = slog.New(slog.DiscardHandler)
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- RunExactlyOnce(ctx, o) }()
		settle(300 * time.Millisecond) // many failed flush attempts
		read := src.rows.Load()
		cancel()
		<-errc
		// batch (MaxRecords 4) + the transaction that starts the next batch (the core holds it until
		// the batch commits) + budget (10) + the one transaction the reader waits to hand over.
		if read > 4+1+10+1 {
			t.Fatalf("read %d rows ahead of a stalled Kafka with ReadAheadRows 10", read)
		}
		if read < 4 {
			t.Fatalf("read only %d rows: the test did not fill a batch", read)
		}
	})
}
