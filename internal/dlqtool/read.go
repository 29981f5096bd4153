// Package dlqtool reads and replays outboxd's dead-letter topic (kafka.dlq_topic): the logic of
// `outboxd dlq tail` and `outboxd dlq replay`.
//
// Dead-letter records are described in README.md ("What goes to the DLQ") and
// built by sink.DeadLetter. Reading uses sink/kafka's Reader (sarama's consumer, read_committed, from the
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

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/sink/kafka"
	"github.com/outboxd/outboxd/source"
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

// MessageValue reports whether the dead letter is a message row's (outboxd.source.table starts
// with source.MessageTablePrefix, the tableless outbox): a transform-stage one's value is then
// the message's raw content, not a row as JSON.
func (r *Record) MessageValue() bool {
	return strings.HasPrefix(r.SourceTable(), source.MessageTablePrefix)
}

// EventID returns the event id: the `id` header, or, for a row-as-JSON dead letter without
// one, the idColumn field of the row.
func (r *Record) EventID(idColumn string) string {
	if v, ok := r.Header("id"); ok {
		return v
	}
	if !r.RowValue() || idColumn == "" || r.MessageValue() {
		return "" // a message's id header is set whenever its content had one
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

// Read calls fn for every record of the DLQ topic, from the beginning of each partition.
// Without follow it stops at the end offsets (last stable offsets) taken when it starts, reading
// the partitions one after the other, so records come in partition, then offset order. With
// follow it reads all partitions concurrently (records of one partition in offset order) until
// ctx ends, which is then not an error; a missing topic is waited for. fn is never called
// concurrently; an error from it stops Read and is returned.
func Read(ctx context.Context, c Conn, follow bool, fn func(*Record) error) error {
	// A command fails within seconds when the cluster is unreachable (about 4 x 250ms).
	adm, err := kafka.Dial(c.Kafka, 4, 250*time.Millisecond)
	if err != nil {
		return err
	}
	defer adm.Close()
	parts, err := partitions(ctx, adm, c, follow)
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return nil
	}
	rd, err := adm.NewReader()
	if err != nil {
		return err
	}
	defer rd.Close()
	rec := func(m *kafka.Message) *Record {
		return &Record{Partition: m.Partition, Offset: m.Offset, Timestamp: m.Timestamp, Key: m.Key, Value: m.Value, Headers: m.Headers}
	}
	warn := func(err error) {
		if c.Warn != nil {
			c.Warn(fmt.Errorf("kafka.dlq_topic %w", err))
		}
	}

	if !follow {
		// Every partition's end first: records dead-lettered while we read are not waited for.
		ends := make([]int64, len(parts))
		for i, p := range parts {
			start, err := adm.Offset(c.Topic, p, kafka.Earliest, kafka.ReadCommitted)
			var end int64
			if err == nil {
				end, err = adm.Offset(c.Topic, p, kafka.Latest, kafka.ReadCommitted)
			}
			if err != nil {
				return fmt.Errorf("kafka.dlq_topic %w", err)
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
			err := rd.ReadPartition(ctx, c.Topic, p, ends[i], func(m *kafka.Message) error { return callFn(fn, rec(m)) }, nil)
			if err != nil {
				return readErr(err)
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
	locked := func(m *kafka.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if first != nil {
			return first
		}
		return callFn(fn, rec(m))
	}
	for _, p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := rd.ReadPartition(ctx, c.Topic, p, -1, locked, warn); err != nil {
				fail(readErr(err))
			}
		}()
	}
	wg.Wait()
	return first
}

// fnError carries an error of Read's fn through kafka.Reader, so that it comes back
// unchanged while the Reader's own errors ("<topic> partition <n>: ...") get the config key.
type fnError struct{ err error }

func (e *fnError) Error() string { return e.err.Error() }

func callFn(fn func(*Record) error, r *Record) error {
	if err := fn(r); err != nil {
		return &fnError{err}
	}
	return nil
}

func readErr(err error) error {
	var fe *fnError
	if errors.As(err, &fe) {
		return fe.err
	}
	return fmt.Errorf("kafka.dlq_topic %w", err)
}

// partitions lists the topic's partitions; a missing topic is ErrNoTopic, or, with wait, waited
// for until it exists or ctx ends.
func partitions(ctx context.Context, adm *kafka.Admin, c Conn, wait bool) ([]int32, error) {
	topic := c.Topic
	for settling := 0; ; {
		parts, err := adm.Partitions(topic)
		switch {
		case err == nil:
			return parts, nil
		case errors.Is(err, kafka.ErrUnknownTopic):
			if !wait {
				return nil, fmt.Errorf("kafka.dlq_topic %s: %w", topic, ErrNoTopic)
			}
		case errors.Is(err, kafka.ErrLeaderNotAvailable) && (wait || settling < 4):
			settling++ // just created: its leaders are being elected
		default:
			return nil, fmt.Errorf("kafka.dlq_topic %s: %w", topic, err) // err names kafka.brokers
		}
		d := time.Second // a missing topic, while following
		if settling > 0 {
			d = 250 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(d):
		}
	}
}

// IsInternalHeader reports headers outboxd adds to a dead letter (outboxd.error.*,
// outboxd.original.*, outboxd.source.*), which a replay strips.
func IsInternalHeader(k string) bool {
	return strings.HasPrefix(k, "outboxd.error.") || strings.HasPrefix(k, "outboxd.original.") ||
		strings.HasPrefix(k, "outboxd.source.")
}
