package testenv

import (
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
)

// Debezium in the test environment: Kafka Connect 4.4 (standalone) with Debezium's PostgreSQL
// and MariaDB connectors and its Outbox Event Router, run from a lib dir that Maven resolves from
// debezium/pom.xml (lib/ = Connect's runtime, plugins/ = Debezium's plugin archives, each in
// its own folder), cached like the Kafka lib dir (~/.cache/outboxd/debezium-lib-<hash>).

//go:embed debezium/pom.xml
var debeziumPOM []byte

// OpenTelemetryVersion is the OpenTelemetry Java SDK in the lib dir (debezium/pom.xml): with
// -Dotel.java.global-autoconfigure.enabled=true Debezium's tracing runs as with an OpenTelemetry
// setup (W3C trace context and baggage propagators).
const OpenTelemetryVersion = "1.49.0"

// DebeziumVersion is the Debezium release debezium/pom.xml resolves for PostgreSQL.
const DebeziumVersion = "3.6.1.Final"

// DebeziumMariaDBVersion is the release of Debezium's MariaDB connector in the lib dir: Maven
// Central serves no debezium-connector-mariadb 3.6.x (nor 3.5.1/3.5.2), and the 3.6.1 MySQL
// connector refuses MariaDB 10.11 (it takes 10.11 for MySQL >= 8.4 and sends SHOW BINARY LOG
// STATUS, which MariaDB rejects).
const DebeziumMariaDBVersion = "3.5.0.Final"

// Connector classes of the plugins in DebeziumLibDir's plugins/.
const (
	DebeziumPostgresConnector = "io.debezium.connector.postgresql.PostgresConnector"
	DebeziumMariaDBConnector  = "io.debezium.connector.mariadb.MariaDbConnector"
	DebeziumEventRouter       = "io.debezium.transforms.outbox.EventRouter"
	StringConverter           = "org.apache.kafka.connect.storage.StringConverter"
	JsonConverter             = "org.apache.kafka.connect.json.JsonConverter"
)

var dbzLibOnce struct {
	sync.Mutex
	dir string
}

// debeziumLibReady reports whether dir holds a complete Debezium lib dir.
func debeziumLibReady(dir string) error {
	for _, f := range []string{
		filepath.Join("lib", "connect-runtime-"+ApacheKafkaVersion+".jar"),
		filepath.Join("lib", "opentelemetry-sdk-extension-autoconfigure-"+OpenTelemetryVersion+".jar"),
		filepath.Join("plugins", "debezium-connector-postgres", "debezium-connector-postgres-"+DebeziumVersion+".jar"),
		filepath.Join("plugins", "debezium-connector-mariadb", "debezium-connector-mariadb-"+DebeziumMariaDBVersion+".jar"),
	} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return err
		}
	}
	return nil
}

// DebeziumLibDir returns a directory with lib/ (Kafka Connect's and OpenTelemetry's jars, for -cp) and plugins/ (for
// plugin.path: debezium-connector-postgres 3.6.1 and debezium-connector-mariadb 3.5.0, both with
// the EventRouter), building it with Maven when this machine has none for the current pom yet.
// OUTBOXD_DEBEZIUM_LIB names a prebuilt directory instead. Safe for concurrent test processes:
// the build runs under a lock file and lands by an atomic rename.
func DebeziumLibDir() (string, error) {
	dbzLibOnce.Lock()
	defer dbzLibOnce.Unlock()
	if dbzLibOnce.dir != "" {
		return dbzLibOnce.dir, nil
	}
	if d := os.Getenv("OUTBOXD_DEBEZIUM_LIB"); d != "" {
		if err := debeziumLibReady(d); err != nil {
			return "", fmt.Errorf("OUTBOXD_DEBEZIUM_LIB=%s is not a built Debezium lib dir (lib/ and plugins/): unset it or point it at one: %w", d, err)
		}
		dbzLibOnce.dir = d
		return d, nil
	}
	d, err := mavenLib{name: "debezium-lib", pom: debeziumPOM, pomPath: "internal/testenv/debezium/pom.xml",
		what: "Kafka Connect " + ApacheKafkaVersion + " and Debezium " + DebeziumVersion, ready: debeziumLibReady}.dir()
	if err != nil {
		return "", err
	}
	dbzLibOnce.dir = d
	return d, nil
}

// DBConn is where a connector finds its database.
type DBConn struct {
	Host     string
	Port     int
	User     string
	Password string
	Database string
}

// Conn is the superuser connection to database db of the private cluster.
func (p *Postgres) Conn(db string) DBConn {
	return DBConn{Host: "127.0.0.1", Port: p.Port, User: "postgres", Database: db}
}

