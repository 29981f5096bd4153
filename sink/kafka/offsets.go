package kafka

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
)

// OffsetStore keeps the position as a record in a compacted Kafka topic (offsets.topic): key =
// the pipeline id, value = JSON {"position", "source", "updated"}. Many pipelines may share the
// topic; each reads and writes only its own key.
//
// Load reads the key's partition with isolation level read_committed from the log start to the
// high-water mark and takes the last value for the key: records of aborted transactions are
// never seen, and a transaction still open when Load starts is waited for (it ends within the
// transaction timeout of its producer at the latest). Save (offsets.store kafka with kafka.delivery at_least_once)
// produces the record with the idempotent producer (acks=all) and returns once it is acked. In
// exactly-once mode the position is not saved here: the pipeline produces Record(p) inside the
// Kafka transaction that carries the records up to p.
//
// The topic is created when absent with cleanup.policy=compact and 1 partition (replication:
// the broker's default). An existing topic is used as it is; a key always maps to the same
// partition (murmur2, like every other keyed record outboxd writes).
type OffsetStore struct {
	Kafka  Config // the kafka section (brokers, TLS, SASL, ...)
	Topic  string // offsets.topic
	Key    string // the pipeline id
	Source string // the source the position belongs to; another source's record is refused
	Log    *slog.Logger

	mu     sync.Mutex
	client sarama.Client
	prod   *Producer
	parts  int32 // partitions of Topic, once known
}

type kafkaDoc struct {
	Position source.Position `json:"position"`
	Source   string          `json:"source,omitempty"`
	Updated  time.Time       `json:"updated"`
}

// storeMetadataRetries bounds how long a metadata request of the store waits for an unreachable
// cluster (about 5 x 500ms), so that Load fails with an error instead of hanging.
const storeMetadataRetries = 5

func (s *OffsetStore) log() *slog.Logger {
	if s.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Log
}

func (s *OffsetStore) connect() (sarama.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client != nil {
		return s.client, nil
	}
	if s.Topic == "" || s.Key == "" {
		return nil, errors.New("offsets: kafka store needs offsets.topic and a pipeline id")
	}
	sc, err := s.Kafka.SaramaConfig()
	if err != nil {
		return nil, err
	}
	sc.Metadata.Retry.Max = storeMetadataRetries
	sc.Metadata.Retry.BackoffFunc = func(int, int) time.Duration { return 500 * time.Millisecond }
	sc.Metadata.Timeout = 0
	sc.Metadata.AllowAutoTopicCreation = false
	c, err := sarama.NewClient(s.Kafka.Brokers, sc)
	if err != nil {
		return nil, fmt.Errorf("offsets.topic %s: connect to kafka.brokers %v: %w", s.Topic, s.Kafka.Brokers, err)
	}
	s.client = c
	return c, nil
}

// EnsureTopic creates offsets.topic when it does not exist (compacted, 1 partition) and returns
// its partition count.
func (s *OffsetStore) EnsureTopic(ctx context.Context) (int32, error) {
	c, err := s.connect()
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	n := s.parts
	s.mu.Unlock()
	if n > 0 {
		return n, nil
	}
	var lastErr error
	for attempt := 0; attempt < 10; attempt++ {
		if attempt > 0 {
			if err := sleepCtx(ctx, time.Duration(attempt)*200*time.Millisecond); err != nil {
				return 0, err
			}
		}
		n, err := s.partitions(c)
		if err == nil {
			s.mu.Lock()
			s.parts = n
			s.mu.Unlock()
			return n, nil
		}
		lastErr = err
		if !errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
			continue
		}
		if err := s.create(c); err != nil {
			lastErr = err
			if !errors.Is(err, sarama.ErrTopicAlreadyExists) {
				continue
			}
		} else {
			s.log().Info("created the offsets topic", "topic", s.Topic, "cleanup.policy", "compact", "partitions", 1)
		}
	}
	return 0, fmt.Errorf("offsets.topic %s: %w", s.Topic, lastErr)
}

