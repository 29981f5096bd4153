package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Which Kafka the end-to-end tests run against, and a node shared by the tests of one process.

// KafkaEnv is the environment variable that picks the broker of the end-to-end tests.
const KafkaEnv = "OUTBOXD_TEST_KAFKA"

// Broker kinds named by OUTBOXD_TEST_KAFKA.
const (
	KindKfake  = "kfake"  // the in-process Kafka-protocol fake (the default)
	KindApache = "apache" // Apache Kafka 4.4, one KRaft node
	KindBoth   = "both"   // the tests run once on each
)

// KafkaUnderTest parses OUTBOXD_TEST_KAFKA: kfake (also when unset or empty), apache or both.
func KafkaUnderTest() (string, error) {
	return ParseKafkaKind(os.Getenv(KafkaEnv))
}

// ParseKafkaKind parses a value of OUTBOXD_TEST_KAFKA.
func ParseKafkaKind(v string) (string, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", KindKfake:
		return KindKfake, nil
	case KindApache:
		return KindApache, nil
	case KindBoth:
		return KindBoth, nil
	}
	return "", fmt.Errorf("%s=%q: want kfake, apache or both", KafkaEnv, v)
}

var shared struct {
	sync.Mutex
	k   *ApacheKafka
	err error
}

// SharedApacheKafka returns this process's shared Apache Kafka node, starting it on first use
// (one JVM start for a whole test binary instead of one per test), with every non-internal topic
// deleted so the caller starts from an empty broker as on a fresh one. Internal topics
// (__consumer_offsets, __transaction_state) stay: transactional ids of earlier tests are known
// to the coordinator, as after any restart of outboxd. Tests that stop the broker, or need
// other broker settings, must start their own node (NewApacheKafka), or stop and start the shared
// one again before they end (a node found stopped is started again). Call StopSharedApacheKafka
// at the end of the process (TestMain).
func SharedApacheKafka(t testing.TB) *ApacheKafka {
	t.Helper()
	shared.Lock()
	defer shared.Unlock()
	if shared.k == nil && shared.err == nil {
		shared.k, shared.err = StartApacheKafka(ApacheOpts{})
		if shared.err == nil {
			watchParent(shared.k)
		}
	}
	if shared.err != nil {
		Unavailable(t, "Apache Kafka "+ApacheKafkaVersion+" (shared node)", shared.err)
	}
	k := shared.k
	if !k.Running() { // a test stopped it and failed before starting it again
		if err := k.Start(); err != nil {
			t.Fatalf("restart the shared Apache Kafka node: %v", err)
		}
	}
	if err := DeleteAllTopics(k.Addr(), 60*time.Second); err != nil {
		t.Fatalf("reset the shared Apache Kafka node: %v; log:\n%s", err, k.Log())
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("shared Apache Kafka log (%s, last lines):\n%s", k.Dir, tail(k.Log(), 80))
		}
	})
	return k
}

// StopSharedApacheKafka destroys the shared node, if one was started.
func StopSharedApacheKafka() {
	shared.Lock()
	defer shared.Unlock()
	if shared.k != nil {
		shared.k.Destroy()
		shared.k = nil
	}
}

// watchParent starts a watchdog shell that SIGKILLs the node's JVM when this process dies
// without StopSharedApacheKafka (a test binary killed by its -timeout panic), so no JVM outlives
// its test run. It finds the JVM by its server.properties path, which is unique to the node.
func watchParent(k *ApacheKafka) {
	pid := jvmPID(filepath.Join(k.Dir, "server.properties"))
	if pid == 0 {
		return
	}
	script := fmt.Sprintf(`while kill -0 %d 2>/dev/null; do sleep 2; done; kill -9 %d 2>/dev/null; rm -rf '%s'`, os.Getpid(), pid, k.Dir)
	cmd := exec.Command("/bin/sh", "-c", script)
	if cmd.Start() == nil {
		go cmd.Wait()
	}
}

// jvmPID returns the pid of the java process whose command line contains arg (0: none).
func jvmPID(arg string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), "kafka.Kafka\x00"+arg) {
			return pid
		}
	}
	return 0
}

// DeleteAllTopics deletes every topic of the broker at addr whose name does not start with "__"
// and waits until Metadata lists none of them.
func DeleteAllTopics(addr string, within time.Duration) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		names, err := userTopics(ctx, cl)
		if err != nil {
			return fmt.Errorf("list topics: %w", err)
		}
		if len(names) == 0 {
			return nil
		}
		req := kmsg.NewPtrDeleteTopicsRequest()
		req.TimeoutMillis = 30000
		for _, n := range names {
			n := n
			req.TopicNames = append(req.TopicNames, n)
			rt := kmsg.NewDeleteTopicsRequestTopic()
			rt.Topic = &n
			req.Topics = append(req.Topics, rt)
		}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return fmt.Errorf("delete topics %v: %w", names, err)
		}
		for _, rt := range resp.Topics {
			if e := kerr.ErrorForCode(rt.ErrorCode); e != nil && e != kerr.UnknownTopicOrPartition {
				return fmt.Errorf("delete topic %v: %w", rt.Topic, e)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topics %v still listed after %v", names, within)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func userTopics(ctx context.Context, cl *kgo.Client) ([]string, error) {
	resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl) // nil Topics: all topics
	if err != nil {
		return nil, err
	}
	var names []string
	for _, t := range resp.Topics {
		if t.Topic != nil && !strings.HasPrefix(*t.Topic, "__") {
			names = append(names, *t.Topic)
		}
	}
	return names, nil
}
