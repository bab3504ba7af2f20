package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
)

// monitoringTimeout bounds each wait on the monitoring stack: the operator regenerates the
// configuration, kubelet syncs the mounted Secret and ConfigMaps (every 10 s on the local
// cluster, every minute on kind), and the config reloader reloads Prometheus.
const monitoringTimeout = 3 * time.Minute

// exporterPort is where the test's target serves /metrics.
const exporterPort = 8080

// TestPrometheusDiscoversServiceMonitorsAndRules checks the monitoring stack of
// hack/monitoring on its own: a ServiceMonitor and a PrometheusRule in a fresh namespace,
// without any selector label, are picked up; the target is scraped and up, and both rules are
// loaded and evaluated. The target is the stack's config-reloader image, which serves its own
// metrics, so the test needs no image beyond the stack's.
func TestPrometheusDiscoversServiceMonitorsAndRules(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := newNamespace(t, "monitoring")
	monitoring := cluster.kube
	labels := map[string]string{"app": "exporter"}

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "exporter", Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:            "exporter",
			Image:           cluster.images["prometheus-config-reloader"],
			ImagePullPolicy: corev1.PullNever,
			// With nothing to watch, the reloader only serves /metrics and /healthz.
			Args:  []string{fmt.Sprintf("--listen-address=:%d", exporterPort)},
			Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: exporterPort}},
			ReadinessProbe: &corev1.Probe{
				ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
					Path: "/healthz", Port: intstr.FromString("metrics"),
				}},
				PeriodSeconds: 1,
			},
			SecurityContext: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true)},
			Resources:       smallResources("32Mi"),
		}}},
	}
	if _, err := cluster.client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	service := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "exporter", Labels: labels},
		Spec: corev1.ServiceSpec{
			Selector: labels,
			Ports:    []corev1.ServicePort{{Name: "metrics", Port: exporterPort, TargetPort: intstr.FromString("metrics")}},
		},
	}
	if _, err := cluster.client.CoreV1().Services(ns).Create(ctx, service, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	serviceMonitor := &monitoringv1.ServiceMonitor{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "exporter"},
		Spec: monitoringv1.ServiceMonitorSpec{
			Selector:  metav1.LabelSelector{MatchLabels: labels},
			Endpoints: []monitoringv1.Endpoint{{Port: "metrics", Path: "/metrics"}},
		},
	}
	// The alert fires as soon as the target is scraped, so its state shows evaluation, not
	// just loading; the recording rule's series shows the same through a query.
	upExpr := fmt.Sprintf(`up{namespace=%q, job="exporter"}`, ns)
	rule := &monitoringv1.PrometheusRule{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "exporter"},
		Spec: monitoringv1.PrometheusRuleSpec{Groups: []monitoringv1.RuleGroup{{
			Name: "e2e-exporter",
			Rules: []monitoringv1.Rule{
				{Record: "e2e:exporter_up:sum", Expr: intstr.FromString("sum by (namespace) (" + upExpr + ")")},
				{Alert: "E2EExporterScraped", Expr: intstr.FromString(upExpr + " == 1")},
			},
		}}},
	}
	for _, obj := range []ctrlclient.Object{serviceMonitor, rule} {
		if err := monitoring.Create(ctx, obj); err != nil {
			t.Fatalf("creating %T: %v", obj, err)
		}
	}

	waitTargetsUp(t, "serviceMonitor/"+ns+"/exporter/0", 1)
	waitRulesEvaluated(t, rule)
	waitFor(t, monitoringTimeout, "alert E2EExporterScraped firing", func() (bool, error) {
		groups, err := ruleGroups(ctx)
		for _, r := range rulesOf(groups, rule, "e2e-exporter") {
			if r.Name == "E2EExporterScraped" && r.State == "firing" {
				return true, nil
			}
		}
		return false, err
	})
	// The group evaluates its rules in order, so the recording rule has seen the target too.
	if values, err := queryVector(ctx, fmt.Sprintf("e2e:exporter_up:sum{namespace=%q}", ns)); err != nil || len(values) != 1 || values[0] != "1" {
		t.Errorf("e2e:exporter_up:sum = %v (error %v), want one sample of 1", values, err)
	}
}

// TestChartMonitoringIsLive checks what the product's chart ships for monitoring, as the suite
// installed it (ServiceMonitor and PrometheusRule enabled): Prometheus scrapes the operator
// through the chart's ServiceMonitor, and loads and evaluates every rule of the chart's
// PrometheusRule without error, which proves their PromQL against a real Prometheus. It is not
// parallel, and its file sorts before TestProduct's, so it runs before TestProduct uninstalls
// the chart.
func TestChartMonitoringIsLive(t *testing.T) {
	ctx := t.Context()
	monitoring := cluster.kube
	var monitors monitoringv1.ServiceMonitorList
	if err := monitoring.List(ctx, &monitors, ctrlclient.InNamespace(productNamespace)); err != nil {
		t.Fatal(err)
	}
	var rules monitoringv1.PrometheusRuleList
	if err := monitoring.List(ctx, &rules, ctrlclient.InNamespace(productNamespace)); err != nil {
		t.Fatal(err)
	}
	if len(monitors.Items) == 0 || len(rules.Items) == 0 {
		t.Fatalf("the chart in %s installed %d ServiceMonitors and %d PrometheusRules, want at least one of each",
			productNamespace, len(monitors.Items), len(rules.Items))
	}
	t.Cleanup(func() {
		if t.Failed() {
			printOperatorLog(t)
		}
	})
	for _, m := range monitors.Items {
		for i := range m.Spec.Endpoints {
			waitTargetsUp(t, fmt.Sprintf("serviceMonitor/%s/%s/%d", m.Namespace, m.Name, i), 1)
		}
	}
	for i := range rules.Items {
		waitRulesEvaluated(t, &rules.Items[i])
	}
}

