package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/internal/testenv"
)

// The broker of the end-to-end tests: kfake or Apache Kafka 4.4, picked by OUTBOXD_TEST_KAFKA
// (kfake, apache or both; unset: kfake). On Apache Kafka the tests share one node per test
// process; every test starts with its non-internal topics deleted, so it sees the broker as a
// fresh one (testenv.SharedApacheKafka). A test that stops the broker or needs other broker
// settings gets a private node (newRestartableBroker, newPrivateApache).

// kafkaKind is the broker this test process runs against: testenv.KindKfake or KindApache.
var kafkaKind = testenv.KindKfake

// setKafkaKind parses OUTBOXD_TEST_KAFKA; for both it returns true: the caller runs the tests on
// kfake and then again, in a child process, on Apache Kafka.
func setKafkaKind() (both bool, err error) {
	k, err := testenv.KafkaUnderTest()
	if err != nil {
		return false, err
	}
	if k == testenv.KindBoth {
		kafkaKind = testenv.KindKfake
		return true, nil
	}
	kafkaKind = k
	return false, nil
}

// runOnApacheToo runs this test binary again with OUTBOXD_TEST_KAFKA=apache and the built
// outboxd (no second build), streaming its output; it returns the child's exit code.
func runOnApacheToo() int {
	fmt.Fprintf(os.Stderr, "=== %s=both: the same tests on Apache Kafka %s\n", testenv.KafkaEnv, testenv.ApacheKafkaVersion)
	cmd := exec.Command(os.Args[0], os.Args[1:]...)
	cmd.Env = append(os.Environ(), testenv.KafkaEnv+"="+testenv.KindApache, "OUTBOXD_TEST_BIN="+binPath)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		fmt.Fprintf(os.Stderr, "run the tests on Apache Kafka: %v\n", err)
		return 1
	}
	return 0
}

func onApache() bool { return kafkaKind == testenv.KindApache }

// kfakeOnly skips the test on Apache Kafka: it needs a kfake fault hook (reason names it).
func kfakeOnly(t *testing.T, reason string) {
	t.Helper()
	if onApache() {
		t.Skipf("kfake only: %s", reason)
	}
}

// apacheOnly skips the test on kfake: it needs what only a real broker does (reason says what).
func apacheOnly(t *testing.T, reason string) {
	t.Helper()
	if !onApache() {
		t.Skipf("Apache Kafka only (%s=apache): %s", testenv.KafkaEnv, reason)
	}
}

// apacheNodes maps the port of every Apache node a test runs on to the node (its log, its
// process), for the env's broker handle, which only knows the address.
var apacheNodes sync.Map

// newTestBroker is the broker of one test: a fresh kfake broker, or the shared Apache Kafka node
// with its topics deleted. On Apache Kafka the handle has no kfake Cluster and must not be
// stopped (use newRestartableBroker).
func newTestBroker(t *testing.T) *testenv.Broker {
	t.Helper()
	if onApache() {
		k := testenv.SharedApacheKafka(t)
		apacheNodes.Store(k.Port, k)
		return &testenv.Broker{Port: k.Port}
	}
	return testenv.NewBroker(t)
}

// newPrivateApache starts an Apache Kafka node of the test's own (opts: other broker settings).
func newPrivateApache(t *testing.T, opts testenv.ApacheOpts) (*testenv.ApacheKafka, *testenv.Broker) {
	t.Helper()
	k := testenv.NewApacheKafka(t, opts)
	apacheNodes.Store(k.Port, k)
	return k, &testenv.Broker{Port: k.Port}
}

// apacheNode returns the Apache node at the broker's address (nil on kfake).
func apacheNode(b *testenv.Broker) *testenv.ApacheKafka {
	if v, ok := apacheNodes.Load(b.Port); ok {
		return v.(*testenv.ApacheKafka)
	}
	return nil
}

// brokerGone takes the env's broker away for the rest of the test: kfake closes (connections
// refused); an Apache node is frozen with SIGSTOP (requests unanswered), and continues at the
// end of the test (the shared node serves the next tests).
func (e *env) brokerGone() {
	if k := apacheNode(e.broker); k != nil {
		k.Pause()
		e.t.Cleanup(k.Resume)
		return
	}
	e.broker.Stop()
}

// restartable is a broker the test stops and starts again with its state kept: kfake with a
// data dir, or a private Apache Kafka node.
type restartable struct {
	t *testing.T
	b *testenv.Broker
	k *testenv.ApacheKafka // nil on kfake
}

