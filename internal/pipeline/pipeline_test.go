package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
)

// The stored and confirmed positions never pass a transaction with an unacked record, whatever
// the ack order.
func TestPositionNeverPassesUnacked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &fakeSource{txs: []source.Tx{
			{Position: "01", Rows: []source.Row{row("a", "x"), row("b", "x")}},
			{Position: "02", Rows: []source.Row{row("c", "x")}},
			{Position: "03"}, // idle progress
			{Position: "04", Rows: []source.Row{row("d", "x")}},
		}}
		p, st := &fakeProducer{}, &memStore{}
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error)
		go func() { errc <- Run(ctx, options(src, p, st)) }()
		waitFor(t, "4 records queued", func() bool { return p.count() == 4 })
		p.ack(3, nil) // d (tx 04)
		p.ack(2, nil) // c (tx 02)
		p.ack(0, nil) // a (tx 01, half)
		settle(10 * testCommitInterval)
		if got := st.get(); got != "" {
			t.Fatalf("stored %q while tx 01 is half acked", got)
		}
		p.ack(1, nil)
		waitFor(t, "position 04 stored", func() bool { return st.get() == "04" })
		src.mu.Lock()
		for _, c := range src.confirmed {
			if c > st.get() {
				t.Fatalf("confirmed %s beyond stored", c)
			}
		}
		src.mu.Unlock()
		cancel()
		if err := <-errc; err != nil {
			t.Fatalf("graceful stop: %v", err)
		}
	})
}

func TestPoisonRowsGoToDLQAndStreamMovesOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &fakeSource{txs: []source.Tx{
			{Position: "01", Rows: []source.Row{row("a", "x"), row("b", "bad topic!"), row("c", "big")}},
			{Position: "02", Rows: []source.Row{row("d", "x")}},
		}}
		p, st := &fakeProducer{auto: true, failFor: map[string]error{"outbox.event.big": errors.New("too large")}}, &memStore{}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		errc := make(chan error)
		go func() { errc <- Run(ctx, options(src, p, st)) }()
		waitFor(t, "stored 02", func() bool { return st.get() == "02" })
		cancel()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		var dlq []*sink.Record
		for _, r := range p.queued {
			if r.Topic == "dlq" {
				dlq = append(dlq, r)
			}
		}
		if len(dlq) != 2 {
			t.Fatalf("%d dead letters, want 2", len(dlq))
		}
		h := func(r *sink.Record, k string) string {
			for _, x := range r.Headers {
				if x.Key == k {
					return string(x.Value)
				}
			}
			return ""
		}
		if h(dlq[0], sink.HeaderReason) != "invalid_topic" || h(dlq[0], sink.HeaderStage) != "transform" || h(dlq[0], sink.HeaderSourcePosition) != "01" ||
			!strings.Contains(string(dlq[0].Value), `"aggregatetype":"bad topic!"`) {
			t.Errorf("transform dead letter: %+v %s", dlq[0].Headers, dlq[0].Value)
		}
		if h(dlq[1], sink.HeaderReason) != "record_too_large" || h(dlq[1], sink.HeaderStage) != "produce" || h(dlq[1], sink.HeaderOriginalTopic) != "outbox.event.big" ||
			h(dlq[1], "id") != "c" || string(dlq[1].Value) != "{}" {
			t.Errorf("produce dead letter: %+v %s", dlq[1].Headers, dlq[1].Value)
		}
	})
}

func TestDLQUnwritableStopsWithoutCommitting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &fakeSource{txs: []source.Tx{
			{Position: "01", Rows: []source.Row{row("a", "x")}},
			{Position: "02", Rows: []source.Row{row("b", "bad!")}},
			{Position: "03", Rows: []source.Row{row("c", "x")}},
		}}
		p, st := &fakeProducer{auto: true, failFor: map[string]error{"dlq": errors.New("authorization failed")}}, &memStore{}
		err := Run(context.Background(), options(src, p, st))
		if err == nil || !strings.Contains(err.Error(), "dead-letter topic dlq cannot be written") {
			t.Fatalf("err = %v", err)
		}
		if got := st.get(); got > "01" {
			t.Fatalf("stored %q past the record whose dead letter failed", got)
		}
	})
}

func TestStoreFailureIsFatal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &fakeSource{txs: []source.Tx{{Position: "01", Rows: []source.Row{row("a", "x")}}}}
		p, st := &fakeProducer{auto: true}, &memStore{err: errors.New("disk full")}
		err := Run(context.Background(), options(src, p, st))
		if err == nil || !strings.Contains(err.Error(), "disk full") {
			t.Fatalf("err = %v", err)
		}
		src.mu.Lock()
		defer src.mu.Unlock()
		if len(src.confirmed) != 0 {
			t.Fatalf("confirmed %v although nothing was stored", src.confirmed)
		}
	})
}

func TestShutdownTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &fakeSource{txs: []source.Tx{{Position: "01", Rows: []source.Row{row("a", "x")}}}}
		p, st := &fakeProducer{}, &memStore{}
		o := options(src, p, st)
		o.ShutdownTimeout = 100 * time.Millisecond
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error)
		go func() { errc <- Run(ctx, o) }()
		waitFor(t, "queued", func() bool { return p.count() == 1 })
		cancel()
		if err := <-errc; !errors.Is(err, ErrShutdownTimeout) {
			t.Fatalf("err = %v", err)
		}
		if st.get() != "" {
			t.Fatal("stored an unacked position")
		}
	})
}

func TestBackpressureCapsInflight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var txs []source.Tx
		for i := 0; i < 100; i++ {
			txs = append(txs, source.Tx{Position: source.Position(fmt.Sprintf("%03d", i)), Rows: []source.Row{row(fmt.Sprint(i), "x")}})
		}
		src := &fakeSource{txs: txs}
		p, st := &fakeProducer{}, &memStore{}
		o := options(src, p, st)
		o.MaxInflight = 7
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error)
		go func() { errc <- Run(ctx, o) }()
		waitFor(t, "7 queued", func() bool { return p.count() == 7 })
		settle(10 * o.CommitInterval)
		if n := p.count(); n != 7 {
			t.Fatalf("%d records queued with max_inflight 7", n)
		}
		for i := 0; i < 100; i++ {
			waitFor(t, "next queued", func() bool { return p.count() > i })
			p.ack(i, nil)
		}
		waitFor(t, "all stored", func() bool { return st.get() == "099" })
		cancel()
		<-errc
	})
}

func TestSourceErrorDrainsAndReopensFromStored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &fakeSource{failAfter: 2, txs: []source.Tx{
			{Position: "01", Rows: []source.Row{row("a", "x")}},
			{Position: "02", Rows: []source.Row{row("b", "x")}},
			{Position: "03", Rows: []source.Row{row("c", "x")}},
		}}
		p, st := &fakeProducer{auto: true}, &memStore{}
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error)
		opened := 0
		o := options(src, p, st)
		o.NewSource = func() source.Source {
			opened++
			src.n = 0 // a fresh connection replays from the stored position
			return src
		}
		go func() { errc <- Run(ctx, o) }()
		waitFor(t, "stored 03", func() bool { return st.get() == "03" })
		cancel()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if opened != 2 {
			t.Fatalf("source opened %d times, want 2", opened)
		}
		if p.count() != 3 {
			t.Fatalf("%d records produced, want 3 (no duplicates after a drained reconnect)", p.count())
		}
	})
}

func TestDLQBreakerStopsThePipeline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var txs []source.Tx
		for i := 0; i < 20; i++ {
			agg := "x"
			if i >= 5 {
				agg = "bad topic"
			}
			txs = append(txs, source.Tx{Position: source.Position(fmt.Sprintf("%02d", i)), Rows: []source.Row{row(fmt.Sprint(i), agg)}})
		}
		src := &fakeSource{txs: txs}
		p, st := &fakeProducer{auto: true}, &memStore{}
		o := options(src, p, st)
		o.DLQBreaker = Breaker{Max: 3, Window: 10}
		err := Run(context.Background(), o)
		if err == nil || !strings.Contains(err.Error(), "kafka.dlq_max_rate exceeded: 4 of the last 10") {
			t.Fatalf("err = %v", err)
		}
		if got := st.get(); got > "08" {
			t.Fatalf("stored %s past the record that tripped the breaker (08)", got)
		}
		// The three dead letters before the trip are produced, even when the batch that
		// tripped the breaker decided them (one Ready for several chunks); the fourth is not.
		dlq := 0
		p.mu.Lock()
		queued := p.queued
		p.mu.Unlock()
		for _, r := range queued {
			if r.Topic == "dlq" {
				dlq++
			}
		}
		if dlq != 3 {
			t.Fatalf("%d dead letters produced, want the 3 before the breaker tripped", dlq)
		}
	})
}

// A record too large for Kafka must not make its dead letter too large as well (that would stop
// the pipeline on every restart): the value is dropped and its size recorded.
func TestHugeRecordDeadLetterDropsValue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		big := row("a", "big")
		big.Values[3] = source.Value{Bytes: make([]byte, 10<<20)}
		src := &fakeSource{txs: []source.Tx{{Position: "01", Rows: []source.Row{big}}, {Position: "02", Rows: []source.Row{row("b", "x")}}}}
		p, st := &fakeProducer{auto: true, failFor: map[string]error{"outbox.event.big": errors.New("too large")}}, &memStore{}
		o := options(src, p, st)
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error)
		go func() { errc <- Run(ctx, o) }()
		waitFor(t, "stored 02", func() bool { return st.get() == "02" })
		cancel()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		for _, r := range p.queued {
			if r.Topic != "dlq" {
				continue
			}
			if r.Value != nil || r.Size() > 1<<20 {
				t.Fatalf("dead letter of %d bytes with value of %d", r.Size(), len(r.Value))
			}
			for _, h := range r.Headers {
				if h.Key == sink.HeaderValueDropped && len(h.Value) > 0 {
					return
				}
			}
			t.Fatalf("no %s header: %+v", sink.HeaderValueDropped, r.Headers)
		}
		t.Fatal("no dead letter")
	})
}

