package bench

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/outboxd/outboxd/source"
)

// memory-large-tx (issue 13): the peak RSS (VmHWM) of `outboxd run`, its own process, while ONE
// huge source transaction flows through it: LargeTxRows rows with ~300-byte jsonb payloads, and
// LargeTxBig rows with payloads of LargeTxPayload bytes (just under Kafka's default 1 MiB record
// limit), on PostgreSQL and on MariaDB, in both delivery modes: 8 figures. Each figure's Detail
// has its target (issue 13: ≤ 64 MiB / ≤ 96 MiB) and the delivery check: the topics read back
// with read_committed hold every row's id.
//
// One load per database and shape: PostgreSQL reads it once per mode on copies of one slot,
// MariaDB from the GTID position before the load, with a replica server_id per mode.

const largeScenario = "memory-large-tx"

// Modes of memory-large-tx, in run order.
var largeModes = []string{"at_least_once", "exactly_once"}

// largeShape is one transaction shape of memory-large-tx.
type largeShape struct {
	key       string  // "rows" or "big": the case id's middle part
	rows      int     // rows in the one transaction
	payload   int     // payload bytes of each row; 0 = the ~300-byte order document
	perTx     int     // 0: one transaction; else the rows in transactions of perTx rows (a comparison, -large-tx-per-tx)
	targetMiB float64 // issue 13's peak RSS target
}

func (s largeShape) label() string {
	if s.perTx > 0 {
		if s.payload == 0 {
			return fmt.Sprintf("%d rows in %d-row transactions (~300 B payloads)", s.rows, s.perTx)
		}
		return fmt.Sprintf("%d rows × %d B payloads in %d-row transactions", s.rows, s.payload, s.perTx)
	}
	if s.payload == 0 {
		return fmt.Sprintf("one %d-row transaction (~300 B payloads)", s.rows)
	}
	return fmt.Sprintf("one transaction of %d rows × %d B payloads", s.rows, s.payload)
}

// largeShapes: with LargeTxPerTx the big-payload rows go in transactions of
// max(1, LargeTxPerTx*payload/1 MiB) rows (about the bytes of one ~300 B chunk).
func largeShapes(o *Options) []largeShape {
	bigPer := 0
	if o.LargeTxPerTx > 0 {
		bigPer = max(1, int(int64(o.LargeTxPerTx)*300/int64(max(1, o.LargeTxPayload))))
	}
	return []largeShape{
		{key: "rows", rows: o.LargeTxRows, perTx: o.LargeTxPerTx, targetMiB: 64},
		{key: "big", rows: o.LargeTxBig, payload: o.LargeTxPayload, perTx: bigPer, targetMiB: 96},
	}
}

// largeCaseID names a case for -large-tx-cases: "pg-rows-alo", "mariadb-big-eos", …
func largeCaseID(db, shape, mode string) string {
	m := "alo"
	if mode == "exactly_once" {
		m = "eos"
	}
	return db + "-" + shape + "-" + m
}

// largeSelected reports whether case id is selected by patterns (path.Match globs; none = all).
func largeSelected(patterns []string, id string) bool {
	if len(patterns) == 0 {
		return true
	}
	for _, p := range patterns {
		if ok, _ := path.Match(strings.TrimSpace(p), id); ok {
			return true
		}
	}
	return false
}

// withDelivery edits a bench config (outboxdYAML) for a delivery mode: exactly_once also needs
// the Kafka offsets store (the position commits inside the Kafka transaction).
func withDelivery(cfg, mode string) (string, error) {
	switch mode {
	case "at_least_once":
		return cfg, nil
	case "exactly_once":
		if strings.Count(cfg, "\nkafka:\n") != 1 || strings.Count(cfg, "\noffsets:\n") != 1 {
			return "", errors.New("bench config: want exactly one kafka: and one offsets: section")
		}
		cfg = strings.Replace(cfg, "\nkafka:\n", "\nkafka:\n  delivery: exactly_once\n", 1)
		return strings.Replace(cfg, "\noffsets:\n", "\noffsets:\n  store: kafka\n", 1), nil
	}
	return "", fmt.Errorf("unknown delivery mode %q", mode)
}

