// Package dlqtool reads and replays outboxd's dead-letter topic (kafka.dlq_topic): the logic of
// `outboxd dlq tail` and `outboxd dlq replay`.
//
// Dead-letter records are described in ../shared/spec/interface.md ("Dead-letter records") and
// built by internal/sink.DeadLetter. Reading uses a sarama consumer (read_committed, from the
// beginning of every partition); replaying uses the pipeline's own durable producer
// (sink/kafka.New: idempotent, acks=all).
package dlqtool

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/sink/kafka"
)

// Conn names the dead-letter topic and how to reach its cluster.
type Conn struct {
	Kafka    kafka.Config // brokers, client id, TLS, SASL (the kafka section of the config)
	Topic    string       // kafka.dlq_topic
	IDColumn string       // outbox.columns.id: where the event id is in a row-as-JSON dead letter
	// Warn, when set, hears consumer errors that Read survives (while following, sarama
	// retries them by itself).
	Warn func(error)
}

// Record is one dead-letter record as read back from the DLQ topic.
type Record struct {
	Partition int32
	Offset    int64
	Timestamp time.Time
	Key       []byte // nil for a null key
	Value     []byte // nil for a null value
	Headers   []sink.Header
}

// Header returns the value of the first header named k, and whether there is one.
func (r *Record) Header(k string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == k {
			return string(h.Value), true
		}
	}
	return "", false
}

func (r *Record) h(k string) string { v, _ := r.Header(k); return v }

// Reason, Stage, Message, OriginalTopic, SourceTable, SourcePosition, SourceAfter and ErrorTime
// return the outboxd.* headers of the contract ("" when absent). SourceAfter is set only on a
// row of a chunk before its transaction's last, whose SourcePosition is then "".
func (r *Record) Reason() string         { return r.h(sink.HeaderReason) }
func (r *Record) Stage() string          { return r.h(sink.HeaderStage) }
func (r *Record) Message() string        { return r.h(sink.HeaderMessage) }
func (r *Record) OriginalTopic() string  { return r.h(sink.HeaderOriginalTopic) }
func (r *Record) SourceTable() string    { return r.h(sink.HeaderSourceTable) }
func (r *Record) SourcePosition() string { return r.h(sink.HeaderSourcePosition) }
func (r *Record) SourceAfter() string    { return r.h(sink.HeaderSourceAfter) }
func (r *Record) ErrorTime() string      { return r.h(sink.HeaderErrorTime) }

// RowValue reports whether the value is the source row as a JSON object rather than the
// original record's value: the transform failed, so no record was ever built.
func (r *Record) RowValue() bool { return r.Stage() == "transform" }

// EventID returns the event id: the `id` header, or, for a row-as-JSON dead letter without
// one, the idColumn field of the row.
func (r *Record) EventID(idColumn string) string {
	if v, ok := r.Header("id"); ok {
		return v
	}
	if !r.RowValue() || idColumn == "" {
		return ""
	}
	row, err := DecodeRow(r.Value)
	if err != nil {
		return ""
	}
	v, ok := row[idColumn]
	if !ok || v.Null {
		return ""
	}
	return string(v.Bytes)
}

// ErrNoTopic means the DLQ topic does not exist: nothing was ever dead-lettered (outboxd creates
// it on its first dead letter when the cluster auto-creates topics).
var ErrNoTopic = errors.New("the dead-letter topic does not exist")

// idleEnd is how long a partition may stay silent, once the consumer has seen the end offset
// taken at start, before the rest of the range is taken to be control records or gaps that a
// read_committed consumer never returns.
var idleEnd = 2 * time.Second

// consumerConfig is the producer's sarama config (TLS, SASL, client id) turned into a bounded
// read_committed consumer config that never creates topics.
func consumerConfig(kc kafka.Config) (*sarama.Config, error) {
	sc, err := kc.SaramaConfig()
	if err != nil {
		return nil, err
	}
	sc.Metadata.AllowAutoTopicCreation = false
	// SaramaConfig retries metadata for about a day (right for the pipeline); a command should
	// fail within seconds when the cluster is unreachable.
	sc.Metadata.Retry.Max = 4
	sc.Metadata.Retry.BackoffFunc = nil
	sc.Metadata.Retry.Backoff = 250 * time.Millisecond
	sc.Metadata.Timeout = 0
	sc.Consumer.IsolationLevel = sarama.ReadCommitted
	sc.Consumer.Return.Errors = true
	sc.Consumer.MaxWaitTime = 250 * time.Millisecond
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	return sc, nil
}

