package kafka

import (
	"context"
	"fmt"
	"time"

	"github.com/IBM/sarama"

	"github.com/outboxd/outboxd/sink"
)

// Message is one record read back by a Reader.
type Message struct {
	Partition int32
	Offset    int64
	Timestamp time.Time
	Key       []byte // nil for a null key
	Value     []byte // nil for a null value (a tombstone)
	Headers   []sink.Header
}

// Reader reads partitions back with isolation level read_committed, through sarama's
// consumer: records of aborted transactions and transaction markers are never delivered, and
// nothing at or past the last stable offset (a transaction still open holds it back).
type Reader struct {
	a        *Admin
	consumer sarama.Consumer
}

// NewReader starts a consumer on the Admin's connection. Close it before the Admin.
func (a *Admin) NewReader() (*Reader, error) {
	c, err := sarama.NewConsumerFromClient(a.client)
	if err != nil {
		return nil, fmt.Errorf("kafka consumer: %w", err)
	}
	return &Reader{a: a, consumer: c}, nil
}

// Close stops the Reader's consumer.
func (r *Reader) Close() error { return r.consumer.Close() }

// ReadPartition calls fn, in offset order, for the records of one partition from its log
// start. fn is called from the calling goroutine; an error from it stops the read and is
// returned. A Reader reads each partition once (sarama lets one consumer hold a partition
// once, and lets go of it asynchronously); different partitions may be read concurrently.
//
// With end >= 0 it returns nil once fn has had every record below end that read_committed
// delivers; end must not be past the partition's last stable offset (Offset(..., Latest,
// ReadCommitted)), or the call waits for the transactions that hold it back. The read ends on
// the last such record itself: a transaction marker or an aborted transaction after it is
// never delivered, so "the consumer reached end-1" would never come. Which record is the last
// is decided before reading (lastDelivered); consumer errors end the call.
//
// With end < 0 it follows the partition until ctx ends (then it returns nil); consumer errors
// go to warn (when set) while sarama retries them by itself.
//
// ctx ending returns nil; callers that need to tell a completed read from a cancelled one
// check ctx.Err().
func (r *Reader) ReadPartition(ctx context.Context, topic string, part int32, end int64,
	fn func(*Message) error, warn func(error)) error {
	last := int64(-1)
	if end >= 0 {
		var err error
		if last, err = r.a.lastDelivered(ctx, topic, part, end); err != nil || last < 0 {
			return err
		}
	}
	pc, err := r.consumer.ConsumePartition(topic, part, sarama.OffsetOldest)
	if err != nil {
		return fmt.Errorf("%s partition %d: %w", topic, part, err)
	}
	// AsyncClose: Close would wait for the consumer's fetch in flight (parked at the broker for
	// up to Consumer.MaxWaitTime when the partition has nothing more).
	defer pc.AsyncClose()
	for {
		select {
		case <-ctx.Done():
			return nil
		case m, ok := <-pc.Messages():
			if !ok {
				return fmt.Errorf("%s partition %d: the consumer stopped", topic, part)
			}
			if end >= 0 && m.Offset >= end {
				return nil // the record we waited for was compacted away; a later one came
			}
			msg := &Message{Partition: m.Partition, Offset: m.Offset, Timestamp: m.Timestamp, Key: m.Key, Value: m.Value}
			for _, h := range m.Headers {
				if h != nil {
					msg.Headers = append(msg.Headers, sink.Header{Key: string(h.Key), Value: h.Value})
				}
			}
			if err := fn(msg); err != nil {
				return err
			}
			if end >= 0 && m.Offset >= last {
				return nil
			}
		case cerr, ok := <-pc.Errors():
			if !ok {
				return fmt.Errorf("%s partition %d: the consumer stopped", topic, part)
			}
			if end < 0 {
				if warn != nil {
					warn(fmt.Errorf("%s partition %d: %w (retrying)", topic, part, cerr.Err))
				}
				continue
			}
			return fmt.Errorf("%s partition %d: %w", topic, part, cerr.Err)
		}
	}
}
