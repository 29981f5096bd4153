package kafka

import (
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/outboxd/outboxd/internal/backoff"
)

// Defaults applied by New to zero-valued Config fields.
const (
	DefaultClientID           = "outboxd"
	DefaultMaxInflightRecords = 4096
	// DefaultLinger 0 is adaptive batching: a partition's records are sent as soon as nothing
	// is in flight to their broker, and collect into one batch while a request is outstanding
	// (see Config.Linger).
	DefaultLinger          = 0
	DefaultBatchBytes      = 1 << 20
	DefaultMaxRecordBytes  = 1 << 20
	DefaultRetryBackoffMin = 100 * time.Millisecond
	DefaultRetryBackoffMax = 10 * time.Second
)

// producerRetryMax is sarama's Producer.Retry.Max. sarama allocates a retry-state slice of
// Retry.Max+1 entries (32 bytes each) for every partition it produces to (async_producer.go,
// newPartitionProducer), so math.MaxInt is impossible and a million would cost 32 MB per
// partition. 1000 retries at the 10 s backoff cap is about 2.7 hours of continuous failure; the
// Producer re-submits anything sarama gives up on anyway (see recovery.go), so the effective
// retry count for transient errors is unbounded.
const producerRetryMax = 1000

// metadataTimeout and abortBackoff implement a kill switch for sarama's metadata retry loop
// (client.go, tryRefreshMetadata): the loop skips its remaining retries when the next backoff
// would pass now+Metadata.Timeout. During normal operation the backoff is seconds and the
// timeout a century, so the loop keeps retrying; once the Producer shuts down the backoff
// function returns abortBackoff and the loop ends after its current attempt.
const (
	metadataTimeout = 100 * 365 * 24 * time.Hour
	abortBackoff    = 200 * 365 * 24 * time.Hour
)

// Config configures a Producer. Zero values of optional fields mean "use the default". Error
// messages name the setting by its outboxd YAML key (kafka.brokers, kafka.compression, ...).
//
// Exactly-once delivery (kafka.delivery: exactly_once) uses the same Config with TxnOptions
// (txn.go: NewTxn, TxnSaramaConfig): a transactional id, one Kafka transaction per batch with the
// stored position inside it, and "abort and replay from the stored position" where the
// at_least_once Producer re-submits in order (recovery.go).
type Config struct {
	Brokers     []string    // kafka.brokers: bootstrap host:port list, at least one
	ClientID    string      // kafka.client_id; default "outboxd"
	Compression string      // kafka.compression: none | gzip | snappy | lz4 | zstd; "" = none
	TLS         *TLSConfig  // kafka.tls; nil = plaintext
	SASL        *SASLConfig // kafka.sasl; nil = no authentication

	// MaxInflightRecords bounds records queued but not yet acked (or failed); Produce blocks
	// while this many are outstanding. Default DefaultMaxInflightRecords (4096).
	MaxInflightRecords int
	// Linger is how long a broker's batch may wait for more records before it is sent
	// (sarama Producer.Flush.Frequency, with BatchBytes as Flush.Bytes). The default 0 is
	// adaptive: sarama's Flush settings all zero, so a record goes out at once when no request
	// is in flight to its broker (one at a time: Net.MaxOpenRequests 1), and records that
	// arrive while one is outstanding collect into the next request (up to MaxRecordBytes per
	// partition). An idle producer adds no delay; a busy one batches as much as the round trip
	// allows. A positive Linger waits that long (or until BatchBytes) instead.
	Linger time.Duration
	// BatchBytes sends a broker's batch as soon as it holds this many bytes
	// (sarama Producer.Flush.Bytes) when Linger is positive. Default 1 MiB. Unused with the
	// adaptive Linger 0 (sarama flushes on its own then; batches stop at MaxRecordBytes).
	BatchBytes int
	// MaxRecordBytes is the largest record (encoded size, key + value + headers + overhead)
	// the producer will send, and the per-partition batch cap (sarama Producer.MaxMessageBytes).
	// Larger records fail permanently with reason record_too_large without a round trip. Keep
	// it at or below the broker's message.max.bytes. Default 1 MiB.
	MaxRecordBytes int
	// RetryBackoffMin/Max bound the capped exponential backoff (with jitter) between retries
	// of a transient failure. Defaults 100ms / 10s.
	RetryBackoffMin time.Duration
	RetryBackoffMax time.Duration
}

