package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/sink"
)

func newTxn(t *testing.T, addr, id string) *TxnProducer {
	t.Helper()
	p, err := NewTxn(testConfig(addr), TxnOptions{ID: id}, slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatalf("NewTxn: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// txnRun produces recs in one transaction and returns their outcomes once all are known.
func txnRun(t *testing.T, p *TxnProducer, recs ...sink.Record) []error {
	t.Helper()
	if err := p.Begin(); err != nil {
		t.Fatalf("Begin: %v", err)
	}
	out := make([]error, len(recs))
	var mu sync.Mutex
	for i := range recs {
		if err := p.Produce(context.Background(), &recs[i], func(err error) { mu.Lock(); out[i] = err; mu.Unlock() }); err != nil {
			out[i] = err
		}
	}
	if err := p.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	return out
}

func recs(topic string, tag string, n int) []sink.Record {
	var out []sink.Record
	for i := 0; i < n; i++ {
		out = append(out, sink.Record{Topic: topic, Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprintf("%s-%d", tag, i)),
			Headers: []sink.Header{{Key: "tag", Value: []byte(tag)}}})
	}
	return out
}

func values(got []testenv.Consumed) string {
	var v []string
	for _, r := range got {
		v = append(v, string(r.Value))
	}
	return strings.Join(v, " ")
}

func noErrors(t *testing.T, errs []error) {
	t.Helper()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
}

// Committed transactions are visible to read_committed consumers, aborted ones are not.
func TestTxnCommitAndAbort(t *testing.T) {
	b := newBroker(t)
	p := newTxn(t, b.Addr(), "txn-visibility")
	noErrors(t, txnRun(t, p, recs("txn.a", "one", 5)...))
	if err := p.Commit(); err != nil {
		t.Fatal(err)
	}
	noErrors(t, txnRun(t, p, recs("txn.a", "two", 5)...))
	if err := p.Abort(); err != nil {
		t.Fatal(err)
	}
	if !p.Usable() {
		t.Fatal("not usable after an abort")
	}
	noErrors(t, txnRun(t, p, recs("txn.a", "three", 5)...))
	if err := p.Commit(); err != nil {
		t.Fatal(err)
	}
	// Every committed transaction is below the last stable offset now (Commit returned):
	// ConsumeAll reads the whole topic up to it, so an aborted record it returned would be there.
	got := testenv.ConsumeAll(t, b.Addr(), `^txn\.a$`)
	v := values(got)
	if len(got) != 10 || strings.Contains(v, "two") || !strings.Contains(v, "one-4") || !strings.Contains(v, "three-4") {
		t.Fatalf("read_committed saw %d records: %s", len(got), v)
	}
	for _, r := range got {
		if r.Header("tag") == "" || PartitionFor(r.Key, 3) != r.Partition {
			t.Fatalf("record %s: headers %v partition %d", r.Value, r.Headers, r.Partition)
		}
	}
}

// A second producer with the same transactional id fences the first: its records fail and its
// commit and abort return PRODUCER_FENCED, which TxnFatal reports as fatal.
func TestTxnFencing(t *testing.T) {
	b := newBroker(t)
	p := newTxn(t, b.Addr(), "txn-fence")
	noErrors(t, txnRun(t, p, recs("txn.f", "before", 2)...))
	if err := p.Commit(); err != nil {
		t.Fatal(err)
	}
	newTxn(t, b.Addr(), "txn-fence")
	start := time.Now()
	errs := txnRun(t, p, recs("txn.f", "zombie", 2)...)
	if errs[0] == nil {
		t.Fatal("the fenced producer's record was acked")
	}
	t.Logf("fenced record failed after %v: %v", time.Since(start), errs[0])
	err := p.Commit()
	if !IsFenced(err) {
		t.Fatalf("commit of the fenced producer: %v", err)
	}
	if fatal, why := TxnFatal(err); !fatal || !strings.Contains(why, "producer fenced") {
		t.Fatalf("TxnFatal = %v %q", fatal, why)
	}
	if err := p.Abort(); !IsFenced(err) {
		t.Fatalf("abort of the fenced producer: %v", err)
	}
	if p.Usable() {
		t.Fatal("a fenced producer claims to be usable")
	}
	// The whole topic up to its last stable offset: the committed records are there, a zombie
	// record would be.
	if got := values(testenv.ConsumeAll(t, b.Addr(), `^txn\.f$`)); strings.Contains(got, "zombie") || !strings.Contains(got, "before-1") {
		t.Fatalf("read_committed saw %q, want the committed records and no zombie", got)
	}
}

// Records that cannot be sent are refused synchronously; the transaction is not affected.
func TestTxnLocalRefusal(t *testing.T) {
	b := newBroker(t)
	cfg := testConfig(b.Addr())
	cfg.MaxRecordBytes = 2000
	p, err := NewTxn(cfg, TxnOptions{ID: "txn-local"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Begin(); err != nil {
		t.Fatal(err)
	}
	never := func(error) { t.Error("done called for a refused record") }
	for _, r := range []sink.Record{
		{Topic: "txn.l", Value: make([]byte, 3000)},
		{Topic: "bad topic!", Value: []byte("x")},
	} {
		err := p.Produce(context.Background(), &r, never)
		var de *DeliveryError
		if !errors.As(err, &de) || !de.Permanent {
			t.Fatalf("%s: %v", r.Topic, err)
		}
		t.Logf("refused: %v", err)
	}
	ok := recs("txn.l", "ok", 1)
	done := make(chan error, 1)
	if err := p.Produce(context.Background(), &ok[0], func(err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	p.Flush(context.Background())
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := testenv.ConsumeAll(t, b.Addr(), `^txn\.l$`); len(got) != 1 {
		t.Fatalf("%d records", len(got))
	}
}

// A record the broker refuses fails its request and with it the transaction: every record of
// the request reports the error (which record was at fault is unknown: the pipeline re-sends
// them one by one); the transaction must be aborted, after which the producer works again.
func TestTxnBrokerRefusal(t *testing.T) {
	b := newBroker(t)
	p := newTxn(t, b.Addr(), "txn-refuse")
	noErrors(t, txnRun(t, p, recs("txn.r", "warm", 1)...))
	if err := p.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Cluster().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "txn.r", Err: kerr.MessageTooLarge, Count: 1})
	errs := txnRun(t, p, recs("txn.r", "bad", 6)...)
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
			if perm, reason := Classify(err); !perm || reason != "record_too_large" {
				t.Fatalf("classified %v %s: %v", perm, reason, err)
			}
		}
	}
	if failed == 0 {
		t.Fatal("no record failed")
	}
	if err := p.Commit(); err == nil {
		t.Fatal("a failed transaction committed")
	}
	if err := p.Abort(); err != nil {
		t.Fatal(err)
	}
	noErrors(t, txnRun(t, p, recs("txn.r", "good", 3)...))
	if err := p.Commit(); err != nil {
		t.Fatal(err)
	}
	got := testenv.ConsumeAll(t, b.Addr(), `^txn\.r$`)
	if v := values(got); len(got) != 4 || strings.Contains(v, "bad") {
		t.Fatalf("read_committed: %s", v)
	}
}

// A transient failure that does not clear fails the records within seconds (bounded retries,
// the transaction is not held open indefinitely); after an abort the producer recovers.
func TestTxnTransientIsBounded(t *testing.T) {
	b := newBroker(t)
	p := newTxn(t, b.Addr(), "txn-transient")
	noErrors(t, txnRun(t, p, recs("txn.t", "warm", 1)...))
	if err := p.Commit(); err != nil {
		t.Fatal(err)
	}
	h := b.Cluster().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "txn.t", Err: kerr.NotEnoughReplicas, Count: -1})
	start := time.Now()
	errs := txnRun(t, p, recs("txn.t", "stalled", 3)...)
	took := time.Since(start)
	if errs[0] == nil {
		t.Fatal("acked during the stall")
	}
	if perm, _ := Classify(errs[0]); perm {
		t.Fatalf("a stall classified permanent: %v", errs[0])
	}
	if took > 15*time.Second {
		t.Fatalf("failing took %v", took)
	}
	t.Logf("stalled records failed after %v: %v", took, errs[0])
	h.Remove()
	if err := p.Abort(); err != nil {
		t.Fatal(err)
	}
	if !p.Usable() {
		t.Fatal("not usable after the abort")
	}
	noErrors(t, txnRun(t, p, recs("txn.t", "after", 3)...))
	if err := p.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := testenv.ConsumeAll(t, b.Addr(), `^txn\.t$`); len(got) != 4 || strings.Contains(values(got), "stalled") {
		t.Fatalf("read_committed: %s", values(got))
	}
}

