package deploy

// The monitoring files: deploy/prometheus/outboxd-rules.yaml is checked and unit-tested by
// promtool (its synthetic series are in outboxd-rules.test.yaml), and deploy/grafana/outboxd.json
// is validated structurally (no Grafana runs here): it parses, every panel has a query on the
// ${datasource} variable filtered by $job and $instance, and every query is valid PromQL
// (promtool checks them as recording rules); the two panels that encode a state as a number are
// evaluated on synthetic series. That every metric they use is exported by a running outboxd is
// test/e2e's TestMonitoringMetricsExported.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const (
	rulesFile     = "prometheus/outboxd-rules.yaml"
	rulesTestFile = "prometheus/outboxd-rules.test.yaml"
	dashboardFile = "grafana/outboxd.json"
	dsUID         = "${datasource}"
)

// promtool returns the promtool binary (Debian's prometheus package, installed by .ci/deps). In CI
// (CI=true) a missing promtool fails the test; elsewhere it skips.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if _, serr := os.Stat("/usr/bin/promtool"); serr == nil {
			return "/usr/bin/promtool"
		}
		if os.Getenv("CI") == "true" {
			t.Fatalf("promtool not found (%v): .ci/deps installs it (Debian package prometheus)", err)
		}
		t.Skipf("promtool not found (%v): install Debian's prometheus package or run .ci/deps", err)
	}
	return p
}

func runPromtool(t *testing.T, bin, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// The alerts the issue asks for (and the cleanup one); each must have a unit test in
// outboxd-rules.test.yaml.
var wantAlerts = []string{"OutboxdDown", "OutboxdMetricsAbsent", "OutboxdNoActiveInstance", "OutboxdNotConnected",
	"OutboxdDeadLetters", "OutboxdNoProgress", "OutboxdSlotLagGrowing", "OutboxdSlotWALExtended",
	"OutboxdSlotWALUnreserved", "OutboxdSlotWALLost", "OutboxdCleanupFailing"}

func TestPrometheusRules(t *testing.T) {
	bin := promtool(t)
	runPromtool(t, bin, ".", "check", "rules", rulesFile)
	runPromtool(t, bin, "prometheus", "test", "rules", filepath.Base(rulesTestFile))

	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(rulesTestFile)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			have[r.Alert] = true
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("alert %s: severity %q, want warning or critical", r.Alert, s)
			}
			for _, a := range []string{"summary", "description", "runbook"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("alert %s has no %s annotation", r.Alert, a)
				}
			}
			if !strings.Contains(r.Annotations["runbook"], "README") {
				t.Errorf("alert %s: its runbook does not point to a README section", r.Alert)
			}
			// Fires and does not fire: a test with the alert expected and one with none.
			if !regexp.MustCompile(`alertname: `+r.Alert+`\n\s+exp_alerts:\n\s+- exp_labels`).Match(tests) ||
				!regexp.MustCompile(`alertname: `+r.Alert+`\n\s+exp_alerts: \[\]`).Match(tests) {
				t.Errorf("alert %s: %s lacks a case where it fires or one where it does not", r.Alert, rulesTestFile)
			}
		}
	}
	for _, a := range wantAlerts {
		if !have[a] {
			t.Errorf("%s has no alert %s", rulesFile, a)
		}
	}
}

type dsRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID          int    `json:"id"`
	Type        string `json:"type"`
	Title       string `json:"title"`
	Description string `json:"description"`
	Datasource  *dsRef `json:"datasource"`
	GridPos     struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		Datasource *dsRef `json:"datasource"`
		Expr       string `json:"expr"`
		RefID      string `json:"refId"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a row's (collapsed) panels
}

type dashboard struct {
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Query      any    `json:"query"`
			Datasource *dsRef `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// queryPanels returns the dashboard's panels other than rows, rows' nested panels included.
func queryPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		if p.Type == "row" {
			out = append(out, queryPanels(p.Panels)...)
			continue
		}
		out = append(out, p)
	}
	return out
}

