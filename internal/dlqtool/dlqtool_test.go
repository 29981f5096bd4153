package dlqtool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/sink/kafka"
	"github.com/outboxd/outboxd/source"
	"github.com/outboxd/outboxd/transform/outbox"
)

var now = time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)

func row(vals ...string) *source.Row {
	r := &source.Row{Table: "public.outbox"}
	for i := 0; i+1 < len(vals); i += 2 {
		r.Columns = append(r.Columns, vals[i])
		if vals[i+1] == "NULL" {
			r.Values = append(r.Values, source.Value{Null: true})
		} else {
			r.Values = append(r.Values, source.Value{Bytes: []byte(vals[i+1])})
		}
	}
	return r
}

// produceStage is the dead letter of a record Kafka refused.
func produceStage(id, topic, key, value, reason string) sink.Record {
	rec := sink.Record{Topic: topic, Key: []byte(key), Value: []byte(value),
		Headers: []sink.Header{{Key: "id", Value: []byte(id)}, {Key: "eventType", Value: []byte("created")}}}
	return sink.DeadLetter(rec, row("id", id, "aggregatetype", "x", "aggregateid", key, "payload", value), "produce", reason,
		"kafka: "+reason, "0/16B3748", now)
}

// transformStage is the dead letter of a row that never became a record.
func transformStage(id, aggType string) sink.Record {
	r := row("id", id, "aggregatetype", aggType, "aggregateid", "k1", "payload", `{"a": 1}`)
	rec := sink.Record{Topic: "outbox.event." + aggType}
	return sink.DeadLetter(rec, r, "transform", "invalid_topic", "topic name has the illegal character ' '", "0/16B4000", now)
}

func toRecord(dl sink.Record, p int32, off int64) *Record {
	return &Record{Partition: p, Offset: off, Timestamp: now, Key: dl.Key, Value: dl.Value, Headers: dl.Headers}
}

func TestTextNeverPrintsTheValue(t *testing.T) {
	dl := produceStage("e1", "outbox.event.big", "order 7", "SECRET-PAYLOAD", "record_too_large")
	var b bytes.Buffer
	if err := Text(&b, toRecord(dl, 2, 5), "id"); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	want := `time=2026-05-01T10:00:00Z reason=record_too_large stage=produce message="kafka: record_too_large" topic=outbox.event.big ` +
		`table=public.outbox position=0/16B3748 id=e1 key="order 7" dlq=2@5` + "\n"
	if got != want {
		t.Fatalf("text\n got %q\nwant %q", got, want)
	}
	// A null key, and a row-as-JSON dead letter: the id comes from the row.
	dl = transformStage("e2", "bad topic")
	dl.Key = nil
	b.Reset()
	Text(&b, toRecord(dl, 0, 0), "id")
	if !strings.Contains(b.String(), " id=e2 key=<null> ") || strings.Contains(b.String(), `"a": 1`) ||
		!strings.Contains(b.String(), `topic="outbox.event.bad topic"`) {
		t.Fatalf("text: %s", b.String())
	}
}

func TestJSON(t *testing.T) {
	dl := produceStage("e1", "outbox.event.big", "k", "{\"x\":1}", "record_too_large")
	var b bytes.Buffer
	JSON(&b, toRecord(dl, 1, 9), "id")
	var j JSONRecord
	if err := json.Unmarshal(b.Bytes(), &j); err != nil {
		t.Fatalf("%v: %s", err, b.String())
	}
	if j.Reason != "record_too_large" || j.Stage != "produce" || j.OriginalTopic != "outbox.event.big" || j.SourceTable != "public.outbox" ||
		j.SourcePosition != "0/16B3748" || j.ID != "e1" || j.Time != "2026-05-01T10:00:00Z" || *j.Key != "k" || j.KeyEncoding != "text" ||
		*j.Value != `{"x":1}` || j.ValueEncoding != "text" || j.Headers["eventType"] != "created" || j.Headers[sink.HeaderStage] != "produce" ||
		j.Partition != 1 || j.Offset != 9 {
		t.Fatalf("json: %s", b.String())
	}
	r := &Record{Value: []byte{0xff, 0x00}, Headers: []sink.Header{{Key: "bin", Value: []byte{0xfe}}}}
	j = ToJSON(r, "id")
	if j.Key != nil || *j.Value != "/wA=" || j.ValueEncoding != "base64" || j.Headers["bin"] != "/g==" || len(j.BinaryHeaders) != 1 {
		t.Fatalf("binary: %+v", j)
	}
}