// partitions asks for the topic's partition count without creating it.
func (s *OffsetStore) partitions(c sarama.Client) (int32, error) {
	b := c.LeastLoadedBroker()
	if b == nil {
		return 0, sarama.ErrOutOfBrokers
	}
	req := sarama.NewMetadataRequest(c.Config().Version, []string{s.Topic})
	req.AllowAutoTopicCreation = false
	resp, err := b.GetMetadata(req)
	if err != nil {
		_ = b.Close()
		return 0, err
	}
	for _, t := range resp.Topics {
		if t.Name != s.Topic {
			continue
		}
		if !errors.Is(t.Err, sarama.ErrNoError) {
			return 0, t.Err
		}
		if len(t.Partitions) == 0 {
			return 0, sarama.ErrLeaderNotAvailable
		}
		return int32(len(t.Partitions)), nil
	}
	return 0, sarama.ErrUnknownTopicOrPartition
}

func (s *OffsetStore) create(c sarama.Client) error {
	// A client with full metadata knows the controller (the store's own asks for one topic).
	sc := *c.Config()
	sc.Metadata.Full = true
	admin, err := sarama.NewClusterAdmin(s.Kafka.Brokers, &sc)
	if err != nil {
		return err
	}
	defer admin.Close()
	compact := "compact"
	return admin.CreateTopic(s.Topic, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: -1,
		ConfigEntries: map[string]*string{"cleanup.policy": &compact}}, false)
}

// Record is the offsets record for p: what Save produces, and what the exactly-once pipeline
// produces inside its Kafka transactions.
func (s *OffsetStore) Record(p source.Position) sink.Record {
	b, _ := json.Marshal(kafkaDoc{Position: p, Source: s.Source, Updated: time.Now().UTC()})
	return sink.Record{Topic: s.Topic, Key: []byte(s.Key), Value: b}
}

// Load returns the last committed position of the key ("" when there is none), creating the
// topic when it does not exist.
func (s *OffsetStore) Load(ctx context.Context) (source.Position, error) {
	n, err := s.EnsureTopic(ctx)
	if err != nil {
		return "", err
	}
	c, _ := s.connect()
	part := PartitionFor([]byte(s.Key), n)
	var lastErr error
	for attempt := 0; attempt < 10; attempt++ {
		if attempt > 0 {
			if err := sleepCtx(ctx, time.Duration(attempt)*200*time.Millisecond); err != nil {
				return "", err
			}
			_ = c.RefreshMetadata(s.Topic)
		}
		doc, found, err := s.read(ctx, c, part)
		if err == nil {
			if !found {
				return "", nil
			}
			if s.Source != "" && doc.Source != "" && doc.Source != s.Source {
				return "", fmt.Errorf("offsets.topic %s: the position stored under key %q belongs to source %q, not %q: "+
					"give this pipeline its own key (offsets.key) or topic", s.Topic, s.Key, doc.Source, s.Source)
			}
			return doc.Position, nil
		}
		var corrupt *corruptError
		if errors.As(err, &corrupt) || ctx.Err() != nil {
			return "", err
		}
		lastErr = err
	}
	return "", fmt.Errorf("offsets.topic %s: read partition %d: %w", s.Topic, part, lastErr)
}

type corruptError struct {
	topic  string
	offset int64
	err    error
}

func (e *corruptError) Error() string {
	return fmt.Sprintf("offsets.topic %s: the record at offset %d is not a position document (%v): "+
		"set a position with `outboxd offsets set`", e.topic, e.offset, e.err)
}

