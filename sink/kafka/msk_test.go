package kafka

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// Static test credentials (AWS's documentation example key pair; not a real account).
const (
	testAccessKey    = "AKIDEXAMPLE"
	testSecretKey    = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
	testSessionToken = "IQoJb3JpZ2luX2VjEXAMPLE/session+token=="
)

// isolateAWS clears the AWS environment of the test process so the standard chain sees only
// what the test sets: empty shared config and credentials files, no profile, no region, no
// web identity or container role, and the EC2 metadata client disabled, so nothing reaches the
// network. It returns the config file's path (empty; a test may write a profile into it).
func isolateAWS(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cfgFile, credFile := filepath.Join(dir, "config"), filepath.Join(dir, "credentials")
	for _, f := range []string{cfgFile, credFile} {
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
		"AWS_ACCESS_KEY", "AWS_SECRET_KEY", "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_REGION",
		"AWS_DEFAULT_REGION", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_SESSION_NAME",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
		"AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"} {
		t.Setenv(k, "") // restored after the test
		os.Unsetenv(k)
	}
	t.Setenv("AWS_CONFIG_FILE", cfgFile)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", credFile)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	return cfgFile
}

func staticAWSCredentials(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", testAccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", testSecretKey)
	t.Setenv("AWS_SESSION_TOKEN", testSessionToken)
}

func mskToken(t *testing.T, s *SASLConfig) (string, error) {
	t.Helper()
	p, err := newMSKTokenProvider(s)
	if err != nil {
		return "", err
	}
	tok, err := p.Token()
	if err != nil {
		return "", err
	}
	return tok.Token, nil
}

