package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/cleanup"
	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/metrics"
	"github.com/outboxd/outboxd/source"
)

// fakeCleaner fails its first DELETE, then records what it deletes; block, when set, holds
// every DELETE until closed.
type fakeCleaner struct {
	mu      sync.Mutex
	calls   int
	deleted []string
	block   chan struct{}
	closed  bool
}

func (f *fakeCleaner) DeleteOutboxRows(ctx context.Context, table string, ids [][]byte, retain time.Duration) (int64, error) {
	if f.block != nil {
		select {
		case <-f.block:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.calls == 1 {
		return 0, errors.New("connection refused")
	}
	if retain != 0 {
		return 0, errors.New("retain passed to the adapter")
	}
	for _, id := range ids {
		f.deleted = append(f.deleted, table+":"+string(id))
	}
	return int64(len(ids)), nil
}

func (f *fakeCleaner) OutboxRowEstimate(context.Context, string) (int64, error) { return 7, nil }
func (f *fakeCleaner) CloseCleaner()                                            { f.mu.Lock(); f.closed = true; f.mu.Unlock() }

func (f *fakeCleaner) got() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := append([]string(nil), f.deleted...)
	sort.Strings(out)
	return out
}

func testRun(t *testing.T, f *fakeCleaner, m *metrics.Metrics) *cleanupRun {
	t.Helper()
	r := &cleanupRun{tr: cleanup.New(cleanup.Config{IDColumn: "id"}), done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	go r.loop(ctx, f, []string{"public.outbox"}, config.Cleanup{Enabled: true, Interval: 5 * time.Millisecond, Batch: 2},
		slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})), m)
	t.Cleanup(r.close)
	return r
}

func outboxTx(pos string, ids ...string) *source.Tx {
	tx := &source.Tx{Position: source.Position(pos), CommitTime: time.Now()}
	for _, id := range ids {
		tx.Rows = append(tx.Rows, source.Row{Table: "public.outbox", Columns: []string{"id"}, Values: []source.Value{{Bytes: []byte(id)}}})
	}
	return tx
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestCleanupRunRetriesAFailedDelete: the first DELETE fails (counted as a failed cycle), its
// ids are deleted by a later cycle; only committed ids go; the adapter gets retain 0; close
// closes the cleaner.
func TestCleanupRunRetriesAFailedDelete(t *testing.T) {
	f := &fakeCleaner{}
	m := metrics.New()
	r := testRun(t, f, m)
	r.opened()
	r.accepted(outboxTx("p1", "a", "b", "c"))
	r.accepted(outboxTx("p2", "d"))
	r.committed("p1")
	waitUntil(t, "a, b, c deleted", func() bool { return strings.Join(f.got(), " ") == "public.outbox:a public.outbox:b public.outbox:c" })
	waitUntil(t, "the metrics", func() bool {
		return metricValue(t, m, "outboxd_cleanup_deleted_total") == 3 && metricValue(t, m, "outboxd_outbox_table_rows") == 7
	})
	if n := metricValue(t, m, "outboxd_cleanup_failed_cycles_total"); n != 1 {
		t.Fatalf("failed cycles %v, want 1", n)
	}
	if n := metricValue(t, m, "outboxd_cleanup_cycles_total"); n < 2 {
		t.Fatalf("cycles %v", n)
	}
	r.close()
	if got := f.got(); len(got) != 3 {
		t.Fatalf("deleted %v: d was not committed", got)
	}
	if !f.closed {
		t.Fatal("the cleaner was not closed")
	}
}

// metricValue is the sum of the samples of the metric family name.
func metricValue(t *testing.T, m *metrics.Metrics, name string) float64 {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var v float64
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, x := range f.GetMetric() {
			v += x.GetCounter().GetValue() + x.GetGauge().GetValue()
		}
	}
	return v
}

// TestCleanupHooksDoNotWaitForTheDelete: while a DELETE blocks on the database, the pipeline's
// hooks return at once.
func TestCleanupHooksDoNotWaitForTheDelete(t *testing.T) {
	f := &fakeCleaner{block: make(chan struct{})}
	r := testRun(t, f, metrics.New())
	r.accepted(outboxTx("p1", "a"))
	r.committed("p1")
	waitUntil(t, "a DELETE under way", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.tr.Stats().Held == 0
	})
	done := make(chan struct{})
	go func() {
		for i := range 1000 {
			r.accepted(outboxTx(fmt.Sprint("q", i), fmt.Sprint("x", i)))
			r.committed(source.Position(fmt.Sprint("q", i)))
			r.opened()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the hooks waited for the DELETE")
	}
	close(f.block)
}
