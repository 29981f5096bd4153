package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/IBM/sarama"
	"github.com/eapache/go-resiliency/breaker"

	"github.com/outboxd/outboxd/sink"
)

// Errors the Producer returns or passes to done.
var (
	// ErrClosed: Produce was called after Close/Shutdown began.
	ErrClosed = errors.New("kafka: producer is closed")
	// ErrAborted: Shutdown's context ended before the record was acked; it may or may not
	// have been written. Transient: the stored position does not cover it, so it is
	// produced again on the next run.
	ErrAborted = errors.New("kafka: producer shut down before the record was acknowledged")
)

// DeliveryError is what done receives for a record that was not delivered. Classify sees
// through it to the Kafka error.
type DeliveryError struct {
	Topic     string
	Partition int32 // -1 when the record never got a partition
	Permanent bool
	Reason    string // Classify's reason
	Err       error
}

func (e *DeliveryError) Error() string {
	kind := "transient"
	if e.Permanent {
		kind = "permanent"
	}
	fix := ""
	if e.Reason == "topic_authorization_failed" {
		fix = fmt.Sprintf(" — the ACLs do not let outboxd's principal write to topic %q: grant it WRITE and DESCRIBE on that topic", e.Topic)
	}
	if e.Partition >= 0 {
		return fmt.Sprintf("kafka: record for topic %q partition %d not delivered (%s, %s): %v%s",
			e.Topic, e.Partition, kind, e.Reason, e.Err, fix)
	}
	return fmt.Sprintf("kafka: record for topic %q not delivered (%s, %s): %v%s", e.Topic, kind, e.Reason, e.Err, fix)
}

func (e *DeliveryError) Unwrap() error { return e.Err }

// RecordTooLargeError: the record's encoded size is over Config.MaxRecordBytes, so it was
// failed without a round trip. It unwraps to sarama.ErrMessageSizeTooLarge.
type RecordTooLargeError struct {
	Size, Limit int
}

func (e *RecordTooLargeError) Error() string {
	return fmt.Sprintf("record is %d bytes encoded, over the %d byte limit (kafka.max_record_bytes; "+
		"the broker's message.max.bytes / topic max.message.bytes must allow it too)", e.Size, e.Limit)
}

func (e *RecordTooLargeError) Unwrap() error { return sarama.ErrMessageSizeTooLarge }

// Classify is the one place that decides whether a produce error is permanent (the record can
// never be delivered as it is: dead-letter it) or transient (retry until it clears), and gives
// a stable snake_case reason for metrics and the DLQ header outboxd.error.reason. It looks at
// typed errors only (errors.As / errors.Is through any wrapping), never at message text.
// Unknown errors are transient: blocking the pipeline is recoverable, dead-lettering a record
// that could have been delivered is not.
func Classify(err error) (permanent bool, reason string) {
	if err == nil {
		return false, ""
	}
	var ke sarama.KError
	if errors.As(err, &ke) {
		return classifyKError(ke)
	}
	var pe *PartitionOutOfRangeError
	if errors.As(err, &pe) {
		return true, "invalid_partition"
	}
	switch {
	case errors.Is(err, ErrAborted), errors.Is(err, ErrClosed), errors.Is(err, sarama.ErrShuttingDown),
		errors.Is(err, sarama.ErrClosedClient):
		return false, "shutdown"
	case errors.Is(err, context.DeadlineExceeded):
		return false, "timeout"
	case errors.Is(err, sarama.ErrOutOfBrokers), errors.Is(err, sarama.ErrNotConnected),
		errors.Is(err, sarama.ErrBrokerNotFound), errors.Is(err, sarama.ErrIncompleteResponse),
		errors.Is(err, breaker.ErrBreakerOpen), // sarama's per-partition breaker after 3 failed leader lookups
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return false, "broker_unreachable"
	}
	var ne net.Error
	if errors.As(err, &ne) {
		if ne.Timeout() {
			return false, "timeout"
		}
		return false, "broker_unreachable"
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return false, "broker_unreachable"
	}
	return false, "unknown"
}

