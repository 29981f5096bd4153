package testenv

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestConsumeAll: ConsumeAll returns exactly the records a read_committed reader sees now
// (plain and committed-transaction records of the matching topics; no aborted record, no
// control record, nothing of a topic that does not match), and it returns as soon as it has
// read them, not after a timeout.
func TestConsumeAll(t *testing.T) {
	b := NewBroker(t)
	ctx := context.Background()
	plain, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.AllowAutoTopicCreation(), kgo.DefaultProduceTopic("ev.a"))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	rec := func(topic, v string) *kgo.Record { return &kgo.Record{Topic: topic, Key: []byte(v), Value: []byte(v)} }
	for i := range 5 {
		if err := plain.ProduceSync(ctx, rec("ev.a", fmt.Sprint("p", i)), rec("other", fmt.Sprint("o", i))).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	txn, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.AllowAutoTopicCreation(), kgo.TransactionalID("consume-all"))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	for _, commit := range []bool{true, false, true} {
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if err := txn.ProduceSync(ctx, rec("ev.b", fmt.Sprintf("%v%d", commit, i))).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := txn.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	got := ConsumeAll(t, b.Addr(), `^ev\.`)
	took := time.Since(start)
	var vals []string
	for _, r := range got {
		vals = append(vals, r.Topic+":"+string(r.Value))
	}
	sort.Strings(vals)
	want := "ev.a:p0 ev.a:p1 ev.a:p2 ev.a:p3 ev.a:p4 ev.b:true0 ev.b:true0 ev.b:true1 ev.b:true1 ev.b:true2 ev.b:true2"
	if g := strings.Join(vals, " "); g != want {
		t.Fatalf("ConsumeAll = %s\nwant         %s", g, want)
	}
	if took > 5*time.Second {
		t.Fatalf("ConsumeAll took %v: it must stop at the end, not wait out a timeout", took)
	}
	// Delivered counts records and markers: ev.a 5 records; ev.b 9 records (6 committed, 3
	// aborted) and one marker per transaction and partition it wrote to (3 to 9).
	n := Delivered(t, b.Addr(), `^ev\.`)
	if n < 5+9+3 || n > 5+9+9 {
		t.Fatalf("Delivered = %d, want 17..23", n)
	}
	if err := plain.ProduceSync(ctx, rec("ev.a", "p5")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if m := Delivered(t, b.Addr(), `^ev\.`); m != n+1 {
		t.Fatalf("Delivered after one more record = %d, want %d", m, n+1)
	}
	if n := len(ConsumeAll(t, b.Addr(), `^none$`)); n != 0 {
		t.Fatalf("no matching topic: %d records", n)
	}
	t.Logf("read %d records in %v", len(got), took.Round(time.Millisecond))
}
