package outbox

import (
	"fmt"
	"strings"
	"time"

	"github.com/outboxd/outboxd/source"
)

// tsMode is outbox.timestamp.
type tsMode uint8

const (
	tsCommit  tsMode = iota // the source transaction's commit time
	tsProduce               // the producer's clock
	tsColumn                // a column, as Debezium's table.field.event.timestamp
)

// initTimestamp prepares outbox.timestamp (checkEnums has checked its form).
func (r *Router) initTimestamp() error {
	switch ts := r.cfg.Timestamp; {
	case ts == "" || ts == TimestampCommit:
		r.hs.ts = tsCommit
	case ts == TimestampProduce:
		r.hs.ts = tsProduce
	case strings.HasPrefix(ts, TimestampColumnPrefix) && len(ts) > len(TimestampColumnPrefix):
		r.hs.ts, r.hs.tsColumn = tsColumn, ts[len(TimestampColumnPrefix):]
	default:
		return fmt.Errorf("outbox.timestamp %q is not one of commit | produce | column:<name>", ts)
	}
	return nil
}

// timestamp is the record's timestamp for row, committed at commit (zero: the producer's clock).
//
//   - commit: commit itself, the source transaction's commit time. Redelivering the row (a restart
//     before its position was stored) gives the same timestamp, unlike Debezium's default (the
//     envelope's ts_ms: when Debezium processed the change). A zero commit (no commit time known)
//     leaves it to the producer's clock.
//   - produce: zero, the producer's clock at send time.
//   - column:<name>: EventRouterDelegate.getEventTimestampMs with table.field.event.timestamp: an
//     io.debezium.time.Timestamp column's milliseconds as they are, a MicroTimestamp's
//     microseconds / 1000 (Java's long division, toward zero), both read as UTC. A NULL column
//     falls back: Debezium to the envelope's ts_ms (processing time), outboxd to the commit time
//     (deterministic; the producer's clock when unknown). A column of any other kind is a
//     dead letter (reason invalid_value), as Debezium's task fails on it ("Unsupported field type");
//     an int64 column only when it is not NULL, as in Debezium (getInt64 reads the NULL first). So
//     is a time before 1970: Kafka's producer refuses negative timestamps.
func (r *Router) timestamp(row *source.Row, commit time.Time) (time.Time, error) {
	switch r.hs.ts {
	case tsProduce:
		return time.Time{}, nil
	case tsColumn:
		return r.columnTimestamp(row, commit)
	}
	return commit, nil
}

func (r *Router) columnTimestamp(row *source.Row, commit time.Time) (time.Time, error) {
	col := r.hs.tsColumn
	v, t, ok := row.Lookup(col)
	if !ok {
		return time.Time{}, &Error{Reason: "missing_column", Column: col,
			Msg: fmt.Sprintf("table %s has no column %q (outbox.timestamp: column:%s)", row.Table, col, col)}
	}
	bad := func(format string, a ...any) (time.Time, error) {
		return time.Time{}, &Error{Reason: "invalid_value", Column: col,
			Msg: fmt.Sprintf("table %s, column %q (outbox.timestamp: column:%s): ", row.Table, col, col) + fmt.Sprintf(format, a...)}
	}
	switch t.Kind {
	case source.KindTimestamp, source.KindMicroTimestamp:
	case source.KindInt64:
		if v.Null {
			return commit, nil
		}
		return bad("an int64 column without a logical type is not an event timestamp (Debezium fails the same way); use a timestamp column, or outbox.timestamp: commit")
	default:
		return bad("a %s column is not an event timestamp: Debezium reads io.debezium.time.Timestamp or MicroTimestamp (a timestamp without time zone, a MySQL DATETIME) and fails on others; use such a column, or outbox.timestamp: commit", kindName(t.Kind))
	}
	if v.Null {
		return commit, nil
	}
	d, err := parseDateTime(v.Bytes, true)
	if err != nil {
		return bad("%v", err)
	}
	var ms int64
	if t.Kind == source.KindTimestamp {
		ms = epochMillis(d.utc())
	} else {
		ms = epochMicros(d.utc()) / 1_000
	}
	if ms < 0 {
		return bad("%s is before 1970: a Kafka record timestamp cannot be negative (Debezium's producer refuses it too)", v.Bytes)
	}
	return time.UnixMilli(ms).UTC(), nil
}

// TimestampColumnError checks outbox.timestamp: column:<name> against a table's columns and
// types (as a source reports them in Row.Columns and Row.Types), for `outboxd check`: nil when
// the option names no column, or a column of a kind the timestamp can be read from; otherwise
// what is wrong and what to do. Types nil means unknown: only the column's presence is checked.
func (r *Router) TimestampColumnError(table string, columns []string, types []source.Type) error {
	if r.hs.ts != tsColumn {
		return nil
	}
	col := r.hs.tsColumn
	for i, c := range columns {
		if c != col {
			continue
		}
		if i >= len(types) {
			return nil
		}
		switch k := types[i].Kind; k {
		case source.KindTimestamp, source.KindMicroTimestamp:
			return nil
		default:
			return fmt.Errorf("outbox.timestamp: column:%s: column %q of %s is %s, not a timestamp without time zone (Debezium's io.debezium.time.Timestamp or MicroTimestamp): every row would be dead-lettered; use such a column, or outbox.timestamp: commit", col, col, table, kindName(k))
		}
	}
	return fmt.Errorf("outbox.timestamp: column:%s: table %s has no column %q: every row would be dead-lettered; name one of its columns, or use outbox.timestamp: commit", col, table, col)
}
