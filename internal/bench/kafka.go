package bench

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/outboxd/outboxd/sink/kafka"
)

// countRecords sums, over topics, the records each partition holds (newest - oldest offset).
// Topics that do not exist count 0.
func countRecords(brokers, topics []string) (int64, error) {
	cl, err := newBenchClient(brokers)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	hi, err := cl.ListOffsets(topics, kafka.Latest, kafka.ReadUncommitted)
	if err != nil {
		return 0, err
	}
	lo, err := cl.ListOffsets(topics, kafka.Earliest, kafka.ReadUncommitted)
	if err != nil {
		return 0, err
	}
	var total int64
	for t, parts := range hi {
		for p, off := range parts {
			total += off - lo[t][p]
		}
	}
	return total, nil
}

// deleteTopics deletes the topics whose names start with prefix (the bench's own), so that the
// embedded broker does not keep every earlier scenario's records in the bench's memory.
func deleteTopics(brokers []string, prefix string) error {
	adm, err := newBenchClient(brokers)
	if err != nil {
		return err
	}
	defer adm.Close()
	_, topics, err := adm.Cluster()
	if err != nil {
		return err
	}
	var errs []error
	for _, t := range topics {
		if strings.HasPrefix(t, prefix) {
			if err := adm.DeleteTopic(t); err != nil {
				errs = append(errs, fmt.Errorf("delete topic %s: %w", t, err))
			}
		}
	}
	return errors.Join(errs...)
}

// ackWatch tells when Kafka holds a number of records in a set of topics: the moment every
// record outboxd produced is acked (acks=all: a record is in the log, below the high watermark,
// only once acknowledged). One ListOffsets request per leader and poll, on one client.
type ackWatch struct {
	cl     *kafka.Admin
	topics []string
	want   int64
}

// newBenchClient is the bench's own metadata/offsets client (not outboxd's producer).
func newBenchClient(brokers []string) (*kafka.Admin, error) {
	return kafka.Dial(kafka.Config{Brokers: brokers}, 3, 50*time.Millisecond)
}

func newAckWatch(brokers, topics []string, want int64) (*ackWatch, error) {
	cl, err := newBenchClient(brokers)
	if err != nil {
		return nil, err
	}
	return &ackWatch{cl: cl, topics: topics, want: want}, nil
}

func (w *ackWatch) Close() { w.cl.Close() }

// complete reports whether the topics hold (at least) want records. Topics not created yet
// count 0; the bench drops its topics between runs, so every log starts at offset 0.
func (w *ackWatch) complete() (bool, error) {
	ends, err := w.cl.ListOffsets(w.topics, kafka.Latest, kafka.ReadUncommitted)
	if err != nil {
		return false, err
	}
	var total int64
	for _, parts := range ends {
		for _, off := range parts {
			total += off
		}
	}
	return total >= w.want, nil
}
