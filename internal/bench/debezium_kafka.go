package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/sink/kafka"
)

// The vs-debezium scenarios run against Apache Kafka: a private single node (KRaft, combined
// broker and controller) unless -brokers names one. Every topic is created by the bench before a
// tool runs, with message.timestamp.type=LogAppendTime: a record's timestamp is the moment the
// broker appended it, the Kafka side of both the drain's steady-state window and commit → Kafka.

// cmpPartitions is the partition count of the bench's topics (as the test brokers auto-create).
const cmpPartitions = 3

// cmpKafka is the Kafka of a vs-debezium scenario.
type cmpKafka struct {
	brokers []string
	desc    string
	stop    func()
	dir     string // the private node's dir ("" = given brokers)
	pid     int
}

// brokerPid finds the private node's JVM (its command line names dir's server.properties);
// 0 for given brokers.
func (k *cmpKafka) brokerPid() int {
	if k.pid != 0 || k.dir == "" {
		return k.pid
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	want := []byte(filepath.Join(k.dir, "server.properties"))
	for _, d := range dirs {
		b, err := os.ReadFile(d + "/cmdline")
		if err == nil && bytes.Contains(b, want) && bytes.Contains(b, []byte("kafka.Kafka")) {
			k.pid, _ = strconv.Atoi(filepath.Base(d))
			break
		}
	}
	return k.pid
}

func startCmpKafka(e *env) (*cmpKafka, error) {
	if len(e.o.Brokers) > 0 {
		return &cmpKafka{brokers: e.o.Brokers, desc: "given by -brokers: " + strings.Join(e.o.Brokers, ","), stop: func() {}}, nil
	}
	e.o.Log.Info("starting a private Apache Kafka node")
	k, err := testenv.StartApacheKafka(testenv.ApacheOpts{Props: []string{"log.message.timestamp.type=LogAppendTime"}})
	if err != nil {
		return nil, fmt.Errorf("start Apache Kafka %s for the Debezium comparison (needs java and, once, mvn; or pass -brokers): %w",
			testenv.ApacheKafkaVersion, err)
	}
	return &cmpKafka{brokers: []string{k.Addr()}, dir: k.Dir,
		desc: "Apache Kafka " + testenv.ApacheKafkaVersion + " (private single KRaft node, JVM -Xmx512m, same machine)", stop: k.Destroy}, nil
}

// warmBroker produces n outbox-sized records (snappy, acks=all, as both tools do) to a throwaway
// topic, so that the broker's JIT warm-up is not billed to whichever tool drains first.
func warmBroker(ctx context.Context, brokers []string, n int) error {
	topic := fmt.Sprintf("outboxd-bench.warmup.%d", time.Now().UnixNano())
	if err := createLogAppendTopics(brokers, []string{topic}); err != nil {
		return err
	}
	defer deleteTopics(brokers, topic)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic),
		kgo.ProducerBatchCompression(kgo.SnappyCompression()), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	value := []byte(`{"orderId": 0, "status": "CREATED", "note": "` + strings.Repeat("0123456789abcdef", 18) + `"}`)
	var failed atomic.Pointer[error]
	for i := range n {
		cl.Produce(ctx, &kgo.Record{Key: []byte(fmt.Sprintf("customer-%d", i%1000)), Value: value}, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.CompareAndSwap(nil, &err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	if p := failed.Load(); p != nil {
		return fmt.Errorf("warm the broker up: %w", *p)
	}
	return nil
}

// createLogAppendTopics creates topics (cmpPartitions partitions, the broker's replication
// factor, LogAppendTime timestamps) and waits until each partition has a leader.
func createLogAppendTopics(brokers, topics []string) error {
	adm, err := newBenchClient(brokers)
	if err != nil {
		return fmt.Errorf("connect to Kafka at %s: %w", strings.Join(brokers, ","), err)
	}
	defer adm.Close()
	for _, t := range topics {
		err := adm.CreateTopic(t, cmpPartitions, map[string]string{"message.timestamp.type": "LogAppendTime"}, false)
		if err != nil && !errors.Is(err, kafka.ErrTopicExists) {
			return fmt.Errorf("create topic %s (message.timestamp.type=LogAppendTime): %w", t, err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for _, t := range topics {
		for {
			parts, err := adm.Partitions(t) // ErrLeaderNotAvailable until every partition has one
			if err == nil && len(parts) == cmpPartitions {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("topic %s has no leader for every partition a minute after its creation: %v", t, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// holds is w.complete() where a partition's leadership still settling (a topic created a moment
// ago, a busy broker) is "not yet" instead of an error (ListOffsets refreshed the metadata for
// the next poll).
func holds(w *ackWatch) (bool, error) {
	ok, err := w.complete()
	if err != nil && kafka.Retriable(err) {
		return false, nil
	}
	return ok, err
}

// kafkaRecord is what the bench keeps of one record read back.
type kafkaRecord struct {
	id      string    // header "id" (outboxd and Debezium's router both set it)
	ts      time.Time // LogAppendTime
	orderID int64     // payload's "orderId" (-1 if none)
}

// readBack reads every record of topics from the start up to the end offsets at the call
// (at_least_once, non-transactional: offsets are records).
func readBack(ctx context.Context, brokers, topics []string) ([]kafkaRecord, error) {
	want, err := countRecords(brokers, topics)
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	out := make([]kafkaRecord, 0, want)
	for int64(len(out)) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return out, fmt.Errorf("read back %d of %d records: %w", len(out), want, ctx.Err())
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) { ferr = fmt.Errorf("fetch %s/%d: %w", t, p, err) })
		if ferr != nil {
			return out, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			k := kafkaRecord{ts: r.Timestamp, orderID: -1}
			for _, h := range r.Headers {
				if h.Key == "id" {
					k.id = string(h.Value)
				}
			}
			if v, ok := jsonIntField(r.Value, "orderId"); ok {
				k.orderID = v
			}
			out = append(out, k)
		})
	}
	return out, nil
}

// jsonIntField finds "key": <integer> in a JSON text (PostgreSQL's jsonb text and MariaDB's
// JSON_OBJECT both write `"key": 12`); it does not parse the document.
func jsonIntField(v []byte, key string) (int64, bool) {
	pat := `"` + key + `"`
	s := string(v)
	for {
		i := strings.Index(s, pat)
		if i < 0 {
			return 0, false
		}
		rest := strings.TrimLeft(s[i+len(pat):], " \t\n\r")
		if !strings.HasPrefix(rest, ":") {
			s = s[i+len(pat):]
			continue
		}
		rest = strings.TrimLeft(rest[1:], " \t\n\r")
		j := 0
		if j < len(rest) && rest[j] == '-' {
			j++
		}
		for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
			j++
		}
		if j == 0 || (j == 1 && rest[0] == '-') {
			return 0, false
		}
		var n int64
		if _, err := fmt.Sscan(rest[:j], &n); err != nil {
			return 0, false
		}
		return n, true
	}
}

// backlogCheck summarises a drain's records: how many, how many distinct event ids, and the
// first and last LogAppendTime.
type backlogCheck struct {
	records, distinct int
	first, last       time.Time
}

func checkBacklog(recs []kafkaRecord) backlogCheck {
	c := backlogCheck{records: len(recs)}
	seen := make(map[string]struct{}, len(recs))
	for _, r := range recs {
		if r.id != "" {
			seen[r.id] = struct{}{}
		}
		if c.first.IsZero() || r.ts.Before(c.first) {
			c.first = r.ts
		}
		if r.ts.After(c.last) {
			c.last = r.ts
		}
	}
	c.distinct = len(seen)
	return c
}

// appendedAfter counts the records appended after t (LogAppendTime has millisecond resolution:
// a record of t's millisecond counts as after).
func appendedAfter(recs []kafkaRecord, t time.Time) int {
	n := 0
	cut := t.Truncate(time.Millisecond)
	for _, r := range recs {
		if !r.ts.Before(cut) {
			n++
		}
	}
	return n
}
