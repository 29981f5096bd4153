package config

import (
	"strings"
	"testing"
)

// saslYAML is a valid config whose kafka section has the given extra keys (a flow mapping's
// contents, e.g. "tls: {}, sasl: {mechanism: PLAIN}").
func saslYAML(kafka string) string {
	return "source: {type: postgres, dsn: 'postgres://x@h/db', tables: [public.outbox]}\n" +
		"kafka: {brokers: ['k:9098'], " + kafka + "}\n"
}

// TestSASLAccepted: each mechanism with its own keys parses, and the keys arrive as written.
func TestSASLAccepted(t *testing.T) {
	cases := []struct {
		kafka string
		want  SASL
	}{
		{"sasl: {mechanism: PLAIN, username: u, password: p}", SASL{Mechanism: "PLAIN", Username: "u", Password: "p"}},
		{"sasl: {mechanism: SCRAM-SHA-256, username: u, password: '${PW}'}", SASL{Mechanism: "SCRAM-SHA-256", Username: "u", Password: "pw-from-env"}},
		{"tls: {}, sasl: {mechanism: SCRAM-SHA-512, username: u, password: p}", SASL{Mechanism: "SCRAM-SHA-512", Username: "u", Password: "p"}},
		{"sasl: {mechanism: OAUTHBEARER, token_url: 'https://idp.example/oauth2/token', client_id: outboxd, client_secret: '${PW}'}",
			SASL{Mechanism: "OAUTHBEARER", TokenURL: "https://idp.example/oauth2/token", ClientID: "outboxd", ClientSecret: "pw-from-env"}},
		{"sasl: {mechanism: OAUTHBEARER, token_url: 'http://127.0.0.1:8080/token', client_id: c, client_secret: s, scope: 'kafka openid'}",
			SASL{Mechanism: "OAUTHBEARER", TokenURL: "http://127.0.0.1:8080/token", ClientID: "c", ClientSecret: "s", Scope: "kafka openid"}},
		{"tls: {}, sasl: {mechanism: AWS_MSK_IAM}", SASL{Mechanism: "AWS_MSK_IAM"}},
		{"tls: {ca_file: /etc/ca.pem}, sasl: {mechanism: AWS_MSK_IAM, region: eu-west-1}", SASL{Mechanism: "AWS_MSK_IAM", Region: "eu-west-1"}},
	}
	for _, c := range cases {
		cfg, err := Parse([]byte(saslYAML(c.kafka)), env(map[string]string{"PW": "pw-from-env"}), "postgres")
		if err != nil {
			t.Errorf("%s: refused: %v", c.kafka, err)
			continue
		}
		if cfg.Kafka.SASL == nil || *cfg.Kafka.SASL != c.want {
			t.Errorf("%s: sasl %+v, want %+v", c.kafka, cfg.Kafka.SASL, c.want)
		}
	}
}

