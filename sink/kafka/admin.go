package kafka

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// Errors of Admin calls, for errors.Is (the caller needs no sarama import).
var (
	ErrUnknownTopic       error = sarama.ErrUnknownTopicOrPartition // the topic does not exist
	ErrTopicExists        error = sarama.ErrTopicAlreadyExists      // CreateTopic: it exists already
	ErrLeaderNotAvailable error = sarama.ErrLeaderNotAvailable      // a partition has no leader (yet)
)

// Admin is one connection to a Kafka cluster for everything outboxd asks of Kafka besides
// producing: metadata, topic creation and configuration, list-offsets, and reading partitions
// back (Reader). The offsets store, `outboxd dlq tail/replay`, `outboxd check` and the bench
// use it. It never creates a topic by asking for it, and its metadata requests are bounded: a
// command fails within seconds on an unreachable cluster instead of retrying for a day like
// the producer. Cluster and Partitions ask one broker once; the lookups behind Offset,
// ListOffsets and Reader (leaders) retry as Dial says.
//
// An Admin is safe for concurrent use. Every call is one or a few request round trips and
// blocks until they are answered or fail (sarama's network timeouts bound them: 30 s).
type Admin struct {
	brokers []string
	client  sarama.Client

	mu    sync.Mutex
	admin sarama.ClusterAdmin // created on first use, on its own connection
}

// Dial connects to c.Brokers with c's TLS, SASL and client id. A metadata refresh (finding a
// partition's leader) is tried retries+1 times, backoff apart. Dial itself sends nothing: an
// unreachable cluster shows in the first call.
func Dial(c Config, retries int, backoff time.Duration) (*Admin, error) {
	sc, err := c.SaramaConfig()
	if err != nil {
		return nil, err
	}
	sc.Metadata.AllowAutoTopicCreation = false
	sc.Metadata.Full = false
	sc.Metadata.Retry.Max = retries
	sc.Metadata.Retry.BackoffFunc = func(int, int) time.Duration { return backoff }
	sc.Metadata.Retry.Backoff = backoff
	sc.Metadata.Timeout = 0
	sc.Admin.Timeout = 30 * time.Second
	// Reader's consumer: read_committed, from the log start, errors returned.
	sc.Consumer.IsolationLevel = sarama.ReadCommitted
	sc.Consumer.Return.Errors = true
	sc.Consumer.MaxWaitTime = 250 * time.Millisecond
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	client, err := sarama.NewClient(c.Brokers, sc)
	if err != nil {
		return nil, fmt.Errorf("kafka.brokers %v: %w", c.Brokers, err)
	}
	return &Admin{brokers: c.Brokers, client: client}, nil
}

// Close releases the connections. Readers made by the Admin must be closed first.
func (a *Admin) Close() error {
	a.mu.Lock()
	adm := a.admin
	a.admin = nil
	a.mu.Unlock()
	if adm != nil {
		_ = adm.Close()
	}
	return a.client.Close()
}

func (a *Admin) clusterAdmin() (sarama.ClusterAdmin, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.admin == nil {
		// The controller is named by a full metadata request; the Admin's own client asks for
		// single topics only.
		sc := *a.client.Config()
		sc.Metadata.Full = true
		adm, err := sarama.NewClusterAdmin(a.brokers, &sc)
		if err != nil {
			return nil, fmt.Errorf("kafka.brokers %v: find the controller: %w", a.brokers, err)
		}
		a.admin = adm
	}
	return a.admin, nil
}

// metadata asks one broker directly (no client-side retry: sarama's would retry an unknown
// topic as if it were about to appear). nil topics asks for all.
func (a *Admin) metadata(topics []string) (*sarama.MetadataResponse, error) {
	b := a.client.LeastLoadedBroker()
	if b == nil {
		return nil, sarama.ErrOutOfBrokers
	}
	req := sarama.NewMetadataRequest(a.client.Config().Version, topics)
	req.AllowAutoTopicCreation = false
	resp, err := b.GetMetadata(req)
	if err != nil {
		_ = b.Close() // reopened by the next call
		// As sarama's client says it: ConnectHint reads a hang-up at this first contact as a
		// listener refusing the client's security.
		return nil, fmt.Errorf("kafka.brokers %v: metadata: %w: %w", a.brokers, sarama.ErrOutOfBrokers, err)
	}
	return resp, nil
}

// Cluster asks for the cluster's metadata (one request): how many brokers it has and the
// names of its topics.
func (a *Admin) Cluster() (brokers int, topics []string, err error) {
	resp, err := a.metadata(nil)
	if err != nil {
		return 0, nil, err
	}
	for _, t := range resp.Topics {
		if errors.Is(t.Err, sarama.ErrNoError) {
			topics = append(topics, t.Name)
		}
	}
	slices.Sort(topics)
	return len(resp.Brokers), topics, nil
}

