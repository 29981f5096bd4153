package app

// `outboxd republish`: publish the rows already in the outbox tables again, through the
// pipeline's own transform, producer and DLQ (internal/pipeline.Run over a table scan,
// republish_source.go), so each record is the one the stream delivered for its row (same
// id header, key, value and headers: consumers deduplicate by id). It never touches what
// `outboxd run` owns: the stored position (its store is in memory), the replication slot or
// binlog connection, the standby lock. Its rows come in the scan's order (outbox.order_column,
// else the order the table keeps: the adapter's ScanOutbox says which), table by table.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/pipeline"
	"github.com/outboxd/outboxd/internal/pipeline/delivery"
	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/sink/kafka"
	"github.com/outboxd/outboxd/source"
	"github.com/outboxd/outboxd/transform/outbox"
)

// RepublishOptions select the rows of `outboxd republish` (its flags).
type RepublishOptions struct {
	// Table is one of source.tables; "": every table of source.tables, in that order.
	Table string
	// TimeColumn is the column Since and Until bound; "": outbox.timestamp's column when that
	// is column:<name>, else Since and Until cannot be used.
	TimeColumn string
	// Since (inclusive) and Until (exclusive); zero: unbounded.
	Since, Until time.Time
	// Where is an SQL condition ANDed to the scan's (the operator's SQL, as is).
	Where string
	// Batch is the rows per scan batch (0: source.ScanBatch).
	Batch int
	// DryRun scans and routes every row (topic, key) without producing anything.
	DryRun bool
	// Terminal draws the progress as a bar redrawn in place (stderr is a terminal); otherwise
	// a progress line every few seconds.
	Terminal bool
}

// UsageError is a wrong republish flag (exit status 2): Flag names it.
type UsageError struct{ Flag, Msg string }

func (e *UsageError) Error() string { return "--" + e.Flag + ": " + e.Msg }

// maxScanBatch caps --batch (rows held per scan batch).
const maxScanBatch = 100000

// queries turns o into one scan query per table, or a UsageError.
func (o RepublishOptions) queries(c *config.Config) ([]source.ScanQuery, error) {
	tables := c.Source.Tables
	if len(tables) == 0 { // the tableless outbox (source.postgres.messages): events are kept in no table
		return nil, &config.Error{Key: "source.tables", Msg: "is empty (the tableless outbox, source.postgres.messages): there is no table to republish from; " +
			"events written with pg_logical_emit_message are kept in no table, so re-publishing one means emitting it again (same id: consumers deduplicate)"}
	}
	if o.Table != "" {
		if !slices.Contains(tables, o.Table) {
			return nil, &UsageError{Flag: "table", Msg: fmt.Sprintf("%q is not one of source.tables (%s)", o.Table, strings.Join(tables, ", "))}
		}
		tables = []string{o.Table}
	}
	if o.Batch < 0 || o.Batch > maxScanBatch {
		return nil, &UsageError{Flag: "batch", Msg: fmt.Sprintf("%d: must be between 1 and %d rows", o.Batch, maxScanBatch)}
	}
	col := o.TimeColumn
	bounded := !o.Since.IsZero() || !o.Until.IsZero()
	if col == "" && bounded {
		ts := c.Outbox.Timestamp
		if !strings.HasPrefix(ts, outbox.TimestampColumnPrefix) {
			flag := "since"
			if o.Since.IsZero() {
				flag = "until"
			}
			return nil, &UsageError{Flag: flag, Msg: fmt.Sprintf("needs --time-column COLUMN (the rows' time column, e.g. created_at): outbox.timestamp is %q, not column:<name>", ts)}
		}
		col = strings.TrimPrefix(ts, outbox.TimestampColumnPrefix)
	}
	if !o.Since.IsZero() && !o.Until.IsZero() && !o.Since.Before(o.Until) {
		return nil, &UsageError{Flag: "until", Msg: fmt.Sprintf("%s is not after --since %s: nothing would be selected", o.Until.Format(time.RFC3339Nano), o.Since.Format(time.RFC3339Nano))}
	}
	if !bounded {
		col = "" // --time-column alone selects nothing: the scan checks it only with a bound
	}
	batch := o.Batch
	if batch == 0 {
		batch = source.ScanBatch
	}
	qs := make([]source.ScanQuery, len(tables))
	for i, t := range tables {
		qs[i] = source.ScanQuery{Table: t, OrderBy: c.Outbox.OrderColumn, TimeColumn: col, Since: o.Since, Until: o.Until,
			Where: o.Where, Batch: batch}
	}
	return qs, nil
}