// read scans partition part from its start to its last stable offset, read_committed.
func (s *OffsetStore) read(ctx context.Context, c sarama.Client, part int32) (doc kafkaDoc, found bool, err error) {
	leader, err := c.Leader(s.Topic, part)
	if err != nil {
		return doc, false, err
	}
	v := c.Config().Version
	start, err := listOffset(leader, v, s.Topic, part, sarama.OffsetOldest, sarama.ReadCommitted)
	if err != nil {
		return doc, false, err
	}
	// Read up to the high-water mark: a transaction still open (another pipeline sharing the
	// topic, or one that crashed mid-transaction) holds the last stable offset back, and a
	// position committed after it would be missed. Wait until every transaction open now has
	// ended (committed, aborted, or timed out on the broker).
	hwm, err := listOffset(leader, v, s.Topic, part, sarama.OffsetNewest, sarama.ReadUncommitted)
	if err != nil {
		return doc, false, err
	}
	var end int64
	for waited := time.Duration(0); ; {
		if end, err = listOffset(leader, v, s.Topic, part, sarama.OffsetNewest, sarama.ReadCommitted); err != nil {
			return doc, false, err
		}
		if end >= hwm {
			break
		}
		if waited%(5*time.Second) == 0 {
			s.log().Info("offsets.topic has an open transaction: waiting for it to end before reading the position",
				"topic", s.Topic, "partition", part, "last_stable_offset", end, "high_water_mark", hwm, "waited", waited)
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return doc, false, err
		}
		waited += 100 * time.Millisecond
	}
	key := []byte(s.Key)
	maxBytes := int32(4 << 20)
	empty := 0
	for off := start; off < end; {
		if err := ctx.Err(); err != nil {
			return doc, false, err
		}
		req := &sarama.FetchRequest{Version: 11, MaxWaitTime: 100, MinBytes: 1, MaxBytes: maxBytes,
			Isolation: sarama.ReadCommitted, SessionID: 0, SessionEpoch: -1}
		req.AddBlock(s.Topic, part, off, maxBytes, -1)
		resp, err := leader.Fetch(req)
		if err != nil {
			_ = leader.Close()
			return doc, false, err
		}
		blk := resp.GetBlock(s.Topic, part)
		if blk == nil {
			return doc, false, sarama.ErrIncompleteResponse
		}
		if !errors.Is(blk.Err, sarama.ErrNoError) {
			return doc, false, blk.Err
		}
		next, err := scanBlock(blk, off, func(offset int64, r *sarama.Record) error {
			if !bytes.Equal(r.Key, key) {
				return nil
			}
			if r.Value == nil { // a tombstone: the position was deleted
				doc, found = kafkaDoc{}, false
				return nil
			}
			var d kafkaDoc
			if err := json.Unmarshal(r.Value, &d); err != nil {
				return &corruptError{topic: s.Topic, offset: offset, err: err}
			}
			doc, found = d, true
			return nil
		})
		if err != nil {
			return doc, false, err
		}
		if next <= off {
			// Nothing complete came back: a batch larger than maxBytes, or the log start
			// moved (retention, compaction).
			empty++
			if empty > 5 {
				return doc, false, fmt.Errorf("no progress reading at offset %d (last stable offset %d)", off, end)
			}
			if maxBytes < 64<<20 {
				maxBytes *= 2
			}
			if blk.LogStartOffset > off {
				next = blk.LogStartOffset
			} else {
				continue
			}
		}
		empty = 0
		off = next
	}
	return doc, found, nil
}

