// Package e2e is outboxd's end-to-end suite: every test builds and runs the real binary
// (github.com/outboxd/outboxd/cmd/outboxd, built once by TestMain) against private PostgreSQL /
// MariaDB servers and a Kafka broker: kfake, or Apache Kafka 4.4 with OUTBOXD_TEST_KAFKA=apache
// (both: kfake, then Apache Kafka in a child process). The process, log and wait helpers are
// internal/testenv/harness, shared with the chaos suite (internal/chaos).
//
//	go test ./test/e2e/
//	OUTBOXD_TEST_KAFKA=apache go test ./test/e2e/
//	OUTBOXD_TEST_BIN=/path/to/outboxd go test ./test/e2e -run X   # another build
package e2e
