package kafka

import (
	"fmt"

	"github.com/xdg-go/scram"
)

// scramClient is sarama's SCRAMClient on github.com/xdg-go/scram (as sarama's own
// examples/sasl_scram_client): SCRAM-SHA-256 and -512 (RFC 5802, 7677) without channel
// binding. The password gets no SASLprep (NewClientUnprepped), as Kafka's own clients send it.
// One instance serves one authentication exchange; sarama makes a new one per connection.
type scramClient struct {
	hash  scram.HashGeneratorFcn
	nonce scram.NonceGeneratorFcn // nil: crypto/rand (tests set a fixed one)
	conv  *scram.ClientConversation
}

func newSCRAMClient(h scram.HashGeneratorFcn) *scramClient { return &scramClient{hash: h} }

// Begin implements sarama.SCRAMClient.
func (s *scramClient) Begin(user, pass, authzID string) error {
	c, err := s.hash.NewClientUnprepped(user, pass, authzID)
	if err != nil {
		return fmt.Errorf("scram: %w", err)
	}
	if s.nonce != nil {
		c.WithNonceGenerator(s.nonce)
	}
	s.conv = c.NewConversation()
	return nil
}

// Step implements sarama.SCRAMClient: "" → client-first; server-first → client-final;
// server-final → verified (Done).
func (s *scramClient) Step(challenge string) (string, error) {
	r, err := s.conv.Step(challenge)
	if err != nil {
		return "", fmt.Errorf("scram: %w", err)
	}
	return r, nil
}

// Done implements sarama.SCRAMClient.
func (s *scramClient) Done() bool { return s.conv != nil && s.conv.Done() }
