package kafka

import (
	"bufio"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/internal/testenv"
)

// verifyMSKToken checks an AWS_MSK_IAM token as the MSK broker does: base64url of a presigned
// URL for kafka-cluster:Connect on kafka.<region>.amazonaws.com, signed (SigV4, recomputed
// here by hand) with the secret of the access key it names, and not expired at now.
func verifyMSKToken(tok, accessKey, secret, region string, now time.Time) error {
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return fmt.Errorf("not base64url: %w", err)
	}
	u, err := url.Parse(string(raw))
	if err != nil {
		return fmt.Errorf("not a URL: %w", err)
	}
	q := u.Query()
	switch {
	case u.Host != "kafka."+region+".amazonaws.com":
		return fmt.Errorf("host %s", u.Host)
	case q.Get("Action") != "kafka-cluster:Connect":
		return fmt.Errorf("action %q", q.Get("Action"))
	case !strings.HasPrefix(q.Get("X-Amz-Credential"), accessKey+"/"):
		return fmt.Errorf("unknown access key in %q", q.Get("X-Amz-Credential"))
	}
	signed, err := time.Parse("20060102T150405Z", q.Get("X-Amz-Date"))
	if err != nil {
		return err
	}
	expires, err := strconv.Atoi(q.Get("X-Amz-Expires"))
	if err != nil {
		return err
	}
	if now.After(signed.Add(time.Duration(expires) * time.Second)) {
		return errors.New("expired")
	}
	empty := sha256.Sum256(nil)
	if q.Get("X-Amz-Signature") != presignedSignature(u, secret, region, "kafka-cluster", hex.EncodeToString(empty[:]), "User-Agent") {
		return errors.New("signature does not match")
	}
	return nil
}

// fakeMSK is a TLS listener that speaks just enough of the Kafka protocol for a client to
// authenticate with SASL/OAUTHBEARER (ApiVersions, SaslHandshake, SaslAuthenticate): each
// token is checked by verify; a refused one gets SASL_AUTHENTICATION_FAILED. sessionMs is the
// SaslAuthenticate session lifetime it grants (KIP-368: the client must re-authenticate).
type fakeMSK struct {
	addr      string
	verify    func(token string) error
	sessionMs int64

	mu    sync.Mutex
	auths []string // "ok" or the refusal, per SaslAuthenticate, in order
	conns []net.Conn
}

func newFakeMSK(t *testing.T, certs *testenv.TestCerts, sessionMs int64, verify func(string) error) *fakeMSK {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(certs.BrokerFile, certs.BrokerFile)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeMSK{addr: ln.Addr().String(), verify: verify, sessionMs: sessionMs}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		f.mu.Lock()
		for _, c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.conns = append(f.conns, c)
			f.mu.Unlock()
			wg.Add(1)
			go func() { defer wg.Done(); defer c.Close(); f.serve(c) }()
		}
	}()
	return f
}

func (f *fakeMSK) authLog() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.auths...)
}

// serve answers one connection's requests until it closes.
func (f *fakeMSK) serve(c net.Conn) {
	r := bufio.NewReader(c)
	for {
		var size int32
		if err := binary.Read(r, binary.BigEndian, &size); err != nil {
			return
		}
		frame := make([]byte, size)
		if _, err := io.ReadFull(r, frame); err != nil {
			return
		}
		resp, corr, flexibleHeader, err := f.answer(frame)
		if err != nil {
			return
		}
		out := binary.BigEndian.AppendUint32(nil, uint32(corr))
		if flexibleHeader {
			out = append(out, 0) // no tagged fields
		}
		out = resp.AppendTo(out)
		if _, err := c.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(out))), out...)); err != nil {
			return
		}
	}
}

