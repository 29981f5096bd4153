package testenv

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv/harness"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Apache Kafka in the test environment: the real broker (4.4, KRaft, combined broker+controller)
// run from a lib dir that Maven resolves from kafka/pom.xml. The lib dir is built once per machine
// and pom content (cached under the user cache dir, ~/.cache/outboxd/kafka-lib-<hash>); Maven's
// own ~/.m2 caches the downloads.

//go:embed kafka/pom.xml
var kafkaPOM []byte

// ApacheKafkaVersion is the Kafka release kafka/pom.xml resolves.
const ApacheKafkaVersion = "4.4.0"

var libOnce struct {
	sync.Mutex
	dir string
}

// KafkaLibDir returns a directory whose lib/ holds the Apache Kafka broker's jars, building it
// with Maven when this machine has none for the current pom yet. OUTBOXD_KAFKA_LIB names a
// prebuilt directory (with lib/ inside) instead. Safe for concurrent test processes: the build
// runs under a lock file and lands by an atomic rename.
func KafkaLibDir() (string, error) {
	libOnce.Lock()
	defer libOnce.Unlock()
	if libOnce.dir != "" {
		return libOnce.dir, nil
	}
	if d := os.Getenv("OUTBOXD_KAFKA_LIB"); d != "" {
		if _, err := os.Stat(filepath.Join(d, "lib", "kafka_2.13-"+ApacheKafkaVersion+".jar")); err != nil {
			return "", fmt.Errorf("OUTBOXD_KAFKA_LIB=%s has no lib/kafka_2.13-%s.jar: unset it or point it at a built dir: %w", d, ApacheKafkaVersion, err)
		}
		libOnce.dir = d
		return d, nil
	}
	d, err := kafkaLib.dir()
	if err != nil {
		return "", err
	}
	libOnce.dir = d
	return d, nil
}

var kafkaLib = mavenLib{name: "kafka-lib", pom: kafkaPOM, pomPath: "internal/testenv/kafka/pom.xml", what: "Apache Kafka " + ApacheKafkaVersion,
	ready: func(dir string) error {
		_, err := os.Stat(filepath.Join(dir, "lib", "kafka_2.13-"+ApacheKafkaVersion+".jar"))
		return err
	}}

// ApacheKafka is one Apache Kafka node (combined broker+controller, KRaft) on loopback ports,
// with its data and logs in Dir. It can be stopped, killed and started again on the same ports
// and data.
type ApacheKafka struct {
	Port           int    // client (PLAINTEXT) port on 127.0.0.1
	ControllerPort int    // KRaft controller port
	NodeID         int    // node.id
	Dir            string // config, data (data/) and log (server.log)

	lib string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	logf *os.File
}

// ApacheOpts tunes StartApacheKafka.
type ApacheOpts struct {
	// Props are extra server.properties lines ("key=value"), appended after the defaults.
	Props []string
}

// StartApacheKafka formats and starts a single Apache Kafka node on free ports in a new temp dir,
// and waits until it answers a Metadata request. Topics are auto-created with 3 partitions, as on
// the kfake Broker. Call Destroy when done.
func StartApacheKafka(opts ApacheOpts) (*ApacheKafka, error) {
	return retryPortTaken(func() (*ApacheKafka, error) { return startApacheKafka(opts) })
}

// retryPortTaken retries start (up to 3 times, on new ports) when a port that was free a moment
// ago was taken by another process before the JVM bound it.
func retryPortTaken[T any](start func() (T, error)) (T, error) {
	for attempt := 1; ; attempt++ {
		v, err := start()
		if err == nil || attempt == 3 || !strings.Contains(err.Error(), "Address already in use") {
			return v, err
		}
	}
}