func TestStripRemovesOnlyOutboxdHeaders(t *testing.T) {
	dl := produceStage("e1", "outbox.event.x", "k", "v", "topic_authorization_failed")
	dl.Headers = append(dl.Headers, sink.Header{Key: "outboxd.trace", Value: []byte("kept")})
	out := Strip(toRecord(dl, 0, 0), "outbox.event.x")
	var keys []string
	for _, h := range out.Headers {
		keys = append(keys, h.Key+"="+string(h.Value))
	}
	if strings.Join(keys, ",") != "id=e1,eventType=created,outboxd.trace=kept" || out.Topic != "outbox.event.x" ||
		string(out.Key) != "k" || string(out.Value) != "v" {
		t.Fatalf("stripped: %v %+v", keys, out)
	}
	for _, k := range []string{sink.HeaderReason, sink.HeaderMessage, sink.HeaderStage, sink.HeaderOriginalTopic,
		sink.HeaderSourceTable, sink.HeaderSourcePosition, sink.HeaderErrorTime} {
		if !IsInternalHeader(k) {
			t.Errorf("%s is not stripped", k)
		}
	}
}

func TestPlan(t *testing.T) {
	good := toRecord(produceStage("e1", "outbox.event.a", "k", "v", "record_too_large"), 0, 0)
	again := toRecord(produceStage("e1", "outbox.event.a", "k", "v", "record_too_large"), 0, 1)
	row := toRecord(transformStage("e2", "bad topic"), 1, 0)
	other := toRecord(produceStage("e3", "outbox.event.a", "k", "v", "record_too_large"), 2, 0)
	noTopic := toRecord(produceStage("e4", "", "k", "v", "record_too_large"), 2, 1)

	p := newPlanner(nil, true, "id")
	if pl := p.plan(good); !pl.Replay || pl.Out.Topic != "outbox.event.a" {
		t.Errorf("good: %+v", pl)
	}
	if pl := p.plan(again); pl.Replay || pl.Prev != good || !strings.Contains(pl.Why, "already replayed") {
		t.Errorf("repeat: %+v", pl)
	}
	if pl := p.plan(row); pl.Replay || !pl.Selected || pl.Explicit || !strings.Contains(pl.Why, "not replayable") {
		t.Errorf("row: %+v", pl)
	}
	if pl := p.plan(noTopic); pl.Replay || !strings.Contains(pl.Why, "outboxd.original.topic") {
		t.Errorf("no topic: %+v", pl)
	}

	p = newPlanner([]string{"e2", "e3", "nope", "nope"}, false, "id")
	if pl := p.plan(good); pl.Selected {
		t.Errorf("not asked for: %+v", pl)
	}
	if pl := p.plan(row); pl.Replay || !pl.Explicit {
		t.Errorf("row by id: %+v", pl)
	}
	if pl := p.plan(other); !pl.Replay || !pl.Explicit {
		t.Errorf("by id: %+v", pl)
	}
	if nf := p.notFound([]string{"e2", "e3", "nope", "nope"}); len(nf) != 1 || nf[0] != "nope" {
		t.Errorf("not found: %v", nf)
	}

	// Reporting: a row-as-JSON dead letter asked for by id fails, with --all it is skipped.
	var sum Summary
	var b bytes.Buffer
	pl := p.plan(row)
	report(&b, &pl, "id", &sum)
	pl = newPlanner(nil, true, "id").plan(row)
	report(&b, &pl, "id", &sum)
	if sum.Failed != 1 || sum.Skipped != 1 || !strings.HasPrefix(b.String(), "failed dlq=1@0 id=e2: not replayable") {
		t.Errorf("%+v\n%s", sum, b.String())
	}
	if _, err := Replay(context.Background(), ReplayOptions{}, &b); !errors.Is(err, ErrNothingSelected) {
		t.Errorf("no selection: %v", err)
	}
}

