package promquery

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// documentedMetric is one row of the tables in docs/metrics.md.
type documentedMetric struct {
	kind   string
	labels []string
}

// readMetricsDoc parses the "| `name` | type | labels | meaning |" rows of docs/metrics.md.
func readMetricsDoc(t *testing.T) map[string]documentedMetric {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\|\\s*`([a-z0-9_]+)`\\s*\\|\\s*([a-z]+)\\s*\\|([^|]*)\\|")
	docs := map[string]documentedMetric{}
	for _, line := range strings.Split(string(b), "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var labels []string
		for _, l := range strings.Split(m[3], ",") {
			if l = strings.TrimSpace(l); l != "" && l != "—" {
				labels = append(labels, l)
			}
		}
		docs[m[1]] = documentedMetric{kind: m[2], labels: labels}
	}
	if len(docs) == 0 {
		t.Fatal("docs/metrics.md has no metric table rows")
	}
	return docs
}

// allExpressions is every PromQL expression this package builds.
func allExpressions() []string {
	var exprs []string
	for _, s := range measureSteps(nodeSelector([]string{"node-a", "node.b"}), time.Minute) {
		exprs = append(exprs, s.expr)
	}
	for _, a := range Alerts(AlertScope{Namespace: "cache", Job: "shared-sidecars", Cluster: "cache/shared"}) {
		exprs = append(exprs, a.Expr)
	}
	return exprs
}

// TestQueriesUseDocumentedMetrics keeps the queries in step with docs/metrics.md: every sidecar
// metric a query reads is documented, counters are only read through rate(), and the labels
// the queries group by are documented for that metric (node is on every sidecar series, le on
// every histogram bucket). Operator metrics must be ones the operator exports, and up is
// Prometheus' own.
func TestQueriesUseDocumentedMetrics(t *testing.T) {
	docs := readMetricsDoc(t)
	name := regexp.MustCompile(`\b(cacheqos_[a-z0-9_]+|up)\b`)
	for _, expr := range allExpressions() {
		for _, loc := range name.FindAllStringIndex(expr, -1) {
			metric := expr[loc[0]:loc[1]]
			switch {
			case metric == "up":
				continue
			case strings.HasPrefix(metric, "cacheqos_operator_"):
				if !slices.Contains(OperatorMetricNames(), metric) {
					t.Errorf("%q uses %s, which the operator does not export", expr, metric)
				}
				continue
			}
			doc, documented := docs[metric]
			if !documented {
				base := regexp.MustCompile(`_(bucket|sum|count)$`).ReplaceAllString(metric, "")
				if d, ok := docs[base]; ok && d.kind == "histogram" {
					doc, documented = d, true
				}
			}
			if !documented {
				t.Errorf("%q uses %s, which docs/metrics.md does not list", expr, metric)
				continue
			}
			rated := strings.HasSuffix(expr[:loc[0]], "rate(")
			if (doc.kind == "counter" || doc.kind == "histogram") != rated {
				t.Errorf("%q reads %s (%s) %s rate()", expr, metric, doc.kind, map[bool]string{true: "through", false: "without"}[rated])
			}
		}
	}
	grouped := regexp.MustCompile(`by \(([^)]*)\) \((?:rate\()?(cacheqos_sidecar_[a-z_]+)`)
	checked := 0
	for _, expr := range allExpressions() {
		for _, m := range grouped.FindAllStringSubmatch(expr, -1) {
			checked++
			metric := regexp.MustCompile(`_(bucket|sum|count)$`).ReplaceAllString(m[2], "")
			if _, ok := docs[metric]; !ok {
				metric = m[2]
			}
			for _, l := range strings.Split(m[1], ",") {
				l = strings.TrimSpace(l)
				if l == LabelNode || (l == LabelLE && metric != m[2]) || slices.Contains(docs[metric].labels, l) {
					continue
				}
				t.Errorf("%q groups %s by %s, which docs/metrics.md does not list as its label", expr, m[2], l)
			}
		}
	}
	if checked < 10 {
		t.Fatalf("only %d grouped sidecar queries were checked; the pattern no longer matches the queries", checked)
	}
}

func TestNodeSelectorEscapes(t *testing.T) {
	got := nodeSelector([]string{"node.b", "node-a"})
	want := `{node=~"node-a|node\\.b"}`
	if got != want {
		t.Fatalf("nodeSelector = %s, want %s", got, want)
	}
}

func TestAlertsCoverEveryConcern(t *testing.T) {
	rules := Alerts(AlertScope{Namespace: "cache", Job: "shared-sidecars", Cluster: "cache/shared"})
	want := []string{"CacheQoSTenantSLOMissed", "CacheQoSTenantThrottled", "CacheQoSSolverDegraded", "CacheQoSSidecarDown"}
	var got []string
	for _, r := range rules {
		got = append(got, r.Name)
		if r.For <= 0 || r.Severity == "" || r.Summary == "" || r.Description == "" {
			t.Errorf("rule %s is incomplete: %+v", r.Name, r)
		}
		if !strings.Contains(r.Expr, `"cache/shared"`) && !strings.Contains(r.Expr, `job="shared-sidecars"`) {
			t.Errorf("rule %s does not select the cluster: %s", r.Name, r.Expr)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("rules %v, want %v", got, want)
	}
}