// TLSConfig enables TLS to the brokers. Files are PEM.
type TLSConfig struct {
	CAFile             string // kafka.tls.ca_file: trusted CAs; "" = system roots
	CertFile           string // kafka.tls.cert_file: client certificate (needs KeyFile)
	KeyFile            string // kafka.tls.key_file
	InsecureSkipVerify bool   // kafka.tls.insecure_skip_verify: do not verify the broker certificate
}

// SASLConfig enables SASL authentication.
type SASLConfig struct {
	Mechanism string // kafka.sasl.mechanism: PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512 | OAUTHBEARER | AWS_MSK_IAM
	Username  string // kafka.sasl.username
	Password  string // kafka.sasl.password; never logged or put in errors
	// OAUTHBEARER: an OAuth 2.0 client credentials grant (oauth.go).
	TokenURL     string // kafka.sasl.token_url
	ClientID     string // kafka.sasl.client_id
	ClientSecret string // kafka.sasl.client_secret; never logged or put in errors
	Scope        string // kafka.sasl.scope (space-separated; optional)
	// AWS_MSK_IAM: the standard AWS credential chain (msk.go).
	Region string // kafka.sasl.region; "" = the chain's (AWS_REGION)
}

// withDefaults returns c with defaults filled in, or an error naming the first bad setting.
func (c Config) withDefaults() (Config, error) {
	if len(c.Brokers) == 0 {
		return c, errors.New("kafka.brokers: at least one broker address (host:port) is required")
	}
	for _, b := range c.Brokers {
		if strings.TrimSpace(b) == "" || !strings.Contains(b, ":") {
			return c, fmt.Errorf("kafka.brokers: %q is not a host:port address", b)
		}
	}
	if c.ClientID == "" {
		c.ClientID = DefaultClientID
	}
	if _, err := compressionCodec(c.Compression); err != nil {
		return c, err
	}
	type pos struct {
		key string
		v   int64
	}
	for _, p := range []pos{
		{"kafka.max_inflight_records", int64(c.MaxInflightRecords)},
		{"kafka.linger", int64(c.Linger)},
		{"kafka.batch_bytes", int64(c.BatchBytes)},
		{"kafka.max_record_bytes", int64(c.MaxRecordBytes)},
		{"kafka.retry_backoff_min", int64(c.RetryBackoffMin)},
		{"kafka.retry_backoff_max", int64(c.RetryBackoffMax)},
	} {
		if p.v < 0 {
			return c, fmt.Errorf("%s: must not be negative (0 means the default)", p.key)
		}
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defd := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.MaxInflightRecords, DefaultMaxInflightRecords)
	def(&c.BatchBytes, DefaultBatchBytes)
	def(&c.MaxRecordBytes, DefaultMaxRecordBytes)
	defd(&c.RetryBackoffMin, DefaultRetryBackoffMin)
	defd(&c.RetryBackoffMax, DefaultRetryBackoffMax)
	if c.RetryBackoffMax < c.RetryBackoffMin {
		return c, fmt.Errorf("kafka.retry_backoff_max (%s) must not be below kafka.retry_backoff_min (%s)",
			c.RetryBackoffMax, c.RetryBackoffMin)
	}
	if c.MaxRecordBytes >= int(sarama.MaxRequestSize)-10*1024 {
		return c, fmt.Errorf("kafka.max_record_bytes: %d is above the protocol limit %d",
			c.MaxRecordBytes, sarama.MaxRequestSize-10*1024)
	}
	return c, nil
}

func compressionCodec(name string) (sarama.CompressionCodec, error) {
	switch strings.ToLower(name) {
	case "", "none":
		return sarama.CompressionNone, nil
	case "gzip":
		return sarama.CompressionGZIP, nil
	case "snappy":
		return sarama.CompressionSnappy, nil
	case "lz4":
		return sarama.CompressionLZ4, nil
	case "zstd":
		return sarama.CompressionZSTD, nil
	}
	return 0, fmt.Errorf("kafka.compression: %q is not one of none, gzip, snappy, lz4, zstd", name)
}

// control carries the backoff policy and the shutdown kill switch into sarama's
// BackoffFunc callbacks. It is shared by all sarama goroutines; abort is one-way.
type control struct {
	min, max time.Duration
	aborted  atomic.Bool
}

