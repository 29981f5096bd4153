package dlqtool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"time"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/sink/kafka"
	"github.com/outboxd/outboxd/source"
)

// Producer is what Replay needs of *kafka.Producer.
type Producer interface {
	Produce(ctx context.Context, rec *sink.Record, done func(error)) error
	Shutdown(ctx context.Context) error
}

// ReplayOptions configure Replay.
type ReplayOptions struct {
	Conn
	IDs []string // replay the dead letters of these event ids
	All bool     // or every replayable dead letter
	// Timeout bounds the wait for acks once every selected record is queued (the producer
	// retries transient errors, such as a missing topic, forever). 0 waits as long as it takes.
	Timeout time.Duration
	// NewProducer builds the producer; nil means kafka.New(Conn.Kafka) (the pipeline's durable
	// settings: idempotent, acks=all).
	NewProducer func() (Producer, error)
	Log         *slog.Logger // the producer's log; nil discards
	// Route, when set, is the outbox transform of the current config: a row-as-JSON dead letter
	// (the transform failed, no record was built) is decoded back to its original column bytes
	// (DecodeRow) and routed again, and replayed when that now succeeds (outbox.* fixed in the
	// config). nil leaves row-as-JSON dead letters not replayable.
	Route func(*source.Row, time.Time) (sink.Record, error)
}

// Summary counts what Replay did.
type Summary struct {
	Replayed int      // produced to the original topic and acked
	Failed   int      // not replayed: still failing, or not replayable although asked for by id
	Skipped  int      // not replayed and not asked for by id (row-as-JSON dead letters, repeats)
	NotFound []string // requested ids with no dead letter
}

// OK reports whether everything asked for was replayed.
func (s Summary) OK() bool { return s.Failed == 0 && len(s.NotFound) == 0 }

// ErrNothingSelected: Replay needs ids or All.
var ErrNothingSelected = errors.New("say which dead letters to replay: --id EVENT_ID (repeatable) or --all")

// Plan is Replay's decision for one dead letter.
type Plan struct {
	Selected bool        // asked for (by --all or its id)
	Explicit bool        // asked for by id
	Replay   bool        // produce Out
	Out      sink.Record // original topic, key, value, and headers minus outboxd.*
	Why      string      // why it is not replayed
	Prev     *Record     // for a repeat of an event id: the dead letter replayed before

	rec *Record    // the dead letter
	res chan error // the outcome of producing Out
	err error      // the outcome when known without producing
}

// planner decides, record by record, what a replay does.
type planner struct {
	ids      map[string]bool
	all      bool
	idColumn string
	found    map[string]bool
	done     map[string]*Record // event id → the dead letter replayed (or tried) for it
	route    func(*source.Row, time.Time) (sink.Record, error)
}

func newPlanner(ids []string, all bool, idColumn string) *planner {
	p := &planner{ids: map[string]bool{}, all: all, idColumn: idColumn, found: map[string]bool{}, done: map[string]*Record{}}
	for _, id := range ids {
		p.ids[id] = true
	}
	return p
}

// plan decides for one dead letter.
func (p *planner) plan(r *Record) Plan {
	id := r.EventID(p.idColumn)
	pl := Plan{rec: r, Explicit: id != "" && p.ids[id]}
	pl.Selected = p.all || pl.Explicit
	if !pl.Selected {
		return pl
	}
	if id != "" {
		p.found[id] = true
		if prev, ok := p.done[id]; ok {
			// The same event dead-lettered twice (the pipeline re-delivers after a crash).
			pl.Prev = prev
			pl.Why = fmt.Sprintf("event %s was already replayed from dlq=%d@%d in this run", id, prev.Partition, prev.Offset)
			return pl
		}
	}
	if r.RowValue() {
		return p.planRow(pl, r, id)
	}
	topic := r.OriginalTopic()
	if topic == "" {
		pl.Why = "not replayable: the dead letter has no outboxd.original.topic header"
		return pl
	}
	pl.Replay = true
	pl.Out = Strip(r, topic)
	if id != "" {
		p.done[id] = r
	}
	return pl
}

