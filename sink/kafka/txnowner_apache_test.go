package kafka

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/sink"
)

// What Apache Kafka 4.4's coordinator reports (DescribeTransactions) after each way a
// transactional id changes hands, and that the replacement check (txnowner.go) reads it right:
// its own timeout abort (epoch +1, CompleteAbort: a replacement may initialise), another
// producer's initialisation over an open transaction (+2, Empty) or an idle one (+1, Empty):
// refused as fenced. kfake reports only Ongoing and Empty, hence a real broker.
func TestTxnEpochShapesOnApacheKafka(t *testing.T) {
	k := testenv.NewApacheKafka(t, testenv.ApacheOpts{Props: []string{"transaction.abort.timed.out.transaction.cleanup.interval.ms=500"}})
	addr := k.Addr()
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	start := func(id string, timeout time.Duration, prev *TxnEpoch) (*TxnProducer, error) {
		p, err := NewTxn(testConfig(addr), TxnOptions{ID: id, Timeout: timeout, Succeeds: prev}, log)
		if err == nil {
			t.Cleanup(func() { p.Close() })
		}
		return p, err
	}
	mustStart := func(id string, timeout time.Duration) *TxnProducer {
		p, err := start(id, timeout, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	// open leaves a transaction open with one acked record (retrying while the auto-created
	// topic is not there yet: each failure aborts, which bumps the epoch).
	open := func(p *TxnProducer) {
		for i := 0; ; i++ {
			if err := p.Begin(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			r := sink.Record{Topic: "shapes.t", Value: []byte("x")}
			if err := p.Produce(context.Background(), &r, func(err error) { done <- err }); err != nil {
				t.Fatal(err)
			}
			err := <-done
			if err == nil {
				return
			}
			if i == 10 {
				t.Fatal(err)
			}
			if err := p.Abort(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond)
		}
	}
	cfg, err := testConfig(addr).withDefaults()
	if err != nil {
		t.Fatal(err)
	}

	p := mustStart("shapes-timeout", 2*time.Second)
	open(p)
	e0 := epochOf(t, p)
	if cur, _, _, err := cfg.describeTxn("shapes-timeout"); err != nil || cur != e0 {
		t.Fatalf("after the aborts of open, the producer says %s, the coordinator %s (%v)", e0, cur, err)
	}
	var cur TxnEpoch
	var state string
	for deadline := time.Now().Add(30 * time.Second); ; {
		if cur, state, _, err = cfg.describeTxn("shapes-timeout"); err != nil {
			t.Fatal(err)
		}
		if state == "CompleteAbort" || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if state != "CompleteAbort" || cur.ProducerID != e0.ProducerID || cur.Epoch != e0.Epoch+1 || !timedOut(e0, cur, state) {
		t.Fatalf("after the 2 s transaction timeout: %s %s (producer %s), want epoch +1 and CompleteAbort", cur, state, e0)
	}
	p.Close()
	if _, err := start("shapes-timeout", 2*time.Second, &e0); err != nil {
		t.Fatalf("replacement after the coordinator's timeout abort refused: %v", err)
	}

	p1 := mustStart("shapes-fence", 30*time.Second)
	open(p1)
	e1 := epochOf(t, p1)
	p2 := mustStart("shapes-fence", 30*time.Second)
	if cur, state, _, _ = cfg.describeTxn("shapes-fence"); cur.Epoch != e1.Epoch+2 || state != "Empty" {
		t.Fatalf("initialised over an open transaction of %s: %s %s, want epoch +2, Empty", e1, cur, state)
	}
	if _, err := start("shapes-fence", 30*time.Second, &e1); !IsFenced(err) {
		t.Fatalf("replacement of the producer fenced over its open transaction: %v, want fenced", err)
	}
	e2 := epochOf(t, p2)
	mustStart("shapes-fence", 30*time.Second)
	if cur, state, _, _ = cfg.describeTxn("shapes-fence"); cur.Epoch != e2.Epoch+1 || state != "Empty" {
		t.Fatalf("initialised over the idle %s: %s %s, want epoch +1, Empty", e2, cur, state)
	}
	if _, err := start("shapes-fence", 30*time.Second, &e2); !IsFenced(err) {
		t.Fatalf("replacement of the producer fenced while idle: %v, want fenced", err)
	}
}
