package e2e

import (
	"context"
	"fmt"
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
				Headers: r.Headers, TSType: r.Attrs.TimestampType()})
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

type cmpResult struct{ equal, deliberate int }

// compareDebezium reads Debezium's records (dbz.*) and outboxd's (obx.* and its DLQ) for rows and
// compares them event by event; every difference must be one of allowed, and every allowed one
// must be seen.
func compareDebezium(t *testing.T, addr string, rows []cmpRow, allowed []deliberate) cmpResult {
	t.Helper()
	dbz := readTopics(t, addr, `^dbz\..*`, len(rows), 2*time.Minute)
	obx := readTopics(t, addr, `^(obx\..*|outboxd\.dlq)$`, len(rows), time.Minute)
	byID := func(side string, recs []cmpRecord) map[string]cmpRecord {
		m := map[string]cmpRecord{}
		for _, r := range recs {
			id, ok := r.header("id")
			if !ok {
				t.Errorf("%s record %s/%d@%d has no id header", side, r.Topic, r.Partition, r.Offset)
				continue
			}
			id = strings.ToLower(id) // matched by event, whatever the case each tool writes
			if _, dup := m[id]; dup {
				t.Errorf("%s delivered event %s twice", side, id)
			}
			m[id] = r
		}
		return m
	}
	d, o := byID("Debezium", dbz), byID("outboxd", obx)
	if len(dbz) != len(rows) || len(obx) != len(rows) {
		t.Errorf("read %d Debezium and %d outboxd records for %d events", len(dbz), len(obx), len(rows))
	}
	var res cmpResult
	seen := make([]int, len(allowed))
	diff := func(row, field, dv, ov string) {
		for i, a := range allowed {
			if (a.row == "*" || a.row == row) && a.field == field && a.dbz == dv && a.obx == ov {
				seen[i]++
				res.deliberate++
				return
			}
		}
		t.Errorf("event %s: %s differs: Debezium %s, outboxd %s", row, field, dv, ov)
	}
	same := func(row, field, dv, ov string) {
		if dv != ov {
			diff(row, field, dv, ov)
		} else {
			res.equal++
		}
	}
	for _, r := range rows {
		dr, dok := d[r.id()]
		or, ook := o[r.id()]
		if !dok || !ook {
			t.Errorf("event %s (%s): delivered by Debezium %v, by outboxd %v", r.label, r.id(), dok, ook)
			continue
		}
		suffix := strings.TrimPrefix(dr.Topic, "dbz.")
		if or.Topic == "outboxd.dlq" {
			reason, _ := or.header("outboxd.error.reason")
			diff(r.label, "routed", fmt.Sprintf("topic %s, key %s", suffix, render(dr.Key)), "dead-lettered: "+reason)
			continue
		}
		same(r.label, "topic suffix", suffix, strings.TrimPrefix(or.Topic, "obx."))
		same(r.label, "partition", fmt.Sprint(dr.Partition), fmt.Sprint(or.Partition))
		same(r.label, "key", render(dr.Key), render(or.Key))
		same(r.label, "value", render(dr.Value), render(or.Value))
		same(r.label, "timestamp type", fmt.Sprint(dr.TSType), fmt.Sprint(or.TSType))
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
				if oh.Key == h.Key {
					same(r.label, "header "+h.Key, render(h.Value), render(oh.Value))
				}
			}
		}
	}
	// Order: per topic suffix and partition, the events in the same sequence.
	seq := func(recs []cmpRecord, prefix string) map[string][]string {
		m := map[string][]string{}
		sort.SliceStable(recs, func(i, j int) bool { return recs[i].Offset < recs[j].Offset })
		for _, r := range recs {
			if !strings.HasPrefix(r.Topic, prefix) {
				continue
			}
			id, _ := r.header("id")
			id = strings.ToLower(id)
			k := fmt.Sprintf("%s/%d", strings.TrimPrefix(r.Topic, prefix), r.Partition)
			m[k] = append(m[k], id)
		}
		return m
	}
	ds, os2 := seq(dbz, "dbz."), seq(obx, "obx.")
	for k, ids := range ds {
		if strings.Join(ids, ",") != strings.Join(os2[k], ",") && len(ids) > 0 {
			// the dead-lettered rows are in Debezium's sequence only
			var kept []string
			for _, id := range ids {
				if or, ok := o[id]; ok && or.Topic != "outboxd.dlq" {
					kept = append(kept, id)
				}
			}
			if strings.Join(kept, ",") != strings.Join(os2[k], ",") {
				t.Errorf("order in %s differs:\nDebezium %v\noutboxd  %v", k, ids, os2[k])
			}
		}
	}
	for i, a := range allowed {
		t.Logf("deliberate difference on %d events: %s %s: Debezium %s, outboxd %s", seen[i], a.row, a.field, a.dbz, a.obx)
		if seen[i] == 0 {
			t.Errorf("deliberate difference not seen (remove it from the list, and from README): %s %s: Debezium %s, outboxd %s", a.row, a.field, a.dbz, a.obx)
		}
	}
	if t.Failed() {
		for _, side := range []struct {
			name string
			recs []cmpRecord
		}{{"Debezium", dbz}, {"outboxd", obx}} {
			for _, r := range side.recs {
				t.Logf("%s %s/%d@%d key %s value %s headers %s", side.name, r.Topic, r.Partition, r.Offset, render(r.Key), render(r.Value), renderHeaders(r.Headers))
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
