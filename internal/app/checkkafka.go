package app

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/outboxd/outboxd/internal/backoff"
	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/sink/kafka"
)

// checkKafka: brokers reachable, the producer's durability settings, and the DLQ topic exists or
// can be created (auto-creation or CreateTopics permission).
func checkKafka(ctx context.Context, c *config.Config) []CheckResult {
	var out []CheckResult
	kc := KafkaConfig(c)
	settings, durability := kc.CheckProducer()
	if settings != nil {
		return append(out, CheckResult{Name: "kafka producer settings", Reason: settings.Error(), Fix: "fix the kafka section of the config"})
	}
	if durability != nil {
		out = append(out, CheckResult{Name: "kafka producer durability", Reason: durability.Error(), Fix: "outboxd refuses to run without acks=all and idempotence"})
	} else {
		out = append(out, CheckResult{Name: "kafka producer durability", OK: true, Reason: "acks=all, idempotent, max.in.flight=1"})
	}
	// A bounded probe: do not wait out the producer's near-endless metadata retries.
	adm, err := kafka.Dial(kc, 2, 200*time.Millisecond)
	var brokers int
	var topics []string
	for attempt := 0; err == nil && attempt < 3; attempt++ {
		if attempt > 0 && backoff.Wait(ctx, 200*time.Millisecond) != nil {
			break
		}
		if brokers, topics, err = adm.Cluster(); err == nil || kc.ConnectHint(err) != "" {
			break // reached, or refused for a reason that asking again does not change
		}
	}
	if adm != nil {
		defer adm.Close()
	}
	if err != nil {
		fix := kc.ConnectHint(err) // a TLS or SASL failure names its config key
		if fix == "" {
			fix = "check kafka.brokers, network access, and kafka.tls / kafka.sasl"
		}
		return append(out, CheckResult{Name: "kafka reachable", Reason: err.Error(), Fix: fix})
	}
	out = append(out, CheckResult{Name: "kafka reachable", OK: true, Reason: fmt.Sprintf("%d broker(s)", brokers)})
	if c.Kafka.Delivery == "exactly_once" {
		out = append(out, checkTxnTimeout(adm, c))
	}

	if slices.Contains(topics, c.Kafka.DLQTopic) {
		return append(out, CheckResult{Name: "dlq topic " + c.Kafka.DLQTopic, OK: true, Reason: "exists"})
	}
	err = adm.CreateTopic(c.Kafka.DLQTopic, -1, nil, true)
	if err == nil {
		return append(out, CheckResult{Name: "dlq topic " + c.Kafka.DLQTopic, OK: true, Reason: "absent, can be created"})
	}
	if errors.Is(err, kafka.ErrTopicExists) {
		return append(out, CheckResult{Name: "dlq topic " + c.Kafka.DLQTopic, OK: true, Reason: "exists"})
	}
	return append(out, CheckResult{Name: "dlq topic " + c.Kafka.DLQTopic, Reason: "absent and cannot be created: " + err.Error(),
		Fix: "create the topic (kafka-topics.sh --create --topic " + c.Kafka.DLQTopic + ") or grant CREATE"})
}
