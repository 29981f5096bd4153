package kafka

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/sink"
)

// TestReaderEndsOnLastCommitted: a partition written in transactions ends with markers (and
// here an aborted transaction) that a read_committed consumer never delivers. ReadPartition up
// to the last stable offset returns the committed records, in order, and returns at once
// after the last of them instead of waiting for end-1; with end < 0 it follows until ctx ends.
func TestReaderEndsOnLastCommitted(t *testing.T) {
	b := testenv.NewBroker(t)
	ctx := context.Background()
	tp, err := NewTxn(testKafka(b.Addr()), TxnOptions{ID: "reader-test"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Close()
	write := func(commit bool, vals ...string) {
		t.Helper()
		if err := tp.Begin(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, len(vals))
		for _, v := range vals {
			rec := sink.Record{Topic: "reader.t", Key: []byte("k"), Value: []byte(v)}
			if err := tp.Produce(ctx, &rec, func(err error) { done <- err }); err != nil {
				t.Fatal(err)
			}
		}
		for range vals {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		if commit {
			err = tp.Commit()
		} else {
			err = tp.Abort()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	write(true, "a", "b")
	write(false, "x")
	write(true, "c")
	write(false, "y", "z")

	a, err := Dial(testKafka(b.Addr()), 3, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.Partitions("reader.absent"); !errors.Is(err, ErrUnknownTopic) {
		t.Fatalf("Partitions of a missing topic: %v, want ErrUnknownTopic", err)
	}
	parts, err := a.Partitions("reader.t")
	if err != nil || len(parts) == 0 {
		t.Fatalf("Partitions: %v %v", parts, err)
	}
	part := PartitionFor([]byte("k"), int32(len(parts)))
	hwm, err := a.Offset("reader.t", part, Latest, ReadUncommitted)
	if err != nil {
		t.Fatal(err)
	}
	lso, err := a.Offset("reader.t", part, Latest, ReadCommitted)
	if err != nil {
		t.Fatal(err)
	}
	// 6 records and 4 markers; nothing open.
	if hwm != 10 || lso != hwm {
		t.Fatalf("high-water mark %d, last stable offset %d; want 10 and 10", hwm, lso)
	}
	r, err := a.NewReader()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var got []string
	start := time.Now()
	err = r.ReadPartition(rctx, "reader.t", part, lso, func(m *Message) error {
		got = append(got, string(m.Value))
		return nil
	}, nil)
	took := time.Since(start)
	if err != nil || rctx.Err() != nil {
		t.Fatalf("ReadPartition: %v (ctx %v) after %v", err, rctx.Err(), took)
	}
	if strings.Join(got, ",") != "a,b,c" {
		t.Fatalf("read %v, want a,b,c", got)
	}
	// The consumer's first fetch has everything: a read that waited for offset 9 (a marker)
	// would run into the 10 s deadline.
	if took > 5*time.Second {
		t.Fatalf("ReadPartition took %v", took)
	}
	t.Logf("read to the last stable offset in %v", took)

	// Following (a new Reader: one reads a partition once): the same records, then it stays
	// until ctx ends (nil).
	r2, err := a.NewReader()
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	fctx, fcancel := context.WithCancel(ctx)
	got = got[:0]
	err = r2.ReadPartition(fctx, "reader.t", part, -1, func(m *Message) error {
		if got = append(got, string(m.Value)); len(got) == 3 {
			fcancel()
		}
		return nil
	}, nil)
	if err != nil || strings.Join(got, ",") != "a,b,c" {
		t.Fatalf("following: %v %v, want a,b,c and nil", got, err)
	}
	// fn's error ends the read and comes back.
	r3, err := a.NewReader()
	if err != nil {
		t.Fatal(err)
	}
	defer r3.Close()
	boom := errors.New("boom")
	if err := r3.ReadPartition(ctx, "reader.t", part, lso, func(*Message) error { return boom }, nil); !errors.Is(err, boom) {
		t.Fatalf("fn's error: %v", err)
	}
}
