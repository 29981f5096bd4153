package pipeline

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/outboxd/outboxd/source"
)

// endSource serves its transactions, then ends with an error wrapping source.ErrEnd (a finite
// source, as `outboxd republish`'s table scan); it counts its opens.
type endSource struct {
	fakeSource
	opens atomic.Int32
}

func (s *endSource) Open(ctx context.Context, from source.Position) error {
	s.opens.Add(1)
	return s.fakeSource.Open(ctx, from)
}

func (s *endSource) Next(ctx context.Context) (source.Tx, error) {
	if s.n < len(s.txs) {
		return s.fakeSource.Next(ctx)
	}
	return source.Tx{}, fmt.Errorf("scan of public.outbox: %w", source.ErrEnd)
}

// TestRunEndsWithFiniteSource: when the source ends with source.ErrEnd, Run drains what is in
// flight (it does not return before the last record is acked), stores the last position and
// returns nil, without reopening the source; a source error that is not ErrEnd still reopens
// (TestSourceErrorReconnects' case), so the sentinel is what ends it.
func TestRunEndsWithFiniteSource(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &endSource{fakeSource: fakeSource{txs: []source.Tx{
			{Position: "01", Rows: []source.Row{row("a", "x"), row("b", "x")}},
			{Position: "02", Rows: []source.Row{row("c", "x")}},
		}}}
		p, st := &fakeProducer{}, &memStore{}
		errc := make(chan error, 1)
		o := options(&src.fakeSource, p, st)
		o.NewSource = func() source.Source { return src }
		go func() { errc <- Run(context.Background(), o) }()
		waitFor(t, "3 records queued", func() bool { return p.count() == 3 })
		p.ack(0, nil)
		p.ack(1, nil)
		settle(10 * testCommitInterval)
		select {
		case err := <-errc:
			t.Fatalf("Run returned (%v) with record c unacked", err)
		default:
		}
		p.ack(2, nil)
		if err := <-errc; err != nil {
			t.Fatalf("Run after the source's end: %v, want nil", err)
		}
		if got := st.get(); got != "02" {
			t.Fatalf("stored %q, want 02", got)
		}
		if n := src.opens.Load(); n != 1 {
			t.Fatalf("source opened %d times, want once (an ended source is not reopened)", n)
		}
	})
}

// TestRunEndsWithFiniteSourceBacklog: chunks still buffered between the reader and the loop (and
// the one held while the core is full) when the end arrives are delivered, not dropped.
func TestRunEndsWithFiniteSourceBacklog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &endSource{}
		for i := 1; i <= 50; i++ {
			src.txs = append(src.txs, source.Tx{Position: source.Position(fmt.Sprintf("%03d", i)),
				Rows: []source.Row{row(fmt.Sprint("a", i), "x"), row(fmt.Sprint("b", i), "x")}})
		}
		p, st := &fakeProducer{auto: true}, &memStore{}
		o := options(&src.fakeSource, p, st)
		o.NewSource = func() source.Source { return src }
		o.MaxInflight = 3 // the core is full most of the time: chunks wait in the channel and in pending
		if err := Run(context.Background(), o); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if n := p.count(); n != 100 {
			t.Fatalf("%d records produced, want 100", n)
		}
		if got := st.get(); got != "050" {
			t.Fatalf("stored %q, want 050", got)
		}
	})
}

// TestRunExactlyOnceEndsWithFiniteSource: the same end under exactly_once (the session loop is
// shared): the last position is committed and RunExactlyOnce returns nil by itself.
func TestRunExactlyOnceEndsWithFiniteSource(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &fakeCluster{}
		src := &endSource{fakeSource: fakeSource{txs: []source.Tx{
			{Position: "01", Rows: []source.Row{row("a", "x")}},
			{Position: "02", Rows: []source.Row{row("b", "x"), row("c", "x")}},
		}}}
		o := eosOptions(c, &src.fakeSource)
		o.NewSource = func() source.Source { return src }
		if err := RunExactlyOnce(context.Background(), o); err != nil {
			t.Fatalf("RunExactlyOnce after the source's end: %v, want nil", err)
		}
		if pos, _ := (fakePosStore{c}).Load(context.Background()); pos != "02" {
			t.Fatalf("committed position %q, want 02", pos)
		}
		if n := src.opens.Load(); n != 1 {
			t.Fatalf("source opened %d times, want once", n)
		}
	})
}
