// Command kafkalib builds (once per machine and pom) the lib dirs of the Apache Kafka broker and
// of Kafka Connect with Debezium that the tests run, and prints their paths. .ci/test runs it
// before go test, so no test waits on Maven.
package main

import (
	"log/slog"
	"os"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
)

func main() {
	start := time.Now()
	dir, err := testenv.KafkaLibDir()
	if err != nil {
		slog.Error("the Apache Kafka lib dir could not be built", "err", err)
		os.Exit(1)
	}
	slog.Info("Apache Kafka lib dir ready", "version", testenv.ApacheKafkaVersion, "dir", dir, "took", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	dir, err = testenv.DebeziumLibDir()
	if err != nil {
		slog.Error("the Kafka Connect + Debezium lib dir could not be built", "err", err)
		os.Exit(1)
	}
	slog.Info("Kafka Connect + Debezium lib dir ready", "connect", testenv.ApacheKafkaVersion, "debezium", testenv.DebeziumVersion, "dir", dir, "took", time.Since(start).Round(time.Millisecond))
}