// scanBlock calls fn for every committed data record of blk at or after from, in offset order,
// and returns the offset to fetch next. It filters as a read_committed consumer must: control
// batches are skipped, and so are transactional batches of a producer inside one of the
// block's aborted transactions (from its first offset up to its abort marker).
func scanBlock(blk *sarama.FetchResponseBlock, from int64, fn func(offset int64, r *sarama.Record) error) (int64, error) {
	next := from
	aborted := slices.Clone(blk.AbortedTransactions)
	slices.SortFunc(aborted, func(a, b *sarama.AbortedTransaction) int {
		switch {
		case a.FirstOffset < b.FirstOffset:
			return -1
		case a.FirstOffset > b.FirstOffset:
			return 1
		}
		return 0
	})
	abortedPIDs := map[int64]bool{}
	for _, recs := range blk.RecordsSet {
		if recs == nil || recs.RecordBatch == nil {
			continue // legacy message sets are never written by outboxd
		}
		rb := recs.RecordBatch
		if rb.PartialTrailingRecord && len(rb.Records) == 0 {
			break
		}
		for len(aborted) > 0 && aborted[0].FirstOffset <= rb.LastOffset() {
			abortedPIDs[aborted[0].ProducerID] = true
			aborted = aborted[1:]
		}
		if rb.Control {
			if len(rb.Records) > 0 && len(rb.Records[0].Key) >= 4 &&
				binary.BigEndian.Uint16(rb.Records[0].Key[2:4]) == 0 { // 0 = ABORT marker
				delete(abortedPIDs, rb.ProducerID)
			}
		} else if !(rb.IsTransactional && abortedPIDs[rb.ProducerID]) {
			for _, r := range rb.Records {
				off := rb.FirstOffset + r.OffsetDelta
				if off < from {
					continue
				}
				if err := fn(off, r); err != nil {
					return next, err
				}
			}
		}
		if rb.PartialTrailingRecord {
			break
		}
		if last := rb.LastOffset() + 1; last > next {
			next = last
		}
	}
	return next, nil
}

// listOffset returns the earliest offset (sarama.OffsetOldest) of a partition, or its end
// (sarama.OffsetNewest): the last stable offset with read_committed, the high-water mark with
// read_uncommitted.
func listOffset(b *sarama.Broker, v sarama.KafkaVersion, topic string, part int32, which int64, iso sarama.IsolationLevel) (int64, error) {
	req := sarama.NewOffsetRequest(v)
	req.IsolationLevel = iso
	req.AddBlock(topic, part, which, 1)
	resp, err := b.GetAvailableOffsets(req)
	if err != nil {
		_ = b.Close()
		return 0, err
	}
	blk := resp.GetBlock(topic, part)
	if blk == nil {
		return 0, sarama.ErrIncompleteResponse
	}
	if !errors.Is(blk.Err, sarama.ErrNoError) {
		return 0, blk.Err
	}
	if len(blk.Offsets) > 0 {
		return blk.Offsets[0], nil
	}
	return blk.Offset, nil
}

// saveTimeout bounds one Save: the pipeline calls Save with a context that never ends while it
// drains on shutdown, and a Kafka that went away must not hang that forever.
const saveTimeout = 30 * time.Second

// Save produces p with the idempotent producer and returns once Kafka acked it (acks=all).
// Transient failures are retried until ctx ends, for at most 30 s.
func (s *OffsetStore) Save(ctx context.Context, p source.Position) error {
	ctx, cancel := context.WithTimeout(ctx, saveTimeout)
	defer cancel()
	if _, err := s.EnsureTopic(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	if s.prod == nil {
		prod, err := New(s.Kafka, s.log())
		if err != nil {
			s.mu.Unlock()
			return fmt.Errorf("offsets.topic %s: %w", s.Topic, err)
		}
		s.prod = prod
	}
	prod := s.prod
	s.mu.Unlock()
	rec := s.Record(p)
	done := make(chan error, 1)
	if err := prod.Produce(ctx, &rec, func(err error) { done <- err }); err != nil {
		return fmt.Errorf("offsets.topic %s: store position %s: %w", s.Topic, p, err)
	}
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("offsets.topic %s: store position %s: %w", s.Topic, p, err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close releases the store's connections. The store can be used again afterwards.
func (s *OffsetStore) Close() error {
	s.mu.Lock()
	prod, c := s.prod, s.client
	s.prod, s.client, s.parts = nil, nil, 0
	s.mu.Unlock()
	if prod != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = prod.Shutdown(ctx)
		cancel()
	}
	if c != nil {
		return c.Close()
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
