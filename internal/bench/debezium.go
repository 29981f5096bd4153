package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/outboxd/outboxd/source"
)

// vs-debezium-pg and vs-debezium-mariadb: outboxd beside Debezium (Kafka Connect standalone with
// the Outbox Event Router, testenv.StartConnect) on the same database, the same backlog and the
// same Apache Kafka, one tool at a time:
//
//   - drain: a backlog of N single-row transactions, loaded before either tool starts; each
//     round every tool drains it from its start (outboxd: a slot copied at the backlog's start,
//     or the GTID position before it; Debezium: its own slot copy, or an offsets file primed
//     before the backlog). Round 1 runs outboxd first, round 2 Debezium first, and so on. The
//     drain time runs from the tool's start (exec) until Kafka holds every record; the
//     steady-state rate runs from the first to the last record's LogAppendTime. CPU is the tool's
//     process tree (/proc/<pid>/stat utime+stime+cutime+cstime), peak RSS its VmHWM.
//   - latency: each tool in turn (outboxd first) streams while 4 writers commit single-row
//     transactions at LatencyRate/s for 5 s of warm-up (reported apart) and then LatencyDuration
//     (measured); latency = the record's LogAppendTime
//     (the topics are created with message.timestamp.type=LogAppendTime) minus the moment the
//     writer saw its COMMIT return.

// dbzSetup is one Debezium run: the connector and worker properties, JVM flags, and a Connect
// dir to use ("" = a new one).
type dbzSetup struct {
	connector, worker map[string]string
	jvm               []string
	dir               string
}

// dbzWorkerTuning are the worker settings of every Debezium run (Connect's producer for source
// tasks), chosen as Debezium's and Kafka's docs advise for throughput and to match outboxd's
// producer: acks=all with idempotence (outboxd's), snappy (outboxd's default compression), linger
// 5 ms (the Java producer has no adaptive mode like outboxd's default linger 0; 5 ms is the
// usual throughput advice), larger batches than the 16 KiB default.
var dbzWorkerTuning = map[string]string{
	"producer.acks":                                  "all",
	"producer.enable.idempotence":                    "true",
	"producer.max.in.flight.requests.per.connection": "5",
	"producer.compression.type":                      "snappy",
	"producer.linger.ms":                             "5",
	"producer.batch.size":                            "262144",
	"offset.flush.interval.ms":                       "1000",
}

// dbzJVM is what bin/connect-standalone.sh runs the worker with (heap -Xms256M -Xmx2G and
// kafka-run-class.sh's KAFKA_JVM_PERFORMANCE_OPTS).
var dbzJVM = []string{"-Xms256m", "-Xmx2g", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
	"-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent", "-XX:MaxInlineLevel=15",
	"-Djava.awt.headless=true"}

// dbzConnectorTuning are the connector settings added to testenv's outbox config: Debezium's
// queue knobs (defaults 2048 / 8192 / 500 ms) raised for throughput, poll.interval.ms at
// outboxd's linger (a poll returns once the batch is full or the interval ends: in a backlog
// drain batches fill at once, at 2000/s the interval bounds the wait), and the routing to the
// run's topics.
func dbzConnectorTuning(topicPrefix string) map[string]string {
	return map[string]string{
		"max.batch.size":   "16384",
		"max.queue.size":   "65536",
		"poll.interval.ms": "5",
		"transforms.outbox.route.topic.replacement": topicPrefix + "${routedByValue}",
	}
}

func newDbzSetup(connector map[string]string) dbzSetup {
	w := map[string]string{}
	for k, v := range dbzWorkerTuning {
		w[k] = v
	}
	return dbzSetup{connector: connector, worker: w, jvm: slices.Clone(dbzJVM)}
}

