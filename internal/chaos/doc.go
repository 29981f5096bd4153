// Package chaos holds outboxd's chaos suite and its failover and slot-safety end-to-end tests.
// It has no code of its own: everything is in its tests, which run the real outboxd binary
// against private PostgreSQL and MariaDB servers and the embedded Kafka-protocol broker.
//
//	go test ./internal/chaos/                                     # short mode (CI), a few minutes
//	OUTBOXD_CHAOS=long go test -timeout 60m ./internal/chaos/     # long mode, for the README table
//	OUTBOXD_CHAOS_REPORT=chaos.md go test ./internal/chaos/       # also write the table to a file
//
// See TestChaos for the scenarios and README.md ("Guarantees") for the latest results.
package chaos