func startApacheKafka(opts ApacheOpts) (*ApacheKafka, error) {
	lib, err := KafkaLibDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "outboxd-kafka-")
	if err != nil {
		return nil, err
	}
	k := &ApacheKafka{NodeID: 1, Dir: dir, lib: lib}
	if k.Port, err = FreePort(); err != nil {
		return nil, err
	}
	if k.ControllerPort, err = FreePort(); err != nil {
		return nil, err
	}
	props := append(k.baseProps(), fmt.Sprintf("controller.quorum.bootstrap.servers=127.0.0.1:%d", k.ControllerPort),
		"default.replication.factor=1", "min.insync.replicas=1",
		"offsets.topic.replication.factor=1", "transaction.state.log.replication.factor=1", "transaction.state.log.min.isr=1",
		"share.coordinator.state.topic.replication.factor=1", "share.coordinator.state.topic.min.isr=1")
	props = append(props, opts.Props...)
	if err := k.format(props, newClusterID(), "--standalone"); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := k.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return k, nil
}

// baseProps are the settings shared by the single node and the cluster nodes.
func (k *ApacheKafka) baseProps() []string {
	return []string{
		"process.roles=broker,controller",
		fmt.Sprintf("node.id=%d", k.NodeID),
		fmt.Sprintf("listeners=PLAINTEXT://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d", k.Port, k.ControllerPort),
		fmt.Sprintf("advertised.listeners=PLAINTEXT://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d", k.Port, k.ControllerPort),
		"inter.broker.listener.name=PLAINTEXT",
		"controller.listener.names=CONTROLLER",
		"listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
		"log.dirs=" + filepath.Join(k.Dir, "data"),
		// As the kfake Broker: auto-created topics with 3 partitions.
		"auto.create.topics.enable=true",
		"num.partitions=3",
		// Test speed, not semantics: few internal partitions, no rebalance delay.
		"offsets.topic.num.partitions=3",
		"transaction.state.log.num.partitions=3",
		"group.initial.rebalance.delay.ms=0",
		"unclean.leader.election.enable=false",
		// A restarted (or killed) node is seen as gone in seconds, not the default 9 s.
		"broker.session.timeout.ms=3000",
		"broker.heartbeat.interval.ms=500",
	}
}