func TestTxnSaramaConfig(t *testing.T) {
	sc, err := Config{Brokers: []string{"k:9092"}}.TxnSaramaConfig(TxnOptions{ID: "outboxd-postgres:outboxd"})
	if err != nil {
		t.Fatal(err)
	}
	if err := ValidateDurability(sc); err != nil {
		t.Fatal(err)
	}
	if err := sc.Validate(); err != nil {
		t.Fatal(err)
	}
	if sc.Producer.Transaction.ID != "outboxd-postgres:outboxd" || sc.Producer.Transaction.Timeout != DefaultTxnTimeout ||
		sc.Producer.Retry.Max != txnProduceRetries || sc.Producer.RequiredAcks != sarama.WaitForAll {
		t.Fatalf("config %+v", sc.Producer)
	}
	if _, err := (Config{Brokers: []string{"k:9092"}}).TxnSaramaConfig(TxnOptions{}); err == nil {
		t.Fatal("empty transactional id accepted")
	}
	port, _ := testenv.FreePort()
	start := time.Now()
	if _, err := NewTxn(Config{Brokers: []string{fmt.Sprintf("127.0.0.1:%d", port)}}, TxnOptions{ID: "x"}, nil); err == nil {
		t.Fatal("NewTxn against no broker succeeded")
	} else {
		t.Logf("NewTxn against no broker failed after %v: %v", time.Since(start), err)
	}
}

// A transaction timeout above the brokers' transaction.max.timeout.ms is refused at
// InitProducerID; TxnFatal reports it as fatal, naming the key and the broker setting. A
// timeout within the maximum is accepted.
func TestTxnTimeoutAboveBrokerMax(t *testing.T) {
	b := newBroker(t, kfake.BrokerConfigs(map[string]string{"transaction.max.timeout.ms": "5000"}))
	_, err := NewTxn(testConfig(b.Addr()), TxnOptions{ID: "txn-timeout", Timeout: 10 * time.Second}, nil)
	if !errors.Is(err, sarama.ErrInvalidTransactionTimeout) {
		t.Fatalf("NewTxn with a timeout above the maximum: %v", err)
	}
	fatal, why := TxnFatal(err)
	if !fatal || !strings.Contains(why, "kafka.transaction_timeout") || !strings.Contains(why, "transaction.max.timeout.ms") {
		t.Fatalf("TxnFatal = %v %q", fatal, why)
	}
	p, err := NewTxn(testConfig(b.Addr()), TxnOptions{ID: "txn-timeout", Timeout: 4 * time.Second}, nil)
	if err != nil {
		t.Fatalf("NewTxn within the maximum: %v", err)
	}
	p.Close()
}
