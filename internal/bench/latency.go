package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/source"
)

// latencyPG: outboxd runs (in-process, metrics on) while writers commit single-row
// transactions at a steady LatencyRate for LatencyDuration; a read_committed consumer takes
// each record's commit-side timestamp from its payload ("ts", clock_timestamp() inside the
// transaction) and the time it was consumed. It also reads outboxd's own commit→ack histogram.
//
// It runs twice: outboxd in the bench process (sharing its Go scheduler with the writers, the
// consumer and the embedded broker), then outboxd as its own process (`outboxd run`, as it is
// deployed), each reported under its own name.
func latencyPG(ctx context.Context, e *env) ([]Result, error) {
	in, err := latencyPGRun(ctx, e, false)
	if err != nil {
		return nil, fmt.Errorf("in-process run: %w", err)
	}
	own, err := latencyPGRun(ctx, e, true)
	if err != nil {
		return in, fmt.Errorf("own-process run: %w", err)
	}
	return append(in, own...), nil
}

// latencyPGRun is one latency run: outboxd in the bench process, or (ownProcess) as a child
// process of the bench's outboxd binary.
func latencyPGRun(ctx context.Context, e *env, ownProcess bool) ([]Result, error) {
	o := e.o
	const scenario = "latency-pg"
	if err := e.pg.ensureSchema(ctx); err != nil {
		return nil, err
	}
	tag := e.runID + "_lat"
	where := "outboxd in the bench process"
	if ownProcess {
		tag += "own"
		where = "outboxd as its own process"
	}
	slot := slotName(tag, 0)
	defer func() { pgDropSlots(ctx, e.pgDSN, slot); pgTruncate(ctx, e.pgDSN) }()
	if err := pgExec(ctx, e.pgDSN, fmt.Sprintf(`SELECT pg_create_logical_replication_slot('%s', 'pgoutput')`, slot)); err != nil {
		return nil, err
	}
	port, err := testenv.FreePort()
	if err != nil {
		return nil, err
	}
	listen := fmt.Sprintf("127.0.0.1:%d", port)
	topicPrefix := "outboxd-bench." + tag + "."
	cfg := outboxdYAML(e, pgSourceYAML(e.pgDSN, slot), topicPrefix, listen)

	// The consumer: every record's (consumed - ts).
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.ConsumeRegex(),
		kgo.ConsumeTopics("^"+regexp.QuoteMeta(topicPrefix)+".*"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(500*time.Millisecond), kgo.MetadataMinAge(100*time.Millisecond), kgo.MetadataMaxAge(time.Second))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var (
		mu        sync.Mutex
		lat       []time.Duration
		consumed  atomic.Int64
		badValues atomic.Int64
		measuring atomic.Bool
	)
	cctx, stopConsumer := context.WithCancel(ctx)
	consumerDone := make(chan struct{})
	go func() {
		defer close(consumerDone)
		for cctx.Err() == nil {
			fs := cl.PollFetches(cctx)
			now := time.Now()
			fs.EachRecord(func(r *kgo.Record) {
				consumed.Add(1)
				ts, ok := payloadTS(r.Value)
				if !ok {
					badValues.Add(1)
					return
				}
				if measuring.Load() {
					mu.Lock()
					lat = append(lat, now.Sub(time.UnixMicro(ts)))
					mu.Unlock()
				}
			})
		}
	}()
	defer func() { stopConsumer(); <-consumerDone; e.dropTopics(topicPrefix) }()

	// outboxd, until the writers are done and every row is consumed.
	var inserted atomic.Int64
	writersDone := make(chan struct{})
	var ack *histogram // outboxd's own view, scraped just before it is stopped
	var ackErr error
	allConsumed := func(source.Position) (bool, error) {
		select {
		case <-writersDone:
			if consumed.Load() < inserted.Load() {
				return false, nil
			}
			ack, ackErr = scrapeHistogram("http://"+listen+"/metrics", "outboxd_commit_to_ack_seconds")
			return true, nil
		default:
			return false, nil
		}
	}
	var bin string
	if ownProcess {
		if bin, err = e.outboxdBin(ctx); err != nil {
			return nil, err
		}
	}
	obCtx, stopOB := context.WithCancel(ctx)
	obErr, obExited := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(obExited)
		if !ownProcess {
			_, err := runOutboxdInProcess(obCtx, e, cfg, allConsumed, profiles{})
			obErr <- err
			return
		}
		r, err := runOutboxdProc(obCtx, bin, cfg, allConsumed, procOpts{env: e.o.OutboxdEnv, poll: 50 * time.Millisecond, sample: time.Second})
		if err == nil && !r.drained && obCtx.Err() == nil {
			err = fmt.Errorf("outboxd exited (%s) before every record was consumed: %s", r.exit, r.logTail)
		}
		obErr <- err
	}()
	defer func() { stopOB(); <-obExited }()

	// Warm-up: one row per topic, consumed, before the clock starts.
	conn, err := pgx.Connect(ctx, e.pgDSN)
	if err != nil {
		return nil, err
	}
	for i := range aggTypes {
		if _, err := conn.Exec(ctx, pgInsertOne, 1_000_000_000+i); err != nil {
			conn.Close(ctx)
			return nil, err
		}
		inserted.Add(1)
	}
	conn.Close(ctx)
	warm := time.Now()
	for consumed.Load() < int64(len(aggTypes)) {
		select {
		case err := <-obErr:
			return nil, fmt.Errorf("outboxd stopped during warm-up: %v", err)
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
		if time.Since(warm) > time.Minute {
			return nil, errors.New("warm-up rows not consumed within a minute")
		}
	}
	measuring.Store(true)

	// Writers: W connections, row k at start + k/rate (no coordinated omission: a late writer
	// does not push the schedule back).
	const writers = 4
	start := time.Now().Add(20 * time.Millisecond)
	psi0, psiOK := cpuPressureSome()
	total := int(float64(o.LatencyRate) * o.LatencyDuration.Seconds())
	interval := time.Second / time.Duration(o.LatencyRate)
	var jobs []func(context.Context) error
	for w := range writers {
		jobs = append(jobs, func(ctx context.Context) error {
			c, err := pgx.Connect(ctx, e.pgDSN)
			if err != nil {
				return err
			}
			defer c.Close(context.Background())
			for k := w; k < total; k += writers {
				if d := time.Until(start.Add(time.Duration(k) * interval)); d > 0 {
					time.Sleep(d)
				}
				if _, err := c.Exec(ctx, pgInsertOne, k); err != nil {
					return err
				}
				inserted.Add(1)
			}
			return nil
		})
	}
	werr := parallel(ctx, jobs...)
	writeTime := time.Since(start)
	psi1, psi1OK := cpuPressureSome()
	psiOK = psiOK && psi1OK
	close(writersDone)
	if werr != nil {
		return nil, fmt.Errorf("writers: %w", werr)
	}
	select {
	case err := <-obErr:
		if err != nil {
			return nil, err
		}
	case <-time.After(time.Minute):
		return nil, fmt.Errorf("only %d of %d records consumed a minute after the writers stopped", consumed.Load(), inserted.Load())
	}

	mu.Lock()
	ls := slices.Clone(lat)
	mu.Unlock()
	slices.Sort(ls)
	if len(ls) == 0 {
		return nil, errors.New("no latencies measured")
	}
	q := func(p float64) float64 { return ms(ls[min(len(ls)-1, int(math.Ceil(p*float64(len(ls))))-1)]) }
	rate := float64(total) / writeTime.Seconds()
	suffix := ""
	if ownProcess {
		suffix = "; own process"
	}
	res := []Result{{Scenario: scenario, Name: "commit → consumed p99 (read_committed consumer" + suffix + ")", Value: q(0.99), Unit: "ms",
		Detail: fmt.Sprintf("p50 %.1f ms, p95 %.1f ms, p99 %.1f ms, max %.1f ms over %d records; %d single-row inserts at %.0f/s for %s (target %d/s); ts = clock_timestamp() in the transaction; %s (target p99 ≤ 25 ms)",
			q(0.5), q(0.95), q(0.99), ms(ls[len(ls)-1]), len(ls), total, rate, writeTime.Round(time.Millisecond), o.LatencyRate, where),
		Extra: map[string]float64{"p50_ms": q(0.5), "p95_ms": q(0.95), "p99_ms": q(0.99), "max_ms": ms(ls[len(ls)-1]), "rate": rate}}}
	if a := ack; a != nil {
		res = append(res, Result{Scenario: scenario, Name: "commit → Kafka ack p99 (outboxd_commit_to_ack_seconds" + suffix + ")", Value: a.quantile(0.99) * 1000, Unit: "ms",
			Detail: fmt.Sprintf("p50 ≈ %.1f ms, p95 ≈ %.1f ms, p99 ≈ %.1f ms (interpolated in histogram buckets), %d observations; commit time = pgoutput commit timestamp",
				a.quantile(0.5)*1000, a.quantile(0.95)*1000, a.quantile(0.99)*1000, int(a.count))})
	}
	if ackErr != nil {
		res = append(res, Result{Scenario: scenario, Name: "commit → Kafka ack (outboxd_commit_to_ack_seconds" + suffix + ")", Error: ackErr.Error()})
	}
	if psiOK && writeTime > 0 {
		// The machine's CPU contention while the writers ran: the share of wall time in which
		// some runnable task (PostgreSQL, the broker, outboxd, anything else) waited for a CPU.
		f := float64(psi1-psi0) / float64(writeTime)
		res[0].Detail += fmt.Sprintf("; CPU pressure (some task waiting for a CPU) %.0f%% of the run", 100*f)
		res[0].Extra["cpu_pressure_some"] = f
	}
	if n := badValues.Load(); n > 0 {
		res[0].Detail += fmt.Sprintf("; %d records without a ts", n)
	}
	return res, nil
}