// largeShortSkip: -short leaves memory-large-tx out unless -only names it.
func largeShortSkip(o *Options) []Result {
	if !o.Short || containsString(o.Only, largeScenario) {
		return nil
	}
	return []Result{{Scenario: largeScenario, Name: "outboxd peak RSS, one huge transaction",
		Error: fmt.Sprintf("%v: not part of -short (loads and delivers 1M-row and 1 GB transactions); name it with -only %s", errSkipped, largeScenario)}}
}

func containsString(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

func memoryLargeTx(ctx context.Context, e *env) ([]Result, error) {
	if r := largeShortSkip(e.o); r != nil {
		return r, nil
	}
	var res []Result
	pgCases := 0
	for _, sh := range largeShapes(e.o) {
		for _, m := range largeModes {
			if largeSelected(e.o.LargeTxCases, largeCaseID("pg", sh.key, m)) {
				pgCases++
			}
		}
	}
	if pgCases > 0 {
		for _, sh := range largeShapes(e.o) {
			rs, err := largePG(ctx, e, sh)
			res = append(res, rs...)
			if err != nil {
				return res, fmt.Errorf("PostgreSQL, %s: %w", sh.label(), err)
			}
		}
	}
	rs, err := largeMariaDB(ctx, e)
	res = append(res, rs...)
	return res, err
}

// largeRun is one measured case.
type largeRun struct {
	db, dbName string
	shape      largeShape
	mode       string
	want       int      // distinct ids the topics must hold (rows, plus a marker row on PostgreSQL)
	topics     []string // where the rows go
	extraNote  string   // what else the source read (the marker transaction)
}

// measure runs outboxd on cfg (already edited for lr.mode: withDelivery) until done, checks the
// delivery and returns the case's Result. Findings (outboxd stopped, over the RSS cap or the
// time limit, not every row delivered) are in Result.Error.
func (lr largeRun) measure(ctx context.Context, e *env, bin, cfg string, done func(source.Position) (bool, error)) (Result, error) {
	x := Result{Scenario: largeScenario, Unit: "MiB",
		Name: fmt.Sprintf("outboxd peak RSS, %s, %s, %s", lr.dbName, lr.shape.label(), lr.mode)}
	capMiB := float64(e.o.LargeTxRSSCapMiB)
	e.o.Log.Info("memory-large-tx: outboxd starts", "case", largeCaseID(lr.db, lr.shape.key, lr.mode))
	r, err := runOutboxdProc(ctx, bin, cfg, done, procOpts{rssCapKiB: capMiB * 1024, gctrace: true,
		timeout: e.o.LargeTxTimeout, env: e.o.OutboxdEnv})
	timedOut := err != nil && strings.Contains(err.Error(), "did not drain within")
	if err != nil && !timedOut {
		return x, err
	}
	x.Value = r.hwmKiB / 1024
	x.Extra = map[string]float64{"vmhwm_kib": r.hwmKiB, "max_sampled_rss_kib": r.maxRSSKiB,
		"max_sampled_rss_anon_kib": r.maxAnonKiB, "target_mib": lr.shape.targetMiB,
		"rows": float64(lr.shape.rows), "gc_cycles": float64(r.gc.Cycles), "go_heap_peak_mib": r.gc.PeakMiB,
		"go_heap_live_max_mib": r.gc.LiveMiB, "go_heap_goal_max_mib": r.gc.GoalMiB}
	verdict := "meets"
	if x.Value > lr.shape.targetMiB {
		verdict = "MISSES"
	}
	x.Detail = fmt.Sprintf("VmHWM of `outboxd run` (own process), target ≤ %.0f MiB: %s it; %s%s; max sampled VmRSS %.1f MiB (RssAnon %.1f MiB); "+
		"Go heap (gctrace): peak %.0f MiB, largest live %.0f MiB, largest goal %.0f MiB over %d GC cycles",
		lr.shape.targetMiB, verdict, lr.shape.label(), lr.extraNote, r.maxRSSKiB/1024, r.maxAnonKiB/1024, r.gc.PeakMiB, r.gc.LiveMiB, r.gc.GoalMiB, r.gc.Cycles)
	if len(e.o.OutboxdEnv) > 0 {
		x.Detail += "; outboxd environment: " + strings.Join(e.o.OutboxdEnv, " ")
	}
	if len(e.o.KafkaExtra) > 0 {
		x.Detail += "; kafka settings added: " + strings.Join(e.o.KafkaExtra, "; ")
	}
	switch {
	case r.overCap:
		x.Error = fmt.Sprintf("VmRSS passed %.0f MiB: the bench killed outboxd (the figure is the peak until then)", capMiB)
	case timedOut:
		x.Error = fmt.Sprintf("outboxd did not deliver the transaction within %s (stopped; the figure is the peak until then)", e.o.LargeTxTimeout)
	case !r.drained:
		x.Error = fmt.Sprintf("outboxd stopped before delivering the transaction: %s; log: %s", r.exit, r.logTail)
	default:
		x.Extra["seconds"] = r.elapsed.Seconds()
		x.Detail += fmt.Sprintf("; delivered in %s", r.elapsed.Round(100*time.Millisecond))
	}
	recs, distinct, err := readDistinctIDs(ctx, e.brokers, lr.topics, lr.want)
	if err != nil {
		return x, fmt.Errorf("read the topics back: %w", err)
	}
	x.Extra["records"], x.Extra["distinct_ids"] = float64(recs), float64(distinct)
	x.Detail += fmt.Sprintf("; Kafka (read_committed): %d records, %d distinct ids of %d", recs, distinct, lr.want)
	if distinct == int64(lr.want) {
		x.Detail += ": all rows delivered"
	} else if x.Error == "" {
		x.Error = fmt.Sprintf("not every row was delivered: %d distinct ids of %d", distinct, lr.want)
	}
	if lr.mode == "exactly_once" && recs != distinct && x.Error == "" {
		x.Error = fmt.Sprintf("exactly_once: %d records for %d distinct ids (duplicates visible to read_committed)", recs, distinct)
	}
	if x.Error != "" {
		e.o.Log.Warn("memory-large-tx case finding", "name", x.Name, "finding", x.Error)
	}
	e.o.Log.Info("memory-large-tx: case done", "case", largeCaseID(lr.db, lr.shape.key, lr.mode),
		"vmhwm_mib", fmt.Sprintf("%.1f", x.Value), "distinct", distinct, "want", lr.want)
	return x, nil
}

// largePG measures one shape on PostgreSQL in each selected mode: one load, read on copies of
// one slot.
func largePG(ctx context.Context, e *env, sh largeShape) ([]Result, error) {
	var modes []string
	for _, m := range largeModes {
		if largeSelected(e.o.LargeTxCases, largeCaseID("pg", sh.key, m)) {
			modes = append(modes, m)
		}
	}
	if len(modes) == 0 {
		return nil, nil
	}
	if err := e.pg.ensureSchema(ctx); err != nil {
		return nil, err
	}
	bin, err := e.outboxdBin(ctx)
	if err != nil {
		return nil, err
	}
	tag := fmt.Sprintf("%s_ltx_%s", e.runID, sh.key)
	slots := make([]string, len(modes))
	sql := []string{}
	for i := range modes {
		slots[i] = slotName(tag, i)
		if i == 0 {
			sql = append(sql, fmt.Sprintf(`SELECT pg_create_logical_replication_slot('%s', 'pgoutput')`, slots[0]))
		} else {
			sql = append(sql, fmt.Sprintf(`SELECT pg_copy_logical_replication_slot('%s', '%s')`, slots[0], slots[i]))
		}
	}
	if err := pgExec(ctx, e.pgDSN, sql...); err != nil {
		pgDropSlots(ctx, e.pgDSN, slots...)
		return nil, fmt.Errorf("create slots: %w", err)
	}
	defer pgTruncate(ctx, e.pgDSN)
	defer pgDropSlots(ctx, e.pgDSN, slots...)
	t0 := time.Now()
	beforeMarker, err := pgLoadOneTx(ctx, e.pgDSN, sh)
	if err != nil {
		return nil, err
	}
	e.o.Log.Info("memory-large-tx: PostgreSQL transaction loaded", "shape", sh.label(), "took", time.Since(t0).Round(time.Millisecond))
	var res []Result
	for i, m := range modes {
		prefix := fmt.Sprintf("outboxd-bench.%s.%d.", tag, i)
		lr := largeRun{db: "pg", dbName: "PostgreSQL", shape: sh, mode: m, want: sh.rows + 1,
			topics: append(topicsOf(prefix), prefix+"big"), extraNote: " and a 1-row marker transaction after it"}
		cfg, err := withDelivery(outboxdYAML(e, pgSourceYAML(e.pgDSN, slots[i]), prefix, ""), m)
		if err != nil {
			return res, err
		}
		x, err := lr.measure(ctx, e, bin, cfg, func(p source.Position) (bool, error) { return lsnAfter(p, beforeMarker) })
		pgDropSlots(ctx, e.pgDSN, slots[i]) // the slot retains WAL
		e.dropTopics(prefix)
		if err != nil {
			return res, err
		}
		res = append(res, x)
	}
	return res, nil
}

// largeMariaDB measures both shapes on a private MariaDB (or -mysql-dsn) in each selected mode.
func largeMariaDB(ctx context.Context, e *env) ([]Result, error) {
	type job struct {
		sh    largeShape
		modes []string
	}
	var jobs []job
	for _, sh := range largeShapes(e.o) {
		j := job{sh: sh}
		for _, m := range largeModes {
			if largeSelected(e.o.LargeTxCases, largeCaseID("mariadb", sh.key, m)) {
				j.modes = append(j.modes, m)
			}
		}
		if len(j.modes) > 0 {
			jobs = append(jobs, j)
		}
	}
	if len(jobs) == 0 {
		return nil, nil
	}
	srv, err := startMariaDB(ctx, e.o)
	if errors.Is(err, errNoMariaDB) {
		return []Result{{Scenario: largeScenario, Name: "outboxd peak RSS, MariaDB", Error: fmt.Sprintf("%v: %v", errSkipped, err)}}, nil
	}
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	e.machine.MariaDB = srv.version
	be := newMyBackend(e, srv)
	if err := be.ensureSchema(ctx); err != nil {
		return nil, err
	}
	bin, err := e.outboxdBin(ctx)
	if err != nil {
		return nil, err
	}
	var res []Result
	for _, j := range jobs {
		if err := srv.exec(ctx, `TRUNCATE TABLE `+myFull); err != nil {
			return res, err
		}
		start, err := srv.queryString(ctx, `SELECT @@gtid_binlog_pos`)
		if err != nil {
			return res, err
		}
		t0 := time.Now()
		if err := myLoadOneTx(ctx, srv, j.sh); err != nil {
			return res, fmt.Errorf("MariaDB, %s: %w", j.sh.label(), err)
		}
		end, err := srv.queryString(ctx, `SELECT @@gtid_binlog_pos`)
		if err != nil {
			return res, err
		}
		e.o.Log.Info("memory-large-tx: MariaDB transaction loaded", "shape", j.sh.label(), "from", start, "to", end,
			"took", time.Since(t0).Round(time.Millisecond))
		tag := fmt.Sprintf("%s_ltx_my_%s", e.runID, j.sh.key)
		for i, m := range j.modes {
			prefix := fmt.Sprintf("outboxd-bench.%s.%d.", tag, i)
			serverID := be.ids
			be.ids++
			lr := largeRun{db: "mariadb", dbName: "MariaDB", shape: j.sh, mode: m, want: j.sh.rows,
				topics: append(topicsOf(prefix), prefix+"big")}
			cfg, err := withDelivery(outboxdYAML(e, mySourceYAML(srv.dsn, serverID), prefix, ""), m)
			if err != nil {
				return res, err
			}
			if err := seedOffsets(ctx, cfg, source.Position(start)); err != nil {
				return res, err
			}
			x, err := lr.measure(ctx, e, bin, cfg, func(p source.Position) (bool, error) { return gtidCovers(p, source.Position(end)), nil })
			e.dropTopics(prefix)
			if err != nil {
				return res, err
			}
			res = append(res, x)
		}
	}
	_ = srv.exec(context.WithoutCancel(ctx), `TRUNCATE TABLE `+myFull)
	return res, nil
}

func mySourceYAML(dsn string, serverID uint32) string {
	return fmt.Sprintf(`  type: mysql
  dsn: %s
  tables: [%s]
  mysql:
    server_id: %d
`, yamlString(dsn), myFull, serverID)
}