// RepublishSummary is what a republish did (or, dry run, would do).
type RepublishSummary struct {
	DryRun   bool
	Failed   bool // the republish ended with an error: the counts say how far it got
	Tables   []string
	Selected int64 // the rows the counts selected
	Read     int64 // the rows the scan returned (more than Selected when rows came in between)
	// Delivered rows were acked by Kafka (dry run: routed to a topic); DeadLettered rows went to
	// the DLQ (dry run: the transform refused them, or their record is over kafka.max_record_bytes).
	Delivered, DeadLettered int64
	Topics                  map[string]*TopicCount
	Reasons                 map[string]int64 // dead letters by reason
	DLQTopic                string
}

// TopicCount is one topic's rows (and, dry run, distinct keys).
type TopicCount struct {
	Rows int64
	keys map[string]struct{}
}

// republishDeps are what a republish needs from outside (tests give fakes).
type republishDeps struct {
	scan        scanner
	route       func(*source.Row, time.Time) (sink.Record, error)
	newProducer func() (pipeline.Producer, error)
	log         *slog.Logger
	progress    io.Writer
}

// Republish runs `outboxd republish`: the summary is written to stdout, progress and logs to
// stderr. The error is a *UsageError or a config error (exit 2), or any other failure (exit 1),
// the summary then saying how far it got.
func Republish(ctx context.Context, c *config.Config, o RepublishOptions, stdout, stderr io.Writer) error {
	qs, err := o.queries(c)
	if err != nil {
		return err
	}
	rep := &progressReporter{w: stderr, terminal: o.Terminal}
	log := republishLogger(c, rep.logWriter(stderr))
	ad, err := adapterFor(c, log)
	if err != nil {
		return err
	}
	secrets := secretsOf(c, ad)
	sc, ok := ad.(scanner)
	if !ok {
		return &config.Error{Key: "source.type", Msg: fmt.Sprintf("%s cannot scan its outbox tables (outboxd republish)", c.Source.Type)}
	}
	router, err := Router(c)
	if err != nil {
		return &config.Error{Key: "outbox", Msg: err.Error()}
	}
	d := republishDeps{scan: sc, route: router.Route, log: log, progress: stderr,
		newProducer: func() (pipeline.Producer, error) {
			p, err := kafka.New(KafkaConfig(c), log)
			if err != nil {
				return nil, fmt.Errorf("kafka producer (kafka.brokers %s): %w", strings.Join(c.Kafka.Brokers, ","), err)
			}
			return p, nil
		}}
	sum, err := republish(ctx, c, qs, o.DryRun, d, rep)
	if sum != nil {
		sum.Failed = err != nil
		sum.write(stdout)
	}
	return scrubbed(err, secrets)
}

// republishLogger is the log of a republish: the config's format; the pipeline's info lines
// (positions, sessions) are about `outboxd run`'s concerns, so below debug only warnings and
// errors (dead letters among them) are written.
func republishLogger(c *config.Config, w io.Writer) *slog.Logger {
	lc := c.Log
	if lc.Level != "debug" && lc.Level != "error" {
		lc.Level = "warn"
	}
	return NewLogger(lc, w)
}

