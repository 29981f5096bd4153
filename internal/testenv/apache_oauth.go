package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/oauth"

	"github.com/outboxd/outboxd/internal/testenv/harness"
)

// Apache Kafka with a SASL_PLAINTEXT listener for SASL/OAUTHBEARER (KIP-768), validating the
// clients' JWTs against the JWK Set of an OAuthServer the test runs:
//
//	listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class=
//	    org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler
//	sasl.oauthbearer.jwks.endpoint.url, sasl.oauthbearer.expected.audience, .expected.issuer
//
// Kafka 4.x refuses to fetch any OAuth URL not listed in the JVM system property
// org.apache.kafka.sasl.oauthbearer.allowed.urls (CVE-2025-27817), so the node's JVM gets it.
// Kafka 4.4 also requires expected.audience and expected.issuer once a JWKS URL is set. The
// jose4j jar the validator needs comes with kafka-clients (kafka/pom.xml needs nothing more).

// OAuthKafka is an Apache Kafka node with a PLAINTEXT listener (no authentication, super user:
// the test's admin and reader) and a SASL_PLAINTEXT listener accepting only OAUTHBEARER tokens
// of its OAuthServer.
type OAuthKafka struct {
	*ApacheKafka
	OAuthPort int // SASL_PLAINTEXT listener (OAUTHBEARER)
	IdP       *OAuthServer
}

// OAuthAddr is the OAUTHBEARER listener's host:port.
func (k *OAuthKafka) OAuthAddr() string { return fmt.Sprintf("127.0.0.1:%d", k.OAuthPort) }

// OAuthOpts tunes StartOAuthApacheKafka.
type OAuthOpts struct {
	ApacheOpts
	// ReauthMS is the listener's connections.max.reauth.ms (KIP-368): the broker tells each
	// client a session lifetime (at most the token's remaining lifetime) and closes a
	// connection that did not re-authenticate in time. 0 = Kafka's default (no re-auth).
	ReauthMS int
}

// StartOAuthApacheKafka starts a node whose OAUTHBEARER listener trusts idp (its JWKS, its
// issuer, its audience), and waits until a token of probeClient (a client idp knows) logs in
// on that listener. Call Destroy when done (idp is the caller's to close).
func StartOAuthApacheKafka(idp *OAuthServer, probeClient string, opts OAuthOpts) (*OAuthKafka, error) {
	k, err := retryPortTaken(func() (*OAuthKafka, error) { return startOAuth(idp, opts) })
	if err != nil {
		return nil, err
	}
	if err := harness.Until(20*time.Second, 200*time.Millisecond, func() error { return k.oauthLogin(probeClient) }); err != nil {
		log := k.Log()
		k.Destroy()
		return nil, fmt.Errorf("the OAUTHBEARER listener %s does not accept a token of %s (%s): %w; log:\n%s",
			k.OAuthAddr(), probeClient, idp.URL, err, log)
	}
	return k, nil
}

func startOAuth(idp *OAuthServer, opts OAuthOpts) (*OAuthKafka, error) {
	lib, err := KafkaLibDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "outboxd-kafka-")
	if err != nil {
		return nil, err
	}
	k := &ApacheKafka{NodeID: 1, Dir: dir, lib: lib}
	ok := &OAuthKafka{ApacheKafka: k, IdP: idp}
	for _, p := range []*int{&k.Port, &k.ControllerPort, &ok.OAuthPort} {
		if *p, err = FreePort(); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	// As startApacheKafka (one node, replication factor 1), plus the OAUTHBEARER listener.
	props := append(k.baseProps(), fmt.Sprintf("controller.quorum.bootstrap.servers=127.0.0.1:%d", k.ControllerPort),
		"default.replication.factor=1", "min.insync.replicas=1",
		"offsets.topic.replication.factor=1", "transaction.state.log.replication.factor=1", "transaction.state.log.min.isr=1",
		"share.coordinator.state.topic.replication.factor=1", "share.coordinator.state.topic.min.isr=1")
	props = append(props, ok.props(opts.ReauthMS)...)
	props = append(props, opts.Props...)
	if err := k.format(props, newClusterID(), "--standalone"); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	// Selector's DEBUG lines say "Successfully re-authenticated with ..." (Reauthentications).
	if err := appendFile(filepath.Join(dir, "log4j2.properties"),
		"logger.selector.name = org.apache.kafka.common.network.Selector\nlogger.selector.level = debug\n"); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := ok.start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return ok, nil
}

