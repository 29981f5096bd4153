package testenv

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv/harness"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// idempotentProducer is a sarama producer as outboxd configures it for at_least_once: acks=all,
// idempotent, one request in flight.
func idempotentProducer(t *testing.T, addrs ...string) sarama.SyncProducer {
	t.Helper()
	sc := sarama.NewConfig()
	sc.Version = sarama.V2_8_0_0
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Producer.Idempotent = true
	sc.Net.MaxOpenRequests = 1
	sc.Producer.Return.Successes = true
	sc.Producer.Retry.Max = 50
	sc.Producer.Retry.Backoff = 200 * time.Millisecond
	sc.Metadata.Retry.Max = 50
	sc.Metadata.Retry.Backoff = 200 * time.Millisecond
	p, err := sarama.NewSyncProducer(addrs, sc)
	if err != nil {
		t.Fatalf("sarama producer: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func produceN(t *testing.T, p sarama.SyncProducer, topic, prefix string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		msg := &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(fmt.Sprintf("k%d", i%5)),
			Value: sarama.StringEncoder(fmt.Sprintf("%s-%d", prefix, i))}
		if _, _, err := p.SendMessage(msg); err != nil {
			t.Fatalf("produce %s-%d: %v", prefix, i, err)
		}
	}
}

func expectValues(t *testing.T, addr, topic string, want int) {
	t.Helper()
	got := Consume(t, addr, topic, want, 20*time.Second)
	seen := map[string]bool{}
	for _, r := range got {
		if seen[string(r.Value)] {
			t.Fatalf("value %s read twice", r.Value)
		}
		seen[string(r.Value)] = true
	}
	if len(got) != want {
		t.Fatalf("read %d records of %s, want %d", len(got), topic, want)
	}
}

// TestApacheKafkaProduceConsumeRestart: one Apache Kafka node takes idempotent acks=all writes to
// an auto-created 3-partition topic; the records survive a SIGTERM restart and a SIGKILL restart
// on the same ports and data, and the node takes writes again after each.
func TestApacheKafkaProduceConsumeRestart(t *testing.T) {
	start := time.Now()
	k := NewApacheKafka(t, ApacheOpts{})
	t.Logf("Apache Kafka %s: lib and first start in %v", ApacheKafkaVersion, time.Since(start).Round(time.Millisecond))
	p := idempotentProducer(t, k.Addr())
	produceN(t, p, "t.restart", "a", 30)
	expectValues(t, k.Addr(), "t.restart", 30)
	if err := metadataPartitions(k.Addr(), "t.restart", 3); err != nil {
		t.Fatal(err)
	}

	start = time.Now()
	k.Stop()
	t.Logf("SIGTERM stop in %v", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	if err := k.Start(); err != nil {
		t.Fatalf("restart after SIGTERM: %v", err)
	}
	t.Logf("restart after SIGTERM: ready in %v", time.Since(start).Round(time.Millisecond))
	expectValues(t, k.Addr(), "t.restart", 30)
	produceN(t, p, "t.restart", "b", 10) // the same producer reconnects

	k.Kill()
	start = time.Now()
	if err := k.Start(); err != nil {
		t.Fatalf("restart after SIGKILL: %v", err)
	}
	t.Logf("restart after SIGKILL: ready in %v", time.Since(start).Round(time.Millisecond))
	produceN(t, idempotentProducer(t, k.Addr()), "t.restart", "c", 10)
	expectValues(t, k.Addr(), "t.restart", 50)
}

// metadataPartitions checks that topic has n partitions.
func metadataPartitions(addr, topic string, n int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return err
	}
	defer cl.Close()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != n {
		return fmt.Errorf("topic %s: metadata %+v, want %d partitions", topic, resp.Topics, n)
	}
	return nil
}

// TestApacheClusterKillLeaderAcksAll: on 3 nodes (RF 3, min.insync.replicas 2) acks=all writes go
// on while the leader of a partition is SIGKILLed, and while another node is SIGSTOPped; the
// killed node restarts on its data and catches up. Nothing acknowledged is lost.
func TestApacheClusterKillLeaderAcksAll(t *testing.T) {
	start := time.Now()
	c := NewApacheCluster(t, 3, ApacheOpts{})
	t.Logf("3-node cluster ready in %v", time.Since(start).Round(time.Millisecond))
	p := idempotentProducer(t, c.Addrs()...)
	produceN(t, p, "t.cluster", "a", 30)
	leader, err := c.Leader("t.cluster", 0)
	if err != nil {
		t.Fatal(err)
	}
	c.Node(leader).Kill()
	start = time.Now()
	defer func() { t.Logf("cleanup starts after %v", time.Since(start).Round(time.Millisecond)) }()
	produceN(t, p, "t.cluster", "b", 30) // 2 of 3 in sync: acks=all still succeeds
	t.Logf("node %d (leader of partition 0) killed; 30 acks=all writes in %v", leader, time.Since(start).Round(time.Millisecond))
	if err := c.Node(leader).Start(); err != nil {
		t.Fatalf("restart node %d: %v", leader, err)
	}
	t.Logf("node %d restarted in %v", leader, time.Since(start).Round(time.Millisecond))
	start = time.Now()
	// SIGSTOP: the controller fences the frozen node once its session times out; SIGCONT brings
	// it back. (Producing while a node is frozen waits out sarama's 30 s read timeout: chaos suite.)
	other := leader%3 + 1
	c.Node(other).Pause()
	waitListed(t, c.Node(leader).Addr(), other, false)
	c.Node(other).Resume()
	waitListed(t, c.Node(leader).Addr(), other, true)
	t.Logf("node %d paused until fenced, resumed until back: %v", other, time.Since(start).Round(time.Millisecond))
	produceN(t, p, "t.cluster", "c", 10)
	start = time.Now()
	expectValues(t, c.Node(leader).Addr(), "t.cluster", 70)
	t.Logf("read back in %v", time.Since(start).Round(time.Millisecond))
}

// waitListed waits until the metadata served at addr lists broker id (listed) or no longer does.
func waitListed(t *testing.T, addr string, id int, listed bool) {
	t.Helper()
	if err := harness.Until(30*time.Second, 100*time.Millisecond, func() error {
		err := metadataReady(addr, id)
		if (err == nil) == listed {
			return nil
		}
		return fmt.Errorf("metadata answer: %v", err)
	}); err != nil {
		t.Fatalf("node %d listed=%v not reached: %v", id, listed, err)
	}
}
