package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
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
