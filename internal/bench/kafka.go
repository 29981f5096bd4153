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
	sc := sarama.NewConfig()
	sc.Version = sarama.V2_8_0_0
	sc.Metadata.Full = false
	sc.Metadata.Retry.Max = 3
	sc.Metadata.Retry.Backoff = 100 * time.Millisecond
	cl, err := sarama.NewClient(brokers, sc)
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