// describeDbz renders a setup for the report (sorted; a password masked).
func describeDbz(s dbzSetup) (string, map[string]string) {
	all := map[string]string{}
	var parts []string
	for _, sec := range []struct {
		name string
		kv   map[string]string
	}{{"connector", s.connector}, {"worker", withHarnessWorker(s.worker)}} {
		keys := make([]string, 0, len(sec.kv))
		for k := range sec.kv {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var kv []string
		for _, k := range keys {
			v := sec.kv[k]
			if strings.Contains(k, "password") && v != "" {
				v = "****"
			}
			all[sec.name+"."+k] = v
			kv = append(kv, k+"="+v)
		}
		parts = append(parts, sec.name+": "+strings.Join(kv, ", "))
	}
	all["jvm"] = strings.Join(s.jvm, " ")
	parts = append(parts, "JVM: "+all["jvm"])
	return strings.Join(parts, "; "), all
}

// withHarnessWorker is w with the worker settings testenv.StartConnect writes unless overridden
// (internal/testenv/debezium_connect.go), for the report.
func withHarnessWorker(w map[string]string) map[string]string {
	out := map[string]string{
		"bootstrap.servers":            "<the comparison's Kafka>",
		"key.converter":                "org.apache.kafka.connect.storage.StringConverter",
		"value.converter":              "org.apache.kafka.connect.storage.StringConverter",
		"offset.storage.file.filename": "<Connect dir>/connect.offsets",
		"offset.flush.interval.ms":     "1000",
		"plugin.path":                  "<Debezium lib dir>/plugins",
		"plugin.discovery":             "service_load",
		"listeners":                    "http://127.0.0.1:<free port>",
	}
	for k, v := range w {
		out[k] = v
	}
	return out
}

// ratio is num/den, or ok=false when it has no meaning (a zero or unmeasured denominator).
func ratio(num, den float64) (float64, bool) {
	r := num / den
	if den <= 0 || num < 0 || math.IsNaN(r) || math.IsInf(r, 0) {
		return 0, false
	}
	return r, true
}

func finite(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return x
}

const (
	toolOutboxd  = 0
	toolDebezium = 1
)

var toolNames = [2]string{"outboxd", "Debezium"}

// brokerWarmup is how many records warmBroker produces before the first drain.
const brokerWarmup = 200000

// vsDebezium runs one comparison scenario on side.
func vsDebezium(ctx context.Context, e *env, scenario string, side cmpSide, k *cmpKafka) ([]Result, error) {
	o := e.o
	bin, err := e.outboxdBin(ctx)
	if err != nil {
		return nil, err
	}
	saved := e.brokers
	e.brokers = k.brokers // outboxdYAML and the helpers produce to the comparison's Kafka
	defer func() { e.brokers = saved }()
	if !strings.Contains(e.machine.Kafka, "vs-debezium") {
		e.machine.Kafka += "; vs-debezium scenarios: " + k.desc
	}

	tag := e.runID + "_" + strings.ReplaceAll(strings.TrimPrefix(scenario, "vs-"), "-", "_")
	// Readers: two per round, then the ceiling's and the profiled in-process outboxd's.
	b, err := side.prepare(ctx, tag, o.N, 2*o.Rounds+2)
	if err != nil {
		return nil, err
	}
	defer side.cleanup(ctx, b)
	o.Log.Info("backlog loaded", "scenario", scenario, "rows", b.Rows, "took", b.LoadTime.Round(time.Millisecond))

	t0 := time.Now()
	if err := warmBroker(ctx, k.brokers, brokerWarmup); err != nil {
		return nil, err
	}
	o.Log.Info("broker warmed up", "records", brokerWarmup, "took", time.Since(t0).Round(time.Millisecond))
	var m cmpData
	for r := range o.Rounds {
		order := []int{toolOutboxd, toolDebezium}
		if r%2 == 1 {
			order = []int{toolDebezium, toolOutboxd}
		}
		for _, tool := range order {
			i := 2*r + tool
			prefix := fmt.Sprintf("outboxd-bench.%s.%d.", tag, i)
			topics := topicsOf(prefix)
			if err := createLogAppendTopics(k.brokers, topics); err != nil {
				return nil, err
			}
			var start func() (*toolProc, error)
			if tool == toolOutboxd {
				src, seed := side.outboxdSource(b, i)
				cfg := outboxdYAML(e, src, prefix, "")
				if seed != "" {
					if err := seedOffsets(ctx, cfg, seed); err != nil {
						return nil, err
					}
				}
				start = func() (*toolProc, error) { return startOutboxdTool(bin, cfg) }
			} else {
				s, err := side.debezium(ctx, b, i, prefix)
				if err != nil {
					return nil, err
				}
				m.dbz = s
				start = func() (*toolProc, error) { return startDebeziumTool(k.brokers, s) }
			}
			var probes []cpuProbe
			if k.dir != "" {
				probes = append(probes, cpuProbe{name: "Kafka broker", pid: k.brokerPid})
			}
			if p := side.serverProbe(ctx, b, i); p != nil {
				probes = append(probes, *p)
			}
			d, err := measureDrain(ctx, k.brokers, topics, b.Rows, start, probes...)
			deleteTopics(k.brokers, prefix)
			if err != nil {
				return nil, fmt.Errorf("%s drain, round %d: %w", toolNames[tool], r+1, err)
			}
			o.Log.Info("drained", "scenario", scenario, "tool", toolNames[tool], "round", r+1,
				"took", d.total.Round(time.Millisecond), "events/s", int(d.rate(b.Rows)),
				"steady events/s", int(finite(d.steadyRate())), "cpu", d.cpu.Round(time.Millisecond),
				"rss_mib", int(d.hwmKiB/1024), "records", d.check.records)
			m.runs[tool] = append(m.runs[tool], d)
		}
	}
	if err := ceilingAndProfile(ctx, e, scenario, tag, side, b, k, &m); err != nil {
		return nil, err
	}

	for _, tool := range []int{toolOutboxd, toolDebezium} {
		prefix := fmt.Sprintf("outboxd-bench.%s.lat%d.", tag, tool)
		topics := topicsOf(prefix)
		if err := createLogAppendTopics(k.brokers, topics); err != nil {
			return nil, err
		}
		var start func() (*toolProc, error)
		var cleanup func()
		if tool == toolOutboxd {
			src, seed, c, err := side.latencyOutboxd(ctx, tag)
			if err != nil {
				return nil, err
			}
			cleanup = c
			cfg := outboxdYAML(e, src, prefix, "")
			if seed != "" {
				if err := seedOffsets(ctx, cfg, seed); err != nil {
					return nil, err
				}
			}
			start = func() (*toolProc, error) { return startOutboxdTool(bin, cfg) }
		} else {
			s, c, err := side.latencyDebezium(ctx, tag, prefix)
			if err != nil {
				return nil, err
			}
			cleanup = c
			start = func() (*toolProc, error) { return startDebeziumTool(k.brokers, s) }
		}
		l, err := measureLatency(ctx, k.brokers, topics, o.LatencyRate, o.LatencyDuration, side.newWriter, start)
		cleanup()
		deleteTopics(k.brokers, prefix)
		if err != nil {
			return nil, fmt.Errorf("%s latency: %w", toolNames[tool], err)
		}
		o.Log.Info("latency measured", "scenario", scenario, "tool", toolNames[tool], "p50_ms", l.quantile(0.5),
			"p99_ms", l.quantile(0.99), "rate", int(l.rate))
		m.lats[tool] = l
	}
	return cmpResults(scenario, side.connectorDesc(), k.desc, b, m, o), nil
}

// cmpData is what a comparison measured.
type cmpData struct {
	runs        [2][]drainRun
	lats        [2]latencyRun
	dbz         dbzSetup // the last Debezium drain's setup
	ceilingName string   // the backend's first reference reader
	ceiling     float64  // its drain rate of the same backlog (events/s, no Kafka)
	profile     string   // the CPU profile of an in-process outboxd drain ("" = none)
	profiled    float64  // that drain's rate
}

// ceilingAndProfile drains the backlog once with the backend's first reference reader (the
// server's rate without Kafka: pg_recvlogical, a bare BinlogSyncer) and, with -cpuprofile, once
// with outboxd in-process under the CPU profiler (to PREFIX.<scenario>.pprof; -blockprofile adds
// a block profile of the same drain).
func ceilingAndProfile(ctx context.Context, e *env, scenario, tag string, side cmpSide, b *Backlog, k *cmpKafka, m *cmpData) error {
	o := e.o
	be := side.backend()
	i := 2 * o.Rounds
	d, err := be.RunReference(ctx, b, 0, i)
	if err != nil {
		return fmt.Errorf("%s drain (the ceiling): %w", be.References()[0], err)
	}
	m.ceilingName, m.ceiling = be.References()[0], float64(b.Rows)/d.Seconds()
	o.Log.Info("drained", "scenario", scenario, "tool", m.ceilingName, "took", d.Round(time.Millisecond), "events/s", int(m.ceiling))
	if o.CPUProfile == "" {
		return nil
	}
	i++
	prefix := fmt.Sprintf("outboxd-bench.%s.%d.", tag, i)
	topics := topicsOf(prefix)
	if err := createLogAppendTopics(k.brokers, topics); err != nil {
		return err
	}
	defer deleteTopics(k.brokers, prefix)
	src, seed := side.outboxdSource(b, i)
	cfg := outboxdYAML(e, src, prefix, "")
	if seed != "" {
		if err := seedOffsets(ctx, cfg, seed); err != nil {
			return err
		}
	}
	w, err := newAckWatch(k.brokers, topics, int64(b.Rows))
	if err != nil {
		return err
	}
	defer w.Close()
	m.profile = fmt.Sprintf("%s.%s.pprof", o.CPUProfile, scenario)
	prof := profiles{cpu: m.profile}
	if o.BlockProfile != "" {
		prof.block = fmt.Sprintf("%s.%s.pprof", o.BlockProfile, scenario)
	}
	took, err := runOutboxdInProcess(ctx, e, cfg, func(source.Position) (bool, error) { return holds(w) }, prof)
	if err != nil {
		return fmt.Errorf("profiled in-process outboxd drain: %w", err)
	}
	m.profiled = float64(b.Rows) / took.Seconds()
	o.Log.Info("drained", "scenario", scenario, "tool", "outboxd in-process (CPU profile)", "took", took.Round(time.Millisecond),
		"events/s", int(m.profiled), "profile", m.profile)
	return nil
}

// vsDebeziumPG is scenario vs-debezium-pg.
func vsDebeziumPG(ctx context.Context, e *env) ([]Result, error) {
	const scenario = "vs-debezium-pg"
	if r := shortSkip(e, scenario); r != nil {
		return r, nil
	}
	side, err := newPGCmpSide(e)
	if err != nil {
		return nil, err
	}
	k, err := startCmpKafka(e)
	if err != nil {
		return nil, err
	}
	defer k.stop()
	return vsDebezium(ctx, e, scenario, side, k)
}

// vsDebeziumMariaDB is scenario vs-debezium-mariadb.
func vsDebeziumMariaDB(ctx context.Context, e *env) ([]Result, error) {
	const scenario = "vs-debezium-mariadb"
	if r := shortSkip(e, scenario); r != nil {
		return r, nil
	}
	srv, err := startMariaDB(ctx, e.o)
	if errors.Is(err, errNoMariaDB) {
		return []Result{{Scenario: scenario, Name: "outboxd vs Debezium", Error: fmt.Sprintf("%v: %v", errSkipped, err)}}, nil
	}
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	e.machine.MariaDB = srv.version
	k, err := startCmpKafka(e)
	if err != nil {
		return nil, err
	}
	defer k.stop()
	return vsDebezium(ctx, e, scenario, newMyCmpSide(e, srv), k)
}

// shortSkip: the comparison starts JVMs (Kafka, Connect) and drains N rows several times; -short
// runs it only when named with -only.
func shortSkip(e *env, scenario string) []Result {
	if !e.o.Short || slices.Contains(e.o.Only, scenario) {
		return nil
	}
	return []Result{{Scenario: scenario, Name: "outboxd vs Debezium",
		Error: fmt.Sprintf("%v: not part of -short (starts Apache Kafka and Kafka Connect); name it with -only %s", errSkipped, scenario)}}
}
