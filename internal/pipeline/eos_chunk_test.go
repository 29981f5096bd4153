package pipeline

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
)

// chunkSource serves chunks (txs() with "|" cuts, or aloBigTx) and re-reads from the start of
// the first transaction ending after the position it is opened at (as the real sources do). The
// fake source of both runners' chunk tests.
type chunkSource struct {
	chunks  []source.Tx
	delay   time.Duration // before each chunk
	failAt  int           // the first time chunk index failAt is due, fail instead (0: never)
	gate    chan struct{} // when set, that failure waits for it to be closed
	blockAt int           // never hand out chunk index blockAt (0: no block)

	mu        sync.Mutex
	n         int
	opens     []source.Position
	confirmed []source.Position
}

func (s *chunkSource) Open(_ context.Context, from source.Position) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opens = append(s.opens, from)
	s.n = 0
	if from != "" { // skip whole transactions ending at or before from
		for i := range s.chunks {
			if p := s.chunks[i].Position; p != "" && p <= from {
				s.n = i + 1
			}
		}
	}
	return nil
}

func (s *chunkSource) Next(ctx context.Context) (source.Tx, error) {
	if s.delay > 0 {
		select {
		case <-ctx.Done():
			return source.Tx{}, ctx.Err()
		case <-time.After(s.delay):
		}
	}
	s.mu.Lock()
	i := s.n
	if i >= len(s.chunks) || s.blockAt > 0 && i == s.blockAt {
		s.mu.Unlock()
		<-ctx.Done()
		return source.Tx{}, ctx.Err()
	}
	if s.failAt > 0 && i == s.failAt {
		s.failAt = 0
		s.mu.Unlock()
		if s.gate != nil {
			select {
			case <-s.gate:
			case <-ctx.Done():
				return source.Tx{}, ctx.Err()
			}
		}
		return source.Tx{}, errors.New("connection reset")
	}
	s.n++
	s.mu.Unlock()
	return s.chunks[i], nil
}

func (s *chunkSource) Confirm(_ context.Context, p source.Position) error {
	s.mu.Lock()
	s.confirmed = append(s.confirmed, p)
	s.mu.Unlock()
	return nil
}
func (s *chunkSource) Close() error { return nil }

func (s *chunkSource) openedAt() []source.Position {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]source.Position(nil), s.opens...)
}

func chunkOptions(c *fakeCluster, src *chunkSource) EOSOptions {
	o := eosOptions(c, nil)
	o.NewSource = func() source.Source { return src }
	return o
}

// txnIDs lists each committed Kafka transaction as "id id ... @position".
func txnIDs(c *fakeCluster) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, txn := range c.txns {
		s := strings.Join(ids(txn, ""), " ")
		if last := txn[len(txn)-1]; last.Topic == "offsets" {
			s += " @" + string(last.Value)
		}
		out = append(out, s)
	}
	return out
}

// A chunked source transaction goes into one Kafka transaction of its own, whatever MaxRecords,
// with its end position; the transactions around it are batched as before.
func TestEOSChunkedTransactionOneKafkaTransaction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &fakeCluster{}
		src := &chunkSource{chunks: txs("a", "b c | d e | f", "g")}
		o := chunkOptions(c, src)
		o.MaxRecords = 4
		if err := runEOS(t, o, "03"); err != nil {
			t.Fatal(err)
		}
		got := strings.Join(txnIDs(c), " / ")
		if got != "a @01 / b c d e f @02 / g @03" {
			t.Fatalf("Kafka transactions: %s", got)
		}
	})
}

// A poison record in a transaction too large to keep in memory (RetainBytes 1): the runner
// aborts, reopens the source at the committed position, re-reads the transaction, sends the
// records that failed together one at a time (findings kept by ordinal), dead-letters the
// culprit; every record arrives once, in one Kafka transaction.
func TestEOSSpilledRedoReReads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &fakeCluster{tooLarge: func(r *sink.Record) bool { return r.Topic == "outbox.event.big" }}
		src := &chunkSource{chunks: txs("a", "b c | big@big d | e", "f")}
		o := chunkOptions(c, src)
		o.MaxRecords = 100
		o.RetainBytes = 1
		if err := runEOS(t, o, "03"); err != nil {
			t.Fatal(err)
		}
		if got := ids(c.committed(), ""); strings.Join(got, " ") != "a b c big d e f" {
			t.Fatalf("committed %v", got)
		}
		if dlq := ids(c.committed(), "dlq"); strings.Join(dlq, " ") != "big" {
			t.Fatalf("dead letters %v", dlq)
		}
		if got := strings.Join(txnIDs(c), " / "); !strings.Contains(got, "b c big d e @02") {
			t.Fatalf("Kafka transactions: %s", got)
		}
		opens := src.openedAt()
		if len(opens) < 2 || opens[1] != "01" {
			t.Fatalf("source opened at %v: want a reopen at 01 for the redo", opens)
		}
	})
}

