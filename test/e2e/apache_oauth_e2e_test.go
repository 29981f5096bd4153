package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
)

// End-to-end tests of kafka.sasl.mechanism OAUTHBEARER against Apache Kafka 4.4: one node
// (testenv.NewOAuthApacheKafka) with a SASL_PLAINTEXT listener whose
// OAuthBearerValidatorCallbackHandler checks the JWTs against the JWK Set, issuer and audience
// of an identity provider the test runs (testenv.OAuthServer: client credentials grant, RS256
// JWTs). The listener has connections.max.reauth.ms set, so the broker bounds each session by
// its token's exp and closes connections that do not re-authenticate (KIP-368). The test reads
// the topics on the PLAINTEXT listener.

const (
	oauthClient        = "outboxd-svc"
	oauthSecret        = "0auth-Client-S3cret-5d1e7a"
	oauthExpiredClient = "stale-clock-svc" // its tokens are already expired when issued
	oauthExpiredSecret = "0auth-Expired-S3cret-2b8c41"
	oauthWrongSecret   = "0auth-Wr0ng-S3cret-a93f06"
	oauthAudience      = "outboxd-kafka"
	// oauthLifetime is the lifetime of the tokens of oauthClient: short, so that the run below
	// outlives several of them (outboxd refreshes at 80% of it, sarama re-authenticates each
	// connection at 85-95% of its session).
	oauthLifetime = 15 * time.Second
)