// republish counts, then scans and delivers (or, dry run, routes) every row of qs.
func republish(ctx context.Context, c *config.Config, qs []source.ScanQuery, dry bool, d republishDeps, rep *progressReporter) (*RepublishSummary, error) {
	sum := &RepublishSummary{DryRun: dry, Topics: map[string]*TopicCount{}, Reasons: map[string]int64{}, DLQTopic: c.Kafka.DLQTopic}
	for _, q := range qs {
		sum.Tables = append(sum.Tables, q.Table)
		n, err := d.scan.CountOutbox(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("count the rows to republish in %s: %w%s", q.Table, err, whereHint(q))
		}
		sum.Selected += n
	}
	if sum.Selected == 0 {
		return sum, nil
	}
	src := newScanSource(d.scan, qs)
	var done atomic.Int64
	rep.p = newProgress(sum.Selected, time.Now())
	stop := make(chan struct{})
	var drawing sync.WaitGroup
	drawing.Go(func() {
		t := time.NewTicker(rep.every())
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				rep.update(now, done.Load())
			}
		}
	})
	var err error
	if dry {
		err = dryRun(ctx, c, src, d.route, sum, &done)
	} else {
		err = deliver(ctx, c, src, d, sum, &done)
	}
	close(stop)
	drawing.Wait()
	rep.finish(time.Now(), done.Load())
	sum.Read = src.scanned.Load()
	if err != nil {
		return sum, err
	}
	if err := src.Err(); err != nil {
		return sum, fmt.Errorf("%w%s; the rows read before it were delivered: run outboxd republish again for the rest", err, whereHint(qs[0]))
	}
	if ctx.Err() != nil {
		return sum, fmt.Errorf("interrupted: %d of %d rows done (delivered or dead-lettered; the records in flight were drained first): "+
			"run outboxd republish again, narrowed with --since or --where to what is left", done.Load(), sum.Selected)
	}
	if got := sum.Delivered + sum.DeadLettered; got != sum.Read {
		return sum, fmt.Errorf("%d rows were scanned but %d delivered or dead-lettered", sum.Read, got) // a bug: say so, never exit 0
	}
	return sum, nil
}

// whereHint points at --where when the operator gave one (its SQL is a likely cause).
func whereHint(q source.ScanQuery) string {
	if q.Where == "" {
		return ""
	}
	return fmt.Sprintf(" (check --where %q)", q.Where)
}

// deliver runs the pipeline over the scan, with kafka.* as `outboxd run` has them.
func deliver(ctx context.Context, c *config.Config, src *scanSource, d republishDeps, sum *RepublishSummary, done *atomic.Int64) error {
	rate, err := config.ParseRate(c.Kafka.DLQMaxRate)
	if err != nil {
		return &config.Error{Key: "kafka.dlq_max_rate", Msg: err.Error()}
	}
	prod, err := d.newProducer()
	if err != nil {
		return err
	}
	m := &republishMetrics{sum: sum, done: done}
	err = republishError(pipeline.Run(ctx, pipeline.Options{
		NewSource: func() source.Source { return src }, // opened once: a second Open fails (scanSource)
		Producer:  prod, Route: d.route, Classify: kafka.Classify, Store: &memoryStore{},
		DLQTopic: c.Kafka.DLQTopic, DLQBreaker: pipeline.Breaker{Max: rate.Max, Window: rate.Window},
		StopOnPermanent: c.Kafka.OnPermanentError == "stop", IDColumn: c.Outbox.Columns.ID,
		MaxInflight: c.Kafka.MaxInflight, MaxRecordBytes: c.Kafka.MaxRecordBytes,
		CommitInterval: 100 * time.Millisecond, ShutdownTimeout: c.ShutdownTimeout, Log: d.log, Metrics: m,
	}))
	return err
}

