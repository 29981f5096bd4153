package kafka

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/outboxd/outboxd/internal/backoff"
	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
)

// OffsetStore keeps the position as a record in a compacted Kafka topic (offsets.topic): key =
// the pipeline id, value = JSON {"position", "source", "updated"}. Many pipelines may share the
// topic; each reads and writes only its own key.
//
// Load reads the key's partition with isolation level read_committed (sarama's consumer, see
// Reader) from the log start to the high-water mark and takes the last value for the key:
// records of aborted transactions are never seen, and a transaction still open when Load starts
// is waited for (it ends within the transaction timeout of its producer at the latest).
//
// Save (offsets.store kafka with kafka.delivery at_least_once) produces the record with the
// idempotent producer (acks=all) and returns once it is acked. In exactly-once mode the
// position is not saved here: the pipeline produces Record(p) inside the Kafka transaction
// that carries the records up to p.
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

	mu    sync.Mutex
	admin *Admin
	prod  *Producer
	parts int32 // partitions of Topic, once known
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

func (s *OffsetStore) connect() (*Admin, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.admin != nil {
		return s.admin, nil
	}
	if s.Topic == "" || s.Key == "" {
		return nil, errors.New("offsets: kafka store needs offsets.topic and a pipeline id")
	}
	a, err := Dial(s.Kafka, storeMetadataRetries, 500*time.Millisecond)
	if err != nil {
		return nil, fmt.Errorf("offsets.topic %s: connect to %w", s.Topic, err)
	}
	s.admin = a
	return a, nil
}

// EnsureTopic creates offsets.topic when it does not exist (compacted, 1 partition) and returns
// its partition count.
func (s *OffsetStore) EnsureTopic(ctx context.Context) (int32, error) {
	a, err := s.connect()
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
			if err := backoff.Wait(ctx, time.Duration(attempt)*200*time.Millisecond); err != nil {
				return 0, err
			}
		}
		parts, err := a.Partitions(s.Topic)
		if err == nil {
			n := int32(len(parts))
			s.mu.Lock()
			s.parts = n
			s.mu.Unlock()
			return n, nil
		}
		lastErr = err
		if !errors.Is(err, ErrUnknownTopic) {
			continue
		}
		if err := a.CreateTopic(s.Topic, 1, map[string]string{"cleanup.policy": "compact"}, false); err != nil {
			lastErr = err
			if !errors.Is(err, ErrTopicExists) {
				continue
			}
		} else {
			s.log().Info("created the offsets topic", "topic", s.Topic, "cleanup.policy", "compact", "partitions", 1)
		}
	}
	return 0, fmt.Errorf("offsets.topic %s: %w", s.Topic, lastErr)
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
	a, _ := s.connect()
	part := PartitionFor([]byte(s.Key), n)
	var lastErr error
	for attempt := 0; attempt < 10; attempt++ {
		if attempt > 0 {
			if err := backoff.Wait(ctx, time.Duration(attempt)*200*time.Millisecond); err != nil {
				return "", err
			}
			_ = a.client.RefreshMetadata(s.Topic)
		}
		doc, found, err := s.read(ctx, a, part)
		if err == nil && ctx.Err() == nil {
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
		if errors.As(err, &corrupt) {
			return "", err
		}
		if ctx.Err() != nil {
			return "", ctx.Err()
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

// read reads partition part read_committed from its start up to its last stable offset, once
// every transaction open when read starts has ended, and returns the key's last value.
func (s *OffsetStore) read(ctx context.Context, a *Admin, part int32) (doc kafkaDoc, found bool, err error) {
	// Read up to the high-water mark: a transaction still open (another pipeline sharing the
	// topic, or one that crashed mid-transaction) holds the last stable offset back, and a
	// position committed after it would be missed. Wait until every transaction open now has
	// ended (committed, aborted, or timed out on the broker).
	hwm, err := a.Offset(s.Topic, part, Latest, ReadUncommitted)
	if err != nil {
		return doc, false, err
	}
	var end int64
	for waited := time.Duration(0); ; {
		if end, err = a.Offset(s.Topic, part, Latest, ReadCommitted); err != nil {
			return doc, false, err
		}
		if end >= hwm {
			break
		}
		if waited%(5*time.Second) == 0 {
			s.log().Info("offsets.topic has an open transaction: waiting for it to end before reading the position",
				"topic", s.Topic, "partition", part, "last_stable_offset", end, "high_water_mark", hwm, "waited", waited)
		}
		if err := backoff.Wait(ctx, 100*time.Millisecond); err != nil {
			return doc, false, err
		}
		waited += 100 * time.Millisecond
	}
	r, err := a.NewReader()
	if err != nil {
		return doc, false, err
	}
	defer r.Close()
	key := []byte(s.Key)
	err = r.ReadPartition(ctx, s.Topic, part, end, func(m *Message) error {
		if !bytes.Equal(m.Key, key) {
			return nil
		}
		if m.Value == nil { // a tombstone: the position was deleted
			doc, found = kafkaDoc{}, false
			return nil
		}
		var d kafkaDoc
		if err := json.Unmarshal(m.Value, &d); err != nil {
			return &corruptError{topic: s.Topic, offset: m.Offset, err: err}
		}
		doc, found = d, true
		return nil
	}, nil)
	return doc, found, err
}

// saveTimeout bounds a Save whose context never ends (the pipeline's final save on shutdown,
// which must not hang on a Kafka that went away). A Save whose context can end (the running
// pipeline's: a stop cancels it) waits for Kafka as long as that context lasts, as the outbox
// records do — the offsets topic's leader moving or a broker outage is transient, not fatal —
// and warns every saveTimeout it waits.
const saveTimeout = 30 * time.Second

// Save produces p with the idempotent producer and returns once Kafka acked it (acks=all).
// Transient failures are retried until ctx ends; with a context that cannot end, for at most
// 30 s.
func (s *OffsetStore) Save(ctx context.Context, p source.Position) error {
	if ctx.Done() == nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, saveTimeout)
		defer cancel()
	}
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
	slow := time.NewTicker(saveTimeout)
	defer slow.Stop()
	start := time.Now()
	for {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("offsets.topic %s: store position %s: %w", s.Topic, p, err)
			}
			return nil
		case <-slow.C:
			s.log().Warn("storing the position in offsets.topic waits for Kafka (retrying until it acks; records keep flowing, the stored position lags)",
				"topic", s.Topic, "position", string(p), "waited", time.Since(start).Round(time.Second))
		case <-ctx.Done():
			return fmt.Errorf("offsets.topic %s: store position %s: %w", s.Topic, p, ctx.Err())
		}
	}
}

// Close releases the store's connections. The store can be used again afterwards.
func (s *OffsetStore) Close() error {
	s.mu.Lock()
	prod, a := s.prod, s.admin
	s.prod, s.admin, s.parts = nil, nil, 0
	s.mu.Unlock()
	if prod != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = prod.Shutdown(ctx)
		cancel()
	}
	if a != nil {
		return a.Close()
	}
	return nil
}
