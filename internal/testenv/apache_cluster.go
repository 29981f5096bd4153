package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ApacheCluster is n Apache Kafka nodes, each a combined broker+controller, with a static
// controller quorum of all of them, replication factor n by default and min.insync.replicas 2
// (1 for a single node). Each node can be stopped, killed, paused and restarted on its own.
type ApacheCluster struct {
	Nodes []*ApacheKafka
	Dir   string
}

// StartApacheCluster formats and starts n nodes on free loopback ports and waits until every one
// of them is listed in the metadata. Call Destroy when done.
func StartApacheCluster(n int, opts ApacheOpts) (*ApacheCluster, error) {
	return retryPortTaken(func() (*ApacheCluster, error) { return startApacheCluster(n, opts) })
}

func startApacheCluster(n int, opts ApacheOpts) (*ApacheCluster, error) {
	lib, err := KafkaLibDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "outboxd-kafka-cluster-")
	if err != nil {
		return nil, err
	}
	c := &ApacheCluster{Dir: dir}
	var voters []string
	for i := 1; i <= n; i++ {
		k := &ApacheKafka{NodeID: i, Dir: filepath.Join(dir, fmt.Sprintf("n%d", i)), lib: lib}
		if err := os.MkdirAll(k.Dir, 0o755); err != nil {
			return nil, err
		}
		if k.Port, err = FreePort(); err != nil {
			return nil, err
		}
		if k.ControllerPort, err = FreePort(); err != nil {
			return nil, err
		}
		voters = append(voters, fmt.Sprintf("%d@127.0.0.1:%d", i, k.ControllerPort))
		c.Nodes = append(c.Nodes, k)
	}
	isr := min(2, n)
	id := newClusterID()
	for _, k := range c.Nodes {
		props := append(k.baseProps(), "controller.quorum.voters="+strings.Join(voters, ","),
			fmt.Sprintf("default.replication.factor=%d", n), fmt.Sprintf("min.insync.replicas=%d", isr),
			fmt.Sprintf("offsets.topic.replication.factor=%d", n),
			fmt.Sprintf("transaction.state.log.replication.factor=%d", n), fmt.Sprintf("transaction.state.log.min.isr=%d", isr),
			fmt.Sprintf("share.coordinator.state.topic.replication.factor=%d", n), fmt.Sprintf("share.coordinator.state.topic.min.isr=%d", isr),
			"replica.lag.time.max.ms=5000")
		props = append(props, opts.Props...)
		if err := k.format(props, id); err != nil { // static quorum: format takes no quorum flag
			os.RemoveAll(dir)
			return nil, err
		}
	}
	// Start all JVMs first: a node is ready only once the quorum has a leader.
	for _, k := range c.Nodes {
		if err := k.spawn(); err != nil {
			c.Destroy()
			return nil, err
		}
	}
	for _, k := range c.Nodes {
		if err := k.waitReady(120 * time.Second); err != nil {
			c.Destroy()
			return nil, err
		}
	}
	return c, nil
}

// Addrs is the bootstrap list of every node.
func (c *ApacheCluster) Addrs() []string {
	var out []string
	for _, k := range c.Nodes {
		out = append(out, k.Addr())
	}
	return out
}

// Node returns the node with node.id id (1-based).
func (c *ApacheCluster) Node(id int) *ApacheKafka { return c.Nodes[id-1] }

// Leader returns the node.id of the leader of topic's partition, asking the running nodes.
func (c *ApacheCluster) Leader(topic string, partition int32) (int, error) {
	var addrs []string
	for _, k := range c.Nodes {
		if k.Running() {
			addrs = append(addrs, k.Addr())
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		return 0, err
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
		return 0, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.Partition == partition && p.ErrorCode == 0 {
				return int(p.Leader), nil
			}
		}
	}
	return 0, fmt.Errorf("no leader for %s/%d in the metadata", topic, partition)
}

// Destroy kills every node and removes the cluster's directory. (Kill, not Stop: a controlled
// shutdown of the last nodes of a quorum waits for a quorum that is going away.)
func (c *ApacheCluster) Destroy() {
	var wg sync.WaitGroup
	for _, k := range c.Nodes {
		wg.Add(1)
		go func() { defer wg.Done(); k.Kill() }()
	}
	wg.Wait()
	os.RemoveAll(c.Dir)
}

// Log returns every node's log tail.
func (c *ApacheCluster) Log() string {
	var b strings.Builder
	for _, k := range c.Nodes {
		fmt.Fprintf(&b, "--- node %d (%s) ---\n%s\n", k.NodeID, k.Addr(), k.Log())
	}
	return b.String()
}

// NewApacheCluster starts an n-node cluster for a test and destroys it at the end. It fails (CI)
// or skips (elsewhere) when the brokers cannot be built or started.
func NewApacheCluster(t testing.TB, n int, opts ApacheOpts) *ApacheCluster {
	t.Helper()
	c, err := StartApacheCluster(n, opts)
	if err != nil {
		Unavailable(t, fmt.Sprintf("Apache Kafka %s cluster of %d", ApacheKafkaVersion, n), err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("Apache Kafka cluster logs:\n%s", c.Log())
		}
		c.Destroy()
	})
	return c
}
