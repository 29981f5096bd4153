package e2e

// The shipped dashboard (deploy/grafana/outboxd.json) and alert rules
// (deploy/prometheus/outboxd-rules.yaml) query only metrics a running outboxd exports: the
// metric names of their PromQL are extracted and each must have a `# TYPE` line on the /metrics
// of an outboxd binary that delivered one record, dead-lettered one and ran outbox.cleanup (the
// labelled vectors exist only once something was counted). PostgreSQL source: the slot metrics
// (outboxd_slot_*, outboxd_source_lag_bytes) are PostgreSQL's.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
)

var (
	promqlString   = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	promqlMatchers = regexp.MustCompile(`\{[^{}]*\}`)
	promqlRange    = regexp.MustCompile(`\[[^\[\]]*\]`)
	promqlGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	// A number (durations and hex included), or an identifier and whether a '(' follows it.
	promqlToken = regexp.MustCompile(`[0-9][0-9a-zA-Z_.]*|([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?`)
	promqlWords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "by": true,
		"without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true, "inf": true, "nan": true,
		"atan2": true, "start": true, "end": true}
)

// promqlMetricNames returns the metric names expr selects, sorted and once each: identifiers
// outside strings, label matchers, ranges and grouping lists that are not functions,
// aggregations or keywords. `up` (Prometheus's own per target) is left out. A name selected as
// {__name__="..."} is not seen (the files do not use that form).
func promqlMetricNames(expr string) []string {
	s := promqlString.ReplaceAllString(expr, " ")
	s = promqlMatchers.ReplaceAllString(s, " ")
	s = promqlRange.ReplaceAllString(s, " ")
	s = promqlGrouping.ReplaceAllString(s, " ")
	seen := map[string]bool{}
	for _, m := range promqlToken.FindAllStringSubmatch(s, -1) {
		name, call := m[1], m[2]
		if name == "" || call != "" || promqlWords[strings.ToLower(name)] || name == "up" {
			continue
		}
		seen[name] = true
	}
	var out []string
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func TestMonitoringMetricNamesExtraction(t *testing.T) {
	for expr, want := range map[string][]string{
		`sum by (topic) (rate(outboxd_events_produced_total{job=~"$job", instance=~"$instance"}[$__rate_interval]))`: {"outboxd_events_produced_total"},
		`histogram_quantile(0.99, sum by (job, le) (rate(outboxd_commit_to_ack_seconds_bucket{job="a"}[5m])))`:       {"outboxd_commit_to_ack_seconds_bucket"},
		`up{job=~"outboxd.*"} == 0`:                                                           nil,
		`count(up{job="x"} == 0) or vector(0)`:                                                nil,
		`absent(outboxd_up{job=~"outboxd.*"})`:                                                {"outboxd_up"},
		"a > 0 unless on (job, instance) b offset 10m or c_total{x=\"{y}[z] d\"} * 1e3":       {"a", "b", "c_total"},
		`(sum by (job) (x) == 0) and on (job) (sum without (instance) (y) > 0)`:               {"x", "y"},
		`max by (job, instance) ((s{status="lost"} == 1) * 3 or (s{status="a"} == 1) * 0x1f)`: {"s"},
	} {
		if got := promqlMetricNames(expr); !slices.Equal(got, want) {
			t.Errorf("promqlMetricNames(%s) = %v, want %v", expr, got, want)
		}
	}
	body := "# TYPE h_seconds histogram\nh_seconds_bucket{le=\"1\"} 1\n# TYPE g gauge\ng 1\n# TYPE g_count gauge\ng_count 1\n"
	for name, want := range map[string]bool{"h_seconds_bucket": true, "h_seconds_count": true, "h_seconds": true, "g": true,
		"g_count": true, "g_sum": false, "h": false, "x": false} {
		if got := typeLine(body, name); got != want {
			t.Errorf("typeLine(%q) = %v, want %v", name, got, want)
		}
	}
}

// monitoringExprs returns the PromQL expressions of the dashboard (every "expr" in it, rows'
// nested panels included) and of the rules file, each with where it is.
func monitoringExprs(t *testing.T) map[string]string {
	t.Helper()
	exprs := map[string]string{}
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "grafana", "outboxd.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash any
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("deploy/grafana/outboxd.json: %v", err)
	}
	var walk func(v any, path string)
	walk = func(v any, path string) {
		switch v := v.(type) {
		case map[string]any:
			if e, ok := v["expr"].(string); ok {
				exprs[path] = e
			}
			for k, x := range v {
				walk(x, path+"."+k)
			}
		case []any:
			for i, x := range v {
				walk(x, fmt.Sprintf("%s[%d]", path, i))
			}
		}
	}
	walk(dash, "outboxd.json")
	b, err = os.ReadFile(filepath.Join("..", "..", "deploy", "prometheus", "outboxd-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct{ Alert, Record, Expr string }
		}
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatalf("deploy/prometheus/outboxd-rules.yaml: %v", err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs["outboxd-rules.yaml "+r.Alert+r.Record] = r.Expr
		}
	}
	return exprs
}