// props are the listeners and the OAUTHBEARER settings (they override baseProps' listeners).
func (k *OAuthKafka) props(reauthMS int) []string {
	const l = "listener.name.sasl_plaintext."
	p := []string{
		fmt.Sprintf("listeners=PLAINTEXT://127.0.0.1:%d,SASL_PLAINTEXT://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d", k.Port, k.OAuthPort, k.ControllerPort),
		fmt.Sprintf("advertised.listeners=PLAINTEXT://127.0.0.1:%d,SASL_PLAINTEXT://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d", k.Port, k.OAuthPort, k.ControllerPort),
		"listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
		"sasl.enabled.mechanisms=OAUTHBEARER",
		l + "sasl.enabled.mechanisms=OAUTHBEARER",
		l + "oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
		l + "oauthbearer.sasl.server.callback.handler.class=org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
		l + "oauthbearer.sasl.oauthbearer.jwks.endpoint.url=" + k.IdP.JWKSURL(),
		l + "oauthbearer.sasl.oauthbearer.expected.audience=" + k.IdP.Audience,
		l + "oauthbearer.sasl.oauthbearer.expected.issuer=" + k.IdP.Issuer,
		// No clock skew allowance: an expired token is refused at once.
		l + "oauthbearer.sasl.oauthbearer.clock.skew.seconds=0",
	}
	if reauthMS > 0 {
		p = append(p, fmt.Sprintf(l+"oauthbearer.connections.max.reauth.ms=%d", reauthMS))
	}
	return p
}

// start is ApacheKafka.Start with the JVM system property that allows the JWKS URL.
func (k *OAuthKafka) start() error {
	a := k.ApacheKafka
	a.mu.Lock()
	logf, err := os.OpenFile(filepath.Join(a.Dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		a.mu.Unlock()
		return err
	}
	args := append(a.jvmArgs("-Xms512m", "-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
		"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls="+k.IdP.JWKSURL()),
		"kafka.Kafka", filepath.Join(a.Dir, "server.properties"))
	cmd := exec.Command("java", args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		a.mu.Unlock()
		return fmt.Errorf("start the Kafka broker (java kafka.Kafka): %w", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	a.cmd, a.done, a.logf = cmd, done, logf
	a.mu.Unlock()
	if err := a.waitReady(90 * time.Second); err != nil {
		a.Kill()
		return err
	}
	return nil
}

// oauthLogin authenticates on the OAUTHBEARER listener with a fresh token of client and sends
// one ApiVersions request.
func (k *OAuthKafka) oauthLogin(client string) error {
	tok, err := k.IdP.Token(client)
	if err != nil {
		return harness.Final(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.OAuthAddr()), kgo.RequestRetries(0),
		kgo.SASL(oauth.Auth{Token: tok}.AsMechanism()))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl)
	return err
}

// Reauthentications counts the KIP-368 re-authentications the broker logged (a client's
// connection authenticated again, with a new token, before its session expired).
func (k *OAuthKafka) Reauthentications() int {
	b, _ := os.ReadFile(filepath.Join(k.Dir, "server.log"))
	return strings.Count(string(b), "Successfully re-authenticated with")
}

func appendFile(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(s); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Destroy kills the node (its data is thrown away) and removes its data.
func (k *OAuthKafka) Destroy() {
	k.Kill()
	os.RemoveAll(k.Dir)
}

// NewOAuthApacheKafka is StartOAuthApacheKafka for a test: destroyed at the end, a failure
// (CI) or skip (elsewhere) when it cannot start, its log printed when the test failed.
func NewOAuthApacheKafka(t testing.TB, idp *OAuthServer, probeClient string, opts OAuthOpts) *OAuthKafka {
	t.Helper()
	k, err := StartOAuthApacheKafka(idp, probeClient, opts)
	if err != nil {
		Unavailable(t, "Apache Kafka "+ApacheKafkaVersion+" with an OAUTHBEARER listener", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("Apache Kafka log (%s):\n%s", k.Dir, k.Log())
		}
		k.Destroy()
	})
	return k
}
