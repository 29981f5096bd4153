package bench

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/IBM/sarama"
)

// countRecords sums, over topics, the records each partition holds (newest - oldest offset).
// Topics that do not exist count 0.
func countRecords(brokers, topics []string) (int64, error) {
	cl, err := newBenchClient(brokers)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	var total int64
	for _, t := range topics {
		parts, err := cl.Partitions(t)
		if errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("topic %s: %w", t, err)
		}
		for _, p := range parts {
			hi, err := cl.GetOffset(t, p, sarama.OffsetNewest)
			if err != nil {
				return 0, fmt.Errorf("topic %s/%d: %w", t, p, err)
			}
			lo, err := cl.GetOffset(t, p, sarama.OffsetOldest)
			if err != nil {
				return 0, fmt.Errorf("topic %s/%d: %w", t, p, err)
			}
			total += hi - lo
		}
	}
	return total, nil
}

// deleteTopics deletes the topics whose names start with prefix (the bench's own), so that the
// embedded broker does not keep every earlier scenario's records in the bench's memory.
func deleteTopics(brokers []string, prefix string) error {
	sc := sarama.NewConfig()
	sc.Version = sarama.V2_8_0_0
	sc.Metadata.Retry.Max = 3
	adm, err := sarama.NewClusterAdmin(brokers, sc)
	if err != nil {
		return err
	}
	defer adm.Close()
	topics, err := adm.ListTopics()
	if err != nil {
		return err
	}
	var errs []error
	for t := range topics {
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
	cl     sarama.Client
	topics []string
	want   int64
}

// newBenchClient is the bench's own metadata/offsets client (not outboxd's producer).
func newBenchClient(brokers []string) (sarama.Client, error) {
	sc := sarama.NewConfig()
	sc.Version = sarama.V2_8_0_0
	sc.Metadata.Full = false
	sc.Metadata.Retry.Max = 3
	sc.Metadata.Retry.Backoff = 50 * time.Millisecond
	return sarama.NewClient(brokers, sc)
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
	reqs := map[*sarama.Broker]*sarama.OffsetRequest{}
	for _, t := range w.topics {
		parts, err := w.cl.Partitions(t)
		if err != nil {
			if errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
				_ = w.cl.RefreshMetadata(t) // created meanwhile? look again next poll
				continue
			}
			return false, err
		}
		for _, p := range parts {
			b, err := w.cl.Leader(t, p)
			if err != nil {
				return false, err
			}
			if reqs[b] == nil {
				reqs[b] = &sarama.OffsetRequest{Version: 1}
			}
			reqs[b].AddBlock(t, p, sarama.OffsetNewest, 1)
		}
	}
	var total int64
	for b, req := range reqs {
		resp, err := b.GetAvailableOffsets(req)
		if err != nil {
			return false, err
		}
		for _, parts := range resp.Blocks {
			for _, blk := range parts {
				if blk.Err != sarama.ErrNoError {
					return false, blk.Err
				}
				total += blk.Offset
			}
		}
	}
	return total >= w.want, nil
}