// newRestartableBroker returns a broker the test may stop and start again: on Apache Kafka the
// shared node (a restart costs less than a new node's start), started again at the end of the
// test if the test left it stopped.
func newRestartableBroker(t *testing.T) *restartable {
	t.Helper()
	if onApache() {
		b := newTestBroker(t)
		k := apacheNode(b)
		t.Cleanup(func() {
			if !k.Running() {
				if err := k.Start(); err != nil {
					t.Errorf("start the shared Apache Kafka node again: %v", err)
				}
			}
		})
		return &restartable{t: t, b: b, k: k}
	}
	b := testenv.NewBroker(t)
	b.Stop()
	b.Dir = t.TempDir()
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	return &restartable{t: t, b: b}
}

// stop is a clean shutdown (Apache: SIGTERM, a controlled shutdown).
func (r *restartable) stop() {
	if r.k != nil {
		t0 := time.Now()
		r.k.Stop()
		r.t.Logf("Apache Kafka node stopped (SIGTERM) in %v", time.Since(t0).Round(time.Millisecond))
		return
	}
	r.b.Stop()
}

// kill is a crash (Apache: SIGKILL of the JVM; kfake has no crash, it closes).
func (r *restartable) kill() {
	if r.k != nil {
		r.k.Kill()
		return
	}
	r.b.Stop()
}

func (r *restartable) start(t *testing.T) {
	t.Helper()
	t0 := time.Now()
	var err error
	if r.k != nil {
		err = r.k.Start()
	} else {
		err = r.b.Start()
	}
	if err != nil {
		t.Fatalf("restart the broker: %v", err)
	}
	if r.k != nil {
		t.Logf("Apache Kafka node restarted in %v", time.Since(t0).Round(time.Millisecond))
	}
}

// saramaAdmin is an admin client for the env's broker.
func (e *env) admin() sarama.ClusterAdmin { return clusterAdmin(e.t, e.broker.Addr()) }

// createTopic creates topic (3 partitions, one replica) with the given topic configs.
func createTopic(t *testing.T, a sarama.ClusterAdmin, topic string, cfg map[string]string) {
	t.Helper()
	entries := map[string]*string{}
	for k, v := range cfg {
		entries[k] = sp(v)
	}
	if err := a.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 3, ReplicationFactor: 1, ConfigEntries: entries}, false); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

// setTopicConfig sets one config of a topic (IncrementalAlterConfigs; value nil deletes it).
func setTopicConfig(t *testing.T, a sarama.ClusterAdmin, topic, key string, value *string) {
	t.Helper()
	op := sarama.IncrementalAlterConfigsOperationSet
	if value == nil {
		op = sarama.IncrementalAlterConfigsOperationDelete
	}
	if err := a.IncrementalAlterConfig(sarama.TopicResource, topic,
		map[string]sarama.IncrementalAlterConfigsEntry{key: {Operation: op, Value: value}}, false); err != nil {
		t.Fatalf("set %s of topic %s: %v", key, topic, err)
	}
}

// stall holds produce requests to a topic unanswered or refused until release: on kfake a fault
// hook fails them with NOT_ENOUGH_REPLICAS (retriable); on Apache Kafka the broker's JVM is
// frozen (SIGSTOP: a hung broker, a long GC pause), so requests to every topic hang until it
// continues. (A single Apache node cannot refuse with NOT_ENOUGH_REPLICAS: Kafka 4 caps the
// effective min.insync.replicas at the replication factor.) While an Apache node is frozen,
// nothing can read it either: read Kafka after release.
type stall struct {
	// reached reports that outboxd has what it must hold back: on kfake the fault refused a
	// produce request; on Apache Kafka the walsender sent outboxd the whole WAL written so far.
	reached func() bool
	release func()
}

// stallProduce stalls produce requests to topic (on Apache Kafka: to the whole broker).
func (e *env) stallProduce(topic string) *stall {
	e.t.Helper()
	if !onApache() {
		h := e.broker.Cluster().Fault(kfakeNER(topic))
		return &stall{reached: func() bool { return h.Hits() > 0 }, release: h.Remove}
	}
	k := apacheNode(e.broker)
	c := e.conn()
	k.Pause()
	e.t.Cleanup(k.Resume)
	return &stall{
		reached: func() bool {
			var caughtUp *bool
			c.QueryRow(context.Background(), `SELECT bool_or(sent_lsn >= pg_current_wal_lsn()) FROM pg_stat_replication`).Scan(&caughtUp)
			return caughtUp != nil && *caughtUp
		},
		release: k.Resume,
	}
}

// kfakeNER is the kfake fault hook that fails every produce to topic with NOT_ENOUGH_REPLICAS.
func kfakeNER(topic string) kfake.Fault {
	return kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.NotEnoughReplicas, Count: -1}
}
