// Package sink defines the record a sink delivers.
//
// A producer takes Records with Produce(ctx, rec, done) and reports each one's delivery through
// done: exactly once per record Produce queued, from the producer's own goroutine (never two at
// once, never inside Produce, Flush or Commit), and Close waits for every outstanding done. The
// full contract is written on sinktest.Producer and sinktest.TxnProducer (the pipeline declares
// the same interfaces where it uses them); sink/sinktest checks sink/kafka's producers and every
// fake producer of the tests against it.
package sink

import "time"

// Header is a Kafka record header.
type Header struct {
	Key   string
	Value []byte
}

// Record is one Kafka record to deliver. A nil Value is a null value (tombstone form).
type Record struct {
	Topic   string
	Key     []byte
	Value   []byte
	Headers []Header
	// Timestamp is the record's CreateTime; zero means the producer's clock when it is sent.
	Timestamp time.Time
	// Partition is the record's partition when PartitionSet (outbox.fields placement
	// "partition"); otherwise the producer's partitioner picks one from Key.
	Partition    int32
	PartitionSet bool
}

// Size is the approximate encoded size of the record in bytes, used for in-flight byte caps.
func (r *Record) Size() int {
	n := len(r.Topic) + len(r.Key) + len(r.Value) + 16
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value) + 4
	}
	return n
}