// pgInsertOne commits one outbox row (autocommit) with row number $1.
var pgInsertOne = `INSERT INTO ` + pgTable + ` (id, aggregatetype, aggregateid, type, payload)
SELECT gen_random_uuid(), ` + pgAggTypeSQL + `, 'customer-' || (i % 1000), 'OrderCreated', ` + pgPayloadSQL + `
FROM (SELECT $1::int AS i) s`

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// payloadTS finds "ts": <µs> in a JSON payload.
func payloadTS(v []byte) (int64, bool) {
	i := bytes.Index(v, []byte(`"ts":`))
	if i < 0 {
		return 0, false
	}
	rest := bytes.TrimLeft(v[i+5:], " ")
	j := 0
	for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	n, err := strconv.ParseInt(string(rest[:j]), 10, 64)
	return n, err == nil
}

// histogram is a scraped Prometheus histogram.
type histogram struct {
	bounds []float64 // upper bounds, ascending; +Inf last
	cum    []float64 // cumulative counts
	count  float64
}

// quantile interpolates linearly inside the bucket holding q.
func (h *histogram) quantile(q float64) float64 {
	if h == nil || h.count == 0 {
		return math.NaN()
	}
	rank := q * h.count
	prevB, prevC := 0.0, 0.0
	for i, b := range h.bounds {
		if h.cum[i] >= rank {
			if math.IsInf(b, 1) {
				return prevB
			}
			if h.cum[i] == prevC {
				return b
			}
			return prevB + (b-prevB)*(rank-prevC)/(h.cum[i]-prevC)
		}
		prevB, prevC = b, h.cum[i]
	}
	return prevB
}

// scrapeHistogram reads histogram name from a /metrics endpoint (text format).
func scrapeHistogram(url, name string) (*histogram, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	h := &histogram{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, name+"_bucket{"):
			i := strings.Index(l, `le="`)
			j := strings.Index(l[i+4:], `"`)
			b, err1 := strconv.ParseFloat(l[i+4:i+4+j], 64)
			c, err2 := strconv.ParseFloat(strings.TrimSpace(l[strings.LastIndex(l, " "):]), 64)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("bad bucket line %q", l)
			}
			h.bounds, h.cum = append(h.bounds, b), append(h.cum, c)
		case strings.HasPrefix(l, name+"_count"):
			h.count, _ = strconv.ParseFloat(strings.TrimSpace(l[strings.LastIndex(l, " "):]), 64)
		}
	}
	if len(h.bounds) == 0 {
		return nil, fmt.Errorf("%s not found at %s", name, url)
	}
	return h, sc.Err()
}
