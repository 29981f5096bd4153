package kafka

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"
)

// scramClient is a SCRAM (RFC 5802) client for sarama's SASL/SCRAM-SHA-256 and -512, without
// channel binding, as Kafka speaks it (RFC 7677; Kafka applies no SASLprep to the password).
// One instance serves one authentication exchange; sarama makes a new one per connection.
type scramClient struct {
	newHash func() hash.Hash

	user, pass, authz string
	nonce             string // client nonce, overridable in tests
	step              int
	clientFirstBare   string
	serverSignature   []byte
	done              bool
}

func newSCRAMClient(h func() hash.Hash) *scramClient { return &scramClient{newHash: h} }

// Begin implements sarama.SCRAMClient.
func (s *scramClient) Begin(user, pass, authzID string) error {
	s.user, s.pass, s.authz = user, pass, authzID
	if s.nonce == "" {
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			return fmt.Errorf("scram: client nonce: %w", err)
		}
		s.nonce = base64.RawStdEncoding.EncodeToString(b)
	}
	return nil
}

// Done implements sarama.SCRAMClient.
func (s *scramClient) Done() bool { return s.done }

func (s *scramClient) gs2Header() string {
	if s.authz == "" {
		return "n,,"
	}
	return "n,a=" + saslName(s.authz) + ","
}

// saslName escapes ',' and '=' as RFC 5802 section 5.1 requires.
func saslName(s string) string {
	return strings.NewReplacer("=", "=3D", ",", "=2C").Replace(s)
}

// Step implements sarama.SCRAMClient: "" → client-first; server-first → client-final;
// server-final → verified (Done).
func (s *scramClient) Step(challenge string) (string, error) {
	s.step++
	switch s.step {
	case 1:
		s.clientFirstBare = "n=" + saslName(s.user) + ",r=" + s.nonce
		return s.gs2Header() + s.clientFirstBare, nil
	case 2:
		return s.clientFinal(challenge)
	case 3:
		return "", s.verifyServerFinal(challenge)
	}
	return "", errors.New("scram: unexpected extra challenge from the server")
}

func scramAttrs(msg string) map[byte]string {
	attrs := make(map[byte]string)
	for _, part := range strings.Split(msg, ",") {
		if len(part) >= 2 && part[1] == '=' {
			attrs[part[0]] = part[2:]
		}
	}
	return attrs
}

func (s *scramClient) hmac(key []byte, msg string) []byte {
	m := hmac.New(s.newHash, key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}

func (s *scramClient) clientFinal(serverFirst string) (string, error) {
	a := scramAttrs(serverFirst)
	if e, ok := a['e']; ok {
		return "", fmt.Errorf("scram: server refused: %s", e)
	}
	nonce, saltB64, iterS := a['r'], a['s'], a['i']
	if !strings.HasPrefix(nonce, s.nonce) || len(nonce) == len(s.nonce) {
		return "", errors.New("scram: server nonce does not extend the client nonce")
	}
	salt, err := base64.StdEncoding.DecodeString(saltB64)
	if err != nil || len(salt) == 0 {
		return "", errors.New("scram: server sent an invalid salt")
	}
	iter, err := strconv.Atoi(iterS)
	if err != nil || iter < 1 {
		return "", errors.New("scram: server sent an invalid iteration count")
	}
	salted, err := pbkdf2.Key(s.newHash, s.pass, salt, iter, s.newHash().Size())
	if err != nil {
		return "", fmt.Errorf("scram: derive key: %w", err)
	}
	clientKey := s.hmac(salted, "Client Key")
	h := s.newHash()
	h.Write(clientKey)
	storedKey := h.Sum(nil)

	withoutProof := "c=" + base64.StdEncoding.EncodeToString([]byte(s.gs2Header())) + ",r=" + nonce
	authMessage := s.clientFirstBare + "," + serverFirst + "," + withoutProof
	sig := s.hmac(storedKey, authMessage)
	proof := make([]byte, len(clientKey))
	for i := range clientKey {
		proof[i] = clientKey[i] ^ sig[i]
	}
	s.serverSignature = s.hmac(s.hmac(salted, "Server Key"), authMessage)
	return withoutProof + ",p=" + base64.StdEncoding.EncodeToString(proof), nil
}

func (s *scramClient) verifyServerFinal(serverFinal string) error {
	a := scramAttrs(serverFinal)
	if e, ok := a['e']; ok {
		return fmt.Errorf("scram: server refused: %s", e)
	}
	v, err := base64.StdEncoding.DecodeString(a['v'])
	if err != nil || subtle.ConstantTimeCompare(v, s.serverSignature) != 1 {
		return errors.New("scram: server signature does not verify (wrong server or man in the middle)")
	}
	s.done = true
	return nil
}
