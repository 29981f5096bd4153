#!/bin/sh
# Regenerates nothing by itself: compiles and runs Oracle.java on stdin with the Kafka Connect 4.4.0
# + Jackson 2.21.7 lib/ and Debezium 3.6.1's postgres plugin jars built by the e2e harness (see
# ../../../../../shared recipes: real-kafka-and-debezium). Usage: JAVA_HOME=... gen.sh LIB PLUGIN < requests > answers
set -e
LIB=$1; PLUGIN=$2
CP="$LIB/*:$(ls "$PLUGIN"/debezium-*.jar | tr '\n' ':')"
OUT=$(mktemp -d)
"${JAVA_HOME:+$JAVA_HOME/bin/}javac" -nowarn -d "$OUT" -cp "$CP" "$(dirname "$0")/Oracle.java" 2>/dev/null
exec "${JAVA_HOME:+$JAVA_HOME/bin/}java" -cp "$OUT:$CP" -Dlog4j2.level=OFF Oracle