// planRow decides for a row-as-JSON dead letter: its row, decoded back to the original bytes,
// is routed again with the current config.
func (p *planner) planRow(pl Plan, r *Record, id string) Plan {
	failed := fmt.Sprintf("the transform failed (%s: %s), so no Kafka record was ever built and the value is the source row as JSON", r.Reason(), r.Message())
	again := "write a new outbox row"
	if r.MessageValue() {
		failed = fmt.Sprintf("the transform failed (%s: %s), so no Kafka record was ever built and the value is the message's raw content", r.Reason(), r.Message())
		again = "emit the event again (pg_logical_emit_message)"
	}
	if p.route == nil {
		pl.Why = "not replayable: " + failed + "; correct the data and " + again
		return pl
	}
	row, err := RowOf(r)
	if err != nil {
		pl.Why = "not replayable: " + failed + ", and " + err.Error()
		return pl
	}
	// The source's commit time is not in the dead letter; its own timestamp (when it was
	// dead-lettered, at most a little after the commit) stands in for outbox.timestamp: commit.
	rec, err := p.route(row, r.Timestamp)
	if err != nil {
		pl.Why = fmt.Sprintf("not replayable: %s; with the current config the transform still fails (%v): "+
			"correct the data and %s, or fix outbox.* in the config and replay again", failed, err, again)
		return pl
	}
	pl.Replay, pl.Out = true, rec
	if id != "" {
		p.done[id] = r
	}
	return pl
}

// RowOf rebuilds the source row of a row-as-JSON dead letter (table from outboxd.source.table,
// columns in name order, each with its original bytes). A message row's dead letter
// (MessageValue) gives the message row again: its value is the raw content, which the route
// parses as the pipeline did.
func RowOf(r *Record) (*source.Row, error) {
	if r.MessageValue() {
		content := r.Value
		if content == nil {
			content = []byte{}
		}
		return &source.Row{Table: r.SourceTable(), Columns: []string{source.MessageColumn},
			Values: []source.Value{{Bytes: content}}, Types: []source.Type{{Kind: source.KindJSON}}, Message: true}, nil
	}
	vals, err := DecodeRow(r.Value)
	if err != nil {
		return nil, err
	}
	row := &source.Row{Table: r.SourceTable(), Columns: make([]string, 0, len(vals)), Values: make([]source.Value, 0, len(vals))}
	for c := range vals {
		row.Columns = append(row.Columns, c)
	}
	sort.Strings(row.Columns)
	for _, c := range row.Columns {
		row.Values = append(row.Values, vals[c])
	}
	return row, nil
}

func (p *planner) notFound(ids []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, id := range ids {
		if !p.found[id] && !seen[id] {
			out = append(out, id)
		}
		seen[id] = true
	}
	return out
}

// Strip returns the record a replay produces for the dead letter r: topic, r's key and value,
// and r's headers without outboxd.error.*, outboxd.original.* and outboxd.source.*, in order.
func Strip(r *Record, topic string) sink.Record {
	out := sink.Record{Topic: topic, Key: r.Key, Value: r.Value}
	for _, h := range r.Headers {
		if !IsInternalHeader(h.Key) {
			out.Headers = append(out.Headers, h)
		}
	}
	return out
}