func TestGrafanaDashboard(t *testing.T) {
	d := loadDashboard(t)
	if d.Title == "" || d.UID == "" {
		t.Errorf("dashboard title %q uid %q: both must be set", d.Title, d.UID)
	}
	if d.SchemaVersion < 36 || d.SchemaVersion > 41 {
		t.Errorf("schemaVersion %d, want 36..41 (Grafana 9-11)", d.SchemaVersion)
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		switch v.Name {
		case "datasource":
			if v.Type != "datasource" || v.Query != "prometheus" {
				t.Errorf("variable datasource: type %q query %v, want a Prometheus datasource variable", v.Type, v.Query)
			}
		case "job", "instance":
			q, _ := json.Marshal(v.Query)
			if v.Type != "query" || v.Datasource == nil || v.Datasource.UID != dsUID || !strings.Contains(string(q), "outboxd_up") {
				t.Errorf("variable %s: type %q datasource %+v query %s, want a label_values query of outboxd_up on %s", v.Name, v.Type, v.Datasource, q, dsUID)
			}
		}
	}
	for _, want := range []string{"datasource", "job", "instance"} {
		if !vars[want] {
			t.Errorf("dashboard has no %s variable", want)
		}
	}
	ids := map[int]string{}
	all := queryPanels(d.Panels)
	for _, p := range d.Panels {
		if p.Type == "row" {
			ids[p.ID] = p.Title
		}
	}
	for _, p := range all {
		name := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		if prev, dup := ids[p.ID]; dup || p.ID == 0 {
			t.Errorf("%s: id missing or also used by %q", name, prev)
		}
		ids[p.ID] = p.Title
		if p.Title == "" || p.Description == "" {
			t.Errorf("%s: needs a title and a description", name)
		}
		if g := p.GridPos; g.W < 1 || g.H < 1 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("%s: gridPos %+v outside the 24-column grid", name, g)
		}
		if p.Datasource == nil || p.Datasource.UID != dsUID || p.Datasource.Type != "prometheus" {
			t.Errorf("%s: datasource %+v, want the %s variable", name, p.Datasource, dsUID)
		}
		if len(p.Targets) == 0 {
			t.Errorf("%s has no query", name)
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" || tg.RefID == "" {
				t.Errorf("%s: a target without expr or refId", name)
			}
			if tg.Datasource == nil || tg.Datasource.UID != dsUID {
				t.Errorf("%s: target %s datasource %+v, want %s", name, tg.RefID, tg.Datasource, dsUID)
			}
			if !strings.Contains(tg.Expr, `job=~"$job"`) || !strings.Contains(tg.Expr, `instance=~"$instance"`) {
				t.Errorf("%s: target %s does not filter by $job and $instance: %s", name, tg.RefID, tg.Expr)
			}
		}
	}
	// The panels the issue asks for, found by what they query.
	exprs := ""
	for _, p := range all {
		for _, tg := range p.Targets {
			exprs += tg.Expr + "\n"
		}
	}
	for _, want := range []string{"outboxd_events_read_total", "outboxd_events_produced_total", "outboxd_source_lag_bytes",
		"outboxd_slot_retained_bytes", "histogram_quantile(0.5,", "histogram_quantile(0.99,", "outboxd_commit_to_ack_seconds_bucket",
		"outboxd_inflight_events", "sum by (reason) (rate(outboxd_dlq_events_total", "outboxd_slot_wal_status",
		"outboxd_standby", "outboxd_up"} {
		if !strings.Contains(exprs, want) {
			t.Errorf("no dashboard query uses %s", want)
		}
	}
}

// grafanaVars replaces the dashboard's variables by what Grafana would send to Prometheus.
var grafanaVars = strings.NewReplacer("$__rate_interval", "1m", "$__range", "1h", "$__interval", "30s",
	`"$job"`, `".*"`, `"$instance"`, `".*"`)

// TestGrafanaDashboardPromQL: every dashboard query is valid PromQL (promtool check rules on
// them as recording rules), and the wal_status and role panels, which encode a state as a
// number for their value mappings, give the right number on synthetic series.
func TestGrafanaDashboardPromQL(t *testing.T) {
	bin := promtool(t)
	d := loadDashboard(t)
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rule
	byTitle := map[string]string{}
	for _, p := range queryPanels(d.Panels) {
		for _, tg := range p.Targets {
			e := grafanaVars.Replace(tg.Expr)
			if strings.Contains(e, "$") {
				t.Errorf("panel %q: a Grafana variable left after substitution: %s", p.Title, e)
			}
			rules = append(rules, rule{Record: fmt.Sprintf("dashboard:panel%d:%s", p.ID, tg.RefID), Expr: e})
			byTitle[p.Title] = e
		}
	}
	dir := t.TempDir()
	rb, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	writeFileT(t, filepath.Join(dir, "dashboard-rules.yaml"), rb)
	runPromtool(t, bin, dir, "check", "rules", "dashboard-rules.yaml")

	walExpr, roleExpr := byTitle["Slot wal_status"], byTitle["Role (active / standby)"]
	if walExpr == "" || roleExpr == "" {
		t.Fatalf("panels \"Slot wal_status\" and \"Role (active / standby)\" not found")
	}
	// outboxd sets all four wal_status gauges, 1 for the current one (internal/metrics SetSlot).
	var series []map[string]string
	for inst, cur := range map[string]string{"r": "reserved", "e": "extended", "u": "unreserved", "l": "lost"} {
		for _, s := range []string{"reserved", "extended", "unreserved", "lost"} {
			v := "0x3"
			if s == cur {
				v = "1x3"
			}
			series = append(series, map[string]string{"series": fmt.Sprintf(`outboxd_slot_wal_status{job="j", instance=%q, status=%q}`, inst, s), "values": v})
		}
	}
	for inst, upStandby := range map[string][2]string{"active": {"1x3", "0x3"}, "standby": {"0x3", "1x3"}, "down": {"0x3", "0x3"}} {
		series = append(series,
			map[string]string{"series": fmt.Sprintf(`outboxd_up{job="j", instance=%q}`, inst), "values": upStandby[0]},
			map[string]string{"series": fmt.Sprintf(`outboxd_standby{job="j", instance=%q}`, inst), "values": upStandby[1]})
	}
	sample := func(inst string, v int) map[string]any {
		return map[string]any{"labels": fmt.Sprintf(`{job="j", instance=%q}`, inst), "value": v}
	}
	test := map[string]any{
		"rule_files": []string{"dashboard-rules.yaml"},
		"tests": []any{map[string]any{
			"interval":     "1m",
			"input_series": series,
			"promql_expr_test": []any{
				map[string]any{"expr": walExpr, "eval_time": "2m", "exp_samples": []any{
					sample("r", 0), sample("e", 1), sample("u", 2), sample("l", 3)}},
				map[string]any{"expr": roleExpr, "eval_time": "2m", "exp_samples": []any{
					sample("down", 0), sample("standby", 1), sample("active", 2)}},
			},
		}},
	}
	tb, err := yaml.Marshal(test)
	if err != nil {
		t.Fatal(err)
	}
	writeFileT(t, filepath.Join(dir, "dashboard.test.yaml"), tb)
	runPromtool(t, bin, dir, "test", "rules", "dashboard.test.yaml")
}

func writeFileT(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
