package chart

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/template"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/cacheqos/cacheqos/internal/promquery"
)

// ruleGroup and rule are the parts of a Prometheus rule file the tests read and write.
type ruleGroup struct {
	Name  string `json:"name"`
	Rules []rule `json:"rules"`
}

type rule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// allAlerts are the chart's alerts, in the order it renders them.
var allAlerts = []string{
	"CacheQoSOperatorDown", "CacheQoSPlanFailing", "CacheQoSPlanInfeasible",
	"CacheQoSTenantSLOBurnFast", "CacheQoSTenantSLOBurnSlow", "CacheQoSTenantThrottledSustained",
	"CacheQoSSidecarDown", "CacheQoSSidecarMetricsStale",
}

// ruleGroups decodes a rendered PrometheusRule's groups.
func ruleGroups(t *testing.T, obj *unstructured.Unstructured) []ruleGroup {
	t.Helper()
	data, err := json.Marshal(nested[[]any](t, obj.Object, "spec", "groups"))
	if err != nil {
		t.Fatal(err)
	}
	var groups []ruleGroup
	if err := json.Unmarshal(data, &groups); err != nil {
		t.Fatal(err)
	}
	return groups
}

// alertRules lists a rendered PrometheusRule's rules.
func alertRules(t *testing.T, obj *unstructured.Unstructured) []rule {
	t.Helper()
	var rules []rule
	for _, g := range ruleGroups(t, obj) {
		rules = append(rules, g.Rules...)
	}
	return rules
}

// writeRuleFile writes groups as a Prometheus rule file and checks it with promtool, which
// parses every expression and template.
func writeRuleFile(t *testing.T, dir string, groups []ruleGroup) string {
	t.Helper()
	data, err := yaml.Marshal(map[string]any{"groups": groups})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(fixture.promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s\n%s", err, out, data)
	}
	return path
}

// query is one PromQL expression the chart ships, and where.
type query struct {
	where, expr string
}

// renderedAlerts renders the chart's PrometheusRule with every alert.
func renderedAlerts(t *testing.T) *unstructured.Unstructured {
	t.Helper()
	return findOne(t, release{name: "t", namespace: testNamespace, values: values{"prometheusRule.enabled": `true`}}.mustRender(t), "PrometheusRule")
}

// TestPrometheusRuleMetricsAreExported checks every alert expression for metrics cacheqos
// does not export, and that promtool accepts the rules.
func TestPrometheusRuleMetricsAreExported(t *testing.T) {
	metrics := newMetricChecker(t)
	groups := ruleGroups(t, renderedAlerts(t))
	writeRuleFile(t, t.TempDir(), groups)
	var names []string
	for _, g := range groups {
		for _, r := range g.Rules {
			names = append(names, r.Alert)
			metrics.check(t, query{"alert " + r.Alert, r.Expr})
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s lacks a severity, summary or description", r.Alert)
			}
		}
	}
	if !slices.Equal(names, allAlerts) {
		t.Errorf("alerts %v, want %v", names, allAlerts)
	}
}

// TestOperatorAlertsMetricsAreExported checks the alerts the operator puts in the
// PrometheusRule of every CacheCluster that asks for one (promquery.Alerts) as the chart's
// own: promtool accepts them, and every metric they query is exported.
func TestOperatorAlertsMetricsAreExported(t *testing.T) {
	metrics := newMetricChecker(t)
	var rules []rule
	for _, a := range promquery.Alerts(promquery.AlertScope{Namespace: "cache-platform", Job: "shared-sidecars", Cluster: "cache-platform/shared"}) {
		metrics.check(t, query{"operator alert " + a.Name, a.Expr})
		rules = append(rules, rule{Alert: a.Name, Expr: a.Expr, For: promquery.FormatDuration(a.For),
			Labels: map[string]string{"severity": a.Severity}, Annotations: map[string]string{"summary": a.Summary, "description": a.Description}})
	}
	if len(rules) == 0 {
		t.Fatal("the operator makes no alerts")
	}
	writeRuleFile(t, t.TempDir(), []ruleGroup{{Name: "cacheqos-cluster", Rules: rules}})
}

