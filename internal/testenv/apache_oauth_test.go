package testenv

import (
	"strings"
	"testing"
)

// TestOAuthApacheKafka: the OAUTHBEARER listener accepts a token of its identity provider
// (StartOAuthApacheKafka waits for that) and refuses an expired one and one signed by another
// provider's key.
func TestOAuthApacheKafka(t *testing.T) {
	clients := map[string]OAuthClient{"good": {Secret: "good-secret"}, "expired": {Secret: "expired-secret", Expired: true}}
	idp, err := StartOAuthServer("kafka-test", clients)
	if err != nil {
		t.Fatal(err)
	}
	defer idp.Close()
	other, err := StartOAuthServer("kafka-test", clients)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	k := NewOAuthApacheKafka(t, idp, "good", OAuthOpts{})
	if err := k.oauthLogin("good"); err != nil {
		t.Fatalf("a good token: %v", err)
	}
	if err := k.oauthLogin("expired"); err == nil || !strings.Contains(err.Error(), "SASL_AUTHENTICATION_FAILED") {
		t.Errorf("an expired token: %v, want SASL_AUTHENTICATION_FAILED", err)
	}
	stranger := &OAuthKafka{ApacheKafka: k.ApacheKafka, OAuthPort: k.OAuthPort, IdP: other}
	if err := stranger.oauthLogin("good"); err == nil || !strings.Contains(err.Error(), "SASL_AUTHENTICATION_FAILED") {
		t.Errorf("a token of another key: %v, want SASL_AUTHENTICATION_FAILED", err)
	}
	if n := idp.Issued("good"); n < 2 {
		t.Errorf("idp issued %d tokens to good, want at least 2", n)
	}
}
