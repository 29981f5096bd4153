// Package kafka is outboxd's Kafka sink: a sarama AsyncProducer configured so that no record is
// lost and transient failures are retried until they clear, in order, plus the Java-compatible
// partitioner (PartitionFor) and the one place errors are classified (Classify).
//
// # Concurrency and order
//
// Produce may be called from any goroutine, but order is defined by the order Produce calls
// return: to keep the source's commit order per key, call it from one goroutine. Results come
// back through the done callbacks, on a single goroutine, in no particular order across
// partitions. Memory is bounded by Config.MaxInflightRecords.
//
// # Delivery guarantees and what sarama does by itself
//
// The producer is idempotent, acks=all, one request in flight per broker, and records with the
// same key go to the same partition (PartitionFor). sarama retries retriable broker errors
// (NOT_LEADER, NOT_ENOUGH_REPLICAS, timeouts, connection loss, ...) in order: a partition's
// failed batch is re-sent before anything behind it (async_producer.go: retryBatch,
// partitionProducer high-watermark/fin, the partition muter). But sarama also fails records
// outright on transient conditions, without retrying them: when a metadata refresh fails
// (partitionProducer.updateLeader and topicProducer.partitionMessage return "client has run
// out of available brokers to talk to" or breaker.ErrBreakerOpen), when retryBatch cannot find
// a leader, and when Producer.Retry.Max is exhausted. Records behind a failed one may then be
// delivered first.
//
// This package closes that gap twice. First, metadata refreshes retry for about a day instead
// of three times (Metadata.Retry.Max, see SaramaConfig), so while the cluster is unreachable
// sarama blocks (and Produce blocks behind it, bounded by MaxInflightRecords) instead of
// failing records. Second, any transient failure that still escapes sarama closes a gate:
// new records are held back, the records already inside sarama are allowed to finish, and the
// failed ones are re-submitted in their original order (after a capped, jittered backoff)
// before the held ones are released (recovery.go). Delivery is at least once: a re-sent record
// may appear twice.
//
// What remains: when a broker answers with an error sarama does not retry but that is not the
// record's fault (UNKNOWN_SERVER_ERROR, OUT_OF_ORDER_SEQUENCE_NUMBER after a broker lost its
// producer state, a batch refusal), sarama fails that batch and sends the partition's next
// batch, which it already holds, right away. Those records land before the re-sent ones
// (TestEscapedTransientErrorsAreResent counts them); nothing is lost. With the
// default adaptive linger (Config.Linger 0) a busy partition usually has a request in flight
// and the next batch waiting behind it, so after such an error that next batch landing first
// is the rule, not the exception; a positive Linger makes it rarer without closing it. Broker outages, leader
// moves, NOT_ENOUGH_REPLICAS and timeouts do not take this path.
//
// Batch-level refusals (MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, INVALID_RECORD) are only
// trusted for a record that was sent alone: other records of a refused batch are re-sent one by
// one, like the Java client's batch splitting, so one oversized record does not dead-letter its
// neighbours.
package kafka
