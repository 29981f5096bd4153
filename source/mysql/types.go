package mysql

import (
	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outboxd/outboxd/source"
)

// Column types as Debezium's MySQL and MariaDB connectors describe them (BinlogValueConverters
// and JdbcValueConverters with their defaults: bigint.unsigned.handling.mode=long,
// decimal.handling.mode=precise, time.precision.mode=adaptive_time_microseconds,
// binary.handling.mode=bytes), so the router can render values as Debezium does. Everything
// comes from the TableMapEvent the row was written with (binlog type, metadata, signedness,
// charset, the NULL bitmap), resolved as buildDesc resolves it (FULL row metadata or the tracked
// schema), so the Types of a table change exactly when its row layout does.
//
// Mapping (Debezium's Connect type → Kind):
//
//	TINYINT [UNSIGNED], BOOL     int16                               KindInt16
//	SMALLINT                     int16                               KindInt16
//	SMALLINT UNSIGNED            int32                               KindInt32
//	MEDIUMINT [UNSIGNED], INT    int32                               KindInt32
//	INT UNSIGNED, BIGINT [UNS.]  int64                               KindInt64
//	FLOAT                        float32                             KindFloat32
//	DOUBLE, REAL                 float64                             KindFloat64
//	DECIMAL(p,s)                 Decimal (scale s, precision p)      KindDecimal
//	BIT(1)                       boolean                             KindBool ("1"/"0")
//	YEAR                         io.debezium.time.Year (int32)       KindInt32
//	CHAR, VARCHAR, TEXT, ENUM,   string                              KindString
//	SET, MariaDB JSON (LONGTEXT)
//	MySQL JSON                   io.debezium.data.Json               KindJSON
//	BINARY(16), MariaDB UUID     bytes; MariaDB UUID: Uuid           KindUUID (outboxd renders it as uuid text)
//	BINARY, VARBINARY, BLOB      bytes                               KindBytes
//	DATETIME(0..3)               io.debezium.time.Timestamp          KindTimestamp
//	DATETIME(4..6)               io.debezium.time.MicroTimestamp     KindMicroTimestamp
//	TIMESTAMP                    io.debezium.time.ZonedTimestamp     KindZonedTimestamp (text in UTC)
//	DATE                         io.debezium.time.Date               KindDate
//
// Known differences (the value is the text or bytes decode.go renders, the Kind the nearest):
// TIME (Debezium MicroTime, int64) → KindString; BIT(n>1) (Bits) → KindString, decimal text;
// YEAR lacks Debezium's schema name; ENUM and SET lack the Enum/EnumSet names; GEOMETRY and
// VECTOR (Geometry, FloatVector) → KindBytes, the raw bytes; FLOAT(M,D) (deprecated syntax,
// Debezium float64: the binlog does not tell it from FLOAT) → KindFloat32; BIGINT UNSIGNED
// above 2^63-1 is Debezium's wrapped negative long but outboxd's unsigned text; a MySQL
// BINARY(16) is bytes in Debezium, while outboxd renders every BINARY(16) as uuid text, which
// is Debezium's form for MariaDB's UUID type (that type is BINARY(16) in the binlog).
// BOOLEAN is TINYINT(1) in the catalog, so int16 as in Debezium's snapshot schema, and a MariaDB
// JSON column is LONGTEXT (string) as SHOW CREATE TABLE shows it to Debezium.

// columnType returns the Type of column c with TableMapEvent metadata meta; nullable as the
// event's NULL bitmap says (known: false when it does not say: every column nullable).
func columnType(c *column, meta uint16, known, nullable bool) source.Type {
	t := source.Type{Kind: source.KindString, Optional: !known || nullable}
	switch c.typ {
	case gomysql.MYSQL_TYPE_TINY:
		t.Kind = source.KindInt16
	case gomysql.MYSQL_TYPE_SHORT:
		t.Kind = source.KindInt16
		if c.unsigned {
			t.Kind = source.KindInt32
		}
	case gomysql.MYSQL_TYPE_INT24, gomysql.MYSQL_TYPE_YEAR:
		t.Kind = source.KindInt32
	case gomysql.MYSQL_TYPE_LONG:
		t.Kind = source.KindInt32
		if c.unsigned {
			t.Kind = source.KindInt64
		}
	case gomysql.MYSQL_TYPE_LONGLONG:
		t.Kind = source.KindInt64
	case gomysql.MYSQL_TYPE_FLOAT:
		t.Kind = source.KindFloat32
	case gomysql.MYSQL_TYPE_DOUBLE:
		t.Kind = source.KindFloat64
	case gomysql.MYSQL_TYPE_NEWDECIMAL: // metadata: precision << 8 | scale
		t.Kind, t.Precision, t.Scale = source.KindDecimal, int(meta>>8), int(meta&0xff)
	case gomysql.MYSQL_TYPE_BIT: // metadata: whole bytes << 8 | remaining bits
		if int(meta>>8)*8+int(meta&0xff) == 1 {
			t.Kind = source.KindBool
		}
	case gomysql.MYSQL_TYPE_DATE, gomysql.MYSQL_TYPE_NEWDATE:
		t.Kind = source.KindDate
	case gomysql.MYSQL_TYPE_DATETIME: // before MySQL 5.6: no fractional seconds
		t.Kind = source.KindTimestamp
	case gomysql.MYSQL_TYPE_DATETIME2: // metadata: fsp
		t.Kind = source.KindTimestamp
		if meta > 3 {
			t.Kind = source.KindMicroTimestamp
		}
	case gomysql.MYSQL_TYPE_TIMESTAMP: // before MySQL 5.6: no fractional seconds
		t.Kind = source.KindZonedTimestamp
	case gomysql.MYSQL_TYPE_TIMESTAMP2: // metadata: fsp
		// Debezium writes the ZonedTimestamp with the column's fractional width (TIMESTAMP(6):
		// "….123450Z", as real Debezium's MariaDB connector does).
		t.Kind, t.Scale = source.KindZonedTimestamp, int(meta)
	case gomysql.MYSQL_TYPE_JSON:
		t.Kind = source.KindJSON
	case gomysql.MYSQL_TYPE_GEOMETRY, gomysql.MYSQL_TYPE_VECTOR:
		t.Kind = source.KindBytes
	case gomysql.MYSQL_TYPE_STRING: // CHAR and BINARY (ENUM and SET are unpacked by realType)
		if c.charset == csBinary {
			t.Kind = source.KindBytes
			if c.length == 16 {
				t.Kind = source.KindUUID // decodeString renders it as a uuid
			}
		}
	case gomysql.MYSQL_TYPE_VARCHAR, gomysql.MYSQL_TYPE_VAR_STRING, gomysql.MYSQL_TYPE_BLOB,
		gomysql.MYSQL_TYPE_TINY_BLOB, gomysql.MYSQL_TYPE_MEDIUM_BLOB, gomysql.MYSQL_TYPE_LONG_BLOB:
		if c.charset == csBinary {
			t.Kind = source.KindBytes
		}
	}
	return t
}