// gatedStore blocks each Save until the test releases it, and records the order of Saves.
type gatedStore struct {
	memStore
	gate    chan struct{}
	started chan source.Position
	mu2     sync.Mutex
	saves   []source.Position
}

func (g *gatedStore) Save(ctx context.Context, p source.Position) error {
	g.started <- p
	select {
	case <-g.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	g.mu2.Lock()
	g.saves = append(g.saves, p)
	g.mu2.Unlock()
	return g.memStore.Save(ctx, p)
}

// A slow Store.Save does not stop the loop: with room for only 5 unresolved records, all 40
// records still get produced and acked while the first Save is blocked (the loop frees tracker
// room without waiting for the store). Saves run one at a time in position order, the source is
// confirmed only with positions whose Save returned, and a stop stores the whole acked prefix.
func TestSlowSaveDoesNotBlockTheLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var txs []source.Tx
		for i := range 40 {
			txs = append(txs, source.Tx{Position: source.Position(fmt.Sprintf("%03d", i+1)), Rows: []source.Row{row(fmt.Sprint(i), "x")}})
		}
		src := &fakeSource{txs: txs}
		p := &fakeProducer{auto: true}
		st := &gatedStore{gate: make(chan struct{}), started: make(chan source.Position, 100)}
		o := options(src, p, &st.memStore)
		o.Store = st
		o.MaxInflight, o.MaxTxs = 5, 5
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- Run(ctx, o) }()

		first := <-st.started // the first Save is now blocked
		waitFor(t, "all 40 records produced while a Save is blocked", func() bool { return p.count() == 40 })
		settle(6 * o.CommitInterval)
		select {
		case q := <-st.started:
			t.Fatalf("a second Save (%s) started while %s was running", q, first)
		default:
		}
		src.mu.Lock()
		if len(src.confirmed) != 0 {
			t.Fatalf("confirmed %v before any Save returned", src.confirmed)
		}
		src.mu.Unlock()

		// Release the Saves; the one queued meanwhile is the newest prefix, 040.
		released := make(chan struct{})
		defer close(released)
		go func() {
			for {
				select {
				case st.gate <- struct{}{}:
				case <-released:
					return
				}
			}
		}()
		if second := <-st.started; second != "040" {
			t.Fatalf("second Save %s, want the newest prefix 040", second)
		}
		waitFor(t, "040 stored", func() bool { return st.get() == "040" })
		cancel()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		st.mu2.Lock()
		saves := append([]source.Position(nil), st.saves...)
		st.mu2.Unlock()
		if len(saves) != 2 || saves[0] != first || saves[1] != "040" {
			t.Fatalf("saves %v, want [%s 040]", saves, first)
		}
		src.mu.Lock()
		defer src.mu.Unlock()
		if fmt.Sprint(src.confirmed) != fmt.Sprint(saves) {
			t.Fatalf("confirmed %v, saved %v", src.confirmed, saves)
		}
	})
}

// A stop that interrupts a running Save (the store honours ctx) still stores the acked prefix:
// the final flush saves it again with a fresh context.
func TestStopDuringSaveStoresThePrefix(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var txs []source.Tx
		for i := range 10 {
			txs = append(txs, source.Tx{Position: source.Position(fmt.Sprintf("%03d", i+1)), Rows: []source.Row{row(fmt.Sprint(i), "x")}})
		}
		src := &fakeSource{txs: txs}
		p := &fakeProducer{auto: true}
		st := &gatedStore{gate: make(chan struct{}), started: make(chan source.Position, 100)}
		o := options(src, p, &st.memStore)
		o.Store = st
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- Run(ctx, o) }()
		waitFor(t, "all 10 records produced", func() bool { return p.count() == 10 })
		waitFor(t, "a Save of the whole prefix", func() bool {
			for {
				select {
				case pos := <-st.started:
					if pos == "010" {
						return true
					}
				default:
					return false
				}
			}
		})
		cancel() // the blocked Save returns ctx.Err()
		select { // the final flush saves again; let it through
		case <-st.started:
			st.gate <- struct{}{}
		case err := <-errc:
			t.Fatalf("stopped (%v) without saving the prefix again; stored %q", err, st.get())
		case <-time.After(5 * time.Second):
			t.Fatal("no final Save after the stop")
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if got := st.get(); got != "010" {
			t.Fatalf("stored %q after a stop that interrupted the Save of 010", got)
		}
		src.mu.Lock()
		defer src.mu.Unlock()
		if n := len(src.confirmed); n == 0 || src.confirmed[n-1] != "010" {
			t.Fatalf("confirmed %v, want 010 last", src.confirmed)
		}
	})
}