// alertCase is one promtool unit test of an alert: input series, and the alerts expected to
// fire (by their labels) at a time.
type alertCase struct {
	name   string
	series map[string]string // series -> promtool values notation
	alert  string
	at     string
	want   []map[string]string // labels besides alertname and the rule's own; nil: none fires
}

const operatorJob = `job="t-cacheqos-operator-metrics", namespace="cacheqos-system"`
const sidecarTarget = `job="shared-sidecars", namespace="cache-platform", instance="10.0.0.5:9400"`

var alertCases = []alertCase{
	{
		name:   "operator down",
		series: map[string]string{`up{` + operatorJob + `, instance="10.0.0.9:8080"}`: "0x20"},
		alert:  "CacheQoSOperatorDown", at: "10m", want: []map[string]string{{}},
	},
	{
		name:   "operator gone from service discovery",
		series: map[string]string{`up{job="other"}`: "1x20"},
		alert:  "CacheQoSOperatorDown", at: "10m", want: []map[string]string{{}},
	},
	{
		name:   "operator up",
		series: map[string]string{`up{` + operatorJob + `, instance="10.0.0.9:8080"}`: "1x20"},
		alert:  "CacheQoSOperatorDown", at: "10m",
	},
	{
		name: "allocation errors",
		series: map[string]string{
			`cacheqos_operator_reconcile_errors_total{controller="allocation", ` + operatorJob + `}`: "0+1x40",
			`cacheqos_operator_reconcile_errors_total{controller="tenantslo", ` + operatorJob + `}`:  "0x40",
		},
		alert: "CacheQoSPlanFailing", at: "30m", want: []map[string]string{{"job": "t-cacheqos-operator-metrics", "namespace": "cacheqos-system"}},
	},
	{
		name:   "infeasible plan",
		series: map[string]string{`cacheqos_operator_solver_status{cluster="cache-platform/shared", status="Infeasible"}`: "1x20"},
		alert:  "CacheQoSPlanInfeasible", at: "16m", want: []map[string]string{{"cluster": "cache-platform/shared"}},
	},
	{
		name: "tenant missing its SLO for an hour",
		series: map[string]string{
			`cacheqos_operator_tenant_slo_met{cluster="cache-platform/shared", tenant="checkout/cart"}`: "0x70",
			`cacheqos_operator_tenant_slo_met{cluster="cache-platform/shared", tenant="search/index"}`:  "1x70",
		},
		alert: "CacheQoSTenantSLOBurnFast", at: "60m", want: []map[string]string{{"cluster": "cache-platform/shared", "tenant": "checkout/cart"}},
	},
	{
		name: "tenant that recovered",
		series: map[string]string{
			`cacheqos_operator_tenant_slo_met{cluster="cache-platform/shared", tenant="checkout/cart"}`: "0x40 1x30",
		},
		alert: "CacheQoSTenantSLOBurnFast", at: "70m",
	},
	{
		name: "tenant missing its SLO a tenth of six hours",
		series: map[string]string{
			`cacheqos_operator_tenant_slo_met{cluster="cache-platform/shared", tenant="checkout/cart"}`: "1x320 0x40",
		},
		alert: "CacheQoSTenantSLOBurnSlow", at: "360m", want: []map[string]string{{"cluster": "cache-platform/shared", "tenant": "checkout/cart"}},
	},
	{
		name: "throttled tenant",
		series: map[string]string{
			`cacheqos_sidecar_requests_total{` + sidecarTarget + `, node="n1", tenant="checkout/cart", class="read"}`: "0+6000x60",
			`cacheqos_sidecar_throttled_requests_total{` + sidecarTarget + `, node="n1", tenant="checkout/cart"}`:     "0+600x60",
			`cacheqos_sidecar_requests_total{` + sidecarTarget + `, node="n1", tenant="search/index", class="read"}`:  "0+6000x60",
			`cacheqos_sidecar_throttled_requests_total{` + sidecarTarget + `, node="n1", tenant="search/index"}`:      "0+60x60",
		},
		alert: "CacheQoSTenantThrottledSustained", at: "50m", want: []map[string]string{{"namespace": "cache-platform", "tenant": "checkout/cart"}},
	},
	{
		name: "sidecar down",
		series: map[string]string{
			`up{` + sidecarTarget + `}`: "1x10 0x20",
			`cacheqos_sidecar_plan_generation{` + sidecarTarget + `, node="n1"}`: "3x10",
			`up{job="unrelated", instance="10.0.0.7:80"}`:                        "0x30",
		},
		alert: "CacheQoSSidecarDown", at: "20m", want: []map[string]string{{"job": "shared-sidecars", "namespace": "cache-platform", "instance": "10.0.0.5:9400"}},
	},
	{
		name: "stale sidecar metrics",
		series: map[string]string{
			`cacheqos_sidecar_plan_generation{` + sidecarTarget + `, node="n1"}`:                                           "3x10",
			`cacheqos_sidecar_plan_generation{job="shared-sidecars", namespace="cache-platform", instance="b", node="n2"}`: "3x40",
		},
		alert: "CacheQoSSidecarMetricsStale", at: "30m", want: []map[string]string{{"namespace": "cache-platform", "node": "n1"}},
	},
	{
		name: "fresh sidecar metrics",
		series: map[string]string{
			`cacheqos_sidecar_plan_generation{` + sidecarTarget + `, node="n1"}`: "3x40",
		},
		alert: "CacheQoSSidecarMetricsStale", at: "30m",
	},
}

