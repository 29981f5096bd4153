package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

// OAUTHBEARER (kafka.sasl.mechanism): an OAuth 2.0 client credentials grant (RFC 6749 4.4)
// against kafka.sasl.token_url, done by golang.org/x/oauth2/clientcredentials, behind sarama's
// AccessTokenProvider.
//
// sarama asks for a token on every new broker connection and, when the broker announces a
// session lifetime (KIP-368: connections.max.reauth.ms on the broker, bounded by the token's
// exp), re-authenticates each connection at 85-95% of that lifetime (broker.go,
// computeSaslSessionLifetime), asking again. The provider hands out one cached token and fetches
// a new one once oauthRefreshFactor of the old one's lifetime has passed (the Java client's
// sasl.login.refresh.window.factor default), so a re-authentication always gets a token with
// most of its lifetime left. A refresh that fails while the cached token is still valid hands
// out the cached one: an identity provider's short outage does not break connections.

const (
	// oauthFetchTimeout bounds one request to the token endpoint (sarama wants Token to return
	// an error after a short while rather than block).
	oauthFetchTimeout = 15 * time.Second
	// oauthRefreshFactor: fetch a new token once this share of the cached one's lifetime passed.
	oauthRefreshFactor = 0.8
	// oauthExpiryMargin: a cached token this close to its expiry is not handed out.
	oauthExpiryMargin = 10 * time.Second
	// oauthNoExpiryLifetime: how long a token whose answer has no expires_in is reused.
	oauthNoExpiryLifetime = 5 * time.Minute
)

// oauthProvider is the sarama.AccessTokenProvider of kafka.sasl.mechanism OAUTHBEARER. Safe for
// concurrent use (sarama calls Token from each broker's goroutine).
type oauthProvider struct {
	fetch    func(context.Context) (*oauth2.Token, error) // one grant request
	now      func() time.Time
	tokenURL string
	clientID string
	secret   string // only to scrub it from errors

	mu        sync.Mutex
	token     string
	refreshAt time.Time // fetch a new token from then on
	expiresAt time.Time // hand the cached one out until then (zero: none cached)
}

func newOAuthTokenProvider(s *SASLConfig) (sarama.AccessTokenProvider, error) {
	return newOAuthProvider(s, &http.Client{Timeout: oauthFetchTimeout}, time.Now)
}

func newOAuthProvider(s *SASLConfig, hc *http.Client, now func() time.Time) (*oauthProvider, error) {
	for _, k := range []struct{ key, v string }{
		{"kafka.sasl.token_url", s.TokenURL}, {"kafka.sasl.client_id", s.ClientID}, {"kafka.sasl.client_secret", s.ClientSecret},
	} {
		if k.v == "" {
			return nil, fmt.Errorf("%s: required with kafka.sasl.mechanism OAUTHBEARER", k.key)
		}
	}
	if u, err := url.Parse(s.TokenURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("kafka.sasl.token_url: %q is not an http(s) URL of the OAuth 2.0 token endpoint", s.TokenURL)
	}
	cc := &clientcredentials.Config{
		ClientID:     s.ClientID,
		ClientSecret: s.ClientSecret,
		TokenURL:     s.TokenURL,
		Scopes:       strings.Fields(s.Scope),
		// AuthStyleAutoDetect: HTTP Basic first (RFC 6749's client_secret_basic), then the
		// credentials in the form body (client_secret_post) if the endpoint refuses that.
	}
	ctx := context.WithValue(context.Background(), oauth2.HTTPClient, hc)
	return &oauthProvider{
		fetch:    func(context.Context) (*oauth2.Token, error) { return cc.Token(ctx) },
		now:      now,
		tokenURL: s.TokenURL,
		clientID: s.ClientID,
		secret:   s.ClientSecret,
	}, nil
}

