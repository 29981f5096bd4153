package testenv

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"time"
)

// OAuthServer is a small OAuth 2.0 identity provider for tests: POST /token implements the
// client credentials grant (RFC 6749 4.4; credentials as HTTP Basic or in the form body) for
// the clients it was given, and issues RS256-signed JWTs (sub, iss, aud, exp, iat, scope, jti)
// whose key GET /jwks publishes as a JWK Set (RFC 7517), as Kafka's
// sasl.oauthbearer.jwks.endpoint.url expects. A wrong client or secret gets 401 invalid_client.
type OAuthServer struct {
	URL      string // http://127.0.0.1:port
	Issuer   string // the iss claim (= URL)
	Audience string // the aud claim

	key *rsa.PrivateKey
	kid string
	srv *httptest.Server

	mu      sync.Mutex
	clients map[string]OAuthClient
	issued  map[string]int
}

// OAuthClient is one client the server knows.
type OAuthClient struct {
	Secret   string
	Lifetime time.Duration // of its tokens; 0 = 1h
	// Expired issues tokens whose exp is already an hour past (iat two hours ago), while the
	// answer's expires_in still says Lifetime: an identity provider with a wrong clock, or a
	// stale cache in front of it.
	Expired bool
}

// TokenURL is the token endpoint's URL (kafka.sasl.token_url).
func (s *OAuthServer) TokenURL() string { return s.URL + "/token" }

// JWKSURL is the JWK Set's URL (the broker's sasl.oauthbearer.jwks.endpoint.url).
func (s *OAuthServer) JWKSURL() string { return s.URL + "/jwks" }

// StartOAuthServer starts the server on a loopback port with a fresh RSA key. Close it when done.
func StartOAuthServer(audience string, clients map[string]OAuthClient) (*OAuthServer, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	kidBytes := make([]byte, 8)
	rand.Read(kidBytes)
	s := &OAuthServer{Audience: audience, key: key, kid: base64.RawURLEncoding.EncodeToString(kidBytes),
		clients: map[string]OAuthClient{}, issued: map[string]int{}}
	for id, c := range clients {
		s.clients[id] = c
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /token", s.token)
	mux.HandleFunc("GET /jwks", s.jwks)
	s.srv = httptest.NewServer(mux)
	s.URL, s.Issuer = s.srv.URL, s.srv.URL
	return s, nil
}

// Close stops the server.
func (s *OAuthServer) Close() { s.srv.Close() }

// Issued is how many tokens the server issued to client id.
func (s *OAuthServer) Issued(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.issued[id]
}

func (s *OAuthServer) jwks(w http.ResponseWriter, _ *http.Request) {
	pub := s.key.PublicKey
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"keys": []map[string]string{{
		"kty": "RSA", "use": "sig", "alg": "RS256", "kid": s.kid,
		"n": base64.RawURLEncoding.EncodeToString(pub.N.Bytes()),
		"e": base64.RawURLEncoding.EncodeToString(big.NewInt(int64(pub.E)).Bytes()),
	}}})
}

func (s *OAuthServer) token(w http.ResponseWriter, r *http.Request) {
	oauthErr := func(status int, code, desc string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]string{"error": code, "error_description": desc})
	}
	if err := r.ParseForm(); err != nil {
		oauthErr(http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	if gt := r.PostForm.Get("grant_type"); gt != "client_credentials" {
		oauthErr(http.StatusBadRequest, "unsupported_grant_type", "only client_credentials")
		return
	}
	id, secret, basic := r.BasicAuth()
	if basic { // RFC 6749 2.3.1: form-urlencoded before the Basic encoding
		id, _ = url.QueryUnescape(id)
		secret, _ = url.QueryUnescape(secret)
	} else {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	s.mu.Lock()
	c, known := s.clients[id]
	s.mu.Unlock()
	if !known || secret != c.Secret {
		if basic {
			w.Header().Set("WWW-Authenticate", `Basic realm="token"`)
		}
		oauthErr(http.StatusUnauthorized, "invalid_client", "client authentication failed")
		return
	}
	life := c.Lifetime
	if life == 0 {
		life = time.Hour
	}
	now := time.Now()
	iat, exp := now, now.Add(life)
	if c.Expired {
		iat, exp = now.Add(-2*time.Hour), now.Add(-time.Hour)
	}
	scope := r.PostForm.Get("scope")
	jti := make([]byte, 12)
	rand.Read(jti)
	claims := map[string]any{"sub": id, "iss": s.Issuer, "aud": s.Audience, "iat": iat.Unix(), "exp": exp.Unix(),
		"jti": base64.RawURLEncoding.EncodeToString(jti)}
	if scope != "" { // Kafka's validator refuses an empty scope claim, not an absent one
		claims["scope"] = scope
	}
	tok, err := s.sign(claims)
	if err != nil {
		oauthErr(http.StatusInternalServerError, "server_error", err.Error())
		return
	}
	s.mu.Lock()
	s.issued[id]++
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(map[string]any{"access_token": tok, "token_type": "Bearer",
		"expires_in": int(life / time.Second), "scope": scope})
}

// sign makes an RS256 JWS compact serialization (RFC 7515) of claims.
func (s *OAuthServer) sign(claims map[string]any) (string, error) {
	part := func(v any) (string, error) {
		b, err := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b), err
	}
	h, err := part(map[string]string{"alg": "RS256", "typ": "JWT", "kid": s.kid})
	if err != nil {
		return "", err
	}
	c, err := part(claims)
	if err != nil {
		return "", err
	}
	input := h + "." + c
	sum := sha256.Sum256([]byte(input))
	sig, err := rsa.SignPKCS1v15(rand.Reader, s.key, crypto.SHA256, sum[:])
	if err != nil {
		return "", fmt.Errorf("sign the token: %w", err)
	}
	return input + "." + base64.RawURLEncoding.EncodeToString(sig), nil
}

// Token issues a token to client id as the token endpoint would (for a test's own login).
func (s *OAuthServer) Token(id string) (string, error) {
	s.mu.Lock()
	c, ok := s.clients[id]
	s.mu.Unlock()
	if !ok {
		return "", fmt.Errorf("no client %q", id)
	}
	req, err := http.NewRequest(http.MethodPost, s.TokenURL(), strings.NewReader("grant_type=client_credentials"))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(id, c.Secret)
	resp, err := s.srv.Client().Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var out struct {
		AccessToken string `json:"access_token"`
		Error       string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return "", err
	}
	if out.AccessToken == "" {
		return "", fmt.Errorf("token endpoint: HTTP %d %s", resp.StatusCode, out.Error)
	}
	return out.AccessToken, nil
}