// typeLine reports whether /metrics text declares name: `# TYPE name`, or for a histogram's or
// summary's _bucket, _sum and _count series, `# TYPE base histogram|summary`.
func typeLine(metrics, name string) bool {
	if regexp.MustCompile(`(?m)^# TYPE ` + regexp.QuoteMeta(name) + ` `).MatchString(metrics) {
		return true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok &&
			regexp.MustCompile(`(?m)^# TYPE `+regexp.QuoteMeta(base)+` (histogram|summary)$`).MatchString(metrics) {
			return true
		}
	}
	return false
}

func TestMonitoringMetricsExported(t *testing.T) {
	exprs := monitoringExprs(t)
	used := map[string][]string{} // name → where
	for where, e := range exprs {
		for _, n := range promqlMetricNames(e) {
			used[n] = append(used[n], where)
		}
	}
	// The extraction found what the panels and alerts are about (a broken extraction
	// that finds nothing would pass the check below).
	for _, want := range []string{"outboxd_events_read_total", "outboxd_events_produced_total", "outboxd_source_lag_bytes",
		"outboxd_slot_retained_bytes", "outboxd_commit_to_ack_seconds_bucket", "outboxd_inflight_events",
		"outboxd_dlq_events_total", "outboxd_slot_wal_status", "outboxd_standby", "outboxd_up"} {
		if used[want] == nil {
			t.Errorf("no dashboard or rule expression uses %s (extracted: %v)", want, keys(used))
		}
	}

	e := newEnv(t, cleanupYAML)
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	e.editConfig(`listen: ""`, "listen: "+addr)
	p := e.start()
	c := e.conn()
	// One record delivered, one dead letter (a NULL aggregatetype: missing_column), and the
	// cleanup deletes the delivered row: every labelled vector gets a series.
	e.insertTx(c, goodRow(0))
	e.insertTx(c, dlqRow{aggType: nil, aggID: sp("k1"), payload: `{"x": 1}`})
	// outboxd_outbox_table_rows is pg_class.reltuples, -1 (not exported) until the table is first
	// vacuumed or analyzed: do what autovacuum would.
	if _, err := c.Exec(context.Background(), "ANALYZE public.outbox"); err != nil {
		t.Fatal(err)
	}

	var body string
	missing := func() []string {
		var out []string
		for n := range used {
			if !typeLine(body, n) {
				out = append(out, n)
			}
		}
		sort.Strings(out)
		return out
	}
	// The slot watch reads pg_replication_slots every 10 s; cleanup runs every 200 ms.
	err = harness.Until(60*time.Second, 200*time.Millisecond, func() error {
		p.MustBeRunning(t)
		body = harness.Metrics(addr)
		if m := missing(); len(m) > 0 {
			return fmt.Errorf("not on /metrics: %v", m)
		}
		return nil
	})
	if err != nil {
		var where []string
		for _, n := range missing() {
			where = append(where, fmt.Sprintf("%s (used by %s)", n, strings.Join(used[n], ", ")))
		}
		t.Fatalf("metrics the dashboard or the rules use that outboxd does not export: %v\n%s\n/metrics:\n%s",
			err, strings.Join(where, "\n"), body)
	}
	// The vectors exist because of this test's records, with the values it caused.
	for _, want := range []string{`outboxd_events_produced_total{topic="outbox.event.order"} 1`,
		`outboxd_dlq_events_total{reason="missing_column"} 1`, `outboxd_slot_wal_status{status="reserved"} 1`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	t.Logf("%d metric names used by the dashboard and the rules, all exported: %v", len(used), keys(used))
	p.Stop(t, syscall.SIGTERM)
}

func keys(m map[string][]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
