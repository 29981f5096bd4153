package kafka

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/eapache/go-resiliency/breaker"
)

// Vectors from Kafka's own UtilsTest.testMurmur2
// (clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java).
func TestMurmur2KafkaVectors(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int32
	}{
		{"21", -973932308},
		{"foobar", -790332482},
		{"a-little-bit-long-string", -985981536},
		{"a-little-bit-longer-string", -1486304829},
		{"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
		{"abc", 479470107},
	} {
		if got := Murmur2([]byte(c.in)); got != c.want {
			t.Errorf("Murmur2(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

func TestPartitionFor(t *testing.T) {
	for _, c := range []struct {
		key  string
		n    int32
		want int32
	}{
		// toPositive(-973932308) = 1173551340
		{"21", 1, 0},
		{"21", 3, 1173551340 % 3},
		{"21", 7, 1173551340 % 7},
		// toPositive(479470107) = 479470107
		{"abc", 12, 479470107 % 12},
		// toPositive(-790332482) = 1357151166
		{"foobar", 100, 1357151166 % 100},
	} {
		if got := PartitionFor([]byte(c.key), c.n); got != c.want {
			t.Errorf("PartitionFor(%q, %d) = %d, want %d", c.key, c.n, got, c.want)
		}
	}
	// Every partition index stays in range for many keys (no negative results).
	for i := range 10000 {
		if p := PartitionFor([]byte(fmt.Sprint(i)), 7); p < 0 || p >= 7 {
			t.Fatalf("PartitionFor out of range: %d", p)
		}
	}
}

func TestJavaPartitionerNilKey(t *testing.T) {
	p := NewJavaPartitioner("t")
	dp := p.(sarama.DynamicConsistencyPartitioner)
	keyed := &sarama.ProducerMessage{Key: sarama.StringEncoder("abc")}
	if got, _ := p.Partition(keyed, 12); got != PartitionFor([]byte("abc"), 12) {
		t.Fatalf("keyed partition %d", got)
	}
	if !dp.MessageRequiresConsistency(keyed) || dp.MessageRequiresConsistency(&sarama.ProducerMessage{}) {
		t.Fatal("consistency: keyed records need all partitions, nil-key records do not")
	}
	seen := map[int32]bool{}
	for range 200 {
		got, err := p.Partition(&sarama.ProducerMessage{}, 4)
		if err != nil || got < 0 || got >= 4 {
			t.Fatalf("nil key partition %d %v", got, err)
		}
		seen[got] = true
	}
	if len(seen) < 2 {
		t.Fatalf("nil keys should spread over partitions, got %v", seen)
	}
}

func TestValidTopicName(t *testing.T) {
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"outbox.event.Order", true},
		{"a", true},
		{"A-z_0.9", true},
		{strings.Repeat("x", 249), true},
		{strings.Repeat("x", 250), false},
		{"", false},
		{".", false},
		{"..", false},
		{"...", true},
		{"has space", false},
		{"slash/topic", false},
		{"ümlaut", false},
		{"colon:x", false},
	} {
		err := ValidTopicName(c.name)
		if (err == nil) != c.ok {
			t.Errorf("ValidTopicName(%q) = %v, want ok=%v", c.name, err, c.ok)
		}
		if err != nil {
			if perm, reason := Classify(err); !perm || reason != "invalid_topic" {
				t.Errorf("Classify(ValidTopicName(%q)) = %v %q", c.name, perm, reason)
			}
		}
	}
}

func TestClassify(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("layer: %w", err) }
	pe := func(err error) error { return &sarama.ProducerError{Msg: &sarama.ProducerMessage{}, Err: err} }
	for _, c := range []struct {
		name   string
		err    error
		perm   bool
		reason string
	}{
		{"message too large", sarama.ErrMessageSizeTooLarge, true, "record_too_large"},
		{"record list too large", pe(sarama.ErrMessageSetSizeTooLarge), true, "record_too_large"},
		{"client-side too large", &RecordTooLargeError{Size: 10, Limit: 5}, true, "record_too_large"},
		{"invalid topic", wrap(sarama.ErrInvalidTopic), true, "invalid_topic"},
		{"topic authz", pe(sarama.ErrTopicAuthorizationFailed), true, "topic_authorization_failed"},
		{"metadata topic authz (joined)", errors.Join(fmt.Errorf("t: %w", sarama.ErrTopicAuthorizationFailed)), true, "topic_authorization_failed"},
		{"invalid record", sarama.ErrInvalidRecord, true, "invalid_record"},
		{"delivery error", &DeliveryError{Topic: "t", Err: sarama.ErrInvalidRecord}, true, "invalid_record"},
		{"unknown topic", sarama.ErrUnknownTopicOrPartition, false, "unknown_topic_or_partition"},
		{"leader not available", pe(sarama.ErrLeaderNotAvailable), false, "leader_not_available"},
		{"not leader", sarama.ErrNotLeaderForPartition, false, "leader_not_available"},
		{"not enough replicas", sarama.ErrNotEnoughReplicas, false, "not_enough_replicas"},
		{"not enough replicas after append", sarama.ErrNotEnoughReplicasAfterAppend, false, "not_enough_replicas"},
		{"request timed out", sarama.ErrRequestTimedOut, false, "timeout"},
		{"network exception", sarama.ErrNetworkException, false, "broker_unreachable"},
		{"out of order sequence", sarama.ErrOutOfOrderSequenceNumber, false, "producer_state"},
		{"out of brokers", wrap(sarama.ErrOutOfBrokers), false, "broker_unreachable"},
		{"sarama wrap out of brokers", sarama.Wrap(sarama.ErrOutOfBrokers, errors.New("dial")), false, "broker_unreachable"},
		{"breaker open", pe(breaker.ErrBreakerOpen), false, "broker_unreachable"},
		{"not connected", sarama.ErrNotConnected, false, "broker_unreachable"},
		{"conn refused", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, false, "broker_unreachable"},
		{"conn reset", wrap(syscall.ECONNRESET), false, "broker_unreachable"},
		{"net timeout", &net.OpError{Op: "read", Err: timeoutErr{}}, false, "timeout"},
		{"aborted", &DeliveryError{Err: ErrAborted}, false, "shutdown"},
		{"cluster authz", sarama.ErrClusterAuthorizationFailed, false, "cluster_authorization_failed"},
		{"other kafka error", sarama.ErrUnknown, false, "kafka_error"},
		{"unknown", errors.New("something"), false, "unknown"},
	} {
		t.Run(c.name, func(t *testing.T) {
			perm, reason := Classify(c.err)
			if perm != c.perm || reason != c.reason {
				t.Fatalf("Classify(%v) = %v, %q; want %v, %q", c.err, perm, reason, c.perm, c.reason)
			}
		})
	}
	if perm, reason := Classify(nil); perm || reason != "" {
		t.Fatal("Classify(nil)")
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestSaramaConfigIsDurable(t *testing.T) {
	sc, err := Config{Brokers: []string{"127.0.0.1:9092"}, Compression: "zstd"}.SaramaConfig()
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.Validate(); err != nil {
		t.Fatalf("sarama Validate: %v", err)
	}
	if err := ValidateDurability(sc); err != nil {
		t.Fatalf("ValidateDurability: %v", err)
	}
	if sc.Producer.Retry.Max < 1000 || sc.Metadata.Retry.Max < 1000 || sc.Producer.Retry.BackoffFunc == nil {
		t.Fatalf("retries: producer %d metadata %d", sc.Producer.Retry.Max, sc.Metadata.Retry.Max)
	}
	if sc.Producer.Compression != sarama.CompressionZSTD || sc.Producer.Flush.Frequency != 0 || sc.Producer.Flush.Bytes != 0 {
		t.Fatal("compression/linger not applied")
	}
}

func TestValidateDurabilityRejects(t *testing.T) {
	for _, c := range []struct {
		name    string
		mutate  func(*sarama.Config)
		setting string
	}{
		{"acks leader", func(c *sarama.Config) { c.Producer.RequiredAcks = sarama.WaitForLocal }, "Producer.RequiredAcks"},
		{"acks none", func(c *sarama.Config) { c.Producer.RequiredAcks = sarama.NoResponse }, "Producer.RequiredAcks"},
		{"idempotence off", func(c *sarama.Config) { c.Producer.Idempotent = false }, "Producer.Idempotent"},
		{"max open requests 5", func(c *sarama.Config) { c.Net.MaxOpenRequests = 5 }, "Net.MaxOpenRequests"},
		{"retries 0", func(c *sarama.Config) { c.Producer.Retry.Max = 0 }, "Producer.Retry.Max"},
		{"errors not returned", func(c *sarama.Config) { c.Producer.Return.Errors = false }, "Producer.Return.Errors"},
	} {
		t.Run(c.name, func(t *testing.T) {
			sc, err := Config{Brokers: []string{"h:1"}}.SaramaConfig()
			if err != nil {
				t.Fatal(err)
			}
			c.mutate(sc)
			err = ValidateDurability(sc)
			if err == nil || !strings.Contains(err.Error(), c.setting) {
				t.Fatalf("want an error naming %s, got %v", c.setting, err)
			}
		})
	}
	if ValidateDurability(sarama.NewConfig()) == nil { // sarama's defaults are not durable
		t.Fatal("sarama defaults accepted")
	}
	if ValidateDurability(nil) == nil {
		t.Fatal("nil accepted")
	}
}

func TestConfigErrorsNameTheSetting(t *testing.T) {
	for _, c := range []struct {
		cfg Config
		key string
	}{
		{Config{}, "kafka.brokers"},
		{Config{Brokers: []string{"nohost"}}, "kafka.brokers"},
		{Config{Brokers: []string{"h:1"}, Compression: "brotli"}, "kafka.compression"},
		{Config{Brokers: []string{"h:1"}, MaxInflightRecords: -1}, "kafka.max_inflight_records"},
		{Config{Brokers: []string{"h:1"}, RetryBackoffMin: time.Second, RetryBackoffMax: time.Millisecond}, "kafka.retry_backoff_max"},
		{Config{Brokers: []string{"h:1"}, TLS: &TLSConfig{CertFile: "c.pem"}}, "kafka.tls.key_file"},
		{Config{Brokers: []string{"h:1"}, TLS: &TLSConfig{CAFile: "/does/not/exist.pem"}}, "kafka.tls.ca_file"},
		{Config{Brokers: []string{"h:1"}, SASL: &SASLConfig{Mechanism: "GSSAPI", Username: "u", Password: "s3cret"}}, "kafka.sasl.mechanism"},
		{Config{Brokers: []string{"h:1"}, SASL: &SASLConfig{Mechanism: "PLAIN", Username: "u"}}, "kafka.sasl.password"},
	} {
		_, err := c.cfg.SaramaConfig()
		if err == nil || !strings.Contains(err.Error(), c.key) {
			t.Errorf("%+v: want error naming %s, got %v", c.cfg, c.key, err)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("error leaks the SASL password: %v", err)
		}
	}
}

func TestBackoffCappedWithJitter(t *testing.T) {
	c := &control{min: 100 * time.Millisecond, max: 10 * time.Second}
	for attempt, want := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond} {
		for range 50 {
			if d := c.backoff(attempt); d < want/2 || d > want {
				t.Fatalf("attempt %d: %v not in [%v, %v]", attempt, d, want/2, want)
			}
		}
	}
	for _, attempt := range []int{20, 1000, 1 << 30} {
		if d := c.backoff(attempt); d < 5*time.Second || d > 10*time.Second {
			t.Fatalf("attempt %d: %v not capped to [5s, 10s]", attempt, d)
		}
	}
	if c.producerBackoff(1, 1000) > 100*time.Millisecond {
		t.Fatal("first producer retry should use the minimum")
	}
	c.aborted.Store(true)
	if c.producerBackoff(5, 1000) != 0 || c.metadataBackoff(5, 1000) != abortBackoff {
		t.Fatal("abort switch")
	}
}

// RFC 7677 section 3 example exchange (SCRAM-SHA-256, user "user", password "pencil").
func TestSCRAMSHA256RFC7677(t *testing.T) {
	s := newSCRAMClient(sha256.New)
	s.nonce = func() string { return "rOprNGfwEbeRWgbNEkqO" }
	if err := s.Begin("user", "pencil", ""); err != nil {
		t.Fatal(err)
	}
	first, _ := s.Step("")
	if first != "n,,n=user,r=rOprNGfwEbeRWgbNEkqO" {
		t.Fatalf("client-first %q", first)
	}
	final, err := s.Step("r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
	if err != nil {
		t.Fatal(err)
	}
	want := "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
	if final != want {
		t.Fatalf("client-final\n got %q\nwant %q", final, want)
	}
	if s.Done() {
		t.Fatal("done before server-final")
	}
	if _, err := s.Step("v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="); err != nil || !s.Done() {
		t.Fatalf("server-final: %v", err)
	}
	bad := newSCRAMClient(sha256.New)
	bad.nonce = s.nonce
	_ = bad.Begin("user", "pencil", "")
	_, _ = bad.Step("")
	_, _ = bad.Step("r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
	if _, err := bad.Step("v=AAAA"); err == nil {
		t.Fatal("a wrong server signature must fail")
	}
}
