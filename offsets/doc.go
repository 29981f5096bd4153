// Package offsets tracks which source positions are fully delivered (Tracker) and stores them
// durably (Store; FileStore here, the Kafka-topic store in sink/kafka). It imports source for
// source.Position and nothing that talks to a server.
package offsets
