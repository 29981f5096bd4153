#!/bin/sh
# Compiles and runs Oracle.java (requests on stdin, answers on stdout) with the Kafka Connect 4.4.0 +
# Jackson 2.21.7 lib/ and Debezium 3.6.1's postgres plugin directory the e2e harness builds
# (~/.cache/outboxd/debezium-lib-*/{lib,plugins/debezium-connector-postgres}).
#   Usage: JAVA_HOME=/usr/lib/jvm/temurin-25-jdk-amd64 gen.sh LIB PLUGIN < requests > answers
# The requests behind ../*.golden are their first columns with the mode letter in front
# (strings: "S <hex>", doubles: "D <bits>", floats: "F <bits>", expand: "E <null> <empty> <hex>",
# decimal: "X <scale> <hex>"); expand_mutations.golden's payloads come from mutations() in
# ../../golden_test.go ("E <null> ignore <hex>"), its answers stored as SHA-256 prefixes.
# doubles/floats have a second answer column from JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64.
set -e
LIB=$1; PLUGIN=$2
CP="$LIB/*:$(ls "$PLUGIN"/debezium-*.jar | tr '\n' ':')"
OUT=$(mktemp -d)
"${JAVA_HOME:+$JAVA_HOME/bin/}javac" -nowarn -d "$OUT" -cp "$CP" "$(dirname "$0")/Oracle.java" 2>/dev/null
exec "${JAVA_HOME:+$JAVA_HOME/bin/}java" -cp "$OUT:$CP" -Dlog4j2.level=OFF Oracle
