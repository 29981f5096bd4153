package kafka

import (
	"errors"

	"github.com/IBM/sarama"
)

// newOAuthTokenProvider is kafka.sasl.mechanism OAUTHBEARER's token source (issue 17: a client
// credentials grant against kafka.sasl.token_url, refreshed before expiry). Placeholder of the
// skeleton: the OAUTHBEARER helper replaces this file.
func newOAuthTokenProvider(s *SASLConfig) (sarama.AccessTokenProvider, error) {
	return nil, errors.New("kafka.sasl.mechanism: OAUTHBEARER is not built yet")
}
