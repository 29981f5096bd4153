package kafka

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

const (
	testClientID     = "outboxd-svc"
	testClientSecret = "s3cret-Client-Secret-9c41"
)

// tokenEndpoint is an OAuth 2.0 token endpoint (client credentials grant) for one client. It
// accepts the credentials as HTTP Basic or in the form body, answers RFC 6749's invalid_client
// (401) to a wrong secret, and counts the tokens it issued.
type tokenEndpoint struct {
	mu        sync.Mutex
	expiresIn int // seconds
	issued    int
	scopes    []string // the scope parameter of each request
	down      bool     // answer 503
}

func (e *tokenEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := r.ParseForm(); err != nil || r.Method != http.MethodPost || r.PostForm.Get("grant_type") != "client_credentials" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	if e.down {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	id, secret, ok := r.BasicAuth()
	if !ok {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	w.Header().Set("Content-Type", "application/json")
	if id != testClientID || secret != testClientSecret {
		w.WriteHeader(http.StatusUnauthorized)
		json.NewEncoder(w).Encode(map[string]string{"error": "invalid_client", "error_description": "client authentication failed"})
		return
	}
	if r.PostForm.Get("scope") == "forbidden" {
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(map[string]string{"error": "invalid_scope"})
		return
	}
	e.issued++
	e.scopes = append(e.scopes, r.PostForm.Get("scope"))
	json.NewEncoder(w).Encode(map[string]any{"access_token": fmt.Sprintf("token-%d", e.issued), "token_type": "Bearer", "expires_in": e.expiresIn})
}

func (e *tokenEndpoint) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.issued
}

// oauthClock is the provider's clock, moved by the test.
type oauthClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *oauthClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *oauthClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newTestProvider(t *testing.T, url, secret, scope string) (*oauthProvider, *oauthClock) {
	t.Helper()
	clk := &oauthClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	p, err := newOAuthProvider(&SASLConfig{Mechanism: "OAUTHBEARER", TokenURL: url, ClientID: testClientID, ClientSecret: secret, Scope: scope},
		&http.Client{Timeout: 5 * time.Second}, clk.now)
	if err != nil {
		t.Fatal(err)
	}
	return p, clk
}

func mustToken(t *testing.T, p sarama.AccessTokenProvider) string {
	t.Helper()
	tok, err := p.Token()
	if err != nil {
		t.Fatal(err)
	}
	return tok.Token
}

// TestOAuthRefreshBeforeExpiry: one token serves every call until 80% of its lifetime has
// passed, then the next call fetches a new one (before the old one expires); the scope is sent
// space-separated; a refresh that fails while the old token is still valid hands out the old
// one, and one that fails after it expired is an error.
func TestOAuthRefreshBeforeExpiry(t *testing.T) {
	ep := &tokenEndpoint{expiresIn: 100}
	srv := httptest.NewServer(ep)
	defer srv.Close()
	p, clk := newTestProvider(t, srv.URL, testClientSecret, "kafka:write  kafka:describe")

	if got := mustToken(t, p); got != "token-1" {
		t.Fatalf("first token %q, want token-1", got)
	}
	clk.add(79 * time.Second)
	for range 3 {
		if got := mustToken(t, p); got != "token-1" {
			t.Fatalf("at 79s of 100s: token %q, want the cached token-1", got)
		}
	}
	if n := ep.count(); n != 1 {
		t.Fatalf("%d tokens fetched before the refresh point, want 1", n)
	}
	clk.add(2 * time.Second) // 81s: past 80%, 19s before expiry
	if got := mustToken(t, p); got != "token-2" {
		t.Fatalf("at 81s of 100s: token %q, want a new token-2", got)
	}
	ep.mu.Lock()
	scopes := append([]string(nil), ep.scopes...)
	ep.mu.Unlock()
	if len(scopes) != 2 || scopes[0] != "kafka:write kafka:describe" {
		t.Errorf("scope parameters %q, want \"kafka:write kafka:describe\" each time", scopes)
	}

	// The endpoint goes down: past the refresh point the still-valid token serves...
	ep.mu.Lock()
	ep.down = true
	ep.mu.Unlock()
	clk.add(85 * time.Second) // 85s into token-2's 100s
	if got := mustToken(t, p); got != "token-2" {
		t.Fatalf("endpoint down, token-2 still valid: token %q, want token-2", got)
	}
	// ...and once it is within the expiry margin the failure is an error naming the key.
	clk.add(6 * time.Second) // 91s: less than oauthExpiryMargin left
	_, err := p.Token()
	var oe *OAuthError
	if !errors.As(err, &oe) || oe.Key != "kafka.sasl.token_url" || !strings.Contains(err.Error(), "HTTP 503") {
		t.Fatalf("endpoint down, token expiring: err %v, want an OAuthError for kafka.sasl.token_url naming HTTP 503", err)
	}
}

// TestOAuthWrongSecret: a wrong client secret is an error naming kafka.sasl.client_secret and
// kafka.sasl.client_id, never holding the secret; ConnectHint gives the fix from it.
func TestOAuthWrongSecret(t *testing.T) {
	ep := &tokenEndpoint{expiresIn: 3600}
	srv := httptest.NewServer(ep)
	defer srv.Close()
	const wrong = "wr0ng-Client-Secret-77d2"
	p, _ := newTestProvider(t, srv.URL, wrong, "")
	_, err := p.Token()
	if err == nil {
		t.Fatal("a wrong secret got a token")
	}
	msg := err.Error()
	want := fmt.Sprintf(`kafka.sasl.client_secret: the token endpoint kafka.sasl.token_url (%s) refused client kafka.sasl.client_id %q (HTTP 401 invalid_client: client authentication failed): check kafka.sasl.client_id and kafka.sasl.client_secret`, srv.URL, testClientID)
	if !strings.HasPrefix(msg, want) {
		t.Errorf("error\n %s\nwant it to start\n %s", msg, want)
	}
	if strings.Contains(msg, wrong) || strings.Contains(msg, testClientSecret) {
		t.Errorf("error shows the secret: %s", msg)
	}
	cfg := Config{SASL: &SASLConfig{Mechanism: "OAUTHBEARER", TokenURL: srv.URL, ClientID: testClientID, ClientSecret: wrong}}
	wrapped := sarama.Wrap(sarama.ErrOutOfBrokers, fmt.Errorf("broker 127.0.0.1:9092: %w", err))
	if h := cfg.ConnectHint(wrapped); !strings.HasPrefix(h, "kafka.sasl.client_secret: check kafka.sasl.client_id and kafka.sasl.client_secret") {
		t.Errorf("hint %q, want the fix for kafka.sasl.client_secret", h)
	}
	if n := ep.count(); n != 0 {
		t.Errorf("%d tokens issued to a wrong secret", n)
	}
}

// TestOAuthErrors: an unreachable endpoint, a refused scope, a non-token answer and missing
// settings each name their key; none shows the secret.
func TestOAuthErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/token"
	ln.Close() // nothing listens there now
	ep := httptest.NewServer(&tokenEndpoint{expiresIn: 60})
	defer ep.Close()
	notOAuth := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"hello": "` + testClientSecret + `"}`)) // 200 with no access_token (echoing the secret)
	}))
	defer notOAuth.Close()
	hang := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-hang }))
	defer slow.Close()
	defer close(hang)

	for _, c := range []struct {
		name, url, scope string
		timeout          time.Duration
		key, want        string
	}{
		{"unreachable", closed, "", 5 * time.Second, "kafka.sasl.token_url", "kafka.sasl.token_url: cannot reach the token endpoint " + closed},
		{"invalid scope", ep.URL, "forbidden", 5 * time.Second, "kafka.sasl.scope", "kafka.sasl.scope: the token endpoint kafka.sasl.token_url"},
		{"no access_token", notOAuth.URL, "", 5 * time.Second, "kafka.sasl.token_url", "kafka.sasl.token_url: the token endpoint " + notOAuth.URL + " gave no usable token"},
		{"no answer", slow.URL, "", 200 * time.Millisecond, "kafka.sasl.token_url", "kafka.sasl.token_url: the token endpoint " + slow.URL + " did not answer within"},
	} {
		p, err := newOAuthProvider(&SASLConfig{Mechanism: "OAUTHBEARER", TokenURL: c.url, ClientID: testClientID, ClientSecret: testClientSecret, Scope: c.scope},
			&http.Client{Timeout: c.timeout}, time.Now)
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Token()
		var oe *OAuthError
		if !errors.As(err, &oe) || oe.Key != c.key || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s: error %v, want an OAuthError for %s starting %q", c.name, err, c.key, c.want)
			continue
		}
		if strings.Contains(err.Error(), testClientSecret) {
			t.Errorf("%s: error shows the secret: %v", c.name, err)
		}
	}

	for _, c := range []struct {
		s    SASLConfig
		want string
	}{
		{SASLConfig{ClientID: "a", ClientSecret: "b"}, "kafka.sasl.token_url: required"},
		{SASLConfig{TokenURL: "https://idp/token", ClientSecret: "b"}, "kafka.sasl.client_id: required"},
		{SASLConfig{TokenURL: "https://idp/token", ClientID: "a"}, "kafka.sasl.client_secret: required"},
		{SASLConfig{TokenURL: "idp/token", ClientID: "a", ClientSecret: "b"}, `kafka.sasl.token_url: "idp/token" is not an http(s) URL`},
	} {
		c.s.Mechanism = "OAUTHBEARER"
		if _, err := (Config{Brokers: []string{"k:9092"}, SASL: &c.s}).SaramaConfig(); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.s, err, c.want)
		}
	}
}

// TestOAuthSaramaConfig: OAUTHBEARER sets sarama's mechanism and token provider, and the
// provider fetches nothing until asked.
func TestOAuthSaramaConfig(t *testing.T) {
	sc, err := Config{Brokers: []string{"k:9092"}, SASL: &SASLConfig{Mechanism: "oauthbearer", TokenURL: "https://idp.example/token",
		ClientID: testClientID, ClientSecret: testClientSecret}}.SaramaConfig()
	if err != nil {
		t.Fatal(err)
	}
	if sc.Net.SASL.Mechanism != sarama.SASLTypeOAuth || sc.Net.SASL.TokenProvider == nil || !sc.Net.SASL.Enable {
		t.Fatalf("SASL %+v: want OAUTHBEARER with a token provider", sc.Net.SASL)
	}
	if err := sc.Validate(); err != nil {
		t.Fatalf("sarama refuses the config: %v", err)
	}
}