// Replay re-produces the selected dead letters to their original topics, in DLQ order, and
// prints one line per selected record to w:
//
//	replayed dlq=P@O id=... topic=... key=...
//	failed dlq=P@O id=... topic=...: REASON: why (the dead letter stays where it is)
//	skipped dlq=P@O id=...: why
//
// then a summary line. A record that still fails is not written anywhere (Kafka topics are
// append-only: the dead letter stays in the DLQ). Dead letters of a failed transform (the value
// is the row as JSON) are routed again with o.Route and replayed when that succeeds; otherwise
// (or without o.Route) they are skipped, and asked for by id they count as failed. The returned error is
// for what stopped the replay itself (cluster unreachable, interrupted); Summary.OK tells
// whether every selected record was replayed.
func Replay(ctx context.Context, o ReplayOptions, w io.Writer) (Summary, error) {
	var sum Summary
	if !o.All && len(o.IDs) == 0 {
		return sum, ErrNothingSelected
	}
	newProducer := o.NewProducer
	if newProducer == nil {
		newProducer = func() (Producer, error) { return kafka.New(o.Kafka, o.Log) }
	}
	pl := newPlanner(o.IDs, o.All, o.IDColumn)
	pl.route = o.Route
	queue := make(chan *Plan, 1024)
	printed := make(chan struct{})
	var writeErr error
	go func() {
		defer close(printed)
		for it := range queue {
			if it.res != nil {
				it.err = <-it.res
			}
			if err := report(w, it, o.IDColumn, &sum); err != nil && writeErr == nil {
				writeErr = err
			}
		}
	}()

	var prod Producer
	readErr := Read(ctx, o.Conn, false, func(r *Record) error {
		it := pl.plan(r)
		if !it.Selected {
			return nil
		}
		if it.Replay {
			if prod == nil {
				var err error
				if prod, err = newProducer(); err != nil {
					return fmt.Errorf("kafka producer: %w", err)
				}
			}
			res := make(chan error, 1)
			if err := prod.Produce(ctx, &it.Out, func(err error) { res <- err }); err != nil {
				it.Replay, it.err = false, fmt.Errorf("not queued: %w", err)
			} else {
				it.res = res
			}
		}
		queue <- &it
		return nil
	})
	if prod != nil {
		sctx, cancel := ctx, context.CancelFunc(func() {})
		if o.Timeout > 0 {
			sctx, cancel = context.WithTimeout(ctx, o.Timeout)
		}
		_ = prod.Shutdown(sctx) // unacked records get done(ErrAborted), reported as failed
		cancel()
	}
	close(queue)
	<-printed
	sum.NotFound = pl.notFound(o.IDs)
	for _, id := range sum.NotFound {
		fmt.Fprintf(w, "not found: no dead letter with id %s in kafka.dlq_topic %s\n", quote(id), o.Topic)
	}
	fmt.Fprintf(w, "replay: %d replayed, %d failed, %d skipped, %d not found\n", sum.Replayed, sum.Failed, sum.Skipped, len(sum.NotFound))
	switch {
	case readErr != nil && errors.Is(readErr, ErrNoTopic):
		// Nothing was ever dead-lettered: requested ids are reported as not found.
	case readErr != nil:
		return sum, fmt.Errorf("dlq replay: %w", readErr)
	case ctx.Err() != nil:
		return sum, fmt.Errorf("dlq replay: interrupted: %w", ctx.Err())
	}
	return sum, writeErr
}

func report(w io.Writer, it *Plan, idColumn string, sum *Summary) error {
	r := it.rec
	where := fmt.Sprintf("dlq=%d@%d id=%s", r.Partition, r.Offset, quote(r.EventID(idColumn)))
	var err error
	switch {
	case it.Replay && it.err == nil:
		sum.Replayed++
		key := "<null>"
		if it.Out.Key != nil {
			key = quote(string(it.Out.Key))
		}
		_, err = fmt.Fprintf(w, "replayed %s topic=%s key=%s\n", where, quote(it.Out.Topic), key)
	case it.Replay || it.err != nil:
		sum.Failed++
		_, err = fmt.Fprintf(w, "failed %s topic=%s: %s; the dead letter stays in the DLQ\n", where, quote(it.Out.Topic), failure(it.err))
	case it.Explicit && it.Prev == nil:
		sum.Failed++
		_, err = fmt.Fprintf(w, "failed %s: %s\n", where, it.Why)
	default:
		sum.Skipped++
		_, err = fmt.Fprintf(w, "skipped %s: %s\n", where, it.Why)
	}
	return err
}

// failure explains a replay's delivery error.
func failure(err error) string {
	if errors.Is(err, kafka.ErrAborted) {
		return "not acknowledged before the replay gave up (interrupted, or --timeout passed while the producer retried a transient error: " +
			"does the topic exist, is the broker reachable?); it may or may not have been written"
	}
	permanent, reason := kafka.Classify(err)
	if permanent {
		return fmt.Sprintf("%s: %v", reason, err)
	}
	return fmt.Sprintf("%s (transient): %v", reason, err)
}
