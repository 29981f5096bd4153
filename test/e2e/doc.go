// Package e2e is outboxd's end-to-end suite: every test builds and runs the real binary
// (github.com/outboxd/outboxd/cmd/outboxd, built once by TestMain) against private PostgreSQL /
// MariaDB servers and a Kafka broker: kfake, or Apache Kafka 4.4 with OUTBOXD_TEST_KAFKA=apache
// (both: kfake, then Apache Kafka in a child process). The process, log and wait helpers are
// internal/testenv/harness, shared with the chaos suite (internal/chaos).
//
//	go test ./test/e2e/                                           # on kfake
//	OUTBOXD_TEST_KAFKA=apache go test ./test/e2e/                 # on Apache Kafka
//	go test ./test/e2e/apache/                                    # the same, as its own package (go test ./... runs it)
//	OUTBOXD_TEST_BIN=/path/to/outboxd go test ./test/e2e -run X   # another build
//
// The tests wait on conditions, never for a fixed time: "nothing else arrived" reads the topics to
// their last stable offset (testenv.ConsumeAll) once the stored position covers the last commit;
// "the slot did not move" holds until outboxd has sent two standby status updates after the fault.
// The fixed pauses left are the faults' lengths and the writers' pacing (harness.Hold).
package e2e
