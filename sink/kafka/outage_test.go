package kafka

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/internal/testenv/harness"
)

// The broker goes away for 3 s while records flow, and comes back on the same port with its
// data: every record is acked, none fails, per-key order holds.
func TestBrokerRestartKeepsOrder(t *testing.T) {
	b := newBroker(t)
	b.Stop()
	b.Dir = t.TempDir() // keep topics and records across Stop/Start
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	p := newProducer(t, testConfig(b.Addr()))
	topic := topicName(t)
	const n, keys = 12000, 23
	o := newOutcomes(t, n)

	var produced atomic.Int64
	prodErr := make(chan error, 1)
	const first = n / 8 // produced before the outage starts
	flowing := make(chan struct{})
	go func() {
		for i := range n {
			if err := p.Produce(context.Background(), seqRecord(topic, i, keys), o.done(i)); err != nil {
				prodErr <- err
				return
			}
			if produced.Add(1) == first {
				close(flowing)
			}
			if i%6 == 0 {
				harness.Hold(time.Millisecond, "pace the producer: spread the records over the outage")
			}
		}
		prodErr <- nil
	}()

	select {
	case <-flowing:
	case err := <-prodErr:
		t.Fatalf("production ended before %d records: %v", first, err)
	case <-time.After(20 * time.Second):
		t.Fatalf("%d records not produced within 20s", first)
	}
	before := produced.Load()
	b.Stop()
	harness.Hold(3*time.Second, "the broker outage")
	during := produced.Load() - before
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	if err := <-prodErr; err != nil {
		t.Fatal(err)
	}
	o.wait(t, 40*time.Second)
	if f := o.failures(); len(f) > 0 {
		for _, err := range f {
			t.Fatalf("%d records failed, e.g. %v", len(f), err)
		}
	}
	t.Logf("produced %d before the outage, %d during it (bounded by backpressure)", before, during)
	if before == 0 || before >= n {
		t.Fatalf("the outage did not overlap production (%d of %d before)", before, n)
	}
	dups := checkPerKeyOrder(t, consume(t, b.Addr(), topic, n, 20*time.Second), n, 3)
	p.mu.Lock()
	episodes := p.episodes
	p.mu.Unlock()
	t.Logf("%d duplicates (at-least-once re-sends), %d recovery episodes", dups, episodes)
}

// Produce blocks at MaxInflightRecords, honours ctx, and Close waits for records to be acked
// once the broker is back.
func TestBackpressureAndCloseWaits(t *testing.T) {
	b := newBroker(t)
	cfg := testConfig(b.Addr())
	cfg.MaxInflightRecords = 10
	p := newProducer(t, cfg)
	topic := topicName(t)

	warm := newOutcomes(t, 1) // learn the topic's metadata first
	if err := p.Produce(context.Background(), seqRecord(topic, 0, 1), warm.done(0)); err != nil {
		t.Fatal(err)
	}
	warm.wait(t, 5*time.Second)

	b.Stop()
	o := newOutcomes(t, 10)
	for i := range 10 {
		if err := p.Produce(context.Background(), seqRecord(topic, i, 3), o.done(i)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	start := time.Now()
	err := p.Produce(ctx, seqRecord(topic, 10, 3), func(error) { t.Error("done for a record Produce refused") })
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) < 250*time.Millisecond {
		t.Fatalf("Produce at the in-flight cap returned %v after %v, want DeadlineExceeded after ~300ms", err, time.Since(start))
	}

	// Close gets its chance to return: it is parked in Shutdown's wait for the records.
	closed := make(chan error, 1)
	closer := make(chan uint64, 1)
	go func() {
		closer <- harness.GoroutineID()
		closed <- p.Close()
	}()
	id := <-closer
	if err := harness.Until(10*time.Second, harness.BlockedInterval, func() error {
		select {
		case err := <-closed:
			return harness.Final(fmt.Errorf("Close returned %v with records outstanding", err))
		default:
		}
		if !harness.Blocked(id, "kafka.(*Producer).Shutdown") {
			return errors.New("Close is not waiting in Shutdown")
		}
		select {
		case <-p.drained: // Shutdown parks here too after the drain, waiting for sarama
			return harness.Final(errors.New("Shutdown took the producer for drained with 10 records outstanding"))
		default:
		}
		return nil // parked in Shutdown's wait for the drain
	}); err != nil {
		t.Fatal(err)
	}
	if err := p.Produce(context.Background(), seqRecord(topic, 11, 3), func(error) {}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Produce during Close = %v, want ErrClosed", err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Close did not return after the broker came back")
	}
	o.wait(t, time.Second) // every done ran before Close returned
	if f := o.failures(); len(f) > 0 {
		t.Fatalf("failures: %v", f)
	}
}

