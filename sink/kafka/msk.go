package kafka

import (
	"errors"

	"github.com/IBM/sarama"
)

// newMSKTokenProvider is kafka.sasl.mechanism AWS_MSK_IAM's token source (issue 17: the AWS MSK
// IAM signer over the standard credential chain). Placeholder of the skeleton: the MSK helper
// replaces this file.
func newMSKTokenProvider(s *SASLConfig) (sarama.AccessTokenProvider, error) {
	return nil, errors.New("kafka.sasl.mechanism: AWS_MSK_IAM is not built yet")
}