// format writes server.properties and formats the storage (kafka.tools.StorageTool).
func (k *ApacheKafka) format(props []string, clusterID string, flags ...string) error {
	cfg := filepath.Join(k.Dir, "server.properties")
	if err := os.WriteFile(cfg, []byte(strings.Join(props, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(k.Dir, "log4j2.properties"), []byte(log4jProps), 0o644); err != nil {
		return err
	}
	args := append(k.jvmArgs("-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"),
		"kafka.tools.StorageTool", "format", "-t", clusterID, "-c", cfg)
	args = append(args, flags...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "java", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("format Kafka storage in %s (kafka.tools.StorageTool): %w\n%s", k.Dir, err, tail(string(out), 40))
	}
	return nil
}

func (k *ApacheKafka) jvmArgs(extra ...string) []string {
	args := append([]string{"-Dlog4j2.configurationFile=" + filepath.Join(k.Dir, "log4j2.properties"),
		"-Dkafka.logs.dir=" + k.Dir}, extra...)
	return append(args, "-cp", filepath.Join(k.lib, "lib")+"/*")
}

// log4jProps logs INFO to stdout (the node's server.log); request and state-change noise at WARN.
const log4jProps = `status = warn
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = STDOUT
logger.req.name = kafka.request.logger
logger.req.level = warn
logger.state.name = state.change.logger
logger.state.level = warn
logger.log.name = org.apache.kafka.storage.internals.log
logger.log.level = warn
logger.cleaner.name = kafka.log.LogCleaner
logger.cleaner.level = warn
`

// newClusterID is a random Kafka Uuid (base64url of 16 bytes, no padding), as StorageTool random-uuid
// makes, without a JVM start.
func newClusterID() string {
	for {
		var b [16]byte
		rand.Read(b[:])
		s := base64.RawURLEncoding.EncodeToString(b[:])
		if s[0] != '-' {
			return s
		}
	}
}

// Addr is the bootstrap address host:port.
func (k *ApacheKafka) Addr() string { return fmt.Sprintf("127.0.0.1:%d", k.Port) }

// Start starts the node (again) on its ports and data, and waits until it serves Metadata.
func (k *ApacheKafka) Start() error {
	if err := k.spawn(); err != nil {
		return err
	}
	if err := k.waitReady(90 * time.Second); err != nil {
		k.Kill()
		return err
	}
	return nil
}

// spawn starts the JVM without waiting for readiness.
func (k *ApacheKafka) spawn() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cmd != nil {
		return fmt.Errorf("kafka node %d is already running", k.NodeID)
	}
	logf, err := os.OpenFile(filepath.Join(k.Dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	args := append(k.jvmArgs("-Xms512m", "-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20"),
		"kafka.Kafka", filepath.Join(k.Dir, "server.properties"))
	cmd := exec.Command("java", args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start the Kafka broker (java kafka.Kafka): %w", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	k.cmd, k.done, k.logf = cmd, done, logf
	return nil
}

// waitReady waits until the node answers Metadata that lists itself (registered, unfenced) and
// a controller.
func (k *ApacheKafka) waitReady(within time.Duration) error {
	k.mu.Lock()
	done := k.done
	k.mu.Unlock()
	err := harness.Until(within, 100*time.Millisecond, func() error {
		select {
		case <-done:
			return harness.Final(fmt.Errorf("kafka node %d exited during start", k.NodeID))
		default:
		}
		return metadataReady(k.Addr(), k.NodeID)
	})
	if err != nil {
		return fmt.Errorf("kafka node %d did not serve Metadata: %w; log:\n%s", k.NodeID, err, k.Log())
	}
	return nil
}

// metadataReady sends one Metadata request to addr and checks that it lists broker id and a
// controller.
func metadataReady(addr string, id int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DialTimeout(time.Second), kgo.RequestRetries(0))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	for _, b := range resp.Brokers {
		if int(b.NodeID) == id && resp.ControllerID >= 0 {
			return nil
		}
	}
	return fmt.Errorf("metadata lists %d brokers, not yet node %d (controller %d)", len(resp.Brokers), id, resp.ControllerID)
}

// Running reports whether the JVM is up.
func (k *ApacheKafka) Running() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cmd != nil
}

// Stop shuts the node down with SIGTERM (a controlled shutdown) and waits; after 60 s it kills it.
func (k *ApacheKafka) Stop() { k.end(syscall.SIGTERM, 60*time.Second) }

// Kill sends SIGKILL and waits for the JVM to exit (crash simulation).
func (k *ApacheKafka) Kill() { k.end(syscall.SIGKILL, 0) }

// Pause freezes the JVM with SIGSTOP (a zombie or a long GC pause); Resume continues it.
func (k *ApacheKafka) Pause() { k.signal(syscall.SIGSTOP) }

// Resume sends SIGCONT to a paused node.
func (k *ApacheKafka) Resume() { k.signal(syscall.SIGCONT) }

func (k *ApacheKafka) signal(sig syscall.Signal) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cmd != nil {
		_ = syscall.Kill(-k.cmd.Process.Pid, sig)
	}
}

func (k *ApacheKafka) end(sig syscall.Signal, grace time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cmd == nil {
		return
	}
	endGroup(k.cmd.Process.Pid, k.done, sig, grace)
	k.logf.Close()
	k.cmd = nil
}

// Destroy stops the node and removes its directory.
func (k *ApacheKafka) Destroy() {
	k.Stop()
	os.RemoveAll(k.Dir)
}

// Log returns the last 300 lines of the node's log, for test failure output.
func (k *ApacheKafka) Log() string {
	b, _ := os.ReadFile(filepath.Join(k.Dir, "server.log"))
	return tail(string(b), 300)
}

func tail(s string, lines int) string {
	parts := strings.Split(s, "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

// NewApacheKafka starts a single node for a test and destroys it at the end. It fails (CI) or
// skips (elsewhere) when the broker cannot be built or started; on failure it logs the broker log.
func NewApacheKafka(t testing.TB, opts ApacheOpts) *ApacheKafka {
	t.Helper()
	k, err := StartApacheKafka(opts)
	if err != nil {
		Unavailable(t, "Apache Kafka "+ApacheKafkaVersion, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("Apache Kafka log (%s):\n%s", k.Dir, k.Log())
		}
		k.Destroy()
	})
	return k
}
