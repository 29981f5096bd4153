package testenv

import (
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Broker is an in-process Kafka-protocol broker (kfake) served over TCP on a fixed port, so that
// it can be stopped and restarted on the same address (state survives when Dir is set).
type Broker struct {
	Port int
	Dir  string // persistence directory; empty = state lost on Stop
	Opts []kfake.Opt

	mu sync.Mutex
	c  *kfake.Cluster
}

// StartBroker starts a single-node broker on a free port with auto topic creation
// (3 partitions per new topic). Extra kfake options are appended.
//
// A port taken between FreePort and the bind (by a process outside FreePort's reservations) is
// retried on a fresh port, up to three times; a restart (Start) keeps its port.
func StartBroker(opts ...kfake.Opt) (*Broker, error) {
	for attempt := 1; ; attempt++ {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		b := &Broker{Port: port, Opts: opts}
		err = b.Start()
		if err == nil || attempt == 3 || !errors.Is(err, syscall.EADDRINUSE) {
			return b, err
		}
	}
}

// Start (re)starts the broker on its port.
func (b *Broker) Start() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	opts := []kfake.Opt{kfake.Ports(b.Port), kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(3)}
	if b.Dir != "" {
		opts = append(opts, kfake.DataDir(b.Dir), kfake.SyncWrites())
	}
	opts = append(opts, b.Opts...)
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return fmt.Errorf("start kfake broker on port %d: %w", b.Port, err)
	}
	b.c = c
	return nil
}

// Cluster returns the running kfake cluster (for fault injection), or nil when stopped.
func (b *Broker) Cluster() *kfake.Cluster {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.c
}

// Addr is the bootstrap address host:port.
func (b *Broker) Addr() string { return fmt.Sprintf("127.0.0.1:%d", b.Port) }

// Stop closes the broker (clients see connection refused until Start).
func (b *Broker) Stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.c != nil {
		b.c.Close()
		b.c = nil
	}
}

// NewBroker starts a broker for a test and stops it at the end.
func NewBroker(t testing.TB, opts ...kfake.Opt) *Broker {
	t.Helper()
	b, err := StartBroker(opts...)
	if err != nil {
		Unavailable(t, "kfake broker", err)
	}
	t.Cleanup(b.Stop)
	return b
}
