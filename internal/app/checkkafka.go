package app

import (
	"context"
	"errors"
	"fmt"

	"github.com/IBM/sarama"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/sink/kafka"
)

// checkKafka: brokers reachable, the producer's durability settings, and the DLQ topic exists or
// can be created (auto-creation or CreateTopics permission).
func checkKafka(ctx context.Context, c *config.Config) []CheckResult {
	var out []CheckResult
	kc := KafkaConfig(c)
	sc, err := kc.SaramaConfig()
	if err != nil {
		return append(out, CheckResult{Name: "kafka producer settings", Reason: err.Error(), Fix: "fix the kafka section of the config"})
	}
	if err := kafka.ValidateDurability(sc); err != nil {
		out = append(out, CheckResult{Name: "kafka producer durability", Reason: err.Error(), Fix: "outboxd refuses to run without acks=all and idempotence"})
	} else {
		out = append(out, CheckResult{Name: "kafka producer durability", OK: true, Reason: "acks=all, idempotent, max.in.flight=1"})
	}
	// A bounded probe: do not wait out the producer's near-endless metadata retries.
	sc.Metadata.Full = true // the admin calls below need the controller and all topics
	sc.Metadata.Retry.Max = 2
	sc.Metadata.Retry.BackoffFunc = nil
	sc.Metadata.Retry.Backoff = 200e6
	client, err := sarama.NewClient(c.Kafka.Brokers, sc)
	if err != nil {
		fix := kc.ConnectHint(err) // a TLS or SASL failure names its config key
		if fix == "" {
			fix = "check kafka.brokers, network access, and kafka.tls / kafka.sasl"
		}
		return append(out, CheckResult{Name: "kafka reachable", Reason: err.Error(), Fix: fix})
	}
	defer client.Close()
	out = append(out, CheckResult{Name: "kafka reachable", OK: true, Reason: fmt.Sprintf("%d broker(s)", len(client.Brokers()))})
	if c.Kafka.Delivery == "exactly_once" {
		out = append(out, checkTxnTimeout(client, c))
	}

	topics, err := client.Topics()
	if err != nil {
		return append(out, CheckResult{Name: "dlq topic " + c.Kafka.DLQTopic, Reason: err.Error(), Fix: "grant DESCRIBE on topics"})
	}
	for _, t := range topics {
		if t == c.Kafka.DLQTopic {
			return append(out, CheckResult{Name: "dlq topic " + c.Kafka.DLQTopic, OK: true, Reason: "exists"})
		}
	}
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err == nil {
		err = admin.CreateTopic(c.Kafka.DLQTopic, &sarama.TopicDetail{NumPartitions: -1, ReplicationFactor: -1}, true)
	}
	if err == nil {
		return append(out, CheckResult{Name: "dlq topic " + c.Kafka.DLQTopic, OK: true, Reason: "absent, can be created"})
	}
	var te *sarama.TopicError
	if errors.As(err, &te) && te.Err == sarama.ErrTopicAlreadyExists {
		return append(out, CheckResult{Name: "dlq topic " + c.Kafka.DLQTopic, OK: true, Reason: "exists"})
	}
	return append(out, CheckResult{Name: "dlq topic " + c.Kafka.DLQTopic, Reason: "absent and cannot be created: " + err.Error(),
		Fix: "create the topic (kafka-topics.sh --create --topic " + c.Kafka.DLQTopic + ") or grant CREATE"})
}