// The same with the transaction kept in memory (RetainBytes default): no reopen.
func TestEOSChunkedPoisonRetained(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &fakeCluster{tooLarge: func(r *sink.Record) bool { return r.Topic == "outbox.event.big" }}
		src := &chunkSource{chunks: txs("a", "b c | big@big d | e", "f")}
		o := chunkOptions(c, src)
		o.MaxRecords = 100
		if err := runEOS(t, o, "03"); err != nil {
			t.Fatal(err)
		}
		if got := ids(c.committed(), ""); strings.Join(got, " ") != "a b c big d e f" {
			t.Fatalf("committed %v", got)
		}
		if opens := src.openedAt(); len(opens) != 1 {
			t.Fatalf("source opened at %v: a retained batch is redone from memory", opens)
		}
	})
}

// A source transaction still arriving when its Kafka transaction nears kafka.transaction_timeout
// is aborted and the run fails loudly with the fix; nothing of it is visible.
func TestEOSTxnTimeoutGuard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &fakeCluster{reqSize: 1}
		src := &chunkSource{chunks: txs("a", "b | c | d | e | f | g | h | i | j | k"), delay: 60 * time.Millisecond}
		o := chunkOptions(c, src)
		o.TxnTimeout = 600 * time.Millisecond // guard at 300ms; the transaction takes 600ms
		start := time.Now()
		err := runEOS(t, o, "99")
		if err == nil || !strings.Contains(err.Error(), "kafka.transaction_timeout") || !strings.Contains(err.Error(), "kafka.delivery: at_least_once") {
			t.Fatalf("err = %v", err)
		}
		t.Logf("failed after %v: %v", time.Since(start).Round(time.Millisecond), err)
		if got := strings.Join(txnIDs(c), " / "); got != "a @01" {
			t.Fatalf("Kafka transactions: %s", got)
		}
		c.mu.Lock()
		open, aborts := len(c.open), c.aborts
		c.mu.Unlock()
		if open != 0 || aborts == 0 {
			t.Fatalf("%d records left in the open transaction, %d aborts: the guard must abort it", open, aborts)
		}
	})
}

// A stop while a chunked transaction's last chunk has not come: its Kafka transaction is aborted,
// the stop is clean, and the committed position stays before it.
func TestEOSStopInsideChunkedTransaction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &fakeCluster{reqSize: 1}
		src := &chunkSource{chunks: txs("a", "b c | d e | f"), blockAt: 3}
		o := chunkOptions(c, src)
		o.Log = slog.New(slog.DiscardHandler)
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- RunExactlyOnce(ctx, o) }()
		waitFor(t, "records of the open transaction acked", func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			return len(c.open) >= 4 // b c d e
		})
		cancel()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(txnIDs(c), " / "); got != "a @01" {
			t.Fatalf("Kafka transactions: %s", got)
		}
		c.mu.Lock()
		open := len(c.open)
		c.mu.Unlock()
		if open != 0 {
			t.Fatalf("%d records left in the open transaction after the stop", open)
		}
	})
}

// A source error inside a chunked transaction: its Kafka transaction is aborted, the source is
// reopened at the committed position, and the transaction is delivered once, whole.
func TestEOSSourceErrorInsideChunkedTransaction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &fakeCluster{}
		src := &chunkSource{chunks: txs("a", "b c | d e | f", "g"), failAt: 3}
		o := chunkOptions(c, src)
		if err := runEOS(t, o, "03"); err != nil {
			t.Fatal(err)
		}
		if got := ids(c.committed(), ""); strings.Join(got, " ") != "a b c d e f g" {
			t.Fatalf("committed %v", got)
		}
		if opens := src.openedAt(); len(opens) != 2 || opens[1] != "01" {
			t.Fatalf("source opened at %v", opens)
		}
		for _, txn := range txnIDs(c) {
			if strings.Contains(txn, "b") && txn != "b c d e f @02" {
				t.Fatalf("Kafka transaction %q", txn)
			}
		}
	})
}