// Token returns the cached token, or fetches a new one when the cached one is past its refresh
// point (or none is cached). Errors name the kafka.sasl key at fault and never hold the client
// secret or a token.
func (p *oauthProvider) Token() (*sarama.AccessToken, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if p.token != "" && now.Before(p.refreshAt) {
		return &sarama.AccessToken{Token: p.token}, nil
	}
	t, err := p.fetch(context.Background())
	if err == nil && t.AccessToken == "" {
		err = errors.New("the answer holds no access_token")
	}
	if err != nil {
		if p.token != "" && now.Before(p.expiresAt) {
			return &sarama.AccessToken{Token: p.token}, nil // refresh failed early: the old token still serves
		}
		return nil, p.explain(err)
	}
	got := p.now()
	life := oauthNoExpiryLifetime
	switch {
	case t.ExpiresIn > 0: // the answer's expires_in, counted from when it arrived
		life = time.Duration(t.ExpiresIn) * time.Second
	case !t.Expiry.IsZero():
		life = time.Until(t.Expiry)
	}
	p.token = t.AccessToken
	p.refreshAt = got.Add(time.Duration(float64(life) * oauthRefreshFactor))
	p.expiresAt = got.Add(life - oauthExpiryMargin)
	return &sarama.AccessToken{Token: p.token}, nil
}

// OAuthError is a failed token request: Key is the kafka.sasl key to fix, Fix what to do. Its
// text holds neither the client secret nor the endpoint's raw answer; Unwrap gives the
// underlying error.
type OAuthError struct {
	Key  string
	What string // what failed
	Fix  string // what to do
	err  error
}

func (e *OAuthError) Error() string { return e.Key + ": " + e.What + ": " + e.Fix }
func (e *OAuthError) Unwrap() error { return e.err }

// explain turns a failed grant into an error naming the key at fault.
func (p *oauthProvider) explain(err error) error {
	e := &OAuthError{Key: "kafka.sasl.token_url", err: err}
	endpoint := "check that kafka.sasl.token_url is the identity provider's OAuth 2.0 token endpoint"
	var (
		re   *oauth2.RetrieveError
		ue   *url.Error
		nerr net.Error
	)
	switch {
	case errors.As(err, &re):
		status, answer := 0, re.ErrorCode
		if re.Response != nil {
			status = re.Response.StatusCode
			answer = strings.TrimSpace(fmt.Sprintf("HTTP %d %s", status, answer))
		}
		if re.ErrorDescription != "" {
			answer += ": " + re.ErrorDescription
		}
		switch {
		case re.ErrorCode == "invalid_client" || status == http.StatusUnauthorized:
			e.Key = "kafka.sasl.client_secret"
			e.What = fmt.Sprintf("the token endpoint kafka.sasl.token_url (%s) refused client kafka.sasl.client_id %q (%s)", p.tokenURL, p.clientID, answer)
			e.Fix = "check kafka.sasl.client_id and kafka.sasl.client_secret (the client must exist at that identity provider, with that secret)"
		case re.ErrorCode == "unauthorized_client" || status == http.StatusForbidden:
			e.Key = "kafka.sasl.client_id"
			e.What = fmt.Sprintf("the token endpoint kafka.sasl.token_url (%s) does not let client kafka.sasl.client_id %q use the client credentials grant (%s)", p.tokenURL, p.clientID, answer)
			e.Fix = "enable the client credentials grant for that client at the identity provider, or check kafka.sasl.client_id"
		case re.ErrorCode == "invalid_scope":
			e.Key = "kafka.sasl.scope"
			e.What = fmt.Sprintf("the token endpoint kafka.sasl.token_url (%s) refused the scope asked for client kafka.sasl.client_id %q (%s)", p.tokenURL, p.clientID, answer)
			e.Fix = "set kafka.sasl.scope to scopes that client may ask for (space-separated), or remove it"
		default:
			e.What = fmt.Sprintf("the token endpoint %s refused the client credentials grant for kafka.sasl.client_id %q (%s)", p.tokenURL, p.clientID, answer)
			e.Fix = endpoint
		}
	case errors.As(err, &nerr) && nerr.Timeout():
		e.What = fmt.Sprintf("the token endpoint %s did not answer within %s", p.tokenURL, oauthFetchTimeout)
		e.Fix = "check kafka.sasl.token_url and network access to it"
	case errors.As(err, &ue):
		e.What = fmt.Sprintf("cannot reach the token endpoint %s: %v", p.tokenURL, ue.Err)
		e.Fix = "check kafka.sasl.token_url and network access to it"
	default:
		e.What = fmt.Sprintf("the token endpoint %s gave no usable token for kafka.sasl.client_id %q: %v", p.tokenURL, p.clientID, err)
		e.Fix = endpoint
	}
	if p.secret != "" {
		e.What = strings.ReplaceAll(e.What, p.secret, "[redacted]")
	}
	return e
}
