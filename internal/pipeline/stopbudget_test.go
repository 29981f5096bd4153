package pipeline

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outboxd/outboxd/source"
)

// stuckProducer never acks; its Shutdown waits for its context, as the Kafka producer does with
// the cluster down, then gives up: the records still out fail (the Kafka producer's ErrAborted).
type stuckProducer struct{ fakeProducer }

func (p *stuckProducer) Shutdown(ctx context.Context) error {
	<-ctx.Done()
	p.fakeProducer.Close()
	return ctx.Err()
}

// TestStopIsOneBudget (issue 11 case 18): with a record that is never acked, a stop takes one
// shutdown_timeout in all — the drain and the producer's shutdown share the deadline — not two.
func TestStopIsOneBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &fakeSource{txs: []source.Tx{{Position: "01", Rows: []source.Row{row("a", "x")}}}}
		p, st := &stuckProducer{}, &memStore{}
		o := options(src, &p.fakeProducer, st)
		o.Producer = p
		o.ShutdownTimeout = 400 * time.Millisecond
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error)
		go func() { errc <- Run(ctx, o) }()
		waitFor(t, "queued", func() bool { return p.count() == 1 })
		stopped := time.Now()
		cancel()
		err := <-errc
		took := time.Since(stopped)
		if !errors.Is(err, ErrShutdownTimeout) {
			t.Fatalf("err = %v", err)
		}
		if took < o.ShutdownTimeout || took > o.ShutdownTimeout*3/2 {
			t.Fatalf("the stop took %v, want about one shutdown_timeout (%v)", took, o.ShutdownTimeout)
		}
	})
}

func TestStopBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		b := newStopBudget(ctx, time.Hour)
		defer b.release()
		if _, ok := b.stopping(); ok {
			t.Fatal("stopping before the stop")
		}
		// Without a stop a bounded wait gets the full timeout.
		c, cc := b.context()
		if d, _ := c.Deadline(); time.Until(d) < 59*time.Minute {
			t.Errorf("deadline without a stop %v", time.Until(d))
		}
		cc()
		cancel()
		waitFor(t, "stop noticed", func() bool { _, ok := b.stopping(); return ok })
		d1, _ := b.stopping()
		if d2 := b.start(); !d2.Equal(d1) {
			t.Errorf("the deadline moved: %v then %v", d1, d2)
		}
		c, cc = b.context()
		defer cc()
		if d, _ := c.Deadline(); !d.Equal(d1) {
			t.Errorf("context deadline %v, want the stop's %v", d, d1)
		}
	})
}

// stuckCloseTxn is a transactional producer whose Close hangs (a cluster gone mid-stop).
type stuckCloseTxn struct {
	*fakeTxn
	release chan struct{}
}

func (p stuckCloseTxn) Close() error { <-p.release; return p.fakeTxn.Close() }

// TestEOSStopIsOneBudget: exactly_once with commits failing transiently and a Close that hangs:
// the stop (the batch's commit attempts, then closing the producer) takes one shutdown_timeout.
func TestEOSStopIsOneBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &fakeCluster{transientLeft: 1 << 30}
		src := &fakeSource{txs: txs("a", "b")}
		o := eosOptions(c, src)
		release := make(chan struct{})
		defer close(release)
		o.NewProducer = func() (TxnProducer, error) {
			p, err := c.newProducer()
			if err != nil {
				return nil, err
			}
			return stuckCloseTxn{fakeTxn: p.(*fakeTxn), release: release}, nil
		}
		o.ShutdownTimeout = 400 * time.Millisecond
		o.Log = slog.New(slog.DiscardHandler)
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- RunExactlyOnce(ctx, o) }()
		// Setup: wait until the batch is being retried against the failing cluster.
		waitFor(t, "a produce attempt against the failing cluster", func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.transientLeft < 1<<30
		})
		stopped := time.Now()
		cancel()
		err := <-errc
		took := time.Since(stopped)
		if !errors.Is(err, ErrShutdownTimeout) {
			t.Fatalf("err = %v", err)
		}
		if took < o.ShutdownTimeout || took > o.ShutdownTimeout*3/2 {
			t.Fatalf("the stop took %v, want about one shutdown_timeout (%v)", took, o.ShutdownTimeout)
		}
	})
}