// ---------------------------------------------------------------------------------------------
// helpers

// monitoringClient is a client for the monitoring.coreos.com kinds of the stack.
// prometheusAPI decodes the data of a Prometheus HTTP API answer into data. It goes through the
// API server's Service proxy, which reaches the in-cluster Prometheus wherever the client does.
func prometheusAPI(ctx context.Context, path string, params map[string]string, data any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	body, err := cluster.client.CoreV1().Services(monitoringNamespace).
		ProxyGet("http", prometheusService, fmt.Sprint(prometheusPort), path, params).DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	var answer struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	if answer.Status != "success" {
		return fmt.Errorf("GET %s: status %q: %s", path, answer.Status, answer.Error)
	}
	return json.Unmarshal(answer.Data, data)
}

type promTarget struct {
	ScrapePool string            `json:"scrapePool"`
	ScrapeURL  string            `json:"scrapeUrl"`
	Labels     map[string]string `json:"labels"`
	Health     string            `json:"health"`
	LastError  string            `json:"lastError"`
}

type promRuleGroup struct {
	Name  string     `json:"name"`
	File  string     `json:"file"`
	Rules []promRule `json:"rules"`
}

type promRule struct {
	Name           string    `json:"name"`
	Type           string    `json:"type"`
	Health         string    `json:"health"`
	LastError      string    `json:"lastError"`
	State          string    `json:"state"` // alerting rules: inactive, pending or firing
	LastEvaluation time.Time `json:"lastEvaluation"`
}

// waitTargetsUp waits until Prometheus has at least want targets in scrape pool pool, every
// one of them up.
func waitTargetsUp(t *testing.T, pool string, want int) {
	t.Helper()
	var last []promTarget
	var lastErr error
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("targets of %s at the end: %+v; last API error: %v", pool, last, lastErr)
		}
	})
	waitFor(t, monitoringTimeout, fmt.Sprintf("%d target(s) of %s up", want, pool), func() (bool, error) {
		var data struct {
			ActiveTargets []promTarget `json:"activeTargets"`
		}
		// Errors are retried: Prometheus restarts when another test scales it.
		lastErr = prometheusAPI(t.Context(), "/api/v1/targets", map[string]string{"state": "active", "scrapePool": pool}, &data)
		if lastErr != nil {
			return false, nil
		}
		last = data.ActiveTargets
		up := 0
		for _, target := range last {
			if target.ScrapePool == pool && target.Health == "up" {
				up++
			}
		}
		return len(last) >= want && up == len(last), nil
	})
}

// waitRulesEvaluated waits until Prometheus has loaded every group of rule and evaluated each
// of its rules at least once; a rule that fails to evaluate fails the test.
func waitRulesEvaluated(t *testing.T, rule *monitoringv1.PrometheusRule) {
	t.Helper()
	var lastErr error
	t.Cleanup(func() {
		if t.Failed() && lastErr != nil {
			t.Logf("last API error: %v", lastErr)
		}
	})
	waitFor(t, monitoringTimeout, fmt.Sprintf("rules of PrometheusRule %s/%s evaluated", rule.Namespace, rule.Name), func() (bool, error) {
		var groups []promRuleGroup
		if groups, lastErr = ruleGroups(t.Context()); lastErr != nil {
			return false, nil
		}
		for _, g := range rule.Spec.Groups {
			loaded := rulesOf(groups, rule, g.Name)
			if len(loaded) != len(g.Rules) {
				return false, nil
			}
			for _, r := range loaded {
				if r.Health == "err" {
					return false, fmt.Errorf("rule %s of group %s does not evaluate: %s", r.Name, g.Name, r.LastError)
				}
				if r.Health != "ok" || r.LastEvaluation.IsZero() {
					return false, nil
				}
			}
		}
		return true, nil
	})
}

func ruleGroups(ctx context.Context) ([]promRuleGroup, error) {
	var data struct {
		Groups []promRuleGroup `json:"groups"`
	}
	err := prometheusAPI(ctx, "/api/v1/rules", nil, &data)
	return data.Groups, err
}

// rulesOf returns the rules Prometheus loaded for group name of rule. The operator writes each
// PrometheusRule to a file named after its namespace and name, so the file tells apart groups
// of the same name from different objects.
func rulesOf(groups []promRuleGroup, rule *monitoringv1.PrometheusRule, name string) []promRule {
	file := rule.Namespace + "-" + rule.Name + "-"
	for _, g := range groups {
		if g.Name == name && strings.Contains(g.File, file) {
			return g.Rules
		}
	}
	return nil
}

// queryVector runs an instant query and returns the sample values of the resulting vector.
func queryVector(ctx context.Context, query string) ([]string, error) {
	var data struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Value [2]any `json:"value"` // [unix time, "value"]
		} `json:"result"`
	}
	if err := prometheusAPI(ctx, "/api/v1/query", map[string]string{"query": query}, &data); err != nil {
		return nil, err
	}
	if data.ResultType != "vector" {
		return nil, fmt.Errorf("query %s: result type %q, want vector", query, data.ResultType)
	}
	values := make([]string, 0, len(data.Result))
	for _, sample := range data.Result {
		values = append(values, fmt.Sprint(sample.Value[1]))
	}
	return values, nil
}

// printOperatorLog shows why the prometheus-operator may have skipped a ServiceMonitor or
// PrometheusRule: it logs every object it rejects.
func printOperatorLog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := tool(ctx, "kubectl", "-n", monitoringNamespace, "logs", "deployment/prometheus-operator", "--tail=30")
	if err != nil {
		t.Logf("prometheus-operator log: %v", err)
		return
	}
	t.Logf("prometheus-operator log:\n%s", out)
}
