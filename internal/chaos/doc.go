// Package chaos holds outboxd's chaos suite and its failover and slot-safety end-to-end tests.
// It has no code of its own: everything is in its tests, which run the real outboxd binary
// against private PostgreSQL and MariaDB servers, the embedded Kafka-protocol broker (kfake)
// and real Apache Kafka 4.4 (internal/testenv).
//
//	go test ./internal/chaos/                                     # short mode (CI), ~10 minutes on 2 cores
//	OUTBOXD_CHAOS=long go test -timeout 90m ./internal/chaos/     # long mode, for the README table
//	OUTBOXD_CHAOS_REPORT=chaos.md go test ./internal/chaos/       # also write the tables to files
//	go test -short ./internal/chaos/                              # skips the Apache Kafka chaos
//
// TestChaos runs the scenarios on kfake (outboxd and database failures, a broker outage, an HA
// pair); see it for the list. TestApacheChaos runs the broker-side scenarios on a 3-node Apache
// Kafka cluster (every node a combined broker+controller, RF 3, min.insync.replicas 2), one
// cluster shared by all of them under their own topic names:
//
//	(a) leader-sigkill[-exactly-once]: SIGKILL the leader of an outbox partition under load,
//	    restart it, wait until it is back in every ISR, again (short: 3 rounds per delivery
//	    mode; long: 12);
//	(b) no-quorum: one broker SIGKILLed, a second one shut down, so the survivor is alone in
//	    every ISR (NOT_ENOUGH_REPLICAS) and the controller quorum is gone: outboxd must block
//	    (no record acked, none dead-lettered, no exit) and catch up once both are back
//	    (short: a 20 s outage, at_least_once; long: the full 60 s, both delivery modes);
//	(c) rolling-restart: SIGTERM each broker in turn under load, restart, wait for the ISR, next
//	    (short: one pass, exactly_once; long: three passes, both delivery modes);
//	(d) zombie-fenced: SIGSTOP the active exactly_once instance, a second one with the same
//	    config takes over (wal_sender_timeout 5s frees the slot) and delivers, SIGCONT the first:
//	    Kafka fences it, it exits 1 saying "producer fenced", and none of its records after the
//	    takeover is visible to read_committed;
//	(e) kafka-offsets-full-restart: at_least_once with offsets.store kafka, the offsets topic's
//	    leader SIGKILLed under load (short: 2 rounds; long: 6), then outboxd stopped and every
//	    broker SIGKILLed and restarted: the position read back is the last one stored, and no
//	    record delivered before the stop is delivered again.
//
// Every scenario ends with the ledger check: the ids committed in the database against every
// record of the scenario's topics read from the beginning with a read_committed consumer
// (franz-go): 0 lost, each key's records in commit order (each id at its first delivery),
// nothing in the dead-letter topic, and with exactly_once 0 duplicates. The report gives per
// scenario the events, lost, duplicates, keys out of order and the longest stall (time without
// a record acked, from outboxd's /metrics). Both suites need Java 17 (Apache Kafka's jars come
// from Maven Central once, see internal/testenv); with CI=true a server that cannot start fails
// the test. OUTBOXD_CHAOS_KEEP=DIR keeps every outboxd log.
//
// See README.md ("Guarantees") for the latest results.
package chaos