// TestApacheOAuth runs outboxd over SASL/OAUTHBEARER with the client credentials grant: check
// passes, run delivers across several token lifetimes, and a wrong client secret, an expired
// token and an unreachable token endpoint each give an error naming the kafka.sasl key at fault;
// no output shows a client secret or a token.
func TestApacheOAuth(t *testing.T) {
	apacheOnly(t, "OAUTHBEARER needs the real broker (it starts its own node with an OAUTHBEARER listener and a local identity provider)")
	idp, err := testenv.StartOAuthServer(oauthAudience, map[string]testenv.OAuthClient{
		oauthClient:        {Secret: oauthSecret, Lifetime: oauthLifetime},
		oauthExpiredClient: {Secret: oauthExpiredSecret, Expired: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer idp.Close()
	start := time.Now()
	k := testenv.NewOAuthApacheKafka(t, idp, oauthClient, testenv.OAuthOpts{ReauthMS: 3600_000})
	t.Logf("broker up in %v", time.Since(start).Round(time.Millisecond))
	s := &oauthSuite{k: k, idp: idp}
	t.Run("Deliver", s.testDeliver)
	t.Run("Mistakes", s.testMistakes)
}

type oauthSuite struct {
	k   *testenv.OAuthKafka
	idp *testenv.OAuthServer
}

func (s *oauthSuite) yaml(tokenURL, client, secret string) string {
	return fmt.Sprintf("  sasl:\n    mechanism: OAUTHBEARER\n    token_url: %s\n    client_id: %s\n    client_secret: %s\n    scope: kafka:write kafka:describe\n",
		tokenURL, client, secret)
}

// noSecrets fails when out holds a client secret or a JWT (the signed header every token of
// the test's identity provider starts with).
func (s *oauthSuite) noSecrets(t *testing.T, what, out string) {
	t.Helper()
	for _, sec := range []string{oauthSecret, oauthExpiredSecret, oauthWrongSecret, "eyJhbGciOiJSUzI1NiIs"} {
		if strings.Contains(out, sec) {
			t.Errorf("%s shows a secret or a token (%q…):\n%s", what, sec[:6], out)
		}
	}
}

// testDeliver: check says OK for Kafka; run delivers rows committed while more than three of
// its tokens expire one after the other (each connection re-authenticated with a refreshed
// token, or the broker would close it), and stops cleanly; no output shows a secret.
func (s *oauthSuite) testDeliver(t *testing.T) {
	e := newEnvOn(t, &testenv.Broker{Port: s.k.OAuthPort}, "outbox:\n  topic: oauth.deliver.${routedByValue}\n")
	e.editConfig("kafka:\n", "kafka:\n  dlq_topic: oauth.deliver.dlq\n"+s.yaml(s.idp.TokenURL(), oauthClient, oauthSecret))
	out, errOut, code := outboxd(t, e.cfgPath, "check")
	s.noSecrets(t, "check", out+errOut)
	if code != 0 || !strings.Contains(out, "OK   kafka reachable") {
		t.Fatalf("check over OAUTHBEARER: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("check says:\n%s", out)

	before := s.idp.Issued(oauthClient)
	p := e.start()
	c := e.conn()
	var want []string
	started := time.Now()
	// Rows in rounds until the run has outlived three token lifetimes; each round waits until
	// its rows are on the topic, so delivery never stalls behind an expired session.
	for round := 0; time.Since(started) < 3*oauthLifetime+5*time.Second; round++ {
		want = append(want, e.insert(c, fmt.Sprintf("K%d", round%3), 5)...)
		got := testenv.Consume(t, s.k.Addr(), `oauth\.deliver\.order`, len(want), 30*time.Second)
		if n, dups := countDistinct(got); n != len(want) || dups != 0 {
			t.Fatalf("round %d (%v in): %d distinct records (%d duplicates) on oauth.deliver.order, want %d\n%s",
				round, time.Since(started).Round(time.Second), n, dups, len(want), p.Out.String())
		}
		// Wait for the next round on a condition: a new token, or a few seconds passing.
		n := s.idp.Issued(oauthClient)
		harness.WaitFor(t, 20*time.Second, "a token refresh or the next round", func() bool {
			return s.idp.Issued(oauthClient) > n || time.Since(started) > time.Duration(round+1)*4*time.Second
		})
	}
	got := testenv.Consume(t, s.k.Addr(), `oauth\.deliver\.order`, len(want), 30*time.Second)
	if n, dups := countDistinct(got); n != len(want) || dups != 0 || len(hasAll(got, want)) > 0 {
		t.Fatalf("%d distinct records (%d duplicates), want %d", n, dups, len(want))
	}
	issued := s.idp.Issued(oauthClient) - before
	reauth := s.k.Reauthentications()
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d:\n%s", code, p.Out.String())
	}
	log := p.Out.String()
	s.noSecrets(t, "run's log", log)
	// One token per oauthLifetime*0.8 at least: the run asked for new ones before the old expired.
	if min := int(time.Since(started) / oauthLifetime); issued < min {
		t.Errorf("run got %d tokens in %v of %v tokens, want at least %d (refreshed before expiry)",
			issued, time.Since(started).Round(time.Second), oauthLifetime, min)
	}
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "level=ERROR") || strings.Contains(l, "level=WARN") {
			t.Errorf("run logged a problem while its tokens were refreshed: %s", l)
		}
	}
	// The broker logged the connections re-authenticating (each with a token whose exp bounds
	// its session): outboxd's connections outlived their first tokens.
	if reauth == 0 {
		t.Errorf("the broker logged no re-authentication in %v of %v tokens", time.Since(started).Round(time.Second), oauthLifetime)
	}
	t.Logf("%d rows delivered over %v; %d tokens fetched by run; %d re-authentications on the broker",
		len(want), time.Since(started).Round(time.Second), issued, reauth)
}

// testMistakes: a wrong client secret, a token endpoint issuing expired tokens and an
// unreachable token endpoint make check FAIL and run, dlq tail and dlq replay exit 1, each
// naming its key; no output shows a secret.
func (s *oauthSuite) testMistakes(t *testing.T) {
	e := newEnvOn(t, &testenv.Broker{Port: s.k.OAuthPort}, "outbox:\n  topic: oauth.mistakes.${routedByValue}\n")
	base, err := os.ReadFile(e.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	unreachable := "http://127.0.0.1:1/token" // port 1: nothing listens
	for _, m := range []struct {
		name      string
		yaml      string
		key       string // the key every command's message names
		checkWant string // in check's FAIL line
		runWant   string // in run's error
	}{
		{"wrong client secret", s.yaml(s.idp.TokenURL(), oauthClient, oauthWrongSecret), "kafka.sasl.client_secret",
			"kafka.sasl.client_secret: check kafka.sasl.client_id and kafka.sasl.client_secret",
			// (run's log quotes the client id again: the text before it)
			fmt.Sprintf("kafka.sasl.client_secret: the token endpoint kafka.sasl.token_url (%s) refused client kafka.sasl.client_id ", s.idp.TokenURL())},
		{"expired token", s.yaml(s.idp.TokenURL(), oauthExpiredClient, oauthExpiredSecret), "kafka.sasl.token_url",
			"kafka.sasl.token_url / kafka.sasl.client_id: the broker refused the OAUTHBEARER token",
			"kafka.sasl.token_url / kafka.sasl.client_id: the broker refused the OAUTHBEARER token"},
		{"unreachable token endpoint", s.yaml(unreachable, oauthClient, oauthSecret), "kafka.sasl.token_url",
			"kafka.sasl.token_url: check kafka.sasl.token_url and network access to it",
			"kafka.sasl.token_url: cannot reach the token endpoint " + unreachable},
	} {
		cfg := filepath.Join(e.dir, strings.ReplaceAll(m.name, " ", "-")+".yaml")
		writeFile(t, cfg, strings.Replace(string(base), "kafka:\n", "kafka:\n"+m.yaml, 1))
		t.Run(strings.ReplaceAll(m.name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			out, errOut, code := outboxd(t, cfg, "check")
			s.noSecrets(t, "check", out+errOut)
			t.Logf("%s: check says:\n%s%s", m.name, out, errOut)
			if code != 1 || !failLine(out, "kafka reachable", m.checkWant) {
				t.Errorf("%s: check exit %d, want 1 and a FAIL kafka reachable line naming %q", m.name, code, m.checkWant)
			}
			out, errOut, code = outboxd(t, cfg, "run")
			s.noSecrets(t, "run", out+errOut)
			t.Logf("%s: run says:\n%s%s", m.name, out, errOut)
			if code != 1 || !strings.Contains(out+errOut, m.runWant) {
				t.Errorf("%s: run exit %d, want 1 and a message with %q", m.name, code, m.runWant)
			}
			for _, args := range [][]string{{"dlq", "tail"}, {"dlq", "replay", "--all", "--timeout", "10s"}} {
				out, errOut, code = outboxd(t, cfg, args...)
				s.noSecrets(t, strings.Join(args, " "), out+errOut)
				if code != 1 || !strings.Contains(out+errOut, m.key) {
					t.Errorf("%s: %s exit %d, want 1 and a message naming %s:\n%s%s", m.name, strings.Join(args, " "), code, m.key, out, errOut)
				}
			}
		})
	}
}

// failLine reports whether out has the FAIL line of check name ("FAIL name: reason — fix") and
// it holds want.
func failLine(out, name, want string) bool {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "FAIL "+name+": ") && strings.Contains(l, want) {
			return true
		}
	}
	return false
}