// Read calls fn for every record of the DLQ topic, from the beginning of each partition.
// Without follow it stops at the end offsets (last stable offsets) taken when it starts, reading
// the partitions one after the other, so records come in partition, then offset order. With
// follow it reads all partitions concurrently (records of one partition in offset order) until
// ctx ends, which is then not an error; a missing topic is waited for. fn is never called
// concurrently; an error from it stops Read and is returned.
func Read(ctx context.Context, c Conn, follow bool, fn func(*Record) error) error {
	sc, err := consumerConfig(c.Kafka)
	if err != nil {
		return err
	}
	client, err := sarama.NewClient(c.Kafka.Brokers, sc)
	if err != nil {
		return fmt.Errorf("kafka.brokers %v: %w", c.Kafka.Brokers, err)
	}
	defer client.Close()
	parts, err := partitions(ctx, client, c, follow)
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return nil
	}
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return fmt.Errorf("kafka consumer: %w", err)
	}
	defer consumer.Close()

	if !follow {
		// Every partition's end first: records dead-lettered while we read are not waited for.
		ends := make([]int64, len(parts))
		for i, p := range parts {
			start, end, err := bounds(client, c.Topic, p)
			if err != nil {
				return err
			}
			if end <= start {
				end = -1 // empty
			}
			ends[i] = end
		}
		for i, p := range parts {
			if ends[i] < 0 {
				continue
			}
			if err := readPartition(ctx, consumer, c.Topic, p, sarama.OffsetOldest, ends[i], fn, c.Warn); err != nil {
				return err
			}
		}
		return nil
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
		cancel()
	}
	locked := func(r *Record) error {
		mu.Lock()
		defer mu.Unlock()
		if first != nil {
			return first
		}
		return fn(r)
	}
	for _, p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := readPartition(ctx, consumer, c.Topic, p, sarama.OffsetOldest, -1, locked, c.Warn); err != nil {
				fail(err)
			}
		}()
	}
	wg.Wait()
	return first
}

// partitions lists the topic's partitions; a missing topic is ErrNoTopic, or, with wait, waited
// for until it exists or ctx ends.
func partitions(ctx context.Context, client sarama.Client, c Conn, wait bool) ([]int32, error) {
	topic := c.Topic
	for {
		err := client.RefreshMetadata(topic)
		var parts []int32
		if err == nil {
			parts, err = client.Partitions(topic)
		}
		switch {
		case err == nil && len(parts) > 0:
			return parts, nil
		case err == nil || errors.Is(err, sarama.ErrUnknownTopicOrPartition):
			if !wait {
				return nil, fmt.Errorf("kafka.dlq_topic %s: %w", topic, ErrNoTopic)
			}
		default:
			return nil, fmt.Errorf("kafka.brokers %v: metadata of kafka.dlq_topic %s: %w", c.Kafka.Brokers, topic, err)
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(time.Second):
		}
	}
}

// bounds returns the partition's log start offset and its last stable offset (the end of what a
// read_committed consumer can read now).
func bounds(client sarama.Client, topic string, p int32) (start, end int64, err error) {
	leader, err := client.Leader(topic, p)
	if err != nil {
		return 0, 0, fmt.Errorf("kafka.dlq_topic %s partition %d: leader: %w", topic, p, err)
	}
	get := func(at int64) (int64, error) {
		req := sarama.NewOffsetRequest(client.Config().Version)
		req.IsolationLevel = sarama.ReadCommitted
		req.AddBlock(topic, p, at, 1)
		resp, err := leader.GetAvailableOffsets(req)
		if err != nil {
			return 0, err
		}
		b := resp.GetBlock(topic, p)
		switch {
		case b == nil:
			return 0, sarama.ErrIncompleteResponse
		case !errors.Is(b.Err, sarama.ErrNoError):
			return 0, b.Err
		case len(b.Offsets) == 1:
			return b.Offsets[0], nil
		}
		return 0, sarama.ErrOffsetOutOfRange
	}
	if start, err = get(sarama.OffsetOldest); err == nil {
		end, err = get(sarama.OffsetNewest)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("kafka.dlq_topic %s partition %d: list offsets from broker %s: %w", topic, p, leader.Addr(), err)
	}
	return start, end, nil
}

// readPartition reads p from start (an offset or sarama.OffsetOldest); with end >= 0 it returns
// once it has the record before end.
func readPartition(ctx context.Context, consumer sarama.Consumer, topic string, p int32, start, end int64,
	fn func(*Record) error, warn func(error)) error {
	pc, err := consumer.ConsumePartition(topic, p, start)
	if err != nil {
		return fmt.Errorf("kafka.dlq_topic %s partition %d: %w", topic, p, err)
	}
	defer pc.Close()
	idle := time.NewTimer(idleEnd)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-pc.Messages():
			if end >= 0 && m.Offset >= end {
				return nil
			}
			r := &Record{Partition: m.Partition, Offset: m.Offset, Timestamp: m.Timestamp, Key: m.Key, Value: m.Value}
			for _, h := range m.Headers {
				if h != nil {
					r.Headers = append(r.Headers, sink.Header{Key: string(h.Key), Value: h.Value})
				}
			}
			if err := fn(r); err != nil {
				return err
			}
			if end >= 0 && m.Offset+1 >= end {
				return nil
			}
			idle.Reset(idleEnd)
		case cerr := <-pc.Errors():
			if end < 0 {
				// Following: sarama retries by itself; the error is worth a line, not an exit.
				if warn != nil {
					warn(fmt.Errorf("kafka.dlq_topic %s partition %d: %w (retrying)", topic, p, cerr.Err))
				}
				continue
			}
			return fmt.Errorf("kafka.dlq_topic %s partition %d: %w", topic, p, cerr.Err)
		case <-idle.C:
			// Nothing for a while although the consumer's fetches reached the end offset: the
			// rest of the range is control records (transaction markers) or aborted data.
			if end >= 0 && pc.HighWaterMarkOffset() >= end {
				return nil
			}
			idle.Reset(idleEnd)
		}
	}
}

// IsInternalHeader reports headers outboxd adds to a dead letter (outboxd.error.*,
// outboxd.original.*, outboxd.source.*), which a replay strips.
func IsInternalHeader(k string) bool {
	return strings.HasPrefix(k, "outboxd.error.") || strings.HasPrefix(k, "outboxd.original.") ||
		strings.HasPrefix(k, "outboxd.source.")
}
