package postgres

import "github.com/outboxd/outboxd/source"

// Column types as Debezium's PostgreSQL connector describes them (PostgresValueConverter with
// its defaults: decimal.handling.mode=precise, time.precision.mode=adaptive,
// binary.handling.mode=bytes), so the router can render values as Debezium does. The facts come
// from the Relation message (type OID and type modifier) and, for nullability, from the catalog
// (Relations.NotNull: pgoutput does not carry it).
//
// Mapping (Debezium's Connect type → Kind):
//
//	bool                         boolean                            KindBool
//	int2 / int4 / int8           int16 / int32 / int64              KindInt16 / KindInt32 / KindInt64
//	oid                          int64                              KindInt64
//	float4 / float8              float32 / float64                  KindFloat32 / KindFloat64
//	numeric(p,s)                 Decimal (scale s, precision p)     KindDecimal, Scale s, Precision p
//	numeric (no typmod)          VariableScaleDecimal               KindDecimal, Precision 0
//	text, varchar, bpchar,       string                             KindString
//	name, "char", inet, cidr,
//	macaddr, macaddr8, ranges
//	uuid                         io.debezium.data.Uuid              KindUUID
//	json, jsonb                  io.debezium.data.Json              KindJSON
//	bytea                        bytes                              KindBytes
//	timestamp(0..3)              io.debezium.time.Timestamp         KindTimestamp
//	timestamp(4..6), timestamp   io.debezium.time.MicroTimestamp    KindMicroTimestamp
//	timestamptz                  io.debezium.time.ZonedTimestamp    KindZonedTimestamp
//	date                         io.debezium.time.Date              KindDate
//
// Debezium derives a timestamp's precision from the typmod the way pgjdbc's getScale does (no
// typmod: 6), and treats numeric without a typmod as VariableScaleDecimal (its
// isVariableScaleDecimal: length 0 and scale 0); outboxd reports that as KindDecimal with
// Precision 0, so a router knows the scale is per value.
//
// Every other type is KindString, its text as PostgreSQL prints it. Where Debezium has another
// Connect type, that is a known difference: time (MicroTime), timetz (ZonedTime), interval
// (MicroDuration), money (Decimal of money.fraction.digits), bit/varbit (boolean or Bits), xml
// (Xml), enums (Enum), arrays, geometric types, tsvector, hstore, ltree, PostGIS and vector
// types, and domains (Debezium resolves a domain to its base type; the Relation message carries
// the domain's OID).

// Built-in type OIDs (pg_type.oid) the mapping knows.
const (
	oidBool        = 16
	oidInt8        = 20
	oidInt2        = 21
	oidInt4        = 23
	oidOID         = 26
	oidJSON        = 114
	oidFloat4      = 700
	oidFloat8      = 701
	oidDate        = 1082
	oidTimestamp   = 1114
	oidTimestamptz = 1184
	oidNumeric     = 1700
	oidUUID        = 2950
	oidJSONB       = 3802
)

// columnType returns the Type of a column with type OID oid and type modifier typmod (-1: none),
// nullable unless notNull.
func columnType(oid uint32, typmod int32, notNull bool) source.Type {
	t := source.Type{Kind: kindOf(oid, typmod), Optional: !notNull}
	if t.Kind == source.KindDecimal && typmod >= 4 {
		t.Precision, t.Scale = numericTypmod(typmod)
	}
	if t.Kind == source.KindZonedTimestamp {
		// Debezium writes a ZonedTimestamp with the column's fractional width
		// (PostgresValueConverter: column.scale(), pgjdbc's DECIMAL_DIGITS: the typmod, 6 without).
		t.Scale = 6
		if typmod >= 0 && typmod <= 6 {
			t.Scale = int(typmod)
		}
	}
	return t
}

func kindOf(oid uint32, typmod int32) source.Kind {
	switch oid {
	case oidBool:
		return source.KindBool
	case oidInt2:
		return source.KindInt16
	case oidInt4:
		return source.KindInt32
	case oidInt8, oidOID:
		return source.KindInt64
	case oidFloat4:
		return source.KindFloat32
	case oidFloat8:
		return source.KindFloat64
	case oidNumeric:
		return source.KindDecimal
	case oidUUID:
		return source.KindUUID
	case oidJSON, oidJSONB:
		return source.KindJSON
	case oidBytea:
		return source.KindBytes
	case oidTimestamp:
		// pgjdbc's scale of a timestamp: the typmod, 6 without one. Debezium's adaptive mode:
		// ≤ 3 milliseconds, ≤ 6 microseconds (PostgreSQL allows no more than 6).
		if typmod >= 0 && typmod <= 3 {
			return source.KindTimestamp
		}
		return source.KindMicroTimestamp
	case oidTimestamptz:
		return source.KindZonedTimestamp
	case oidDate:
		return source.KindDate
	}
	return source.KindString
}

// numericTypmod decodes numeric's type modifier ((precision << 16 | scale & 0x7ff) + 4; the
// scale is an 11-bit signed number since PostgreSQL 15, as numeric_typmod_scale reads it).
func numericTypmod(typmod int32) (precision, scale int) {
	m := typmod - 4
	return int(m>>16) & 0xffff, (int(m&0x7ff) ^ 1024) - 1024
}