// backoff is capped exponential backoff with "equal jitter": attempt 0 waits in
// [min/2, min], each further attempt doubles that, up to [max/2, max].
func (c *control) backoff(attempt int) time.Duration {
	return backoff.Jitter(backoff.Policy{Min: c.min, Max: c.max}.Attempt(attempt))
}

// producerBackoff is sarama's Producer.Retry.BackoffFunc (retries counts from 1).
func (c *control) producerBackoff(retries, _ int) time.Duration {
	if c.aborted.Load() {
		return 0
	}
	return c.backoff(retries - 1)
}

// metadataBackoff is sarama's Metadata.Retry.BackoffFunc (retries counts from 0).
func (c *control) metadataBackoff(retries, _ int) time.Duration {
	if c.aborted.Load() {
		return abortBackoff
	}
	return c.backoff(retries)
}

// metadataRetryMax makes sarama's metadata refresh retry for about a day before giving up,
// bounded because sarama retries by recursion (one stack frame per attempt).
func metadataRetryMax(maxBackoff time.Duration) int {
	n := int(24 * time.Hour / maxBackoff)
	return min(max(n, 1000), 20000)
}

// SaramaConfig returns the sarama configuration New uses for cfg: idempotent, acks=all, one
// request in flight per broker, Java-compatible partitioning, and retries that do not give up
// on transient errors. Metadata refreshes on a client built from it block (retrying) while the
// cluster is unreachable, for up to about a day; a bounded probe such as `outboxd check`
// should copy it and lower Metadata.Retry.Max.
func (c Config) SaramaConfig() (*sarama.Config, error) {
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	return c.saramaConfig(&control{min: c.RetryBackoffMin, max: c.RetryBackoffMax})
}

// saramaConfig expects defaults applied.
func (c Config) saramaConfig(ctl *control) (*sarama.Config, error) {
	sc := sarama.NewConfig()
	sc.ClientID = c.ClientID
	sc.Version = sarama.V2_8_0_0
	sc.ChannelBufferSize = 1024

	sc.Net.MaxOpenRequests = 1
	sc.Net.DialTimeout = 10 * time.Second

	// Only topics we produce to; a full metadata fetch at NewClient would also block New
	// forever on an unreachable cluster (see metadataRetryMax).
	sc.Metadata.Full = false
	sc.Metadata.Retry.Max = metadataRetryMax(c.RetryBackoffMax)
	sc.Metadata.Retry.BackoffFunc = ctl.metadataBackoff
	sc.Metadata.Timeout = metadataTimeout

	p := &sc.Producer
	p.Idempotent = true
	p.RequiredAcks = sarama.WaitForAll
	p.Timeout = 10 * time.Second
	p.Return.Successes = true
	p.Return.Errors = true
	p.Partitioner = NewJavaPartitioner
	p.MaxMessageBytes = c.MaxRecordBytes
	p.Retry.Max = producerRetryMax
	p.Retry.Backoff = c.RetryBackoffMin
	p.Retry.BackoffFunc = ctl.producerBackoff
	// Producer.Transaction.Retry keeps sarama's 50 x 100ms: InitProducerID in New fails after ~5s.
	// Flush.MaxMessages stays 0 (unlimited): batches are bounded by bytes (MaxMessageBytes per
	// partition). Linger 0: all three zero is sarama's "flush whenever the broker can take a
	// request" (produce_set.go readyToFlush), which with one request in flight is adaptive
	// batching. Flush.Bytes must then be 0 too, or sarama would wait for that many bytes.
	p.Flush.MaxMessages = 0
	if c.Linger > 0 {
		p.Flush.Frequency = c.Linger
		p.Flush.Bytes = c.BatchBytes
	}
	codec, err := compressionCodec(c.Compression)
	if err != nil {
		return nil, err
	}
	p.Compression = codec

	if c.TLS != nil {
		tc, err := c.TLS.build()
		if err != nil {
			return nil, err
		}
		sc.Net.TLS.Enable = true
		sc.Net.TLS.Config = tc
	}
	if c.SASL != nil {
		if err := c.SASL.apply(sc); err != nil {
			return nil, err
		}
	}
	return sc, nil
}