// TestAlertsFire runs promtool's rule unit tests over the rendered alerts: each fires on the
// series it is about, with the labels its annotations use, and stays quiet otherwise.
func TestAlertsFire(t *testing.T) {
	obj := renderedAlerts(t)
	rules := map[string]rule{}
	for _, r := range alertRules(t, obj) {
		rules[r.Alert] = r
	}
	dir := t.TempDir()
	ruleFile := writeRuleFile(t, dir, ruleGroups(t, obj))
	tested := map[string]bool{}
	for _, c := range alertCases {
		t.Run(c.name, func(t *testing.T) {
			r, ok := rules[c.alert]
			if !ok {
				t.Fatalf("the chart has no alert %s", c.alert)
			}
			tested[c.alert] = true
			runPromtoolTest(t, dir, ruleFile, r, c)
		})
	}
	for _, name := range allAlerts {
		if !tested[name] {
			t.Errorf("no case tests alert %s", name)
		}
	}
}

func runPromtoolTest(t *testing.T, dir, ruleFile string, r rule, c alertCase) {
	t.Helper()
	var series []map[string]string
	for _, name := range sortedKeys(c.series) {
		series = append(series, map[string]string{"series": name, "values": c.series[name]})
	}
	expected := []map[string]any{}
	for _, labels := range c.want {
		all := map[string]string{}
		for k, v := range r.Labels {
			all[k] = v
		}
		for k, v := range labels {
			all[k] = v
		}
		expected = append(expected, map[string]any{"exp_labels": all, "exp_annotations": expandAnnotations(t, r, labels)})
	}
	test := map[string]any{
		"rule_files":          []string{ruleFile},
		"evaluation_interval": "1m",
		"tests": []any{map[string]any{
			"interval":        "1m",
			"input_series":    series,
			"alert_rule_test": []any{map[string]any{"eval_time": c.at, "alertname": c.alert, "exp_alerts": expected}},
		}},
	}
	data, err := yaml.Marshal(test)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+".test.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(fixture.promtool, "test", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("promtool test rules: %v\n%s\nrule: %s\n%s", err, out, r.Expr, data)
	}
}

