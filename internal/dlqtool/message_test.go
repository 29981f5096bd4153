package dlqtool

import (
	"strings"
	"testing"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
	"github.com/outboxd/outboxd/transform/outbox"
)

// messageStage is the transform-stage dead letter of a message row (tableless outbox), routed
// with router as the pipeline does.
func messageStage(t *testing.T, router *outbox.Router, content string) *Record {
	t.Helper()
	r := &source.Row{Table: source.MessageTablePrefix + "outboxd.event", Columns: []string{source.MessageColumn},
		Values: []source.Value{{Bytes: []byte(content)}}, Types: []source.Type{{Kind: source.KindJSON}}, Message: true}
	rec, err := router.Route(r, now)
	if err == nil {
		t.Fatalf("%s: routed", content)
	}
	e := err.(*outbox.Error)
	return toRecord(sink.DeadLetter(rec, r, "transform", e.Reason, e.Msg, "0/16B4000", now), 0, 1)
}

// TestPlanMessage: `dlq replay` parses a message's dead letter as a message again with the
// current config: one whose topic was invalid replays once the config routes it elsewhere, a
// malformed one is refused saying the event must be emitted again.
func TestPlanMessage(t *testing.T) {
	old, _ := outbox.New(outbox.DefaultConfig())
	fixedCfg := outbox.DefaultConfig()
	fixedCfg.Topic = "events"
	fixed, _ := outbox.New(fixedCfg)

	good := messageStage(t, old, `{"id":"e1","aggregatetype":"bad type","aggregateid":"k","payload":{"a":1}}`)
	bad := messageStage(t, old, `{"id":"e2","aggregatetype":"order","payload":{"a":1}`)
	if !good.MessageValue() || good.EventID("id") != "e1" || good.Reason() != "invalid_topic" {
		t.Fatalf("message dead letter: message %v id %q reason %q", good.MessageValue(), good.EventID("id"), good.Reason())
	}
	if bad.Reason() != outbox.ReasonInvalidMessage || bad.EventID("id") != "" || string(bad.Value) != `{"id":"e2","aggregatetype":"order","payload":{"a":1}` {
		t.Fatalf("malformed dead letter: reason %q id %q value %q", bad.Reason(), bad.EventID("id"), bad.Value)
	}
	p := newPlanner(nil, true, "id")
	p.route = fixed.Route
	pl := p.plan(good)
	if !pl.Replay || pl.Out.Topic != "events" || string(pl.Out.Key) != "k" || string(pl.Out.Value) != `{"a":1}` {
		t.Fatalf("plan of a fixable message: %+v", pl)
	}
	pl = p.plan(bad)
	if pl.Replay || !strings.Contains(pl.Why, "raw content") || !strings.Contains(pl.Why, "emit the event again") || !strings.Contains(pl.Why, "invalid_message") {
		t.Fatalf("plan of a malformed message: %+v", pl)
	}
}