// TestSASLRefused: every mistake is a config error (outboxd exits 2) naming the key to fix:
// a missing key of the mechanism, a key of another mechanism, a token_url that is not an
// http(s) URL, AWS_MSK_IAM without kafka.tls, an unknown mechanism.
func TestSASLRefused(t *testing.T) {
	cases := []struct{ kafka, key, says string }{
		// unknown or mis-cased mechanism
		{"sasl: {mechanism: GSSAPI}", "kafka.sasl.mechanism", "AWS_MSK_IAM"},
		{"sasl: {mechanism: aws_msk_iam}", "kafka.sasl.mechanism", "not one of"},
		{"sasl: {username: u, password: p}", "kafka.sasl.mechanism", "not one of"},
		// PLAIN / SCRAM: required keys
		{"sasl: {mechanism: PLAIN, password: p}", "kafka.sasl.username", "required with kafka.sasl.mechanism PLAIN"},
		{"sasl: {mechanism: SCRAM-SHA-256, username: u}", "kafka.sasl.password", "required with kafka.sasl.mechanism SCRAM-SHA-256"},
		{"sasl: {mechanism: SCRAM-SHA-512}", "kafka.sasl.username", "required"},
		// PLAIN / SCRAM: keys of other mechanisms
		{"sasl: {mechanism: PLAIN, username: u, password: p, token_url: 'https://i/t'}", "kafka.sasl.token_url", "not used with kafka.sasl.mechanism PLAIN"},
		{"sasl: {mechanism: SCRAM-SHA-512, username: u, password: p, client_secret: s}", "kafka.sasl.client_secret", "remove it"},
		{"sasl: {mechanism: SCRAM-SHA-256, username: u, password: p, scope: x}", "kafka.sasl.scope", "remove it"},
		{"sasl: {mechanism: PLAIN, username: u, password: p, region: us-east-1}", "kafka.sasl.region", "not used with kafka.sasl.mechanism PLAIN"},
		// OAUTHBEARER: required keys, token_url's form, other mechanisms' keys
		{"sasl: {mechanism: OAUTHBEARER, client_id: c, client_secret: s}", "kafka.sasl.token_url", "required with kafka.sasl.mechanism OAUTHBEARER"},
		{"sasl: {mechanism: OAUTHBEARER, token_url: 'https://i/t', client_secret: s}", "kafka.sasl.client_id", "required"},
		{"sasl: {mechanism: OAUTHBEARER, token_url: 'https://i/t', client_id: c}", "kafka.sasl.client_secret", "required"},
		{"sasl: {mechanism: OAUTHBEARER, token_url: 'ftp://i/t', client_id: c, client_secret: s}", "kafka.sasl.token_url", "not an http(s) URL"},
		{"sasl: {mechanism: OAUTHBEARER, token_url: 'idp.example/token', client_id: c, client_secret: s}", "kafka.sasl.token_url", "not an http(s) URL"},
		{"sasl: {mechanism: OAUTHBEARER, token_url: 'https:///token', client_id: c, client_secret: s}", "kafka.sasl.token_url", "not an http(s) URL"},
		{"sasl: {mechanism: OAUTHBEARER, token_url: 'https://i/t', client_id: c, client_secret: s, username: u}", "kafka.sasl.username", "not used with kafka.sasl.mechanism OAUTHBEARER"},
		{"sasl: {mechanism: OAUTHBEARER, token_url: 'https://i/t', client_id: c, client_secret: s, password: p}", "kafka.sasl.password", "remove it"},
		{"sasl: {mechanism: OAUTHBEARER, token_url: 'https://i/t', client_id: c, client_secret: s, region: r}", "kafka.sasl.region", "remove it"},
		// AWS_MSK_IAM: TLS, other mechanisms' keys
		{"sasl: {mechanism: AWS_MSK_IAM}", "kafka.tls", "port 9098"},
		{"sasl: {mechanism: AWS_MSK_IAM, region: us-east-1}", "kafka.tls", "required with kafka.sasl.mechanism AWS_MSK_IAM"},
		{"tls: {}, sasl: {mechanism: AWS_MSK_IAM, username: u}", "kafka.sasl.username", "not used with kafka.sasl.mechanism AWS_MSK_IAM"},
		{"tls: {}, sasl: {mechanism: AWS_MSK_IAM, password: p}", "kafka.sasl.password", "remove it"},
		{"tls: {}, sasl: {mechanism: AWS_MSK_IAM, token_url: 'https://i/t'}", "kafka.sasl.token_url", "remove it"},
		{"tls: {}, sasl: {mechanism: AWS_MSK_IAM, client_id: c}", "kafka.sasl.client_id", "remove it"},
		{"tls: {}, sasl: {mechanism: AWS_MSK_IAM, client_secret: s}", "kafka.sasl.client_secret", "remove it"},
		{"tls: {}, sasl: {mechanism: AWS_MSK_IAM, scope: x}", "kafka.sasl.scope", "remove it"},
		// a typo under kafka.sasl
		{"tls: {}, sasl: {mechanism: AWS_MSK_IAM, regoin: us-east-1}", "kafka.sasl.regoin", ""},
	}
	for _, c := range cases {
		_, err := Parse([]byte(saslYAML(c.kafka)), env(nil), "postgres")
		if err == nil {
			t.Errorf("accepted: %s", c.kafka)
			continue
		}
		// IsConfigError is what makes outboxd exit 2 (cmd/outboxd).
		if !IsConfigError(err) || !strings.Contains(err.Error(), c.key) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: error %q, want a config error naming %s and saying %q", c.kafka, err, c.key, c.says)
		}
	}
}

// TestSASLSecretsNotInErrors: a refused kafka.sasl never quotes the password or the client
// secret, whatever the mistake.
func TestSASLSecretsNotInErrors(t *testing.T) {
	const secret = "s3cr3t-9f2c"
	for _, k := range []string{
		"sasl: {mechanism: PLAIN, username: u, password: " + secret + ", region: r}",
		"sasl: {mechanism: AWS_MSK_IAM, password: " + secret + "}",
		"tls: {}, sasl: {mechanism: AWS_MSK_IAM, password: " + secret + "}",
		"tls: {}, sasl: {mechanism: AWS_MSK_IAM, client_secret: " + secret + "}",
		"sasl: {mechanism: OAUTHBEARER, token_url: 'ftp://i/t', client_id: c, client_secret: " + secret + "}",
		"sasl: {mechanism: OAUTHBEARER, token_url: 'https://i/t', client_secret: " + secret + "}",
		"sasl: {mechanism: GSSAPI, password: " + secret + "}",
	} {
		_, err := Parse([]byte(saslYAML(k)), env(nil), "postgres")
		if err == nil || strings.Contains(err.Error(), secret) {
			t.Errorf("%s: error %v", k, err)
		}
	}
}
