package kafka

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/IBM/sarama"
)

// ConnectHint names the config key behind a failure to connect or authenticate to the brokers,
// and says what to do, from the typed errors inside err (TLS verification, a non-TLS answer, a
// TLS alert from the broker, a SASL refusal, a failed OAUTHBEARER token request). It returns ""
// for any other error. The hint never includes the SASL password or the OAuth client secret.
func (c Config) ConnectHint(err error) string {
	if err == nil {
		return ""
	}
	return c.connectHint(err)
}

func (c Config) connectHint(err error) string {
	var (
		unknownCA x509.UnknownAuthorityError
		hostErr   x509.HostnameError
		invalid   x509.CertificateInvalidError
		notTLS    tls.RecordHeaderError
		opErr     *net.OpError
		oauth     *OAuthError
	)
	ca := "the system's trusted CAs (kafka.tls.ca_file is not set)"
	if c.TLS != nil && c.TLS.CAFile != "" {
		ca = c.TLS.CAFile
	}
	switch {
	case errors.As(err, &unknownCA):
		return fmt.Sprintf("kafka.tls.ca_file: the broker's certificate is not signed by a CA in %s: "+
			"set kafka.tls.ca_file to the PEM file of the CA that signed the brokers' certificates", ca)
	case errors.As(err, &hostErr):
		return fmt.Sprintf("kafka.tls.ca_file: the broker's certificate does not name the host in kafka.brokers (%v): "+
			"list the brokers by a name or IP address in their certificates", hostErr.Host)
	case errors.As(err, &invalid):
		return fmt.Sprintf("kafka.tls.ca_file: the broker's certificate does not verify against %s: "+
			"renew the broker certificate or fix kafka.tls.ca_file", ca)
	case errors.As(err, &notTLS):
		return "kafka.tls: the broker does not answer TLS on that port: point kafka.brokers at the broker's " +
			"SSL or SASL_SSL listener, or remove kafka.tls for a PLAINTEXT listener"
	case errors.As(err, &oauth):
		return oauth.Key + ": " + oauth.Fix
	case errors.Is(err, sarama.ErrSASLAuthenticationFailed) && c.SASL != nil && strings.EqualFold(c.SASL.Mechanism, sarama.SASLTypeOAuth):
		// The token came from kafka.sasl.token_url; the broker's validator (signature against its
		// JWKS, exp, aud, iss) refused it. The broker says why only in its own log.
		return fmt.Sprintf("kafka.sasl.token_url / kafka.sasl.client_id: the broker refused the OAUTHBEARER token that kafka.sasl.token_url (%s) "+
			"issued to client %q (expired, or not signed by a key of the broker's sasl.oauthbearer.jwks.endpoint.url, or its aud/iss "+
			"not the broker's sasl.oauthbearer.expected.audience/expected.issuer): point kafka.sasl.token_url at the identity provider "+
			"the cluster trusts, check kafka.sasl.client_id and kafka.sasl.scope, and that this host's and the identity provider's clocks are right",
			c.SASL.TokenURL, c.SASL.ClientID)
	case errors.Is(err, sarama.ErrSASLAuthenticationFailed) && c.SASL != nil && strings.EqualFold(c.SASL.Mechanism, "AWS_MSK_IAM"):
		return "kafka.sasl.region: the broker refused the AWS_MSK_IAM (SigV4-signed) token: check that the AWS credentials found by the " +
			"standard chain belong to a role whose IAM policy allows kafka-cluster:Connect on this cluster, and kafka.sasl.region"
	case errors.Is(err, sarama.ErrSASLAuthenticationFailed):
		user := ""
		if c.SASL != nil {
			user = fmt.Sprintf(" %q", c.SASL.Username)
		}
		return fmt.Sprintf("kafka.sasl.password: the broker refused SASL authentication of kafka.sasl.username%s: "+
			"check kafka.sasl.username and kafka.sasl.password (the user must exist on the cluster for kafka.sasl.mechanism)", user)
	case errors.Is(err, sarama.ErrUnsupportedSASLMechanism):
		return "kafka.sasl.mechanism: the broker's listener does not enable this mechanism (its sasl.enabled.mechanisms): " +
			"set kafka.sasl.mechanism to one it enables, or point kafka.brokers at the SASL listener"
	case errors.Is(err, sarama.ErrOutOfBrokers) && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)):
		// The broker hung up before answering: what a listener does to a client whose security
		// does not match it (TLS to a PLAINTEXT listener, plaintext to an SSL one, no SASL on a
		// SASL one); rarely a broker going down at that moment.
		return fmt.Sprintf("kafka.tls / kafka.sasl: the broker closed the connection before answering, as a listener does "+
			"when the client's security does not match it (this client: %s): PLAINTEXT needs neither kafka.tls nor kafka.sasl, "+
			"SSL needs kafka.tls, SASL_SSL needs kafka.tls and kafka.sasl, SASL_PLAINTEXT needs kafka.sasl", c.security())
	case errors.As(err, &opErr) && opErr.Op == "remote error" && c.TLS != nil:
		// A TLS alert from the broker after our side of the handshake: with TLS 1.3 a broker
		// that requires a client certificate says so only now (bad_certificate or
		// certificate_required).
		if c.TLS.CertFile == "" {
			return "kafka.tls.cert_file: the broker refused the TLS connection, and no client certificate is set: " +
				"its listener requires one (ssl.client.auth=required): set kafka.tls.cert_file and kafka.tls.key_file"
		}
		return fmt.Sprintf("kafka.tls.cert_file: the broker refused the TLS connection with the client certificate %s: "+
			"it must be signed by a CA in the broker's truststore and be valid now", c.TLS.CertFile)
	}
	return ""
}

// security names the client side as a Kafka security protocol.
func (c Config) security() string {
	switch {
	case c.TLS != nil && c.SASL != nil:
		return "SASL_SSL"
	case c.TLS != nil:
		return "SSL"
	case c.SASL != nil:
		return "SASL_PLAINTEXT"
	}
	return "PLAINTEXT"
}