// sigV4Encode is SigV4's URI encoding: every byte but the unreserved A-Z a-z 0-9 - _ . ~ as
// %XX, upper-case hex (so a space is %20, not +).
func sigV4Encode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || strings.IndexByte("-_.~", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

// presignedSignature computes a SigV4 query-string signature (a presigned GET of "/") by hand,
// per AWS's "Create a signed AWS API request" steps: the canonical request over every query
// parameter but X-Amz-Signature and those in unsigned, the string to sign, and the HMAC chain.
func presignedSignature(u *url.URL, secret, region, service, payloadHash string, unsigned ...string) string {
	q := u.Query()
	var keys []string
	for k := range q {
		if k == "X-Amz-Signature" || contains(unsigned, k) {
			continue
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var pairs []string
	for _, k := range keys {
		pairs = append(pairs, sigV4Encode(k)+"="+sigV4Encode(q.Get(k)))
	}
	canonical := strings.Join([]string{"GET", "/", strings.Join(pairs, "&"), "host:" + u.Host + "\n", "host", payloadHash}, "\n")
	amzDate := q.Get("X-Amz-Date")
	scope := amzDate[:8] + "/" + region + "/" + service + "/aws4_request"
	sum := sha256.Sum256([]byte(canonical))
	toSign := "AWS4-HMAC-SHA256\n" + amzDate + "\n" + scope + "\n" + hex.EncodeToString(sum[:])
	k := hmacSHA256([]byte("AWS4"+secret), amzDate[:8])
	k = hmacSHA256(k, region)
	k = hmacSHA256(k, service)
	k = hmacSHA256(k, "aws4_request")
	return hex.EncodeToString(hmacSHA256(k, toSign))
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// TestMSKTokenSignedPayload: the token is the base64url (unpadded) of a SigV4-presigned
// https://kafka.<region>.amazonaws.com/ URL for kafka-cluster:Connect, signed with the
// credentials of the standard chain (here the environment), and its X-Amz-Signature is the one
// SigV4 gives, recomputed here by hand.
func TestMSKTokenSignedPayload(t *testing.T) {
	isolateAWS(t)
	staticAWSCredentials(t)
	const region = "eu-west-3"
	before := time.Now().UTC().Truncate(time.Second)
	tok, err := mskToken(t, &SASLConfig{Mechanism: "AWS_MSK_IAM", Region: region})
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now().UTC()
	if strings.ContainsAny(tok, "=+/") {
		t.Errorf("token %q is not unpadded base64url", tok)
	}
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		t.Fatalf("token is not base64url without padding: %v", err)
	}
	if strings.Contains(string(raw), testSecretKey) || strings.Contains(tok, testSecretKey) {
		t.Fatal("the secret access key is in the token")
	}
	u, err := url.Parse(string(raw))
	if err != nil {
		t.Fatalf("decoded token %q is not a URL: %v", raw, err)
	}
	if u.Scheme != "https" || u.Host != "kafka."+region+".amazonaws.com" || (u.Path != "/" && u.Path != "") {
		t.Errorf("URL %s://%s%s, want https://kafka.%s.amazonaws.com/", u.Scheme, u.Host, u.Path, region)
	}
	q := u.Query()
	amzDate := q.Get("X-Amz-Date")
	signedAt, err := time.Parse("20060102T150405Z", amzDate)
	if err != nil || signedAt.Before(before) || signedAt.After(after) {
		t.Errorf("X-Amz-Date %q (%v) not between %v and %v", amzDate, err, before, after)
	}
	want := map[string]string{
		"Action":               "kafka-cluster:Connect",
		"X-Amz-Algorithm":      "AWS4-HMAC-SHA256",
		"X-Amz-Credential":     testAccessKey + "/" + amzDate[:8] + "/" + region + "/kafka-cluster/aws4_request",
		"X-Amz-Expires":        "900",
		"X-Amz-Security-Token": testSessionToken,
		"X-Amz-SignedHeaders":  "host",
	}
	for k, v := range want {
		if got := q.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if ua := q.Get("User-Agent"); !strings.HasPrefix(ua, "aws-msk-iam-sasl-signer-go/") {
		t.Errorf("User-Agent %q, want aws-msk-iam-sasl-signer-go/<version>/<go version>", ua)
	}
	// The signer signs the URL, then adds User-Agent: it is not part of the signature. The
	// payload hash it signs with is SHA-256 of the empty body.
	empty := sha256.Sum256(nil)
	sig := presignedSignature(u, testSecretKey, region, "kafka-cluster", hex.EncodeToString(empty[:]), "User-Agent")
	if got := q.Get("X-Amz-Signature"); got != sig {
		t.Errorf("X-Amz-Signature %s, SigV4 by hand gives %s", got, sig)
	}
	// A different secret gives a different signature (the comparison above is not vacuous).
	if presignedSignature(u, testSecretKey+"x", region, "kafka-cluster", hex.EncodeToString(empty[:]), "User-Agent") == sig {
		t.Error("the hand-computed signature does not depend on the secret")
	}
}

// TestMSKRegion: kafka.sasl.region wins; without it the AWS chain's region (AWS_REGION,
// AWS_DEFAULT_REGION, the shared config file); with none, the error names kafka.sasl.region.
func TestMSKRegion(t *testing.T) {
	host := func(t *testing.T, tok string) string {
		t.Helper()
		raw, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil {
			t.Fatal(err)
		}
		u, err := url.Parse(string(raw))
		if err != nil {
			t.Fatal(err)
		}
		return u.Host
	}
	t.Run("none", func(t *testing.T) {
		isolateAWS(t)
		staticAWSCredentials(t)
		_, err := newMSKTokenProvider(&SASLConfig{Mechanism: "AWS_MSK_IAM"})
		if err == nil || !strings.HasPrefix(err.Error(), "kafka.sasl.region:") || !strings.Contains(err.Error(), "AWS_REGION") {
			t.Fatalf("error %v, want one naming kafka.sasl.region and AWS_REGION", err)
		}
		// apply (what New and outboxd check build) fails the same way.
		sc := sarama.NewConfig()
		if err := (&SASLConfig{Mechanism: "AWS_MSK_IAM"}).apply(sc); err == nil || !strings.Contains(err.Error(), "kafka.sasl.region") {
			t.Fatalf("apply: %v", err)
		}
	})
	t.Run("env", func(t *testing.T) {
		isolateAWS(t)
		staticAWSCredentials(t)
		t.Setenv("AWS_REGION", "ca-central-1")
		tok, err := mskToken(t, &SASLConfig{Mechanism: "AWS_MSK_IAM"})
		if err != nil {
			t.Fatal(err)
		}
		if h := host(t, tok); h != "kafka.ca-central-1.amazonaws.com" {
			t.Errorf("host %s", h)
		}
		tok, err = mskToken(t, &SASLConfig{Mechanism: "AWS_MSK_IAM", Region: "us-west-2"})
		if err != nil {
			t.Fatal(err)
		}
		if h := host(t, tok); h != "kafka.us-west-2.amazonaws.com" {
			t.Errorf("kafka.sasl.region does not win over AWS_REGION: host %s", h)
		}
	})
	t.Run("AWS_DEFAULT_REGION", func(t *testing.T) {
		isolateAWS(t)
		staticAWSCredentials(t)
		t.Setenv("AWS_DEFAULT_REGION", "sa-east-1")
		tok, err := mskToken(t, &SASLConfig{Mechanism: "AWS_MSK_IAM"})
		if err != nil {
			t.Fatal(err)
		}
		if h := host(t, tok); h != "kafka.sa-east-1.amazonaws.com" {
			t.Errorf("host %s", h)
		}
	})
	t.Run("shared config", func(t *testing.T) {
		cfg := isolateAWS(t)
		staticAWSCredentials(t)
		if err := os.WriteFile(cfg, []byte("[default]\nregion = ap-south-1\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		tok, err := mskToken(t, &SASLConfig{Mechanism: "AWS_MSK_IAM"})
		if err != nil {
			t.Fatal(err)
		}
		if h := host(t, tok); h != "kafka.ap-south-1.amazonaws.com" {
			t.Errorf("host %s", h)
		}
	})
}

// TestMSKCredentialErrors: no credentials anywhere, a credential_process that prints broken
// JSON holding a secret, one that hangs: each error says what to do, none holds a secret, and
// the hang is bounded by the provider's timeout.
func TestMSKCredentialErrors(t *testing.T) {
	t.Run("none", func(t *testing.T) {
		isolateAWS(t)
		_, err := mskToken(t, &SASLConfig{Mechanism: "AWS_MSK_IAM", Region: "us-east-1"})
		if err == nil {
			t.Fatal("a token without credentials")
		}
		t.Logf("error: %v", err)
		for _, s := range []string{"kafka.sasl.mechanism: AWS_MSK_IAM: no AWS credentials in the standard chain", "AWS_ACCESS_KEY_ID", "AWS_PROFILE", "web identity", "instance role"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not say %q", err, s)
			}
		}
		// As sarama returns it from a connection attempt: ConnectHint names the key and the fix.
		c := Config{SASL: &SASLConfig{Mechanism: "AWS_MSK_IAM"}}
		hint := c.ConnectHint(fmt.Errorf("kafka: client has run out of available brokers to talk to: %w", err))
		if !strings.HasPrefix(hint, "kafka.sasl.mechanism: ") || !strings.Contains(hint, "AWS_PROFILE") {
			t.Errorf("ConnectHint %q", hint)
		}
	})
	t.Run("credential_process output", func(t *testing.T) {
		cfg := isolateAWS(t)
		const leak = "SECRETinPROCESSoutput0123456789"
		script := filepath.Join(t.TempDir(), "creds.sh")
		body := "#!/bin/sh\necho '{\"Version\": 1, \"AccessKeyId\": \"AKIDPROC\", \"SecretAccessKey\": \"" + leak + "\"'\n"
		if err := os.WriteFile(script, []byte(body), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(cfg, []byte("[default]\ncredential_process = "+script+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := mskToken(t, &SASLConfig{Mechanism: "AWS_MSK_IAM", Region: "us-east-1"})
		if err == nil {
			t.Fatal("a token from broken credential_process output")
		}
		t.Logf("error: %v", err)
		if strings.Contains(fmt.Sprintf("%v %+v %#v", err, err, err), leak) {
			t.Fatalf("the secret printed by credential_process is in the error: %v", err)
		}
		if !strings.Contains(err.Error(), "credential_process") || !strings.Contains(err.Error(), "AWS_MSK_IAM") {
			t.Errorf("error %q does not name credential_process and the mechanism", err)
		}
	})
	t.Run("broken credentials file", func(t *testing.T) {
		const leak = "SECRETinCREDENTIALSfile0123"
		for _, body := range []string{
			"[default\naws_access_key_id = AKIDX\naws_secret_access_key = " + leak + "\n",
			"[default]\naws_access_key_id = AKIDX\naws_secret_access_key " + leak + "\n",
			"[default]\naws_secret_access_key = " + leak + "\n",
		} {
			isolateAWS(t)
			if err := os.WriteFile(os.Getenv("AWS_SHARED_CREDENTIALS_FILE"), []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := mskToken(t, &SASLConfig{Mechanism: "AWS_MSK_IAM", Region: "us-east-1"})
			if err == nil || !strings.Contains(err.Error(), "AWS_MSK_IAM") || strings.Contains(err.Error(), leak) {
				t.Errorf("credentials file %q: error %v", body, err)
			}
		}
	})
	t.Run("hang", func(t *testing.T) {
		cfg := isolateAWS(t)
		// The SDK's credential cache goes on waiting for the process in the background (its own
		// limit is a minute), holding the test's stderr: 3s, not longer, keeps go test quick.
		if err := os.WriteFile(cfg, []byte("[default]\ncredential_process = exec sleep 3\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		p, err := newMSKTokenProvider(&SASLConfig{Mechanism: "AWS_MSK_IAM", Region: "us-east-1"})
		if err != nil {
			t.Fatal(err)
		}
		mp := p.(*mskTokenProvider)
		mp.timeout = 300 * time.Millisecond
		start := time.Now()
		_, err = mp.Token()
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("Token took %v with a %v timeout", took, mp.timeout)
		}
		if err == nil || !strings.Contains(err.Error(), "no token within 300ms") {
			t.Fatalf("error %v, want the timeout named", err)
		}
		t.Logf("error: %v", err)
	})
}

// fakeClock is an injectable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time          { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// TestMSKTokenCacheAndRenewal: sarama asks for a token per connection; one token is reused
// until mskRenewBefore before its expiry, then replaced; a failed renewal keeps the current
// token while it has mskMinValidity left, then the error reaches sarama.
func TestMSKTokenCacheAndRenewal(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	var calls int
	var fail error
	p := newMSKProvider("us-east-1", nil)
	p.now = clock.now
	var logs strings.Builder
	p.log = slog.New(slog.NewTextHandler(&logs, nil))
	p.generate = func(ctx context.Context) (string, int64, error) {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("token generated without a deadline")
		}
		calls++
		if fail != nil {
			return "", 0, fail
		}
		return "token-" + strconv.Itoa(calls), clock.now().Add(15 * time.Minute).UnixMilli(), nil
	}
	get := func(want string, wantCalls int) {
		t.Helper()
		tok, err := p.Token()
		if err != nil {
			t.Fatalf("Token: %v", err)
		}
		if tok.Token != want || calls != wantCalls {
			t.Fatalf("token %q after %d signings, want %q after %d", tok.Token, calls, want, wantCalls)
		}
	}
	get("token-1", 1)
	get("token-1", 1)
	clock.advance(15*time.Minute - mskRenewBefore - time.Second) // 1s before the renewal point
	get("token-1", 1)
	clock.advance(time.Second) // at the renewal point: renewed
	get("token-2", 2)
	get("token-2", 2)

	// token-2 expires at 10m+15m = 25m from the start. Renewal failing at 20m: still token-2.
	fail = errors.New("sts: throttled")
	clock.advance(15*time.Minute - mskRenewBefore)
	get("token-2", 3)
	// 20s before expiry (under mskMinValidity): the error.
	clock.advance(mskRenewBefore - 20*time.Second)
	if tok, err := p.Token(); err == nil || !strings.Contains(err.Error(), "sts: throttled") {
		t.Fatalf("Token %v, %v: want the renewal error once the token is about to expire", tok, err)
	}
	// The credentials come back: a new token at once.
	fail = nil
	get("token-5", 5)
	if !strings.Contains(logs.String(), "renewing the MSK IAM token failed") || strings.Contains(logs.String(), "token-") {
		t.Errorf("log %q: want the failed renewal logged, no token in it", logs.String())
	}
}

// TestMSKApply: kafka.sasl.mechanism AWS_MSK_IAM is sarama's OAUTHBEARER with the MSK token
// provider, and the whole producer config (SaramaConfig: TLS on) passes sarama's Validate.
func TestMSKApply(t *testing.T) {
	isolateAWS(t)
	staticAWSCredentials(t)
	c := Config{Brokers: []string{"b-1.example.kafka.us-east-1.amazonaws.com:9098"},
		TLS: &TLSConfig{}, SASL: &SASLConfig{Mechanism: "AWS_MSK_IAM", Region: "us-east-1"}}
	sc, err := c.SaramaConfig()
	if err != nil {
		t.Fatal(err)
	}
	if !sc.Net.SASL.Enable || !sc.Net.SASL.Handshake || sc.Net.SASL.Mechanism != sarama.SASLTypeOAuth || !sc.Net.TLS.Enable {
		t.Fatalf("SASL enable %v handshake %v mechanism %q TLS %v", sc.Net.SASL.Enable, sc.Net.SASL.Handshake, sc.Net.SASL.Mechanism, sc.Net.TLS.Enable)
	}
	p, ok := sc.Net.SASL.TokenProvider.(*mskTokenProvider)
	if !ok || p.region != "us-east-1" {
		t.Fatalf("TokenProvider %T %+v", sc.Net.SASL.TokenProvider, sc.Net.SASL.TokenProvider)
	}
	if err := sc.Validate(); err != nil {
		t.Fatalf("sarama refuses the config: %v", err)
	}
	tok, err := p.Token()
	if err != nil || tok.Token == "" || len(tok.Extensions) != 0 {
		t.Fatalf("token %+v, %v", tok, err)
	}
	if settings, durability := c.CheckProducer(); settings != nil || durability != nil {
		t.Fatalf("CheckProducer: %v, %v", settings, durability)
	}
}
