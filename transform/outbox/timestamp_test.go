package outbox

import (
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/source"
)

func tsRow(col string, t source.Type, v any) *source.Row {
	str := source.Type{Kind: source.KindString}
	return typedRow("id", str, uid, "aggregatetype", str, "order", "aggregateid", str, "42", "payload", str, "x", col, t, v)
}

// TestTimestamp: outbox.timestamp commit | produce | column:<name>. Column cases are Debezium's
// EventRouterTest canSetTimestampByUserDefinedConfiguration (a Timestamp column's ms as they are)
// and AbstractEventRouterTest shouldConvertMicrosecondsTimestampToMilliseconds (a PostgreSQL
// timestamp column 2019-03-24 20:52:59, a MicroTimestamp: 1553460779000 ms); expected values
// printed by testdata/javaoracle.
func TestTimestamp(t *testing.T) {
	commit := time.Date(2026, 1, 2, 3, 4, 5, 678_000_000, time.UTC)
	micro := source.Type{Kind: source.KindMicroTimestamp, Optional: true}
	milli := source.Type{Kind: source.KindTimestamp, Optional: true}
	cases := []struct {
		name, ts string
		row      *source.Row
		commit   time.Time
		wantMs   int64 // -1: the zero time (producer's clock)
		reason   string
		inError  string
	}{
		{name: "default is the commit time", ts: "", row: tsRow("x", micro, nil), commit: commit, wantMs: commit.UnixMilli()},
		{name: "commit", ts: TimestampCommit, row: tsRow("x", micro, nil), commit: commit, wantMs: commit.UnixMilli()},
		{name: "commit unknown: producer's clock", ts: TimestampCommit, row: tsRow("x", micro, nil), wantMs: -1},
		{name: "produce", ts: TimestampProduce, row: tsRow("x", micro, nil), commit: commit, wantMs: -1},
		{name: "AERT shouldConvertMicrosecondsTimestampToMilliseconds", ts: "column:created", row: tsRow("created", micro, "2019-03-24 20:52:59"), commit: commit, wantMs: 1553460779000},
		{name: "MicroTimestamp: µs / 1000 truncated", ts: "column:created", row: tsRow("created", micro, "2019-03-24 20:52:59.123999"), commit: commit, wantMs: 1553460779123},
		{name: "ERT canSetTimestampByUserDefinedConfiguration (Timestamp ms)", ts: "column:created", row: tsRow("created", milli, "2019-03-24 20:52:59.456"), commit: commit, wantMs: 1553460779456},
		{name: "Java's long division toward zero: -500 µs is 0 ms", ts: "column:created", row: tsRow("created", micro, "1969-12-31 23:59:59.9995"), commit: commit, wantMs: 0},
		{name: "NULL column: the commit time (Debezium: ts_ms)", ts: "column:created", row: tsRow("created", micro, nil), commit: commit, wantMs: commit.UnixMilli()},
		{name: "NULL column, commit unknown", ts: "column:created", row: tsRow("created", micro, nil), wantMs: -1},
		{name: "NULL int64: the fallback, as Debezium (getInt64 null)", ts: "column:created", row: tsRow("created", source.Type{Kind: source.KindInt64}, nil), commit: commit, wantMs: commit.UnixMilli()},
		{name: "int64 is not a timestamp", ts: "column:created", row: tsRow("created", source.Type{Kind: source.KindInt64}, "1553460779000"), reason: "invalid_value", inError: "int64 column"},
		{name: "timestamptz is not (ZonedTimestamp)", ts: "column:created", row: tsRow("created", source.Type{Kind: source.KindZonedTimestamp}, "2019-03-24 20:52:59+00"), reason: "invalid_value", inError: "ZonedTimestamp column"},
		{name: "NULL timestamptz is not either", ts: "column:created", row: tsRow("created", source.Type{Kind: source.KindZonedTimestamp}, nil), reason: "invalid_value", inError: "ZonedTimestamp column"},
		{name: "untyped row (string)", ts: "column:created", row: row("id", uid, "aggregatetype", "order", "aggregateid", "42", "payload", "x", "created", "2019-03-24 20:52:59"), reason: "invalid_value", inError: "a string column"},
		{name: "missing column", ts: "column:created", row: tsRow("other", micro, nil), reason: "missing_column", inError: `no column "created"`},
		{name: "before 1970", ts: "column:created", row: tsRow("created", milli, "1969-12-31 23:59:59"), reason: "invalid_value", inError: "before 1970"},
		{name: "unreadable text", ts: "column:created", row: tsRow("created", micro, "infinity"), reason: "invalid_value", inError: "not a date-time"},
	}
	for _, c := range cases {
		cfg := DefaultConfig()
		cfg.Timestamp = c.ts
		r, err := New(cfg)
		if err != nil {
			t.Fatalf("%s: New: %v", c.name, err)
		}
		rec, err := r.Route(c.row, c.commit)
		if c.reason != "" {
			e, ok := err.(*Error)
			if !ok || e.Reason != c.reason || !strings.Contains(e.Msg, c.inError) {
				t.Errorf("%s: err %v, want a %s *Error with %q", c.name, err, c.reason, c.inError)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if c.wantMs == -1 {
			if !rec.Timestamp.IsZero() {
				t.Errorf("%s: timestamp %v, want zero (the producer's clock)", c.name, rec.Timestamp)
			}
		} else if rec.Timestamp.IsZero() || rec.Timestamp.UnixMilli() != c.wantMs {
			t.Errorf("%s: timestamp %v (%d ms), want %d ms", c.name, rec.Timestamp, rec.Timestamp.UnixMilli(), c.wantMs)
		}
	}
}

func TestTimestampColumnError(t *testing.T) {
	cols := []string{"id", "created", "zoned"}
	types := []source.Type{{Kind: source.KindUUID}, {Kind: source.KindMicroTimestamp}, {Kind: source.KindZonedTimestamp}}
	for ts, want := range map[string]string{
		"commit": "", "column:created": "", "column:zoned": "ZonedTimestamp, not a timestamp", "column:nope": `no column "nope"`,
	} {
		cfg := DefaultConfig()
		cfg.Timestamp = ts
		r, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		err = r.TimestampColumnError("public.outbox", cols, types)
		if (want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", ts, err, want)
		}
	}
	cfg := DefaultConfig()
	cfg.Timestamp = "column:zoned"
	r, _ := New(cfg)
	if err := r.TimestampColumnError("public.outbox", cols, nil); err != nil {
		t.Errorf("unknown types: %v, want nil (only presence is checked)", err)
	}
}