func (t *TLSConfig) build() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // operator's explicit choice
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("kafka.tls.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("kafka.tls.ca_file: %s holds no PEM certificate", t.CAFile)
		}
		tc.RootCAs = pool
	}
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		return nil, errors.New("kafka.tls.key_file: required when kafka.tls.cert_file is set")
	case t.CertFile == "" && t.KeyFile != "":
		return nil, errors.New("kafka.tls.cert_file: required when kafka.tls.key_file is set")
	case t.CertFile != "":
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("kafka.tls.cert_file/key_file: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

func (s *SASLConfig) apply(sc *sarama.Config) error {
	sc.Net.SASL.Enable = true
	sc.Net.SASL.Handshake = true
	switch m := strings.ToUpper(s.Mechanism); m {
	case sarama.SASLTypeOAuth: // OAUTHBEARER: oauth.go
		p, err := newOAuthTokenProvider(s)
		if err != nil {
			return err
		}
		sc.Net.SASL.Mechanism = sarama.SASLTypeOAuth
		sc.Net.SASL.TokenProvider = p
		return nil
	case "AWS_MSK_IAM": // OAUTHBEARER with a SigV4-signed token: msk.go
		p, err := newMSKTokenProvider(s)
		if err != nil {
			return err
		}
		sc.Net.SASL.Mechanism = sarama.SASLTypeOAuth
		sc.Net.SASL.TokenProvider = p
		return nil
	case sarama.SASLTypePlaintext, sarama.SASLTypeSCRAMSHA256, sarama.SASLTypeSCRAMSHA512:
		if s.Username == "" {
			return errors.New("kafka.sasl.username: required when kafka.sasl is set")
		}
		if s.Password == "" {
			return errors.New("kafka.sasl.password: required when kafka.sasl is set")
		}
		sc.Net.SASL.User = s.Username
		sc.Net.SASL.Password = s.Password
		sc.Net.SASL.Mechanism = sarama.SASLMechanism(m)
		switch m {
		case sarama.SASLTypeSCRAMSHA256:
			sc.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return newSCRAMClient(sha256.New) }
		case sarama.SASLTypeSCRAMSHA512:
			sc.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return newSCRAMClient(sha512.New) }
		}
		return nil
	default:
		return fmt.Errorf("kafka.sasl.mechanism: %q is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, AWS_MSK_IAM", s.Mechanism)
	}
}

// ValidateDurability refuses a sarama producer configuration that could lose or reorder
// records: acks other than all, idempotence off, more than one request in flight per
// connection, no retries, or failed records not reported on the Errors channel. The error
// names every offending setting. sarama's own Config.Validate is not called here.
func ValidateDurability(sc *sarama.Config) error {
	if sc == nil {
		return errors.New("kafka producer config is nil")
	}
	var errs []error
	if sc.Producer.RequiredAcks != sarama.WaitForAll {
		errs = append(errs, fmt.Errorf("Producer.RequiredAcks is %d, must be WaitForAll (acks=all): "+
			"with fewer acks a broker failure loses acknowledged records", sc.Producer.RequiredAcks))
	}
	if !sc.Producer.Idempotent {
		errs = append(errs, errors.New("Producer.Idempotent is off, must be on (enable.idempotence=true): "+
			"retries could duplicate or reorder records"))
	}
	if sc.Net.MaxOpenRequests > 1 {
		errs = append(errs, fmt.Errorf("Net.MaxOpenRequests is %d, must be 1: sarama's idempotent "+
			"producer keeps order only with one request in flight per broker", sc.Net.MaxOpenRequests))
	}
	if sc.Producer.Retry.Max <= 0 {
		errs = append(errs, fmt.Errorf("Producer.Retry.Max is %d, must be > 0: "+
			"transient broker errors would fail records", sc.Producer.Retry.Max))
	}
	if !sc.Producer.Return.Errors {
		errs = append(errs, errors.New("Producer.Return.Errors is off, must be on: "+
			"failed records would only be logged, never reported"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("kafka producer is not durable: %w", errors.Join(errs...))
	}
	return nil
}

// CheckProducer reports what New would refuse in c: settings no producer can be built from
// (the error names the config key), or a producer configuration that is not durable
// (ValidateDurability). outboxd check reports them as two results.
func (c Config) CheckProducer() (settings, durability error) {
	sc, err := c.SaramaConfig()
	if err != nil {
		return err, nil
	}
	return nil, ValidateDurability(sc)
}
