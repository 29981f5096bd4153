package pipeline

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/outboxd/outboxd/internal/pipeline/delivery"
	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
)

// kafka.on_permanent_error: stop through the at_least_once runner: a row Kafka refuses for good
// ends Run with a *delivery.PermanentError naming it; the transactions before it are stored,
// nothing is dead-lettered, the position never reaches its transaction; the same for a row the
// transform refuses. Then a run with the cause fixed resumes at the bad transaction.
func TestStopOnPermanentALO(t *testing.T) {
	for _, tc := range []struct{ name, agg, stage, reason string }{
		{"produce", "big", "produce", "record_too_large"},
		{"transform", "bad topic!", "transform", "invalid_topic"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				src := &fakeSource{txs: []source.Tx{
					{Position: "01", Rows: []source.Row{row("a", "x"), row("b", "x")}},
					{Position: "02", Rows: []source.Row{row("c", "x")}},
					{Position: "03", Rows: []source.Row{row("d", "x"), row("e", tc.agg), row("f", "x")}},
					{Position: "04", Rows: []source.Row{row("g", "x")}},
				}}
				p, st := &fakeProducer{auto: true, failFor: map[string]error{"outbox.event.big": errors.New("too large")}}, &memStore{}
				o := options(src, p, st)
				o.StopOnPermanent = true
				o.DLQBreaker = Breaker{Max: 0, Window: 1} // would trip on the first dead letter: stop must not consult it
				err := Run(context.Background(), o)
				var pe *delivery.PermanentError
				if !errors.As(err, &pe) {
					t.Fatalf("err = %v, want a PermanentError", err)
				}
				if pe.RowID != "e" || pe.Table != "public.outbox" || pe.Where.Position != "03" || pe.Stage != tc.stage || pe.Reason != tc.reason || pe.Stored != "02" {
					t.Fatalf("PermanentError %+v", pe)
				}
				for _, want := range []string{"event id e", "source position 03", "stored position 02", "on_permanent_error: dlq", "`outboxd offsets set -c FILE --position 03`"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error lacks %q: %v", want, err)
					}
				}
				if got := st.get(); got != "02" {
					t.Fatalf("stored %q, want 02 (the transactions before the bad one, not its own)", got)
				}
				for _, r := range p.queued {
					if r.Topic == "dlq" {
						t.Fatalf("a dead letter was produced under stop: %+v", r.Headers)
					}
				}

				// The fix (on_permanent_error: dlq here; a config change in general): the restart
				// resumes at 03 and delivers it and what follows.
				p2 := &fakeProducer{auto: true}
				o2 := options(&fakeSource{txs: src.txs}, p2, st) // opened at the stored 02: re-reads 03 on

				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				errc := make(chan error, 1)
				go func() { errc <- Run(ctx, o2) }()
				waitFor(t, "stored 04", func() bool { return st.get() == "04" })
				cancel()
				if err := <-errc; err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, r := range p2.queued {
					got = append(got, r.Topic+":"+headerOf(r, "id"))
				}
				if strings.Join(got, " ") != "outbox.event.x:d dlq:e outbox.event.x:f outbox.event.x:g" && tc.name == "transform" ||
					tc.name == "produce" && strings.Join(got, " ") != "outbox.event.x:d outbox.event.big:e outbox.event.x:f outbox.event.x:g" {
					t.Fatalf("after the restart: %v", got)
				}
			})
		})
	}
}

func headerOf(r *sink.Record, k string) string {
	for _, x := range r.Headers {
		if x.Key == k {
			return string(x.Value)
		}
	}
	return ""
}

// The same through the exactly_once runner: the batch holding the bad row is aborted, the
// transactions of it before the bad one are committed, nothing after it and no dead letter is
// ever committed.
func TestStopOnPermanentEOS(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &fakeCluster{tooLarge: func(r *sink.Record) bool { return r.Topic == "outbox.event.big" }}
		src := &fakeSource{txs: txs("a b", "c", "d big@big e", "f")}
		o := eosOptions(c, src)
		o.MaxRecords, o.StopOnPermanent = 100, true // one batch for all: the cut is inside it
		o.DLQBreaker = Breaker{Max: 0, Window: 1}
		err := runEOS(t, o, "04")
		var pe *delivery.PermanentError
		if !errors.As(err, &pe) {
			t.Fatalf("err = %v, want a PermanentError", err)
		}
		if pe.RowID != "big" || pe.Where.Position != "03" || pe.Stage != "produce" || pe.Reason != "record_too_large" || pe.Stored != "02" || pe.Note != "" {
			t.Fatalf("PermanentError %+v", pe)
		}
		if got := strings.Join(ids(c.committed(), ""), " "); got != "a b c" {
			t.Fatalf("committed %q, want the transactions before the bad one", got)
		}
		if pos, _ := (fakePosStore{c}).Load(context.Background()); pos != "02" {
			t.Fatalf("committed position %s, want 02", pos)
		}
	})
}