// Partitions returns the ids of topic's partitions, in order (one metadata request, never
// creating the topic). A topic that does not exist is ErrUnknownTopic; one whose partitions
// do not all have a leader yet (just created) is ErrLeaderNotAvailable.
func (a *Admin) Partitions(topic string) ([]int32, error) {
	resp, err := a.metadata([]string{topic})
	if err != nil {
		return nil, err
	}
	for _, t := range resp.Topics {
		if t.Name != topic {
			continue
		}
		if !errors.Is(t.Err, sarama.ErrNoError) {
			return nil, t.Err
		}
		if len(t.Partitions) == 0 {
			return nil, sarama.ErrLeaderNotAvailable
		}
		ids := make([]int32, 0, len(t.Partitions))
		for _, p := range t.Partitions {
			if !errors.Is(p.Err, sarama.ErrNoError) && !errors.Is(p.Err, sarama.ErrReplicaNotAvailable) {
				return nil, p.Err
			}
			if p.Leader < 0 {
				return nil, sarama.ErrLeaderNotAvailable
			}
			ids = append(ids, p.ID)
		}
		slices.Sort(ids)
		return ids, nil
	}
	return nil, sarama.ErrUnknownTopicOrPartition
}

// CreateTopic creates topic with the given partition count (-1: the broker's default), the
// broker's default replication factor and the given topic configs (cleanup.policy, ...).
// validateOnly asks the controller whether it would (outboxd check). A topic that exists is
// ErrTopicExists.
func (a *Admin) CreateTopic(topic string, partitions int32, configs map[string]string, validateOnly bool) error {
	adm, err := a.clusterAdmin()
	if err != nil {
		return err
	}
	d := &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: -1}
	if len(configs) > 0 {
		d.ConfigEntries = make(map[string]*string, len(configs))
		for k, v := range configs {
			d.ConfigEntries[k] = &v
		}
	}
	return adm.CreateTopic(topic, d, validateOnly)
}

// DeleteTopic deletes topic.
func (a *Admin) DeleteTopic(topic string) error {
	adm, err := a.clusterAdmin()
	if err != nil {
		return err
	}
	return adm.DeleteTopic(topic)
}

// TopicConfig returns the value of the topic config key (cleanup.policy, ...) of topic, ""
// when the broker reports none.
func (a *Admin) TopicConfig(topic, key string) (string, error) {
	adm, err := a.clusterAdmin()
	if err != nil {
		return "", err
	}
	entries, err := adm.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: topic, ConfigNames: []string{key}})
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if e.Name == key {
			return e.Value, nil
		}
	}
	return "", nil
}

// BrokerConfig returns the value of the broker config key (transaction.max.timeout.ms, ...)
// on every broker of the cluster, by broker id; a broker that does not report it is left out.
func (a *Admin) BrokerConfig(key string) (map[int32]string, error) {
	adm, err := a.clusterAdmin()
	if err != nil {
		return nil, err
	}
	brokers, _, err := adm.DescribeCluster()
	if err != nil {
		return nil, err
	}
	out := make(map[int32]string, len(brokers))
	for _, b := range brokers {
		entries, err := adm.DescribeConfig(sarama.ConfigResource{Type: sarama.BrokerResource, Name: strconv.Itoa(int(b.ID())),
			ConfigNames: []string{key}})
		if err != nil {
			return nil, fmt.Errorf("describe broker %d: %w", b.ID(), err)
		}
		for _, e := range entries {
			if e.Name == key {
				out[b.ID()] = e.Value
			}
		}
	}
	return out, nil
}

// Retriable reports whether err from an Admin call only means that a partition's leadership
// is still settling (a topic created a moment ago, a leader moving, a busy broker): asking
// again shortly can succeed.
func Retriable(err error) bool {
	var ke sarama.KError
	if !errors.As(err, &ke) {
		return false
	}
	switch ke {
	case sarama.ErrNotLeaderForPartition, sarama.ErrLeaderNotAvailable, sarama.ErrUnknownTopicOrPartition,
		sarama.ErrNotCoordinatorForConsumer, sarama.ErrRequestTimedOut, sarama.ErrOffsetNotAvailable,
		sarama.ErrFencedLeaderEpoch, sarama.ErrUnknownLeaderEpoch, sarama.ErrKafkaStorageError,
		sarama.ErrReplicaNotAvailable:
		return true
	}
	return false
}
