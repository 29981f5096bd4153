package kafka

import (
	"encoding/binary"
	"fmt"

	"github.com/IBM/sarama"

	"github.com/outboxd/outboxd/sink"
)

// Murmur2 is org.apache.kafka.common.utils.Utils.murmur2, bit for bit: MurmurHash2 with seed
// 0x9747b28c over little-endian 4-byte words, as the Java client's default partitioner uses.
func Murmur2(b []byte) int32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	h := seed ^ uint32(len(b))
	for len(b) >= 4 {
		k := binary.LittleEndian.Uint32(b)
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
		b = b[4:]
	}
	switch len(b) {
	case 3:
		h ^= uint32(b[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(b[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(b[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}

// PartitionFor is the partition the Java client's default partitioner picks for a non-nil key:
// toPositive(murmur2(key)) % numPartitions, toPositive(x) = x & 0x7fffffff. It panics if
// numPartitions <= 0.
func PartitionFor(key []byte, numPartitions int32) int32 {
	return (Murmur2(key) & 0x7fffffff) % numPartitions
}

// javaPartitioner partitions keyed records like the Java client (PartitionFor over all of the
// topic's partitions, available or not, so a key never moves while a leader is down) and
// records with a nil key at random among the partitions that have a leader (sarama's random
// partitioner; the Java client's sticky partitioner is equally arbitrary). An empty, non-nil
// key is a key: it hashes like Java's zero-length byte array.
type javaPartitioner struct {
	random sarama.Partitioner
}

// NewJavaPartitioner is a sarama.PartitionerConstructor for the Java-compatible partitioner.
func NewJavaPartitioner(topic string) sarama.Partitioner {
	return &javaPartitioner{random: sarama.NewRandomPartitioner(topic)}
}

// PartitionOutOfRangeError: a record's explicit partition (sink.Record.PartitionSet, outbox.fields
// placement partition) is not one of the topic's partitions. Classify reports it as permanent
// with reason invalid_partition, so the record is dead-lettered.
type PartitionOutOfRangeError struct {
	Topic      string
	Partition  int32
	Partitions int32 // the topic's partition count as the producer's metadata knows it
}

func (e *PartitionOutOfRangeError) Error() string {
	return fmt.Sprintf("the record asks for partition %d of topic %q, which has %d partitions (0..%d): fix the "+
		"row's partition column, or add partitions to the topic (outboxd sees new partitions at its next metadata refresh)",
		e.Partition, e.Topic, e.Partitions, e.Partitions-1)
}

// recordOf returns the sink.Record behind one of our own messages (nil for a foreign message).
func recordOf(msg *sarama.ProducerMessage) *sink.Record {
	switch m := msg.Metadata.(type) {
	case *inflight:
		return m.rec
	case *txnMsg:
		return m.rec
	}
	return nil
}

// explicit returns rec's explicit partition, or a *PartitionOutOfRangeError if the topic has no
// such partition.
func explicit(rec *sink.Record, numPartitions int32) (int32, error) {
	if rec.Partition < 0 || rec.Partition >= numPartitions {
		return -1, &PartitionOutOfRangeError{Topic: rec.Topic, Partition: rec.Partition, Partitions: numPartitions}
	}
	return rec.Partition, nil
}

// Partition implements sarama.Partitioner. A record with PartitionSet goes to its partition
// (counted among all of the topic's partitions, as the Java client's explicit partition).
func (p *javaPartitioner) Partition(msg *sarama.ProducerMessage, numPartitions int32) (int32, error) {
	if it, ok := msg.Metadata.(*inflight); ok { // fast path: our own records
		if it.rec.PartitionSet {
			return explicit(it.rec, numPartitions)
		}
		if it.rec.Key == nil {
			return p.random.Partition(msg, numPartitions)
		}
		return PartitionFor(it.rec.Key, numPartitions), nil
	}
	if rec := recordOf(msg); rec != nil && rec.PartitionSet {
		return explicit(rec, numPartitions)
	}
	if msg.Key == nil {
		return p.random.Partition(msg, numPartitions)
	}
	key, err := msg.Key.Encode()
	if err != nil {
		return -1, err
	}
	return PartitionFor(key, numPartitions), nil
}

// RequiresConsistency implements sarama.Partitioner.
func (p *javaPartitioner) RequiresConsistency() bool { return true }

// MessageRequiresConsistency implements sarama.DynamicConsistencyPartitioner: keyed records
// and explicitly partitioned records are placed among all partitions, nil-key records among
// writable ones.
func (p *javaPartitioner) MessageRequiresConsistency(msg *sarama.ProducerMessage) bool {
	if it, ok := msg.Metadata.(*inflight); ok {
		return it.rec.Key != nil || it.rec.PartitionSet
	}
	if rec := recordOf(msg); rec != nil && rec.PartitionSet {
		return true
	}
	return msg.Key != nil
}
