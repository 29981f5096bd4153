package e2e

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Reading both tools' records back and comparing them event by event (debezium_compare_test.go).

// deliberate is one kept difference: for rows matching row (a label, or "*" for any), field
// differs with exactly these renderings.
type deliberate struct{ row, field, dbz, obx, why string }

// cmpRecord is a record as read back, with everything the comparison looks at.
type cmpRecord struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	Headers   []kgo.RecordHeader
	TSType    int8 // 0 CreateTime, 1 LogAppendTime
	Timestamp time.Time
	// ProducerID tells the tools apart on a topic both write (a raw, unrouted topic).
	ProducerID int64
}

func (r cmpRecord) header(k string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == k {
			return string(h.Value), true
		}
	}
	return "", false
}

// readTopics reads the topics matching pattern (read_uncommitted is fine: both tools produce
// without transactions here) until want records arrived, then polls 1 s more to see any extra.
func readTopics(t *testing.T, addr, pattern string, want int, timeout time.Duration) []cmpRecord {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeRegex(), kgo.ConsumeTopics(pattern),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.MetadataMinAge(100*time.Millisecond),
		kgo.MetadataMaxAge(500*time.Millisecond), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	defer cl.Close()
	var out []cmpRecord
	poll := func(d time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		f := cl.PollFetches(ctx)
		f.EachRecord(func(r *kgo.Record) {
			out = append(out, cmpRecord{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value,
				Headers: r.Headers, TSType: r.Attrs.TimestampType(), Timestamp: r.Timestamp, ProducerID: r.ProducerID})
		})
	}
	for deadline := time.Now().Add(timeout); len(out) < want && time.Now().Before(deadline); {
		poll(time.Second)
	}
	for extra := time.Now().Add(time.Second); time.Now().Before(extra); {
		poll(300 * time.Millisecond)
	}
	return out
}

// render is a byte string for a difference message: null for nil, else Go-quoted.
func render(b []byte) string {
	if b == nil {
		return "null"
	}
	return strconv.Quote(string(b))
}

type cmpResult struct{ events, equal, deliberate int }

// compareDebezium reads Debezium's records (dbz.*) and outboxd's (obx.* and its DLQ) for rows and
// compares them event by event (compareRecords; StringConverter: null keys' partitions are not
// compared).
func compareDebezium(t *testing.T, addr string, rows []cmpRow, allowed []deliberate) cmpResult {
	t.Helper()
	dbz := readTopics(t, addr, `^dbz\..*`, len(rows), 2*time.Minute)
	obx := readTopics(t, addr, `^(obx\..*|outboxd\.dlq)$`, len(rows), time.Minute)
	return compareRecords(t, "", rows, dbz, obx, allowed, cmpOpts{dbzPrefix: "dbz.", obxPrefix: "obx.", dlq: "outboxd.dlq"})
}

// cmpOpts says how one setup's records are compared.
type cmpOpts struct {
	dbzPrefix, obxPrefix string // each tool's topic prefix (stripped before the topics are compared)
	dlq                  string // outboxd's DLQ topic: a row there is a "routed" difference
	// nullKeyPartition: compare the partition of a record whose Debezium key is null (JsonConverter
	// writes a NULL key as bytes, hashed like any key); StringConverter's null key is spread by the
	// partitioner, so neither its partition nor its place in the per-partition order is compared.
	nullKeyPartition bool
	// exactTS reports whether Debezium's timestamp of a row is deterministic (the
	// table.field.event.timestamp column, not NULL): then the timestamps must be equal (ms). Else
	// Debezium's is its processing time: compared loosely (field "timestamp (loose)": within
	// tsSlack of each other).
	exactTS func(cmpRow) bool
	// diffs, when set, collects every difference seen (deliberate or not), e.g. for a report.
	diffs *[]cmpDiff
	// schemaDefaults: where Debezium's value (JsonConverter with schemas) has column defaults in
	// its schema ("default":…) and outboxd's has none, they are a difference of their own (field
	// "value schema defaults", outboxd "none") and the rest of the value is compared without them.
	schemaDefaults bool
}

// schemaDefault is a "default" member of a Connect schema in JsonConverter's output (it always
// precedes "field"); a value is a JSON scalar.
var schemaDefault = regexp.MustCompile(`"default":("(?:[^"\\]|\\.)*"|-?[0-9][0-9.eE+-]*|true|false|null),`)

// cmpDiff is one difference seen: why is the deliberate one's reason, "" when none matched.
type cmpDiff struct{ setup, row, field, dbz, obx, why string }