// expandAnnotations expands an alert's annotation templates the way Prometheus does ($labels
// holds the alert's labels), for promtool's expected alerts.
func expandAnnotations(t *testing.T, r rule, labels map[string]string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, text := range r.Annotations {
		tmpl, err := template.New(k).Option("missingkey=error").Parse("{{$labels := .Labels}}" + text)
		if err != nil {
			t.Fatalf("alert %s annotation %s: %v", r.Alert, k, err)
		}
		var buf bytes.Buffer
		if err := tmpl.Execute(&buf, map[string]any{"Labels": labels}); err != nil {
			t.Fatalf("alert %s annotation %s uses a label the alert does not have: %v", r.Alert, k, err)
		}
		out[k] = buf.String()
	}
	return out
}

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID      int    `json:"id"`
	Type    string `json:"type"`
	Title   string `json:"title"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

// grafanaVariable matches a Grafana variable reference: $name or ${name} (with a format).
var grafanaVariable = regexp.MustCompile(`\$\{?(__[a-z_]+|[A-Za-z_][A-Za-z0-9_]*)(:[a-z]+)?\}?`)

// labelValuesQuery matches Grafana's label_values(expr, label).
var labelValuesQuery = regexp.MustCompile(`^label_values\((.+),\s*[A-Za-z_][A-Za-z0-9_]*\)$`)

// substituteVariables makes a dashboard query plain PromQL: interval variables become a
// duration, other variables a value.
func substituteVariables(expr string) string {
	return grafanaVariable.ReplaceAllStringFunc(expr, func(v string) string {
		if strings.Contains(v, "interval") || strings.Contains(v, "__range") {
			return "5m"
		}
		return "x"
	})
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal(readRepoFile(t, "charts/cacheqos/dashboards/cacheqos.json"), &d); err != nil {
		t.Fatalf("dashboards/cacheqos.json: %v", err)
	}
	return d
}

// dashboardQueries lists the dashboard's queries: every panel target, and the expression of
// every label_values() variable.
func dashboardQueries(t *testing.T, d dashboard) []query {
	t.Helper()
	var out []query
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, ok := v.Query.(map[string]any)["query"].(string)
		if !ok {
			t.Fatalf("variable %s has no query", v.Name)
		}
		m := labelValuesQuery.FindStringSubmatch(q)
		if m == nil {
			t.Fatalf("variable %s: query %q is not label_values(expr, label)", v.Name, q)
		}
		out = append(out, query{"variable " + v.Name, m[1]})
	}
	var walk func([]panel)
	walk = func(panels []panel) {
		for _, p := range panels {
			for i, target := range p.Targets {
				out = append(out, query{fmt.Sprintf("panel %q query %d", p.Title, i), target.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// TestDashboard checks that the dashboard is valid JSON with the promised variables and
// panels, that promtool parses every query, and that every metric it queries is exported.
func TestDashboard(t *testing.T) {
	d := readDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Error("the dashboard has no uid or title")
	}
	var variables []string
	for _, v := range d.Templating.List {
		variables = append(variables, v.Name)
	}
	for _, want := range []string{"datasource", "cluster", "namespace", "tenant", "node"} {
		if !slices.Contains(variables, want) {
			t.Errorf("the dashboard has no variable %s (it has %v)", want, variables)
		}
	}

	ids := map[int]bool{}
	var titles []string
	var walk func([]panel)
	walk = func(panels []panel) {
		for _, p := range panels {
			if ids[p.ID] {
				t.Errorf("panel id %d is used twice", p.ID)
			}
			ids[p.ID] = true
			titles = append(titles, p.Title)
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, want := range []string{
		"Hit ratio per tenant vs target", "SLO met per tenant", "Objectives: target vs observed", "Memory: allocated vs used",
		"Latency percentiles", "Operations per second", "Bytes per second", "Throttling", "Evictions and ghost hits",
		"Memory per node: capacity, allocated, used", "Operations per node vs capacity", "Bandwidth per node vs capacity",
		"Node utilization", "Solver status", "Plan duration",
	} {
		if !slices.Contains(titles, want) {
			t.Errorf("the dashboard has no panel %q", want)
		}
	}

	metrics := newMetricChecker(t)
	queried := map[string]bool{}
	var records []rule
	queries := dashboardQueries(t, d)
	for i, q := range queries {
		for _, m := range metrics.check(t, q) {
			queried[m] = true
		}
		records = append(records, rule{Record: fmt.Sprintf("dashboard:query_%d", i), Expr: substituteVariables(q.expr)})
	}
	writeRuleFile(t, t.TempDir(), []ruleGroup{{Name: "dashboard", Rules: records}})
	for _, want := range []string{
		"cacheqos_sidecar_hits_total", "cacheqos_sidecar_partition_limit_bytes", "cacheqos_sidecar_partition_used_bytes",
		"cacheqos_sidecar_request_duration_seconds", "cacheqos_sidecar_throttled_requests_total", "cacheqos_sidecar_evictions_total",
		"cacheqos_operator_solver_status", "cacheqos_operator_plan_duration_seconds", "cacheqos_operator_tenant_slo_met",
		"cacheqos_operator_tenant_objective_target", "cacheqos_operator_tenant_objective_observed",
		"cacheqos_operator_tenant_allocated_bytes", "cacheqos_operator_node_memory_capacity_bytes",
		"cacheqos_operator_node_ops_capacity_per_second", "cacheqos_operator_node_bandwidth_capacity_bytes_per_second",
	} {
		if !queried[want] {
			t.Errorf("the dashboard never queries %s", want)
		}
	}
	t.Logf("%d queries over %d metrics", len(queries), len(queried))
}

// dashboardVariables are the values TestDashboardJoins gives the dashboard's variables: the
// CacheCluster cache-platform/shared, every tenant and node, a 5m rate window.
var dashboardVariables = map[string]string{
	"cluster": "cache-platform/shared", "cluster_namespace": "cache-platform", "cluster_name": "shared",
	"namespace": ".+", "tenant": ".+", "node": ".+", "__rate_interval": "5m",
}

// instantiate replaces the dashboard variables in expr by dashboardVariables' values.
func instantiate(t *testing.T, expr string) string {
	t.Helper()
	return grafanaVariable.ReplaceAllStringFunc(expr, func(ref string) string {
		v, ok := dashboardVariables[grafanaVariable.FindStringSubmatch(ref)[1]]
		if !ok {
			t.Fatalf("%s: no value for the variable %s", expr, ref)
		}
		return v
	})
}

// panelQuery finds the query refID of the panel titled title.
func panelQuery(t *testing.T, d dashboard, title, refID string) string {
	t.Helper()
	var found []string
	var walk func([]panel)
	walk = func(panels []panel) {
		for _, p := range panels {
			for _, target := range p.Targets {
				if p.Title == title && target.RefID == refID {
					found = append(found, target.Expr)
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	if len(found) != 1 {
		t.Fatalf("the dashboard has %d queries %s in panels titled %q, want 1", len(found), refID, title)
	}
	return found[0]
}

// TestDashboardJoins evaluates, with promtool, the panels that set the operator's series
// against the sidecars' (plan against use, load against capacity, observed against target):
// a join that matches nothing, or more than one series on a side, shows an empty panel or an
// error in Grafana, and parsing alone finds neither. The input holds two operator replicas
// (a former leader keeps its series) and two tenants on one node; every number is one the
// series make by hand.
func TestDashboardJoins(t *testing.T) {
	d := readDashboard(t)
	const op = `job="t-cacheqos-operator-metrics", namespace="cacheqos-system", cluster="cache-platform/shared"`
	const sc = `job="shared-sidecars", namespace="cache-platform", instance="10.0.0.5:9400", node="n1"`
	series := map[string]string{
		`cacheqos_operator_tenant_allocated_bytes{` + op + `, instance="a", tenant="t/web", node="n1"}`:                        "600x20",
		`cacheqos_operator_tenant_allocated_bytes{` + op + `, instance="a", tenant="t/api", node="n1"}`:                        "200x20",
		`cacheqos_operator_tenant_objective_target{` + op + `, instance="a", tenant="t/web", objective="hit_ratio"}`:           "0.8x20",
		`cacheqos_operator_tenant_objective_target{` + op + `, instance="a", tenant="t/api", objective="latency_p99_seconds"}`: "0.002x20",
		`cacheqos_operator_tenant_objective_observed{` + op + `, instance="a", tenant="t/web", objective="hit_ratio"}`:         "0.75x20",
		`cacheqos_operator_tenant_slo_met{` + op + `, instance="a", tenant="t/web"}`:                                           "0x20",
		`cacheqos_operator_tenant_slo_met{` + op + `, instance="a", tenant="t/api"}`:                                           "1x20",
		`cacheqos_sidecar_requests_total{` + sc + `, tenant="t/web", class="read"}`:                                            "0+3000x20",
		`cacheqos_sidecar_requests_total{` + sc + `, tenant="t/api", class="write"}`:                                           "0+1200x20",
		`cacheqos_sidecar_bytes_in_total{` + sc + `, tenant="t/web"}`:                                                          "0+24000x20",
		`cacheqos_sidecar_bytes_out_total{` + sc + `, tenant="t/web"}`:                                                         "0+12000x20",
		`cacheqos_sidecar_hits_total{` + sc + `, tenant="t/web"}`:                                                              "0+2250x20",
		`cacheqos_sidecar_misses_total{` + sc + `, tenant="t/web"}`:                                                            "0+750x20",
	}
	for _, instance := range []string{"a", "b"} {
		series[`cacheqos_operator_node_memory_capacity_bytes{`+op+`, instance="`+instance+`", node="n1"}`] = "1000x20"
		series[`cacheqos_operator_node_ops_capacity_per_second{`+op+`, instance="`+instance+`", node="n1"}`] = "100x20"
		series[`cacheqos_operator_node_bandwidth_capacity_bytes_per_second{`+op+`, instance="`+instance+`", node="n1"}`] = "1000x20"
	}
	type sample struct {
		Labels string  `json:"labels"`
		Value  float64 `json:"value"`
	}
	web, api, n1 := `{tenant="t/web"}`, `{tenant="t/api"}`, `{node="n1"}`
	cases := []struct {
		panel, refID string
		want         []sample
	}{
		{"Hit ratio per tenant vs target", "A", []sample{{web, 0.75}}},
		{"Hit ratio per tenant vs target", "B", []sample{{web, 0.8}}},
		{"Objectives: target vs observed", "A", []sample{{`{objective="hit_ratio", tenant="t/web"}`, 0.8}, {`{objective="latency_p99_seconds", tenant="t/api"}`, 0.002}}},
		{"Objectives: target vs observed", "B", []sample{{`{objective="hit_ratio", tenant="t/web"}`, 0.75}}},
		{"Objectives: target vs observed", "C", []sample{{`{objective="hit_ratio", tenant="t/web"}`, 0}, {`{objective="latency_p99_seconds", tenant="t/api"}`, 1}}},
		{"Memory: allocated vs used", "A", []sample{{web, 600}, {api, 200}}},
		{"Latency percentiles", "E", []sample{{`{objective="latency_p99_seconds", tenant="t/api"}`, 0.002}}},
		{"Memory per node: capacity, allocated, used", "A", []sample{{n1, 1000}}},
		{"Memory per node: capacity, allocated, used", "B", []sample{{n1, 800}}},
		{"Operations per node vs capacity", "A", []sample{{n1, 70}}},
		{"Operations per node vs capacity", "B", []sample{{n1, 100}}},
		{"Bandwidth per node vs capacity", "A", []sample{{n1, 600}}},
		{"Bandwidth per node vs capacity", "B", []sample{{n1, 1000}}},
		{"Node utilization", "A", []sample{{n1, 0.8}}},
		{"Node utilization", "B", []sample{{n1, 0.7}}},
		{"Node utilization", "C", []sample{{n1, 0.6}}},
	}
	var inputs []map[string]string
	for _, name := range sortedKeys(series) {
		inputs = append(inputs, map[string]string{"series": name, "values": series[name]})
	}
	var exprTests []any
	for _, c := range cases {
		exprTests = append(exprTests, map[string]any{
			"expr": instantiate(t, panelQuery(t, d, c.panel, c.refID)), "eval_time": "10m", "exp_samples": c.want,
		})
	}
	data, err := yaml.Marshal(map[string]any{
		"rule_files":          []string{},
		"evaluation_interval": "1m",
		"tests":               []any{map[string]any{"interval": "1m", "input_series": inputs, "promql_expr_test": exprTests}},
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dashboard.test.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(fixture.promtool, "test", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("promtool test rules: %v\n%s", err, out)
	}
}