func classifyKError(ke sarama.KError) (bool, string) {
	switch ke {
	// Permanent: this record (or batch, see recovery.go) is refused as it is.
	case sarama.ErrMessageSizeTooLarge, sarama.ErrMessageSetSizeTooLarge:
		return true, "record_too_large"
	case sarama.ErrInvalidTopic:
		return true, "invalid_topic"
	case sarama.ErrTopicAuthorizationFailed:
		return true, "topic_authorization_failed"
	case sarama.ErrInvalidRecord:
		return true, "invalid_record"

	// Transient.
	case sarama.ErrUnknownTopicOrPartition:
		// With auto-creation off the topic may simply not exist yet: an operator (or a
		// deployment) creates it, or metadata is momentarily stale after a create or a
		// partition increase. Kafka itself calls this retriable. Dead-lettering would divert
		// every record of the topic; blocking makes the problem visible and loses nothing.
		return false, "unknown_topic_or_partition"
	case sarama.ErrLeaderNotAvailable, sarama.ErrNotLeaderForPartition, sarama.ErrFencedLeaderEpoch,
		sarama.ErrUnknownLeaderEpoch, sarama.ErrBrokerNotAvailable, sarama.ErrNotController:
		return false, "leader_not_available"
	case sarama.ErrNotEnoughReplicas, sarama.ErrNotEnoughReplicasAfterAppend:
		return false, "not_enough_replicas"
	case sarama.ErrRequestTimedOut:
		return false, "timeout"
	case sarama.ErrNetworkException:
		return false, "broker_unreachable"
	case sarama.ErrKafkaStorageError, sarama.ErrInvalidMessage: // CORRUPT_MESSAGE: a bad transfer, retry
		return false, "broker_error"
	case sarama.ErrOutOfOrderSequenceNumber, sarama.ErrUnknownProducerID, sarama.ErrInvalidProducerEpoch,
		sarama.ErrDuplicateSequenceNumber:
		// Idempotent producer state lost or out of step (e.g. broker restart without its
		// producer state); sarama has bumped the epoch, re-sending works.
		return false, "producer_state"
	case sarama.ErrThrottlingQuotaExceeded:
		return false, "throttled"
	case sarama.ErrInvalidTimestamp:
		// The timestamp is set by this host; only clock skew beyond the broker's
		// message.timestamp.difference.max.ms causes it. Fix the clock, do not lose records.
		return false, "invalid_timestamp"
	case sarama.ErrClusterAuthorizationFailed:
		return false, "cluster_authorization_failed"
	case sarama.ErrSASLAuthenticationFailed:
		return false, "sasl_authentication_failed"
	}
	return false, "kafka_error"
}

// needsIsolation reports errors a broker gives for a whole batch because of one record in it
// (or its total size). sarama does not split batches as the Java client does, so such a
// failure is only permanent for a record that was sent alone.
func needsIsolation(err error) bool {
	var ke sarama.KError
	if !errors.As(err, &ke) {
		return false
	}
	return ke == sarama.ErrMessageSizeTooLarge || ke == sarama.ErrMessageSetSizeTooLarge ||
		ke == sarama.ErrInvalidRecord
}

// ValidTopicName checks a topic name against Kafka's rules: 1 to 249 characters from
// [a-zA-Z0-9._-], and not "." or "..". The error unwraps to sarama.ErrInvalidTopic, so
// Classify reports it as permanent with reason invalid_topic.
func ValidTopicName(name string) error {
	if err := sink.ValidTopic(name); err != nil {
		return &topicNameError{name, err.Error()}
	}
	return nil
}

type topicNameError struct{ name, why string }

func (e *topicNameError) Error() string {
	return "invalid Kafka topic: " + e.why
}

func (e *topicNameError) Unwrap() error { return sarama.ErrInvalidTopic }