// tsSlack bounds how far apart the two tools' clocks-of-processing (or the commit and Debezium's
// processing) may be on this busy 2-core machine.
const tsSlack = 3 * time.Minute

// match reports whether a deliberate difference covers this one ("*" as row, dbz or obx: any).
func (a deliberate) match(row, field, dv, ov string) bool {
	return (a.row == "*" || a.row == row) && a.field == field && (a.dbz == "*" || a.dbz == dv) && (a.obx == "*" || a.obx == ov)
}

// compareRecords compares Debezium's records dbz and outboxd's obx for rows event by event
// (matched by the id header): topic (after each tool's prefix), partition, key, value, timestamp
// type and timestamp, headers (names, order, bytes, null vs absent), and per topic-partition the
// order of events. Every difference must be one of allowed, and every allowed one must be seen.
// name ("setup B") prefixes the messages.
func compareRecords(t *testing.T, name string, rows []cmpRow, dbz, obx []cmpRecord, allowed []deliberate, o cmpOpts) cmpResult {
	t.Helper()
	if name != "" {
		name += ": "
	}
	byID := func(side string, recs []cmpRecord) map[string]cmpRecord {
		m := map[string]cmpRecord{}
		for _, r := range recs {
			id, ok := r.header("id")
			if !ok {
				t.Errorf("%s%s record %s/%d@%d has no id header", name, side, r.Topic, r.Partition, r.Offset)
				continue
			}
			id = strings.ToLower(id) // matched by event, whatever the case each tool writes
			if _, dup := m[id]; dup {
				t.Errorf("%s%s delivered event %s twice", name, side, id)
			}
			m[id] = r
		}
		return m
	}
	d, ob := byID("Debezium", dbz), byID("outboxd", obx)
	if len(dbz) != len(rows) || len(obx) != len(rows) {
		t.Errorf("%sread %d Debezium and %d outboxd records for %d events", name, len(dbz), len(obx), len(rows))
	}
	res := cmpResult{events: len(rows)}
	seen := make([]int, len(allowed))
	diff := func(row, field, dv, ov string) {
		for i, a := range allowed {
			if a.match(row, field, dv, ov) {
				seen[i]++
				res.deliberate++
				if o.diffs != nil {
					*o.diffs = append(*o.diffs, cmpDiff{strings.TrimSuffix(name, ": "), row, field, dv, ov, a.why})
				}
				return
			}
		}
		if o.diffs != nil {
			*o.diffs = append(*o.diffs, cmpDiff{strings.TrimSuffix(name, ": "), row, field, dv, ov, ""})
		}
		t.Errorf("%sevent %s: %s differs: Debezium %s, outboxd %s", name, row, field, dv, ov)
	}
	same := func(row, field, dv, ov string) {
		if dv != ov {
			diff(row, field, dv, ov)
		} else {
			res.equal++
		}
	}
	unordered := map[string]bool{} // ids whose partition is not compared
	label, labelID := map[string]string{}, map[string]string{}
	for _, r := range rows {
		label[r.id()], labelID[r.label] = r.label, r.id()
	}
	for _, r := range rows {
		dr, dok := d[r.id()]
		or, ook := ob[r.id()]
		if !dok || !ook {
			t.Errorf("%sevent %s (%s): delivered by Debezium %v, by outboxd %v", name, r.label, r.id(), dok, ook)
			continue
		}
		suffix := strings.TrimPrefix(dr.Topic, o.dbzPrefix)
		if or.Topic == o.dlq {
			reason, _ := or.header("outboxd.error.reason")
			diff(r.label, "routed", fmt.Sprintf("topic %s, key %s", suffix, render(dr.Key)), "dead-lettered: "+reason)
			continue
		}
		same(r.label, "topic suffix", suffix, strings.TrimPrefix(or.Topic, o.obxPrefix))
		if dr.Key != nil || o.nullKeyPartition {
			same(r.label, "partition", fmt.Sprint(dr.Partition), fmt.Sprint(or.Partition))
		} else {
			unordered[r.id()] = true
		}
		same(r.label, "key", render(dr.Key), render(or.Key))
		dv := dr.Value
		if o.schemaDefaults && schemaDefault.Match(dv) && !schemaDefault.Match(or.Value) {
			var found []string
			for _, m := range schemaDefault.FindAllSubmatch(dv, -1) {
				found = append(found, string(m[1]))
			}
			diff(r.label, "value schema defaults", strings.Join(found, " "), "none")
			dv = schemaDefault.ReplaceAll(dv, nil)
		}
		same(r.label, "value", render(dv), render(or.Value))
		same(r.label, "timestamp type", fmt.Sprint(dr.TSType), fmt.Sprint(or.TSType))
		if o.exactTS != nil && o.exactTS(r) {
			same(r.label, "timestamp", fmt.Sprint(dr.Timestamp.UnixMilli()), fmt.Sprint(or.Timestamp.UnixMilli()))
		} else if gap := or.Timestamp.Sub(dr.Timestamp); gap <= tsSlack && gap >= -tsSlack {
			res.equal++
		} else {
			diff(r.label, "timestamp (loose)", fmt.Sprint(dr.Timestamp.UnixMilli()), fmt.Sprint(or.Timestamp.UnixMilli()))
		}
		names := func(c cmpRecord) string {
			var n []string
			for _, h := range c.Headers {
				n = append(n, h.Key)
			}
			return strings.Join(n, ",")
		}
		same(r.label, "header names", names(dr), names(or))
		for _, h := range dr.Headers {
			for _, oh := range or.Headers {
				if oh.Key != h.Key {
					continue
				}
				if h.Key == "traceparent" {
					// Debezium's carries the id of the span it starts (db-log-write): random
					dt, dspan := splitTraceparent(h.Value)
					ot, ospan := splitTraceparent(oh.Value)
					same(r.label, "header traceparent (version, trace id, flags)", dt, ot)
					same(r.label, "header traceparent span id", dspan, ospan)
					continue
				}
				same(r.label, "header "+h.Key, render(h.Value), render(oh.Value))
			}
		}
	}
	// Order: per topic suffix and partition, the events in the same sequence.
	seq := func(recs []cmpRecord, prefix string) map[string][]string {
		m := map[string][]string{}
		sort.SliceStable(recs, func(i, j int) bool { return recs[i].Offset < recs[j].Offset })
		for _, r := range recs {
			id, _ := r.header("id")
			id = strings.ToLower(id)
			if r.Topic == o.dlq || unordered[id] {
				continue
			}
			k := fmt.Sprintf("%s/%d", strings.TrimPrefix(r.Topic, prefix), r.Partition)
			if l, ok := label[id]; ok {
				id = l
			}
			m[k] = append(m[k], id)
		}
		return m
	}
	ds, os2 := seq(dbz, o.dbzPrefix), seq(obx, o.obxPrefix)
	parts := make([]string, 0, len(ds))
	for k := range ds {
		parts = append(parts, k)
	}
	sort.Strings(parts)
	for _, k := range parts {
		ids := ds[k]
		if strings.Join(ids, ",") != strings.Join(os2[k], ",") && len(ids) > 0 {
			// the dead-lettered rows are in Debezium's sequence only
			var kept []string
			for _, id := range ids {
				if or, ok := ob[labelID[id]]; ok && or.Topic != o.dlq {
					kept = append(kept, id)
				}
			}
			if strings.Join(kept, ",") != strings.Join(os2[k], ",") {
				// row: the topic-partition (after the prefix), values: the event ids in offset order
				diff(k, "order", strings.Join(kept, ","), strings.Join(os2[k], ","))
			}
		}
	}
	for i, a := range allowed {
		t.Logf("%sdeliberate difference on %d events: %s %s: Debezium %s, outboxd %s", name, seen[i], a.row, a.field, a.dbz, a.obx)
		if seen[i] == 0 {
			t.Errorf("%sdeliberate difference not seen (remove it from the list, and from README): %s %s: Debezium %s, outboxd %s", name, a.row, a.field, a.dbz, a.obx)
		}
	}
	if t.Failed() {
		for _, side := range []struct {
			name string
			recs []cmpRecord
		}{{"Debezium", dbz}, {"outboxd", obx}} {
			for _, r := range side.recs {
				t.Logf("%s%s %s/%d@%d key %s value %s headers %s", name, side.name, r.Topic, r.Partition, r.Offset, render(r.Key), render(r.Value), renderHeaders(r.Headers))
			}
		}
	}
	return res
}

func renderHeaders(hs []kgo.RecordHeader) string {
	var b []string
	for _, h := range hs {
		b = append(b, h.Key+"="+render(h.Value))
	}
	return strings.Join(b, " ")
}

// splitTraceparent splits a W3C traceparent into "<version>-<trace id>-…-<flags>" and its span
// id (the whole value, quoted, and "" when it is not 55 bytes).
func splitTraceparent(v []byte) (masked, span string) {
	if len(v) != 55 {
		return render(v), ""
	}
	return string(v[:36]) + "…" + string(v[52:]), string(v[36:52])
}