// TestTailAndReplayAgainstBroker writes dead letters to a kfake broker with the pipeline's
// producer, reads them back, and replays them: one to a topic that refuses writes.
func TestTailAndReplayAgainstBroker(t *testing.T) {
	b := testenv.NewBroker(t)
	kc := kafka.Config{Brokers: []string{b.Addr()}, Linger: time.Millisecond}
	conn := Conn{Kafka: kc, Topic: "outboxd.dlq", IDColumn: "id"}
	ctx := context.Background()

	if _, err := Tail(ctx, conn, &bytes.Buffer{}, false, false); !errors.Is(err, ErrNoTopic) {
		t.Fatalf("tail of a missing topic: %v", err)
	}

	dls := []sink.Record{
		produceStage("e1", "outbox.event.a", "k1", "v1", "record_too_large"),
		transformStage("e2", "bad topic"),
		produceStage("e3", "outbox.event.secret", "k3", "v3", "topic_authorization_failed"),
		produceStage("e4", "outbox.event.a", "k4", "", "record_too_large"),
	}
	dls[3].Value = nil // a null value stays null
	prod, err := kafka.New(kc, nil)
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, len(dls))
	for i := range dls {
		dls[i].Topic = "outboxd.dlq"
		if err := prod.Produce(ctx, &dls[i], func(err error) { errs <- err }); err != nil {
			t.Fatal(err)
		}
	}
	for range dls {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	prod.Close()

	var out bytes.Buffer
	n, err := Tail(ctx, conn, &out, false, false)
	if err != nil || n != 4 {
		t.Fatalf("tail: %d records, %v\n%s", n, err, out.String())
	}
	for _, want := range []string{"id=e1 key=k1", "reason=invalid_topic stage=transform", "id=e3 key=k3", "id=e4 key=k4"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("tail lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if n, err := Tail(ctx, conn, &out, false, true); err != nil || n != 4 || strings.Count(out.String(), "\n") != 4 {
		t.Fatalf("tail --json: %d %v\n%s", n, err, out.String())
	}

	// --follow prints what is there and keeps going until ctx ends.
	fctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	out.Reset()
	n, err = Tail(fctx, conn, &out, true, false)
	cancel()
	if err != nil || n != 4 {
		t.Fatalf("tail --follow: %d %v", n, err)
	}

	h := b.Cluster().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "outbox.event.secret", Err: kerr.TopicAuthorizationFailed, Count: -1})
	out.Reset()
	sum, err := Replay(ctx, ReplayOptions{Conn: conn, All: true, Timeout: 20 * time.Second}, &out)
	if err != nil || sum.Replayed != 2 || sum.Failed != 1 || sum.Skipped != 1 || sum.OK() {
		t.Fatalf("replay --all: %+v %v\n%s", sum, err, out.String())
	}
	if !strings.Contains(out.String(), "failed dlq=") || !strings.Contains(out.String(), "topic_authorization_failed") {
		t.Errorf("replay output:\n%s", out.String())
	}
	h.Remove()
	out.Reset()
	sum, err = Replay(ctx, ReplayOptions{Conn: conn, IDs: []string{"e3", "missing"}, Timeout: 20 * time.Second}, &out)
	if err != nil || sum.Replayed != 1 || sum.Failed != 0 || len(sum.NotFound) != 1 {
		t.Fatalf("replay --id e3: %+v %v\n%s", sum, err, out.String())
	}

	got := testenv.Consume(t, b.Addr(), `outbox\.event\..*`, 3, 10*time.Second)
	byID := map[string]testenv.Consumed{}
	for _, r := range got {
		byID[r.Header("id")] = r
	}
	if len(got) != 3 || len(byID) != 3 {
		t.Fatalf("replayed records: %+v", got)
	}
	for _, id := range []string{"e1", "e3", "e4"} {
		r := byID[id]
		for k := range r.Headers {
			if IsInternalHeader(k) {
				t.Errorf("%s replayed with header %s", id, k)
			}
		}
		if r.Header("eventType") != "created" || r.Topic == "" {
			t.Errorf("%s: %+v", id, r)
		}
	}
	if r := byID["e3"]; r.Topic != "outbox.event.secret" || string(r.Key) != "k3" || string(r.Value) != "v3" {
		t.Errorf("e3: %+v", r)
	}
	if r := byID["e4"]; r.Value != nil {
		t.Errorf("e4: null value replayed as %q", r.Value)
	}
}

