package kafka

import (
	"errors"
	"fmt"

	"github.com/IBM/sarama"
)

// Isolation says which end of a partition an end offset is.
type Isolation int8

const (
	// ReadUncommitted: the high-water mark (every record written and replicated, committed
	// or not, transaction markers included).
	ReadUncommitted = Isolation(sarama.ReadUncommitted)
	// ReadCommitted: the last stable offset, what a read_committed consumer can read now
	// (held back by the oldest transaction still open).
	ReadCommitted = Isolation(sarama.ReadCommitted)
)

// Positions ListOffsets and Offset ask for.
const (
	Earliest int64 = sarama.OffsetOldest // the log start offset
	Latest   int64 = sarama.OffsetNewest // the end (see Isolation)
)

// Offset returns the start (at = Earliest) or the end (at = Latest, see Isolation) of one
// partition: one ListOffsets request to its leader.
func (a *Admin) Offset(topic string, part int32, at int64, iso Isolation) (int64, error) {
	leader, err := a.client.Leader(topic, part)
	if err != nil {
		return 0, fmt.Errorf("%s partition %d: leader: %w", topic, part, err)
	}
	req := sarama.NewOffsetRequest(a.client.Config().Version)
	req.IsolationLevel = sarama.IsolationLevel(iso)
	req.AddBlock(topic, part, at, 1)
	resp, err := leader.GetAvailableOffsets(req)
	if err != nil {
		_ = leader.Close() // reopened by the next call
		return 0, fmt.Errorf("%s partition %d: list offsets from broker %s: %w", topic, part, leader.Addr(), err)
	}
	off, err := blockOffset(resp.GetBlock(topic, part))
	if err != nil {
		return 0, fmt.Errorf("%s partition %d: list offsets from broker %s: %w", topic, part, leader.Addr(), err)
	}
	return off, nil
}

// ListOffsets returns Offset(topic, p, at, iso) for every partition of the topics, in one
// request per partition leader. A topic that does not exist is left out of the result. On an
// error that Retriable accepts, the topics' metadata is refreshed for the next call.
func (a *Admin) ListOffsets(topics []string, at int64, iso Isolation) (map[string]map[int32]int64, error) {
	reqs := map[*sarama.Broker]*sarama.OffsetRequest{}
	for _, t := range topics {
		parts, err := a.client.Partitions(t)
		if errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: partitions: %w", t, err)
		}
		for _, p := range parts {
			b, err := a.client.Leader(t, p)
			if err != nil {
				return nil, a.settling(topics, fmt.Errorf("%s partition %d: leader: %w", t, p, err))
			}
			if reqs[b] == nil {
				reqs[b] = sarama.NewOffsetRequest(a.client.Config().Version)
				reqs[b].IsolationLevel = sarama.IsolationLevel(iso)
			}
			reqs[b].AddBlock(t, p, at, 1)
		}
	}
	out := map[string]map[int32]int64{}
	for b, req := range reqs {
		resp, err := b.GetAvailableOffsets(req)
		if err != nil {
			_ = b.Close()
			return nil, fmt.Errorf("list offsets from broker %s: %w", b.Addr(), err)
		}
		for t, parts := range resp.Blocks {
			for p, blk := range parts {
				off, err := blockOffset(blk)
				if err != nil {
					return nil, a.settling(topics, fmt.Errorf("%s partition %d: list offsets from broker %s: %w", t, p, b.Addr(), err))
				}
				if out[t] == nil {
					out[t] = map[int32]int64{}
				}
				out[t][p] = off
			}
		}
	}
	return out, nil
}

// settling refreshes the topics' metadata when err is Retriable, and returns err.
func (a *Admin) settling(topics []string, err error) error {
	if Retriable(err) {
		_ = a.client.RefreshMetadata(topics...)
	}
	return err
}

func blockOffset(blk *sarama.OffsetResponseBlock) (int64, error) {
	switch {
	case blk == nil:
		return 0, sarama.ErrIncompleteResponse
	case !errors.Is(blk.Err, sarama.ErrNoError):
		return 0, blk.Err
	case len(blk.Offsets) > 0:
		return blk.Offsets[0], nil
	}
	return blk.Offset, nil
}
