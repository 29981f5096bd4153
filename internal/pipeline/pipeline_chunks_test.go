package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
)

// at_least_once with transactions handed over in chunks (issue 13).

// aloBigTx is one transaction of n rows in chunks of per rows, ending at pos.
func aloBigTx(pos source.Position, n, per int, agg string) []source.Tx {
	var out []source.Tx
	for i := 0; i < n; i += per {
		var rs []source.Row
		for j := i; j < min(i+per, n); j++ {
			rs = append(rs, row(fmt.Sprintf("%s-%d", pos, j), agg))
		}
		out = append(out, source.Tx{Rows: rs, More: true})
	}
	out[len(out)-1].More, out[len(out)-1].Position = false, pos
	return out
}

// A chunked transaction is produced chunk by chunk, bounded by the in-flight cap, and its
// position is stored (and confirmed) only once every record of all its chunks is acked.
func TestChunkedTransactionStoredOnlyWhenWhole(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		chunks := append(aloBigTx("01", 1, 1, "x"), aloBigTx("02", 40, 4, "x")...)
		src := &chunkSource{chunks: chunks}
		p, st := &fakeProducer{}, &memStore{}
		o := options(nil, p, st)
		o.NewSource = func() source.Source { return src }
		o.MaxInflight = 10
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- Run(ctx, o) }()
		waitFor(t, "first record", func() bool { return p.count() >= 1 })
		p.ack(0, nil)
		waitFor(t, "01 stored", func() bool { return st.get() == "01" })
		// 40 rows in chunks of 4, at most 10 in flight: ack them one by one.
		for i := 1; i <= 40; i++ {
			waitFor(t, fmt.Sprintf("record %d queued", i), func() bool { return p.count() > i })
			if n := p.count() - i; n > 10 {
				t.Fatalf("%d records unacked with max_inflight 10", n)
			}
			if i < 40 {
				settle(o.CommitInterval) // a commit tick passes
				if got := st.get(); got != "01" {
					t.Fatalf("stored %s with %d of 40 records of transaction 02 acked", got, i-1)
				}
			}
			p.ack(i, nil)
		}
		waitFor(t, "02 stored", func() bool { return st.get() == "02" })
		cancel()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		src.mu.Lock()
		defer src.mu.Unlock()
		if fmt.Sprint(src.confirmed) != "[01 02]" {
			t.Fatalf("confirmed %v, want [01 02]", src.confirmed)
		}
	})
}

// A source error between two chunks of a transaction: what was produced is drained, the stored
// position stays before the cut transaction, and the reopened source reads it again whole (its
// first chunks a second time: duplicates, never a gap).
func TestSourceErrorBetweenChunksRereadsWhole(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		chunks := append(aloBigTx("01", 2, 2, "x"), aloBigTx("02", 9, 3, "x")...)
		src := &chunkSource{chunks: chunks, failAt: 3, gate: make(chan struct{})} // after 01 and two chunks of 02
		p, st := &fakeProducer{auto: true}, &memStore{}
		o := options(nil, p, st)
		o.NewSource = func() source.Source { return src }
		var stores []source.Position
		var mu sync.Mutex
		o.OnCommit = func(pos source.Position) { mu.Lock(); stores = append(stores, pos); mu.Unlock() }
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- Run(ctx, o) }()
		waitFor(t, "01 and two chunks of 02 produced", func() bool { return p.count() == 8 })
		waitFor(t, "01 stored", func() bool { return st.get() == "01" })
		close(src.gate) // the source fails before the last chunk of 02
		waitFor(t, "02 stored", func() bool { return st.get() == "02" })
		cancel()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		src.mu.Lock()
		opens := fmt.Sprint(src.opens)
		src.mu.Unlock()
		if opens != "[ 01]" {
			t.Fatalf("opened at %s, want [ 01] (reopened after 01, before the cut transaction)", opens)
		}
		if n := p.count(); n != 2+6+9 {
			t.Fatalf("%d records produced, want 17 (01, the 6 rows of 02 read before the error, 02 again whole)", n)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, s := range stores {
			if s != "01" && s != "02" {
				t.Fatalf("stored %s", s)
			}
		}
	})
}

