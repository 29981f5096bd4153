package sinktest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/outboxd/outboxd/sink"
)

// ReadBack reads what a producer delivered, for the RecordFieldsArrive clauses.
type ReadBack struct {
	// Read returns the n records delivered to topic (waiting for them), each with the partition
	// it landed on (Partition, PartitionSet true), its CreateTime (Timestamp) and its headers.
	Read func(t *testing.T, topic string, n int) []sink.Record
	// Partitions is the partition count of the topics Record returns.
	Partitions int32
}

const fieldRecords = 12

// fieldsIndexHeader names the header that tells the clause's records apart.
const fieldsIndexHeader = "sinktest-index"

// fieldRecord is record i of the RecordFieldsArrive clause: h's record i, with an index header;
// even records carry an explicit partition (i/2 % partitions) and a timestamp (base + i ms),
// odd ones neither (the producer's partitioner and clock). All go to topic.
func fieldRecord(rec *sink.Record, topic string, i int, partitions int32, base time.Time) *sink.Record {
	r := *rec
	r.Topic = topic // h.Record may give each call a topic of its own
	r.Headers = append(append([]sink.Header(nil), rec.Headers...), sink.Header{Key: fieldsIndexHeader, Value: []byte(strconv.Itoa(i))})
	if i%2 == 0 {
		r.Partition, r.PartitionSet = int32(i/2)%partitions, true
		r.Timestamp = base.Add(time.Duration(i) * time.Millisecond)
	} else {
		r.Partition, r.PartitionSet, r.Timestamp = 0, false, time.Time{}
	}
	return &r
}

// checkFields checks the read-back records against what fieldRecord sent: an explicit
// partition and a set timestamp arrive as given (the timestamp to the millisecond, Kafka's
// resolution), an unset timestamp arrives as the producer's clock at send time.
func checkFields(t *testing.T, got []sink.Record, partitions int32, base, before, after time.Time) {
	t.Helper()
	seen := map[int]bool{}
	for _, r := range got {
		i := -1
		for _, hd := range r.Headers {
			if hd.Key == fieldsIndexHeader {
				i, _ = strconv.Atoi(string(hd.Value))
			}
		}
		if i < 0 || i >= fieldRecords || seen[i] {
			t.Errorf("read back a record with index %d (headers %v): not one sent once", i, r.Headers)
			continue
		}
		seen[i] = true
		if i%2 == 0 {
			if want := int32(i/2) % partitions; r.Partition != want {
				t.Errorf("record %d: on partition %d, want its explicit partition %d", i, r.Partition, want)
			}
			if want := base.Add(time.Duration(i) * time.Millisecond); !r.Timestamp.Equal(want) {
				t.Errorf("record %d: timestamp %v, want %v as given", i, r.Timestamp.UTC(), want.UTC())
			}
		} else if r.Timestamp.Before(before.Truncate(time.Millisecond)) || r.Timestamp.After(after) {
			t.Errorf("record %d: zero timestamp arrived as %v, want the send time (between %v and %v)", i, r.Timestamp, before, after)
		}
	}
	if len(seen) != fieldRecords {
		t.Errorf("read back %d distinct records, want %d", len(seen), fieldRecords)
	}
}

// fieldsBase is a set timestamp an hour ago, at millisecond resolution (brokers may refuse
// timestamps far from their clock).
func fieldsBase() time.Time { return time.Now().Add(-time.Hour).Truncate(time.Millisecond) }

// testRecordFields: a record's explicit partition (PartitionSet) and timestamp arrive as given;
// a zero timestamp is the send time.
func testRecordFields(t *testing.T, h Harness) {
	if h.ReadBack == nil {
		t.Skip("this harness has no ReadBack: the producer delivers nowhere readable")
	}
	p := newProducer(t, h)
	base, before := fieldsBase(), time.Now()
	tl := newTally(fieldRecords)
	topic := h.Record(t, 0).Topic
	for i := range fieldRecords {
		rec := fieldRecord(h.Record(t, i), topic, i, h.ReadBack.Partitions, base)
		if err := p.Produce(context.Background(), rec, tl.done(i)); err != nil {
			t.Fatalf("Produce %d: %v", i, err)
		}
	}
	tl.wait(t, h.Wait)
	tl.check(t, true)
	checkFields(t, h.ReadBack.Read(t, topic, fieldRecords), h.ReadBack.Partitions, base, before, time.Now())
}

// testTxnRecordFields: as testRecordFields, through a committed transaction.
func testTxnRecordFields(t *testing.T, h TxnHarness) {
	if h.ReadBack == nil {
		t.Skip("this harness has no ReadBack: the producer delivers nowhere readable")
	}
	p := newTxn(t, h)
	base, before := fieldsBase(), time.Now()
	tl := newTally(fieldRecords)
	if err := p.Begin(); err != nil {
		t.Fatalf("Begin: %v", err)
	}
	topic := h.Record(t, 0).Topic
	for i := range fieldRecords {
		rec := fieldRecord(h.Record(t, i), topic, i, h.ReadBack.Partitions, base)
		if err := p.Produce(context.Background(), rec, tl.done(i)); err != nil {
			t.Fatalf("Produce %d: %v", i, err)
		}
	}
	if err := p.Commit(); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	tl.check(t, true)
	checkFields(t, h.ReadBack.Read(t, topic, fieldRecords), h.ReadBack.Partitions, base, before, time.Now())
}