func (f *fakeMSK) answer(frame []byte) (kmsg.Response, int32, bool, error) {
	if len(frame) < 10 {
		return nil, 0, false, errors.New("short frame")
	}
	key, ver := int16(binary.BigEndian.Uint16(frame)), int16(binary.BigEndian.Uint16(frame[2:]))
	corr := int32(binary.BigEndian.Uint32(frame[4:]))
	idLen := int(int16(binary.BigEndian.Uint16(frame[8:])))
	body := frame[10+max(idLen, 0):]
	req := kmsg.RequestForKey(key)
	if req == nil {
		return nil, 0, false, fmt.Errorf("api key %d", key)
	}
	req.SetVersion(ver)
	if req.IsFlexible() { // request header v2: tagged fields (sarama sends none)
		if len(body) == 0 || body[0] != 0 {
			return nil, 0, false, errors.New("tagged header fields")
		}
		body = body[1:]
	}
	if err := req.ReadFrom(body); err != nil {
		return nil, 0, false, err
	}
	resp := req.ResponseKind()
	resp.SetVersion(ver)
	switch r := resp.(type) {
	case *kmsg.ApiVersionsResponse: // its response header is never flexible
		for _, k := range []struct{ key, min, max int16 }{{18, 0, 3}, {17, 0, 1}, {36, 0, 2}} {
			r.ApiKeys = append(r.ApiKeys, kmsg.ApiVersionsResponseApiKey{ApiKey: k.key, MinVersion: k.min, MaxVersion: k.max})
		}
		return r, corr, false, nil
	case *kmsg.SASLHandshakeResponse:
		r.SupportedMechanisms = []string{"OAUTHBEARER"}
		if m := req.(*kmsg.SASLHandshakeRequest).Mechanism; m != "OAUTHBEARER" {
			r.ErrorCode = 33 // UNSUPPORTED_SASL_MECHANISM
		}
	case *kmsg.SASLAuthenticateResponse:
		// RFC 7628 client first message: gs2 header, then auth=Bearer <token>, \x01-separated.
		msg := string(req.(*kmsg.SASLAuthenticateRequest).SASLAuthBytes)
		tok, ok := strings.CutPrefix(msg, "n,,\x01auth=Bearer ")
		tok, ok2 := strings.CutSuffix(tok, "\x01\x01")
		verdict := "ok"
		if !ok || !ok2 {
			verdict = fmt.Sprintf("malformed client first message %q", msg)
		} else if err := f.verify(tok); err != nil {
			verdict = err.Error()
		}
		f.mu.Lock()
		f.auths = append(f.auths, verdict)
		f.mu.Unlock()
		if verdict != "ok" {
			r.ErrorCode = 58 // SASL_AUTHENTICATION_FAILED
			m := "[" + verdict + "] Access denied"
			r.ErrorMessage = &m
		} else {
			r.SessionLifetimeMillis = f.sessionMs
		}
	}
	return resp, corr, resp.IsFlexible(), nil
}

// TestMSKSaramaAuthenticates: sarama, configured by SaramaConfig for kafka.sasl.mechanism
// AWS_MSK_IAM over kafka.tls, authenticates to a fake MSK listener that checks the SigV4
// signature by hand; it re-authenticates when the session the broker granted ends (KIP-368,
// as MSK's IAM listeners require); a broker that refuses the token (wrong secret) makes the
// connection fail with ErrSASLAuthenticationFailed, which ConnectHint names.
func TestMSKSaramaAuthenticates(t *testing.T) {
	isolateAWS(t)
	staticAWSCredentials(t)
	certs, err := testenv.NewTestCerts(t.TempDir(), "outboxd")
	if err != nil {
		t.Fatal(err)
	}
	const region = "eu-central-1"
	connect := func(t *testing.T, f *fakeMSK) (*sarama.Broker, error) {
		t.Helper()
		c := Config{Brokers: []string{f.addr}, TLS: &TLSConfig{CAFile: certs.CAFile},
			SASL: &SASLConfig{Mechanism: "AWS_MSK_IAM", Region: region}}
		sc, err := c.SaramaConfig()
		if err != nil {
			t.Fatal(err)
		}
		b := sarama.NewBroker(f.addr)
		if err := b.Open(sc); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		_, err = b.ApiVersions(&sarama.ApiVersionsRequest{}) // the first request waits for the connection and SASL
		return b, err
	}

	t.Run("accepted and re-authenticated", func(t *testing.T) {
		f := newFakeMSK(t, certs, 1000, func(tok string) error {
			return verifyMSKToken(tok, testAccessKey, testSecretKey, region, time.Now())
		})
		b, err := connect(t, f)
		if err != nil {
			t.Fatalf("connection: %v (broker saw %v)", err, f.authLog())
		}
		// After the 1s session (sarama re-authenticates at 85-95% of it), the next request
		// re-authenticates first.
		deadline := time.Now().Add(10 * time.Second)
		for len(f.authLog()) < 2 && time.Now().Before(deadline) {
			if _, err := b.ApiVersions(&sarama.ApiVersionsRequest{}); err != nil {
				t.Fatalf("request after re-authentication: %v (broker saw %v)", err, f.authLog())
			}
			time.Sleep(50 * time.Millisecond) // polling the condition: sarama re-authenticates only on a request
		}
		if got := f.authLog(); len(got) < 2 || got[0] != "ok" || got[1] != "ok" {
			t.Fatalf("authentications %v, want two accepted", got)
		}
	})

	t.Run("refused", func(t *testing.T) {
		f := newFakeMSK(t, certs, 0, func(tok string) error {
			return verifyMSKToken(tok, testAccessKey, "another-secret", region, time.Now())
		})
		_, err := connect(t, f)
		if !errors.Is(err, sarama.ErrSASLAuthenticationFailed) {
			t.Fatalf("error %v, want ErrSASLAuthenticationFailed (broker saw %v)", err, f.authLog())
		}
		if got := f.authLog(); len(got) != 1 || got[0] != "signature does not match" {
			t.Fatalf("broker saw %v", got)
		}
		c := Config{SASL: &SASLConfig{Mechanism: "AWS_MSK_IAM", Region: region}}
		hint := c.ConnectHint(err)
		if !strings.Contains(hint, "kafka-cluster:Connect") || strings.Contains(hint+err.Error(), testSecretKey) {
			t.Fatalf("ConnectHint %q for %v", hint, err)
		}
		t.Logf("error: %v; hint: %s", err, hint)
	})
}