// The dead letter of a row in a chunk that is not the last of its transaction has no position
// yet: HeaderSourcePosition is empty and HeaderSourceAfter names the transaction before it.
// A row of a whole transaction keeps today's headers (no HeaderSourceAfter).
func TestDeadLetterOfAChunkSaysWhereItLies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		chunks := append(aloBigTx("01", 1, 1, "x"), aloBigTx("02", 4, 2, "bad topic")...)
		chunks = append(chunks, aloBigTx("03", 1, 1, "bad topic")...)
		src := &chunkSource{chunks: chunks}
		p := &fakeProducer{auto: true, failFor: map[string]error{"outbox.event.bad topic": errors.New("too large")}}
		st := &memStore{}
		o := options(nil, p, st)
		o.NewSource = func() source.Source { return src }
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- Run(ctx, o) }()
		waitFor(t, "03 stored", func() bool { return st.get() == "03" })
		cancel()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		var got []string
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, r := range p.queued {
			if r.Topic != "dlq" {
				continue
			}
			h := map[string]string{}
			for _, x := range r.Headers {
				h[x.Key] = string(x.Value)
			}
			after, hasAfter := h[sink.HeaderSourceAfter]
			got = append(got, fmt.Sprintf("pos=%s,after=%s/%v", h[sink.HeaderSourcePosition], after, hasAfter))
		}
		want := "[pos=,after=01/true pos=,after=01/true pos=02,after=/false pos=02,after=/false pos=03,after=/false]"
		if fmt.Sprint(got) != want {
			t.Fatalf("dead letters\n%v\nwant\n%v", got, want)
		}
	})
}

// The in-flight byte cap holds across chunks: with 1 MiB rows and a 3 MiB cap, at most three
// records are unacked at once (a fourth would pass the cap).
func TestInflightBytesCapAcrossChunks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var chunks []source.Tx
		for i := 0; i < 4; i++ {
			var rs []source.Row
			for j := 0; j < 3; j++ {
				r := row(fmt.Sprintf("%d-%d", i, j), "x")
				r.Values[3] = source.Value{Bytes: make([]byte, 1<<20)}
				rs = append(rs, r)
			}
			chunks = append(chunks, source.Tx{Rows: rs, More: i < 3})
		}
		chunks[3].Position = "01"
		src := &chunkSource{chunks: chunks}
		p, st := &fakeProducer{}, &memStore{}
		o := options(nil, p, st)
		o.NewSource = func() source.Source { return src }
		o.MaxInflightBytes = 3<<20 + 1024
		o.MaxRecordBytes = 2 << 20
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- Run(ctx, o) }()
		for i := 0; i < 12; i++ {
			waitFor(t, fmt.Sprintf("record %d queued", i), func() bool { return p.count() > i })
			synctest.Wait() // the loop produced all it would
			if n := p.count() - i; n > 3 {
				t.Fatalf("%d records of 1 MiB unacked with a 3 MiB cap", n)
			}
			p.ack(i, nil)
		}
		waitFor(t, "01 stored", func() bool { return st.get() == "01" })
		cancel()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	})
}

// cappedProducer is fakeProducer with the real producer's cap: Produce with cap records
// outstanding would block; here it is a test failure.
type cappedProducer struct {
	fakeProducer
	cap, outstanding int
	t                *testing.T
}

func (p *cappedProducer) Produce(ctx context.Context, rec *sink.Record, done func(error)) error {
	p.mu.Lock()
	if p.outstanding >= p.cap {
		p.t.Errorf("Produce with %d records outstanding (cap %d): the loop would block", p.outstanding, p.cap)
	}
	p.outstanding++
	p.mu.Unlock()
	return p.fakeProducer.Produce(ctx, rec, func(err error) {
		p.mu.Lock()
		p.outstanding--
		p.mu.Unlock()
		done(err)
	})
}

// A chunk larger than max_inflight (the sources cut 1024 rows; kafka.max_inflight may be
// lower) never makes the loop call Produce past the producer's cap: the core paces the sends.
func TestChunkLargerThanMaxInflightNeverBlocksProduce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		chunks := aloBigTx("01", 50, 25, "x")
		src := &chunkSource{chunks: chunks}
		p, st := &cappedProducer{cap: 10, t: t}, &memStore{}
		o := options(nil, &p.fakeProducer, st)
		o.Producer = p
		o.NewSource = func() source.Source { return src }
		o.MaxInflight = 10
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- Run(ctx, o) }()
		for i := 0; i < 50; i++ {
			waitFor(t, fmt.Sprintf("record %d queued", i), func() bool { return p.count() > i })
			p.ack(i, nil)
		}
		waitFor(t, "01 stored", func() bool { return st.get() == "01" })
		cancel()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	})
}
