package config

import "time"

// Kafka is the kafka section (the producer, the DLQ, delivery mode).
type Kafka struct {
	Brokers     []string `yaml:"brokers"`
	ClientID    string   `yaml:"client_id"`
	Delivery    string   `yaml:"delivery"`
	Compression string   `yaml:"compression"`
	DLQTopic    string   `yaml:"dlq_topic"`
	DLQMaxRate  string   `yaml:"dlq_max_rate"`
	MaxInflight int      `yaml:"max_inflight"`
	// MaxRecordBytes is the largest record outboxd sends (keep it <= the brokers' and topics'
	// message size limits); larger ones are dead-lettered as record_too_large.
	MaxRecordBytes int           `yaml:"max_record_bytes"`
	Linger         time.Duration `yaml:"linger"`
	TLS            *TLS          `yaml:"tls"`
	SASL           *SASL         `yaml:"sasl"`
	// TransactionalID is the exactly_once producer's transactional.id; "" = "outboxd-" + the
	// pipeline id.
	TransactionalID string `yaml:"transactional_id"`
	// TransactionTimeout is the exactly_once producer's transaction.timeout.ms: a Kafka
	// transaction open longer is aborted by the broker. A source transaction goes into one
	// Kafka transaction, so the largest one must be delivered within it (must be <= the
	// brokers' transaction.max.timeout.ms, default 15m).
	TransactionTimeout time.Duration `yaml:"transaction_timeout"`
	// OnPermanentError is what a record that can never be delivered does: dlq (default: it is
	// dead-lettered and delivery goes on) | stop (outboxd exits 1 naming it, storing no position
	// past it; Kafka Connect's errors.tolerance=none).
	OnPermanentError string `yaml:"on_permanent_error"`
}

type TLS struct {
	CAFile             string `yaml:"ca_file"`
	CertFile           string `yaml:"cert_file"`
	KeyFile            string `yaml:"key_file"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
}

// SASL is kafka.sasl: PLAIN and SCRAM-* (username, password), OAUTHBEARER (an OAuth 2.0
// client credentials grant: token_url, client_id, client_secret, scope) or AWS_MSK_IAM (the
// standard AWS credential chain; region).
type SASL struct {
	Mechanism string `yaml:"mechanism"`
	Username  string `yaml:"username"`
	Password  string `yaml:"password"`
	// TokenURL is the OAuth 2.0 token endpoint (OAUTHBEARER).
	TokenURL string `yaml:"token_url"`
	// ClientID and ClientSecret are the OAuth 2.0 client's credentials (OAUTHBEARER); the secret
	// is never logged.
	ClientID     string `yaml:"client_id"`
	ClientSecret string `yaml:"client_secret"`
	// Scope is the space-separated scope asked for (OAUTHBEARER; optional).
	Scope string `yaml:"scope"`
	// Region is the AWS region of the MSK cluster (AWS_MSK_IAM; "" = the AWS chain's, AWS_REGION).
	Region string `yaml:"region"`
}

// Offsets is the offsets section: where positions are stored.
type Offsets struct {
	Store          string        `yaml:"store"`
	Path           string        `yaml:"path"`
	Topic          string        `yaml:"topic"`
	CommitInterval time.Duration `yaml:"commit_interval"`
	// Key is the pipeline id: the record key in offsets.topic; "" = derived from the source
	// ("postgres:<slot>", "mysql:<server_id>").
	Key string `yaml:"key"`
}
