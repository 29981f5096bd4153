package kafka

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/IBM/sarama"
)

// alertErr is what crypto/tls returns for an alert from the peer: a *net.OpError "remote error".
type alertErr struct{}

func (alertErr) Error() string { return "tls: bad certificate" }

// TestConnectHint: each TLS/SASL failure, wrapped as sarama wraps it (ErrOutOfBrokers joined
// with the broker errors), names the config key at fault; other errors get no hint; the SASL
// password never appears.
func TestConnectHint(t *testing.T) {
	out := func(err error) error { return sarama.Wrap(sarama.ErrOutOfBrokers, fmt.Errorf("dial: %w", err)) }
	tlsCA := &TLSConfig{CAFile: "/etc/ca.pem"}
	sasl := &SASLConfig{Mechanism: "SCRAM-SHA-512", Username: "svc", Password: "hunter2-secret"}
	oauth := &SASLConfig{Mechanism: "OAUTHBEARER", TokenURL: "https://idp.example/token", ClientID: "svc-client", ClientSecret: "hunter2-secret"}
	for _, c := range []struct {
		name string
		cfg  Config
		err  error
		want string // "" = no hint
	}{
		{"unknown CA", Config{TLS: tlsCA}, out(&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}), "kafka.tls.ca_file: the broker's certificate is not signed by a CA in /etc/ca.pem"},
		{"unknown CA, system roots", Config{TLS: &TLSConfig{}}, out(x509.UnknownAuthorityError{}), "kafka.tls.ca_file is not set"},
		{"wrong host", Config{TLS: tlsCA}, out(x509.HostnameError{Host: "kafka-1"}), "kafka.tls.ca_file: the broker's certificate does not name the host"},
		{"expired", Config{TLS: tlsCA}, out(x509.CertificateInvalidError{Reason: x509.Expired}), "kafka.tls.ca_file: the broker's certificate does not verify"},
		{"not TLS", Config{TLS: tlsCA}, out(tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}), "kafka.tls: the broker does not answer TLS"},
		{"sasl refused", Config{SASL: sasl}, sarama.ErrSASLAuthenticationFailed, `kafka.sasl.password: the broker refused SASL authentication of kafka.sasl.username "svc"`},
		{"sasl mechanism", Config{SASL: sasl}, out(sarama.ErrUnsupportedSASLMechanism), "kafka.sasl.mechanism"},
		{"oauth token refused by the broker", Config{SASL: oauth}, out(sarama.Wrap(sarama.ErrSASLAuthenticationFailed, errors.New("invalid credentials"))),
			`kafka.sasl.token_url / kafka.sasl.client_id: the broker refused the OAUTHBEARER token that kafka.sasl.token_url (https://idp.example/token) issued to client "svc-client"`},
		{"oauth token endpoint refused the client", Config{SASL: oauth}, out(&OAuthError{Key: "kafka.sasl.client_secret", What: "refused", Fix: "check kafka.sasl.client_id and kafka.sasl.client_secret"}),
			"kafka.sasl.client_secret: check kafka.sasl.client_id and kafka.sasl.client_secret"},
		{"msk iam refused", Config{SASL: &SASLConfig{Mechanism: "AWS_MSK_IAM"}}, out(sarama.ErrSASLAuthenticationFailed), "kafka.sasl.region: the broker refused the AWS_MSK_IAM"},
		{"no client cert", Config{TLS: tlsCA}, out(&net.OpError{Op: "remote error", Err: alertErr{}}), "kafka.tls.cert_file: the broker refused the TLS connection, and no client certificate is set"},
		{"client cert refused", Config{TLS: &TLSConfig{CertFile: "/etc/c.pem", KeyFile: "/etc/k.pem"}}, out(&net.OpError{Op: "remote error", Err: alertErr{}}), "kafka.tls.cert_file: the broker refused the TLS connection with the client certificate /etc/c.pem"},
		{"hung up, plaintext", Config{}, out(io.EOF), "kafka.tls / kafka.sasl: the broker closed the connection before answering, as a listener does when the client's security does not match it (this client: PLAINTEXT)"},
		{"hung up, SSL", Config{TLS: tlsCA}, out(io.ErrUnexpectedEOF), "(this client: SSL)"},
		{"hung up, SASL_SSL", Config{TLS: tlsCA, SASL: sasl}, out(io.EOF), "(this client: SASL_SSL)"},
		{"EOF not at connect", Config{}, fmt.Errorf("produce: %w", io.EOF), ""},
		{"remote error without TLS", Config{}, out(&net.OpError{Op: "remote error", Err: alertErr{}}), ""},
		{"connection refused", Config{TLS: tlsCA}, out(&net.OpError{Op: "dial", Err: errors.New("connection refused")}), ""},
		{"nil", Config{}, nil, ""},
	} {
		got := c.cfg.ConnectHint(c.err)
		if c.want == "" && got != "" || !strings.Contains(got, c.want) {
			t.Errorf("%s: hint %q, want it to contain %q", c.name, got, c.want)
		}
		if strings.Contains(got, "hunter2-secret") {
			t.Errorf("%s: hint shows the password: %q", c.name, got)
		}
	}
}