// republishError rewords the pipeline's errors for a republish: the run's fix (a restart,
// `offsets set`) does not apply; running the republish again does. A kafka.on_permanent_error:
// stop error is said again in those terms.
func republishError(err error) error {
	var pe *delivery.PermanentError
	if err == nil {
		return nil
	}
	if !errors.As(err, &pe) {
		return fmt.Errorf("%w — for this republish: rows after the last delivered ones may not have been delivered; "+
			"run outboxd republish again once the cause is fixed (narrowed with --since or --where to what is left)", err)
	}
	id := ""
	if pe.RowID != "" {
		id = " event id " + pe.RowID
	}
	topic := ""
	if pe.Topic != "" {
		topic = " for topic " + pe.Topic
	}
	return fmt.Errorf("kafka.on_permanent_error: stop: a row of %s%s cannot be delivered%s (%s stage, reason %s): %w. It was not dead-lettered; "+
		"later rows already handed to Kafka may have been delivered. To get past it: fix the cause and run outboxd republish "+
		"again (narrowed with --since or --where to what is left), or set kafka.on_permanent_error: dlq to dead-letter it and go on",
		pe.Table, id, topic, pe.Stage, pe.Reason, pe.Cause)
}

// dryRun routes every row of the scan, counting topics, keys and what would be dead-lettered.
func dryRun(ctx context.Context, c *config.Config, src *scanSource, route func(*source.Row, time.Time) (sink.Record, error),
	sum *RepublishSummary, done *atomic.Int64) error {
	if err := src.Open(ctx, ""); err != nil {
		return err
	}
	defer src.Close()
	for {
		tx, err := src.Next(ctx)
		if errors.Is(err, source.ErrEnd) {
			return nil // src.Err tells a failed scan
		}
		if err != nil {
			return nil // ctx ended: the caller reports the interruption
		}
		for i := range tx.Rows {
			rec, err := route(&tx.Rows[i], time.Time{})
			switch {
			case err != nil:
				reason := "transform"
				if oe := (*outbox.Error)(nil); errors.As(err, &oe) {
					reason = oe.Reason
				}
				sum.Reasons[reason]++
				sum.DeadLettered++
			case rec.Size() > c.Kafka.MaxRecordBytes:
				sum.Reasons["record_too_large"]++
				sum.DeadLettered++
			default:
				tc := sum.topic(rec.Topic)
				tc.Rows++
				if tc.keys == nil {
					tc.keys = map[string]struct{}{}
				}
				tc.keys[string(rec.Key)] = struct{}{}
				sum.Delivered++
			}
			done.Add(1)
		}
	}
}

func (s *RepublishSummary) topic(name string) *TopicCount {
	tc := s.Topics[name]
	if tc == nil {
		tc = &TopicCount{}
		s.Topics[name] = tc
	}
	return tc
}

// republishMetrics counts the pipeline's outcomes into the summary (the loop goroutine calls
// it; the progress reads done).
type republishMetrics struct {
	mu   sync.Mutex
	sum  *RepublishSummary
	done *atomic.Int64
}

func (m *republishMetrics) EventsRead(int) {}
func (m *republishMetrics) Produced(topic string, _, _ time.Time) {
	m.mu.Lock()
	m.sum.topic(topic).Rows++
	m.sum.Delivered++
	m.mu.Unlock()
	m.done.Add(1)
}
func (m *republishMetrics) DeadLettered(reason string) {
	m.mu.Lock()
	m.sum.Reasons[reason]++
	m.sum.DeadLettered++
	m.mu.Unlock()
	m.done.Add(1)
}
func (m *republishMetrics) Inflight(int)              {}
func (m *republishMetrics) Committed(source.Position) {}

// memoryStore is the republish's offsets store: positions of the scan, in memory only (the
// stored position of `outboxd run` is never read or written).
type memoryStore struct {
	mu  sync.Mutex
	pos source.Position
}

func (s *memoryStore) Load(context.Context) (source.Position, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pos, nil
}

func (s *memoryStore) Save(_ context.Context, p source.Position) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pos = p
	return nil
}