// TestTransformDeadLettersCarryTheEventID: a row the transform refuses still yields the `id`
// header (canonical form), so its dead letter can be found and selected by event id.
func TestTransformDeadLettersCarryTheEventID(t *testing.T) {
	r, err := outbox.New(outbox.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, rw := range []*source.Row{
		row("id", "5C4A3E6D-62D9-421D-B02C-06E076FDE76E", "aggregatetype", "NULL", "aggregateid", "k", "payload", "{}"),
		row("id", "5c4a3e6d-62d9-421d-b02c-06e076fde76e", "aggregatetype", "bad topic", "aggregateid", "k", "payload", "{}"),
		row("id", "5c4a3e6d-62d9-421d-b02c-06e076fde76e", "aggregatetype", "order", "aggregateid", "NULL", "payload", "{}"),
	} {
		rec, err := r.Route(rw, time.Time{})
		if err == nil {
			t.Fatalf("%v: routed", rw.Values)
		}
		dl := sink.DeadLetter(rec, rw, "transform", "x", err.Error(), "0/1", now)
		if got := toRecord(dl, 0, 0); got.h("id") != "5c4a3e6d-62d9-421d-b02c-06e076fde76e" || got.EventID("id") != got.h("id") {
			t.Errorf("%v: headers %v", rw.Values, dl.Headers)
		}
	}
	// No id at all: no header, and no id from the row either.
	rw := row("id", "NULL", "aggregatetype", "NULL", "aggregateid", "k", "payload", "{}")
	rec, _ := r.Route(rw, time.Time{})
	if dl := sink.DeadLetter(rec, rw, "transform", "x", "y", "0/1", now); len(dl.Headers) != 7 || toRecord(dl, 0, 0).EventID("id") != "" {
		t.Errorf("NULL id: %v", dl.Headers)
	}
	// Older dead letters without the header: the id comes from the row.
	rw = row("id", "e9", "aggregatetype", "NULL")
	if got := toRecord(sink.DeadLetter(sink.Record{}, rw, "transform", "x", "y", "0/1", now), 0, 0); got.EventID("id") != "e9" {
		t.Errorf("id from the row: %q", got.EventID("id"))
	}
}

// A row of a chunk before its transaction's last has no position yet: the dead letter carries
// outboxd.source.after (as the pipeline's dead-letter builder adds it), and both forms show it;
// an ordinary dead letter shows no after field.
func TestSourceAfterShown(t *testing.T) {
	rec := sink.Record{Topic: "outbox.event.x", Key: []byte("k"), Value: []byte("v"), Headers: []sink.Header{{Key: "id", Value: []byte("e3")}}}
	dl := sink.DeadLetter(rec, row("id", "e3", "aggregatetype", "x", "aggregateid", "k", "payload", "v"), "produce", "record_too_large",
		"kafka: record_too_large", "", now)
	dl.Headers = append(dl.Headers, sink.Header{Key: sink.HeaderSourceAfter, Value: []byte("0/16B0000")})
	var b bytes.Buffer
	if err := Text(&b, toRecord(dl, 0, 1), "id"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), ` position="" after=0/16B0000 id=e3 `) {
		t.Fatalf("text: %s", b.String())
	}
	if j := ToJSON(toRecord(dl, 0, 1), "id"); j.SourcePosition != "" || j.SourceAfter != "0/16B0000" {
		t.Fatalf("json: %+v", j)
	}
	b.Reset()
	Text(&b, toRecord(produceStage("e1", "outbox.event.big", "k", "v", "record_too_large"), 0, 2), "id")
	if strings.Contains(b.String(), "after=") {
		t.Fatalf("an ordinary dead letter shows after=: %s", b.String())
	}
	if j := ToJSON(toRecord(produceStage("e1", "outbox.event.big", "k", "v", "record_too_large"), 0, 2), "id"); j.SourceAfter != "" {
		t.Fatalf("json source_after on an ordinary dead letter: %q", j.SourceAfter)
	}
}
