package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/IBM/sarama"
)

// Why ReadPartition decides its last record before reading: sarama's consumer hides its fetch
// position. Transaction markers occupy offsets but are never delivered, nor are aborted
// records, so a read_committed consumer that has delivered everything below end may still be
// many offsets short of end (an exactly-once topic always ends with a commit marker), and
// nothing it delivers says so. lastDelivered reads the batch headers of the partition's tail
// once and names the last record that the consumer will deliver; the consumer then reads up
// to that record and no further. No timer decides that a read is complete.

// tailWindow is how many offsets before end lastDelivered looks at first; it doubles the
// window while the window holds no delivered record.
const tailWindow = 64

// lastDelivered returns the offset of the last record below end that a read_committed
// consumer of the partition delivers, or -1 when there is none. end must not be past the
// last stable offset: every transaction with a record below end has then ended, and its
// marker is in the log (before the high-water mark).
func (a *Admin) lastDelivered(ctx context.Context, topic string, part int32, end int64) (int64, error) {
	start, err := a.Offset(topic, part, Earliest, ReadUncommitted)
	if err != nil || end <= start {
		return -1, err
	}
	for from := max(start, end-tailWindow); ; from = max(start, from-2*(end-from)) {
		last, err := a.scanTail(ctx, topic, part, from, end)
		if err != nil || last >= 0 || from == start {
			return last, err
		}
	}
}

// scanTail reads batch headers from offset from (read_uncommitted: markers past the last
// stable offset count too) until every transaction with a record in [from, end) has its
// marker, and returns the last delivered record below end (tail.last).
func (a *Admin) scanTail(ctx context.Context, topic string, part int32, from, end int64) (int64, error) {
	leader, err := a.client.Leader(topic, part)
	if err != nil {
		return -1, fmt.Errorf("%s partition %d: leader: %w", topic, part, err)
	}
	t := tail{end: end, last: -1, pending: map[int64]int64{}}
	maxBytes := int32(1 << 20)
	for off, stuck := from, 0; ; {
		if err := ctx.Err(); err != nil {
			return -1, err
		}
		req := &sarama.FetchRequest{Version: 11, MaxWaitTime: 10, MinBytes: 1, MaxBytes: maxBytes,
			Isolation: sarama.ReadUncommitted, SessionID: 0, SessionEpoch: -1}
		req.AddBlock(topic, part, off, maxBytes, -1)
		resp, err := leader.Fetch(req)
		if err != nil {
			_ = leader.Close()
			return -1, fmt.Errorf("%s partition %d: fetch from broker %s: %w", topic, part, leader.Addr(), err)
		}
		blk := resp.GetBlock(topic, part)
		if blk == nil {
			return -1, sarama.ErrIncompleteResponse
		}
		if !errors.Is(blk.Err, sarama.ErrNoError) {
			return -1, fmt.Errorf("%s partition %d: fetch from broker %s: %w", topic, part, leader.Addr(), blk.Err)
		}
		next := t.addAll(blk.RecordsSet, off)
		if (next >= end && len(t.pending) == 0) || next >= blk.HighWaterMarkOffset {
			return t.last, nil
		}
		if next > off {
			off, stuck = next, 0
			continue
		}
		// Nothing complete came back: a batch larger than maxBytes, or the log start moved.
		if stuck++; stuck > 5 {
			return -1, fmt.Errorf("%s partition %d: no progress reading batch headers at offset %d (high-water mark %d)",
				topic, part, off, blk.HighWaterMarkOffset)
		}
		maxBytes = min(2*maxBytes, 64<<20)
		if blk.LogStartOffset > off {
			off = blk.LogStartOffset
		}
	}
}

// tail follows a partition's record batches in offset order and keeps the last record below
// end that a read_committed consumer delivers: a record of a non-transactional batch at once;
// one of a transactional batch when its producer's next marker commits (an abort drops it).
// That is sarama's filter (consumer.go parseResponse) restated for complete information: with
// every transaction ended, the aborted-transaction index of a fetch response says no more
// than the marker that follows the producer's records.
type tail struct {
	end     int64
	last    int64           // -1: none yet
	pending map[int64]int64 // producer id → last record below end of its transaction in progress
}

// addAll adds the complete batches of a fetch at offset from and returns the offset after
// them (from when none was complete).
func (t *tail) addAll(set []*sarama.Records, from int64) int64 {
	next := from
	for _, recs := range set {
		if recs == nil {
			continue
		}
		if rb := recs.RecordBatch; rb != nil {
			if rb.PartialTrailingRecord {
				break
			}
			t.add(rb)
			next = max(next, rb.LastOffset()+1)
			continue
		}
		if recs.MsgSet != nil { // legacy format: never transactional
			for _, m := range recs.MsgSet.Messages {
				if m.Offset < t.end {
					t.last = max(t.last, m.Offset)
				}
				next = max(next, m.Offset+1)
			}
		}
	}
	return next
}

func (t *tail) add(rb *sarama.RecordBatch) {
	if rb.Control {
		if p, ok := t.pending[rb.ProducerID]; ok {
			if len(rb.Records) > 0 && isCommitMarker(rb.Records[0].Key) {
				t.last = max(t.last, p)
			}
			delete(t.pending, rb.ProducerID)
		}
		return
	}
	hi := int64(-1) // compaction may have removed records: only those present count
	for _, r := range rb.Records {
		if off := rb.FirstOffset + r.OffsetDelta; off < t.end {
			hi = max(hi, off)
		}
	}
	switch {
	case hi < 0:
	case !rb.IsTransactional:
		t.last = max(t.last, hi)
	default:
		if p, ok := t.pending[rb.ProducerID]; !ok || hi > p {
			t.pending[rb.ProducerID] = hi
		}
	}
}

// isCommitMarker reads a control record's key: version (int16), type (int16: 0 abort, 1 commit).
func isCommitMarker(key []byte) bool {
	return len(key) >= 4 && binary.BigEndian.Uint16(key[2:4]) == 1
}
