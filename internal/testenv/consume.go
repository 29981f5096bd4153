package testenv

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/internal/testenv/harness"
)

// Consumed is a record read back from the broker.
type Consumed struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	Headers   map[string]string
}

// Header returns header k.
func (c Consumed) Header(k string) string { return c.Headers[k] }

// Consume reads records of the topics matching the regular expression pattern (read_committed,
// from the beginning) until want records arrived or timeout passed, and returns what it read.
// With want <= 0 it reads until timeout.
func Consume(t testing.TB, addr, pattern string, want int, timeout time.Duration) []Consumed {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeRegex(), kgo.ConsumeTopics(pattern),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.MetadataMinAge(100*time.Millisecond), kgo.MetadataMaxAge(time.Second),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out []Consumed
	for ctx.Err() == nil && (want <= 0 || len(out) < want) {
		f := cl.PollFetches(ctx)
		f.EachRecord(func(r *kgo.Record) {
			c := Consumed{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value, Headers: map[string]string{}}
			for _, h := range r.Headers {
				c.Headers[h.Key] = string(h.Value)
			}
			out = append(out, c)
		})
	}
	return out
}

// ConsumeAll reads every record (read_committed) of the topics matching pattern (unanchored,
// as kgo.ConsumeRegex) that is in them when it is called: it lists each partition's last stable
// offset, then reads until it has reached each one. There is no quiet period to wait out: what it
// returns is what the broker had, exactly, so a test that asserts "nothing else arrived" reads
// the whole topic, not whatever came within a timeout. Records produced meanwhile may be
// included. It fails the test if the broker does not answer or the end is not reached within
// 60 s.
func ConsumeAll(t testing.TB, addr, pattern string) []Consumed {
	t.Helper()
	recs := ReadAll(t, []string{addr}, pattern)
	out := make([]Consumed, len(recs))
	for i, r := range recs {
		c := Consumed{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value, Headers: map[string]string{}}
		for _, h := range r.Headers {
			c.Headers[h.Key] = string(h.Value)
		}
		out[i] = c
	}
	return out
}

// ReadAll is ConsumeAll with franz-go's records (producer id and epoch included), from the
// brokers at addrs (a cluster: any of them).
func ReadAll(t testing.TB, addrs []string, pattern string) []*kgo.Record {
	t.Helper()
	re, err := regexp.Compile(pattern)
	if err != nil {
		t.Fatalf("ReadAll: pattern %q: %v", pattern, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var ends map[string]map[int32]partEnd
	if err := harness.Until(30*time.Second, 100*time.Millisecond, func() (err error) {
		ends, err = stableEnds(ctx, addrs, re) // a new topic's leader may not be elected yet
		return err
	}); err != nil {
		t.Fatalf("ReadAll %s at %v: %v", pattern, addrs, err)
	}
	start := map[string]map[int32]kgo.Offset{}
	left := 0
	for tp, ps := range ends {
		for p, e := range ps {
			if e.end > e.start {
				if start[tp] == nil {
					start[tp] = map[int32]kgo.Offset{}
				}
				start[tp][p] = kgo.NewOffset().At(e.start)
				left++
			}
		}
	}
	if left == 0 {
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumePartitions(start), kgo.KeepControlRecords(),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for left > 0 {
		f := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("ReadAll %s: %d partitions not read to their last stable offset within 60s", pattern, left)
		}
		f.EachRecord(func(r *kgo.Record) {
			// The record at end-1 is always returned: a visible record or, kept here, the
			// marker that ends the transaction before the end.
			if e, ok := ends[r.Topic][r.Partition]; ok && !e.reached && r.Offset+1 >= e.end {
				e.reached = true
				ends[r.Topic][r.Partition] = e
				left--
			}
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
		})
	}
	return out
}

// Delivered is how far the topics matching pattern have come for a read_committed reader: the
// sum over their partitions of last stable offset minus log start (records and transaction
// markers), without reading a record. It only grows while something delivers: a cheap progress
// meter to wait on. It fails the test when the broker does not answer within 30 s.
func Delivered(t testing.TB, addr, pattern string) int64 {
	t.Helper()
	re, err := regexp.Compile(pattern)
	if err != nil {
		t.Fatalf("Delivered: pattern %q: %v", pattern, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ends map[string]map[int32]partEnd
	if err := harness.Until(30*time.Second, 100*time.Millisecond, func() (err error) {
		ends, err = stableEnds(ctx, []string{addr}, re)
		return err
	}); err != nil {
		t.Fatalf("Delivered %s at %s: %v", pattern, addr, err)
	}
	var n int64
	for _, ps := range ends {
		for _, e := range ps {
			n += e.end - e.start
		}
	}
	return n
}

// partEnd is one partition's log start and last stable offset.
type partEnd struct {
	start, end int64
	reached    bool
}

// stableEnds lists the log start and last stable offsets of every partition of the topics
// matching re.
func stableEnds(ctx context.Context, addrs []string, re *regexp.Regexp) (map[string]map[int32]partEnd, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	meta, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	out := map[string]map[int32]partEnd{}
	for _, ts := range []int64{-2, -1} { // earliest, then latest (read_committed: the LSO)
		req := kmsg.NewPtrListOffsetsRequest()
		req.ReplicaID, req.IsolationLevel = -1, 1
		for _, tm := range meta.Topics {
			if tm.Topic == nil || tm.IsInternal || !re.MatchString(*tm.Topic) {
				continue
			}
			rt := kmsg.NewListOffsetsRequestTopic()
			rt.Topic = *tm.Topic
			for _, pm := range tm.Partitions {
				rp := kmsg.NewListOffsetsRequestTopicPartition()
				rp.Partition, rp.Timestamp = pm.Partition, ts
				rt.Partitions = append(rt.Partitions, rp)
			}
			req.Topics = append(req.Topics, rt)
		}
		if len(req.Topics) == 0 {
			return out, nil
		}
		// Sharded by partition leader: kgo sends each partition to its leader and merges.
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return nil, fmt.Errorf("list offsets: %w", err)
		}
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
					return nil, fmt.Errorf("list offsets of %s/%d: %w", rt.Topic, rp.Partition, err)
				}
				if out[rt.Topic] == nil {
					out[rt.Topic] = map[int32]partEnd{}
				}
				e := out[rt.Topic][rp.Partition]
				if ts == -2 {
					e.start = rp.Offset
				} else {
					e.end = rp.Offset
				}
				out[rt.Topic][rp.Partition] = e
			}
		}
	}
	return out, nil
}