// Conn is the root connection to database db of the private server.
func (m *MariaDB) Conn(db string) DBConn {
	return DBConn{Host: "127.0.0.1", Port: m.Port, User: "root", Database: db}
}

// ConnectDirVar in a connector or worker value is replaced by the Connect's Dir when it starts
// (e.g. the MariaDB connector's schema history file).
const ConnectDirVar = "${connect.dir}"

// outboxRouter is the Outbox Event Router part shared by both connectors: the defaults (topic
// outbox.event.<aggregatetype>, key aggregateid, value payload, header id) plus the type column
// as header eventType, and raw strings for key and value.
func outboxRouter(cfg map[string]string) {
	cfg["transforms"] = "outbox"
	cfg["transforms.outbox.type"] = DebeziumEventRouter
	cfg["transforms.outbox.table.fields.additional.placement"] = "type:header:eventType"
	cfg["key.converter"] = StringConverter
	cfg["value.converter"] = StringConverter
	cfg["extended.headers.enabled"] = "false" // no __debezium.context.* headers
	cfg["tombstones.on.delete"] = "false"
	cfg["tasks.max"] = "1"
}

func merge(cfg, extra map[string]string) map[string]string {
	for k, v := range extra {
		cfg[k] = v
	}
	return cfg
}

// DebeziumPostgresOutbox is the connector config (name "dbz-pg-outbox") of Debezium's PostgreSQL
// connector with the Outbox Event Router on table (schema-qualified, e.g. "public.outbox"):
// pgoutput, its own slot and publication (created as a filtered, insert-only publication),
// snapshot.mode=no_data, outboxd's heartbeat messages excluded, StringConverter key and value,
// header eventType from column type, no Debezium context headers. extra is merged last (it may override anything, e.g. "name" or
// "transforms.outbox.route.topic.replacement").
func DebeziumPostgresOutbox(db DBConn, slot, publication, table string, extra map[string]string) map[string]string {
	cfg := map[string]string{
		"name":                        "dbz-pg-outbox",
		"connector.class":             DebeziumPostgresConnector,
		"database.hostname":           db.Host,
		"database.port":               strconv.Itoa(db.Port),
		"database.user":               db.User,
		"database.password":           db.Password,
		"database.dbname":             db.Database,
		"topic.prefix":                "dbzpg",
		"plugin.name":                 "pgoutput",
		"slot.name":                   slot,
		"publication.name":            publication,
		"publication.autocreate.mode": "filtered",
		"table.include.list":          table,
		"skipped.operations":          "u,d,t",
		"snapshot.mode":               "no_data",
		// outboxd's heartbeats are logical decoding messages (pg_logical_emit_message); Debezium
		// would pass them, unrouted, to <topic.prefix>.message
		"message.prefix.exclude.list": "outboxd.heartbeat",
	}
	outboxRouter(cfg)
	return merge(cfg, extra)
}

// DebeziumMariaDBOutbox is the connector config (name "dbz-mariadb-outbox") of Debezium's MariaDB
// connector (DebeziumMariaDBVersion) with the Outbox Event Router on table (database-qualified, e.g. "app.outbox"): binlog client serverID (must
// differ from every other replica's and outboxd's), snapshot.mode=no_data without locks, schema
// history in a file in the Connect's Dir, StringConverter key and value, header eventType, no
// Debezium context headers. extra is merged last.
func DebeziumMariaDBOutbox(db DBConn, serverID uint32, table string, extra map[string]string) map[string]string {
	cfg := map[string]string{
		"name":                                  "dbz-mariadb-outbox",
		"connector.class":                       DebeziumMariaDBConnector,
		"database.hostname":                     db.Host,
		"database.port":                         strconv.Itoa(db.Port),
		"database.user":                         db.User,
		"database.password":                     db.Password,
		"database.server.id":                    strconv.FormatUint(uint64(serverID), 10),
		"database.include.list":                 db.Database,
		"table.include.list":                    table,
		"topic.prefix":                          "dbzmaria",
		"include.schema.changes":                "false",
		"snapshot.mode":                         "no_data",
		"snapshot.locking.mode":                 "none",
		"skipped.operations":                    "u,d,t",
		"schema.history.internal":               "io.debezium.storage.file.history.FileSchemaHistory",
		"schema.history.internal.file.filename": ConnectDirVar + "/schema-history.dat",
		"schema.history.internal.store.only.captured.tables.ddl": "true",
	}
	outboxRouter(cfg)
	return merge(cfg, extra)
}
