package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/pipeline"
	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
)

// fakeScanner serves rows per table, q.Batch rows a callback, as the adapters' ScanOutbox.
type fakeScanner struct {
	rows      map[string][]source.Row
	failAfter int // > 0: the scan fails after this many batches of a table
	mu        sync.Mutex
	queries   []source.ScanQuery
}

func (f *fakeScanner) ScanOutbox(ctx context.Context, q source.ScanQuery, fn func([]source.Row) error) error {
	f.mu.Lock()
	f.queries = append(f.queries, q)
	f.mu.Unlock()
	rows := f.rows[q.Table]
	for b := 0; len(rows) > 0; b++ {
		if f.failAfter > 0 && b == f.failAfter {
			return errors.New("connection reset by peer")
		}
		n := min(q.Batch, len(rows))
		batch := append([]source.Row(nil), rows[:n]...) // fresh per batch, as the adapters'
		rows = rows[n:]
		if err := fn(batch); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

func (f *fakeScanner) CountOutbox(_ context.Context, q source.ScanQuery) (int64, error) {
	return int64(len(f.rows[q.Table])), nil
}

// fakeProducer acks every record on its own goroutine, failing those of failTopic permanently.
type fakeProducer struct {
	mu        sync.Mutex
	recs      []sink.Record
	onProduce func(n int) // called with the records produced so far (the test's stop)
	failTopic string
	dones     chan func()
	wg        sync.WaitGroup
	once      sync.Once
}

func newFakeProducer() *fakeProducer {
	p := &fakeProducer{dones: make(chan func(), 1024)}
	p.wg.Go(func() {
		for d := range p.dones {
			d()
		}
	})
	return p
}

func (p *fakeProducer) Produce(_ context.Context, rec *sink.Record, done func(error)) error {
	p.mu.Lock()
	p.recs = append(p.recs, *rec)
	n := len(p.recs)
	p.mu.Unlock()
	if p.onProduce != nil {
		p.onProduce(n)
	}
	var err error
	if rec.Topic == p.failTopic {
		err = sarama.ErrMessageSizeTooLarge
	}
	p.dones <- func() { done(err) }
	return nil
}

func (p *fakeProducer) Close() error {
	p.once.Do(func() { close(p.dones) })
	p.wg.Wait()
	return nil
}

func outboxRow(table, id, agg, key string) source.Row {
	r := source.Row{Table: table, Columns: []string{"id", "aggregatetype", "aggregateid", "type", "payload"},
		Values: []source.Value{{Bytes: []byte(id)}, {Bytes: []byte(agg)}, {Bytes: []byte(key)}, {Bytes: []byte("created")}, {Bytes: []byte(`{"n": 1}`)}}}
	if agg == "" {
		r.Values[1] = source.Value{Null: true}
	}
	return r
}

func republishConfig(t *testing.T, extra string) *config.Config {
	t.Helper()
	c, err := Parse([]byte(`source: {type: postgres, dsn: 'postgres://x@h/db', tables: [public.outbox, public.outbox2]}
kafka: {brokers: ['k:9092']}
`+extra), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func testDeps(t *testing.T, c *config.Config, sc scanner, p *fakeProducer) republishDeps {
	router, err := Router(c)
	if err != nil {
		t.Fatal(err)
	}
	return republishDeps{scan: sc, route: router.Route, log: slog.New(slog.NewTextHandler(t.Output(), nil)),
		newProducer: func() (pipeline.Producer, error) {
			if p == nil {
				t.Fatal("a producer was created")
			}
			return p, nil
		}}
}

// TestRepublishDeliversInScanOrder: every row of every table is produced once, in the scan's
// order, a poison row (NULL aggregatetype) and a record Kafka refuses for good are
// dead-lettered, and the summary counts all of it.
func TestRepublishDeliversInScanOrder(t *testing.T) {
	c := republishConfig(t, "")
	sc := &fakeScanner{rows: map[string][]source.Row{}}
	var want []string
	for i := range 2500 {
		agg := "order"
		switch i {
		case 1234:
			agg = "" // missing_column
		case 2000:
			agg = "big" // the producer refuses outbox.event.big: record_too_large
		}
		id := fmt.Sprintf("id-%04d", i)
		sc.rows["public.outbox"] = append(sc.rows["public.outbox"], outboxRow("public.outbox", id, agg, fmt.Sprint("k", i%7)))
		if agg == "order" {
			want = append(want, id)
		}
	}
	sc.rows["public.outbox2"] = []source.Row{outboxRow("public.outbox2", "other-1", "customer", "c1")}
	want = append(want, "other-1")
	p := newFakeProducer()
	p.failTopic = "outbox.event.big"
	qs, err := RepublishOptions{}.queries(c)
	if err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	sum, err := republish(t.Context(), c, qs, false, testDeps(t, c, sc, p), &progressReporter{w: &progress})
	if err != nil {
		t.Fatal(err)
	}
	var got, dlq []string
	for _, r := range p.recs {
		id := ""
		for _, h := range r.Headers {
			if h.Key == "id" {
				id = string(h.Value)
			}
		}
		switch r.Topic {
		case "outboxd.dlq":
			dlq = append(dlq, id)
		case "outbox.event.big":
		default:
			got = append(got, id)
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("produced %d records out of order or not each once (want %d)", len(got), len(want))
	}
	if strings.Join(dlq, ",") != "id-1234,id-2000" {
		t.Fatalf("dead letters %v, want id-1234 and id-2000", dlq)
	}
	if sum.Selected != 2501 || sum.Read != 2501 || sum.Delivered != 2499 || sum.DeadLettered != 2 ||
		sum.Reasons["missing_column"] != 1 || sum.Reasons["record_too_large"] != 1 ||
		sum.Topics["outbox.event.order"].Rows != 2498 || sum.Topics["outbox.event.customer"].Rows != 1 {
		t.Fatalf("summary %+v (reasons %v)", sum, sum.Reasons)
	}
	var out strings.Builder
	sum.write(&out)
	if !strings.Contains(out.String(), "republished 2501 rows of public.outbox, public.outbox2 (2501 selected): 2499 delivered, 2 dead-lettered to outboxd.dlq (missing_column 1, record_too_large 1; see outboxd dlq tail)") ||
		!strings.Contains(out.String(), "outbox.event.order") {
		t.Fatalf("summary:\n%s", out.String())
	}
	if !strings.Contains(progress.String(), "2501/2501 rows (100.0%)") {
		t.Fatalf("final progress line missing:\n%s", progress.String())
	}
}

// TestRepublishDryRunProducesNothing: no producer is created; topics, keys and would-be dead
// letters are counted.
func TestRepublishDryRunProducesNothing(t *testing.T) {
	c := republishConfig(t, "")
	sc := &fakeScanner{rows: map[string][]source.Row{"public.outbox": {
		outboxRow("public.outbox", "a", "order", "k1"), outboxRow("public.outbox", "b", "order", "k2"),
		outboxRow("public.outbox", "c", "order", "k1"), outboxRow("public.outbox", "d", "", "k1"),
		outboxRow("public.outbox", "e", "customer", "k9"),
	}}}
	qs, err := RepublishOptions{Table: "public.outbox"}.queries(c)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := republish(t.Context(), c, qs, true, testDeps(t, c, sc, nil), &progressReporter{w: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	sum.write(&out)
	for _, w := range []string{"dry run: 5 rows of public.outbox (5 selected), nothing produced: 4 would be delivered, 1 dead-lettered (missing_column 1)",
		"outbox.event.order           3 rows        2 keys", "outbox.event.customer        1 rows        1 keys"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("summary lacks %q:\n%s", w, out.String())
		}
	}
}

// TestRepublishScanFailure: a scan failing midway ends the republish with an error (exit 1)
// naming the table, after the rows read before it were delivered.
func TestRepublishScanFailure(t *testing.T) {
	c := republishConfig(t, "")
	sc := &fakeScanner{rows: map[string][]source.Row{}, failAfter: 2}
	for i := range 2500 {
		sc.rows["public.outbox"] = append(sc.rows["public.outbox"], outboxRow("public.outbox", fmt.Sprint(i), "order", "k"))
	}
	p := newFakeProducer()
	qs, _ := RepublishOptions{Table: "public.outbox", Batch: 1000}.queries(c)
	sum, err := republish(t.Context(), c, qs, false, testDeps(t, c, sc, p), &progressReporter{w: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "scan of public.outbox failed after 2000 rows") || !strings.Contains(err.Error(), "connection reset by peer") {
		t.Fatalf("err = %v", err)
	}
	if sum == nil || sum.Delivered != 2000 || len(p.recs) != 2000 {
		t.Fatalf("summary %+v, %d produced; want the 2000 rows read before the failure delivered", sum, len(p.recs))
	}
}

// TestRepublishQueries: the flags' checks (usage errors name the flag) and the queries built.
func TestRepublishQueries(t *testing.T) {
	since := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	until := since.Add(time.Hour)
	for _, tc := range []struct {
		name, extra string
		o           RepublishOptions
		flag        string // the usage error's flag; "" no error
		col         string
	}{
		{name: "unknown table", o: RepublishOptions{Table: "public.nope"}, flag: "table"},
		{name: "since without a time column", o: RepublishOptions{Since: since}, flag: "since"},
		{name: "until without a time column", o: RepublishOptions{Until: until}, flag: "until"},
		{name: "outbox.timestamp's column", extra: "outbox: {timestamp: 'column:created_at'}", o: RepublishOptions{Since: since}, col: "created_at"},
		{name: "explicit time column", o: RepublishOptions{Since: since, Until: until, TimeColumn: "ts"}, col: "ts"},
		{name: "empty range", o: RepublishOptions{Since: until, Until: since, TimeColumn: "ts"}, flag: "until"},
		{name: "batch", o: RepublishOptions{Batch: 200000}, flag: "batch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := republishConfig(t, tc.extra)
			qs, err := tc.o.queries(c)
			var ue *UsageError
			if tc.flag != "" {
				if !errors.As(err, &ue) || ue.Flag != tc.flag {
					t.Fatalf("err = %v, want a usage error naming --%s", err, tc.flag)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(qs) != 2 || qs[0].TimeColumn != tc.col || qs[1].Table != "public.outbox2" || qs[0].Batch != source.ScanBatch {
				t.Fatalf("queries %+v", qs)
			}
		})
	}
}

// TestScanSourceChunks: a batch larger than scanChunkBytes comes as several chunks, each a
// whole transaction whose position counts the rows handed out; the end is source.ErrEnd, and a
// second Open (a resume) is refused.
func TestScanSourceChunks(t *testing.T) {
	big := strings.Repeat("x", 300<<10)
	var rows []source.Row
	for i := range 10 {
		r := outboxRow("public.outbox", fmt.Sprint(i), "order", "k")
		r.Values[4].Bytes = []byte(big)
		rows = append(rows, r)
	}
	s := newScanSource(&fakeScanner{rows: map[string][]source.Row{"public.outbox": rows}}, []source.ScanQuery{{Table: "public.outbox", Batch: 1000}})
	if err := s.Open(t.Context(), ""); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var sizes []int
	var last source.Position
	for {
		tx, err := s.Next(t.Context())
		if errors.Is(err, source.ErrEnd) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if tx.More || tx.Bytes > scanChunkBytes || tx.Bytes != source.ChunkBytes(&source.Tx{Rows: tx.Rows}) {
			t.Fatalf("chunk %+v", tx.Position)
		}
		sizes = append(sizes, len(tx.Rows))
		last = tx.Position
	}
	if fmt.Sprint(sizes) != "[3 3 3 1]" || last != "republish:10" {
		t.Fatalf("chunks of %v rows, last position %s", sizes, last)
	}
	if s.Err() != nil {
		t.Fatal(s.Err())
	}
	if err := s.Open(t.Context(), "republish:3"); !errors.Is(err, source.ErrPositionLost) {
		t.Fatalf("second Open: %v, want a refusal", err)
	}
}

// TestRepublishInterrupted: a stop (the signal's context) drains what is in flight and ends the
// republish with an error saying how far it got (exit 1), never as a success.
func TestRepublishInterrupted(t *testing.T) {
	c := republishConfig(t, "")
	sc := &fakeScanner{rows: map[string][]source.Row{}}
	for i := range 5000 {
		sc.rows["public.outbox"] = append(sc.rows["public.outbox"], outboxRow("public.outbox", fmt.Sprint(i), "order", "k"))
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	p := newFakeProducer()
	p.onProduce = func(n int) {
		if n == 1500 {
			cancel()
		}
	}
	qs, _ := RepublishOptions{Table: "public.outbox"}.queries(c)
	sum, err := republish(ctx, c, qs, false, testDeps(t, c, sc, p), &progressReporter{w: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "interrupted: ") || !strings.Contains(err.Error(), "of 5000 rows done") {
		t.Fatalf("err = %v, want the interruption", err)
	}
	if sum == nil || sum.Delivered != int64(len(p.recs)) || sum.Delivered >= 5000 {
		t.Fatalf("summary %+v with %d produced: every produced record acked before the stop's end, not all rows", sum, len(p.recs))
	}
}

// TestRepublishStopOnPermanent: with kafka.on_permanent_error: stop the first row that cannot be
// delivered ends the republish with exit 1's error naming it and the republish's own fix (no
// `offsets set`), and it is not dead-lettered.
func TestRepublishStopOnPermanent(t *testing.T) {
	c := republishConfig(t, "")
	c.Kafka.OnPermanentError = "stop"
	sc := &fakeScanner{rows: map[string][]source.Row{"public.outbox": {
		outboxRow("public.outbox", "a", "order", "k"), outboxRow("public.outbox", "poison", "", "k"), outboxRow("public.outbox", "c", "order", "k"),
	}}}
	p := newFakeProducer()
	qs, _ := RepublishOptions{}.queries(c)
	sum, err := republish(t.Context(), c, qs, false, testDeps(t, c, sc, p), &progressReporter{w: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "kafka.on_permanent_error: stop: a row of public.outbox event id poison cannot be delivered (transform stage, reason missing_column)") ||
		!strings.Contains(err.Error(), "run outboxd republish again") || strings.Contains(err.Error(), "offsets set") {
		t.Fatalf("err = %v", err)
	}
	for _, r := range p.recs {
		if r.Topic == "outboxd.dlq" {
			t.Fatalf("dead-lettered under on_permanent_error: stop")
		}
	}
	sum.Failed = true
	var out strings.Builder
	sum.write(&out)
	if !strings.HasPrefix(out.String(), "republish stopped: 3 rows of public.outbox, public.outbox2 read (3 selected): ") {
		t.Fatalf("summary %q", out.String())
	}
}