// Shutdown gives up at its deadline: every unacked record gets done(ErrAborted) exactly once.
func TestShutdownTimeoutAborts(t *testing.T) {
	b := newBroker(t)
	p := newProducer(t, testConfig(b.Addr()))
	topic := topicName(t)
	warm := newOutcomes(t, 1)
	if err := p.Produce(context.Background(), seqRecord(topic, 0, 1), warm.done(0)); err != nil {
		t.Fatal(err)
	}
	warm.wait(t, 5*time.Second)

	b.Stop()
	const n = 50
	o := newOutcomes(t, n)
	for i := range n {
		if err := p.Produce(context.Background(), seqRecord(topic, i, 5), o.done(i)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := p.Shutdown(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Shutdown took %v", d)
	}
	o.wait(t, time.Second)
	for i, err := range o.failures() {
		if !errors.Is(err, ErrAborted) {
			t.Fatalf("record %d: %v, want ErrAborted", i, err)
		}
		if perm, reason := Classify(err); perm || reason != "shutdown" {
			t.Fatalf("aborted record classified %v %s", perm, reason)
		}
	}
	if len(o.failures()) != n {
		t.Fatalf("%d of %d records aborted", len(o.failures()), n)
	}
	// Late sarama results must not call done again (o.done fails the test on a second call).
	// Every done runs on the result goroutine, which ends once sarama has returned every
	// record it held: after that, no late result is left to call one.
	select {
	case <-p.resultDone:
	case <-time.After(20 * time.Second):
		t.Fatal("the result goroutine did not end within 20s of the aborted shutdown: sarama still holds records")
	}
}

// Errors sarama does not retry itself but Classify calls transient (here UNKNOWN_SERVER_ERROR
// and OUT_OF_ORDER_SEQUENCE_NUMBER) escape to the gate, which re-sends them: every record
// lands, none is reported failed. Records already inside sarama when the error surfaced may
// overtake the re-sent ones (see the package doc); the test reports how many did.
func TestEscapedTransientErrorsAreResent(t *testing.T) {
	for _, fe := range []*kerr.Error{kerr.UnknownServerError, kerr.OutOfOrderSequenceNumber} {
		t.Run(fe.Message, func(t *testing.T) {
			b := newBroker(t)
			p := newProducer(t, testConfig(b.Addr()))
			topic := topicName(t)
			h := b.Cluster().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: fe, Count: 1})
			const n, keys = 3000, 7
			o := newOutcomes(t, n)
			for i := range n {
				if err := p.Produce(context.Background(), seqRecord(topic, i, keys), o.done(i)); err != nil {
					t.Fatal(err)
				}
				if i%100 == 0 {
					harness.Hold(time.Millisecond, "pace: many produce requests, so others are inside sarama behind the faulted one")
				}
			}
			o.wait(t, 30*time.Second)
			if f := o.failures(); len(f) > 0 {
				t.Fatalf("%d records failed, e.g. %v", len(f), f)
			}
			if h.Hits() == 0 {
				t.Fatal("fault never hit")
			}
			recs := consume(t, b.Addr(), topic, n, 10*time.Second)
			last, inversions, seen := map[string]int{}, 0, map[int]bool{}
			for _, r := range recs {
				v := atoi(t, r.Value)
				if seen[v] {
					continue
				}
				seen[v] = true
				if prev, ok := last[string(r.Key)]; ok && v < prev {
					inversions++
				}
				last[string(r.Key)] = max(last[string(r.Key)], v)
			}
			if len(seen) != n {
				t.Fatalf("%d distinct records, want %d", len(seen), n)
			}
			t.Logf("%d fault hits, %d per-key inversions from records already inside sarama", h.Hits(), inversions)
		})
	}
}

// With the in-flight cap far away, Produce blocks on sarama itself during an outage; ctx
// still ends the wait, the refused record is never reported, and the queued ones land.
func TestProduceBlockedInSaramaHonoursCtx(t *testing.T) {
	b := newBroker(t)
	cfg := testConfig(b.Addr())
	cfg.MaxInflightRecords = 20000 // far above what sarama buffers (ChannelBufferSize per stage)
	p := newProducer(t, cfg)
	topic := topicName(t)
	warm := newOutcomes(t, 1)
	if err := p.Produce(context.Background(), seqRecord(topic, 0, 1), warm.done(0)); err != nil {
		t.Fatal(err)
	}
	warm.wait(t, 5*time.Second)
	b.Stop()

	limit := cfg.MaxInflightRecords - 1
	o := newOutcomes(t, 0)
	queued := 0
	for ; queued < limit; queued++ {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		err := p.Produce(ctx, seqRecord(topic, queued, 5), o.done(queued))
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if queued == limit {
		t.Fatal("Produce never blocked although the broker is down")
	}
	t.Logf("sarama took %d records before pushing back", queued)
	o.mu.Lock()
	o.want = queued
	o.mu.Unlock()
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	o.wait(t, 30*time.Second)
	if f := o.failures(); len(f) > 0 {
		t.Fatalf("%d failures, e.g. %v", len(f), f)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.seen[queued] != 0 {
		t.Fatal("done called for the record whose Produce timed out")
	}
}

func TestNewFailsWhenUnreachable(t *testing.T) {
	b := newBroker(t)
	addr := b.Addr()
	b.Stop()
	start := time.Now()
	_, err := New(testConfig(addr), nil)
	if err == nil || !strings.Contains(err.Error(), "kafka.brokers") {
		t.Fatalf("New against a stopped broker = %v", err)
	}
	t.Logf("New failed after %v: %v", time.Since(start).Round(time.Millisecond), err)
}
