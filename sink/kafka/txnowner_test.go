package kafka

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/internal/testenv"
)

func epochOf(t *testing.T, p *TxnProducer) TxnEpoch {
	t.Helper()
	e, ok := p.Epoch()
	if !ok {
		t.Fatal("the producer's epoch is unknown (DescribeTransactions failed?)")
	}
	return e
}

func describe(t *testing.T, addr, id string) (TxnEpoch, string, bool, error) {
	t.Helper()
	c, err := testConfig(addr).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	return c.describeTxn(id)
}

func replace(t *testing.T, addr, id string, prev TxnEpoch) (*TxnProducer, error) {
	t.Helper()
	p, err := NewTxn(testConfig(addr), TxnOptions{ID: id, Succeeds: &prev}, slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err == nil {
		t.Cleanup(func() { p.Close() })
	}
	return p, err
}

// A replacement producer of an instance whose id another instance initialised since does not
// initialise it again: NewTxn fails as fenced and the other instance keeps its transactions.
// A replacement of the producer that still holds the id initialises it (and fences that one).
func TestTxnReplacementDoesNotFenceATakeover(t *testing.T) {
	b := newBroker(t)
	const id = "txn-takeover"
	p1 := newTxn(t, b.Addr(), id)
	noErrors(t, txnRun(t, p1, recs("txn.o", "one", 1)...))
	if err := p1.Commit(); err != nil {
		t.Fatal(err)
	}
	e1 := epochOf(t, p1)
	p2 := newTxn(t, b.Addr(), id) // another instance takes the id over
	e2 := epochOf(t, p2)
	if e2 == e1 {
		t.Fatalf("the second initialisation left the epoch at %s", e1)
	}
	p1.Close()
	_, err := replace(t, b.Addr(), id, e1)
	if !IsFenced(err) {
		t.Fatalf("replacement of the fenced producer: %v, want fenced", err)
	}
	if fatal, _ := TxnFatal(err); !fatal || !strings.Contains(err.Error(), e2.String()) {
		t.Fatalf("TxnFatal(%v) = %v, want fatal naming the holder %s", err, fatal, e2)
	}
	// The refused replacement did not initialise the id: the instance that took over commits.
	noErrors(t, txnRun(t, p2, recs("txn.o", "two", 1)...))
	if err := p2.Commit(); err != nil {
		t.Fatalf("the instance that took over was fenced by a refused replacement: %v", err)
	}
	// p2's own replacement may initialise: the coordinator still holds p2's epoch.
	p3, err := replace(t, b.Addr(), id, e2)
	if err != nil {
		t.Fatalf("replacement of the holder: %v", err)
	}
	if e3 := epochOf(t, p3); e3 == e2 {
		t.Fatalf("the replacement did not initialise the id (epoch still %s)", e3)
	}
	noErrors(t, txnRun(t, p3, recs("txn.o", "three", 1)...))
	if err := p3.Commit(); err != nil {
		t.Fatal(err)
	}
	if v := values(testenv.ConsumeAll(t, b.Addr(), `^txn\.o$`)); v != "one-0 two-0 three-0" {
		t.Fatalf("read_committed: %q", v)
	}
}

// The epoch a producer reports follows the coordinator: unchanged by commits and plain aborts,
// learnt again after sarama bumps it (an abort after an abortable error), so that a replacement
// after such a bump is not refused as fenced.
func TestTxnEpochFollowsBumps(t *testing.T) {
	b := newBroker(t)
	const id = "txn-bump"
	p := newTxn(t, b.Addr(), id)
	e0 := epochOf(t, p)
	noErrors(t, txnRun(t, p, recs("txn.e", "a", 2)...))
	if err := p.Commit(); err != nil {
		t.Fatal(err)
	}
	noErrors(t, txnRun(t, p, recs("txn.e", "b", 2)...))
	if err := p.Abort(); err != nil {
		t.Fatal(err)
	}
	if e := epochOf(t, p); e != e0 {
		t.Fatalf("epoch after a commit and a plain abort: %s, want %s", e, e0)
	}
	cur, _, found, err := describe(t, b.Addr(), id)
	if err != nil || !found || cur != e0 {
		t.Fatalf("coordinator holds %s (found %v, err %v), want %s", cur, found, err, e0)
	}

	b.Cluster().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "txn.e", Err: kerr.MessageTooLarge, Count: 1})
	failed := 0
	for _, err := range txnRun(t, p, recs("txn.e", "bad", 3)...) {
		if err != nil {
			failed++
		}
	}
	if failed == 0 {
		t.Fatal("no record failed")
	}
	if err := p.Abort(); err != nil {
		t.Fatal(err)
	}
	e1 := epochOf(t, p)
	if e1 == e0 {
		t.Fatalf("sarama did not bump the epoch (%s) after the abortable error: the test proves nothing", e1)
	}
	cur, _, _, err = describe(t, b.Addr(), id)
	if err != nil || cur != e1 {
		t.Fatalf("after the abort the producer says %s, the coordinator %s (err %v)", e1, cur, err)
	}
	t.Logf("epoch %s, after the abortable error's abort %s", e0, e1)
	if _, err := replace(t, b.Addr(), id, e1); err != nil {
		t.Fatalf("replacement after sarama's own epoch bump refused: %v", err)
	}
}

// The shapes the coordinator leaves: only its own timeout abort (one bump, an abort state) lets a
// replacement initialise; another producer's initialisation does not.
func TestTimedOut(t *testing.T) {
	prev := TxnEpoch{ProducerID: 7, Epoch: 3}
	for _, c := range []struct {
		cur   TxnEpoch
		state string
		want  bool
	}{
		{TxnEpoch{7, 4}, "CompleteAbort", true},
		{TxnEpoch{7, 4}, "PrepareAbort", true},
		{TxnEpoch{7, 4}, "PrepareEpochFence", true},
		{TxnEpoch{7, 4}, "Empty", false},         // another InitProducerId, nothing was open
		{TxnEpoch{7, 5}, "Empty", false},         // another InitProducerId that fenced an open transaction
		{TxnEpoch{7, 5}, "CompleteAbort", false}, // ... which then aborted its own
		{TxnEpoch{7, 4}, "Ongoing", false},
		{TxnEpoch{8, 4}, "CompleteAbort", false}, // a new producer id
		{TxnEpoch{7, 3}, "CompleteAbort", false}, // unchanged is handled before timedOut
	} {
		if got := timedOut(prev, c.cur, c.state); got != c.want {
			t.Errorf("timedOut(%s, %s, %s) = %v, want %v", prev, c.cur, c.state, got, c.want)
		}
	}
}
