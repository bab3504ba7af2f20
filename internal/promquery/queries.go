package promquery

// Every PromQL expression cacheqos evaluates or installs lives in this file, next to the metric
// names it uses, so that a test can check them against docs/metrics.md.

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Metrics the cache sidecar exports (docs/metrics.md). Every series carries LabelNode.
const (
	MetricRequests          = "cacheqos_sidecar_requests_total"
	MetricHits              = "cacheqos_sidecar_hits_total"
	MetricMisses            = "cacheqos_sidecar_misses_total"
	MetricBytesIn           = "cacheqos_sidecar_bytes_in_total"
	MetricBytesOut          = "cacheqos_sidecar_bytes_out_total"
	MetricRequestDuration   = "cacheqos_sidecar_request_duration_seconds"
	MetricThrottledRequests = "cacheqos_sidecar_throttled_requests_total"
	MetricMRCHitRatio       = "cacheqos_sidecar_mrc_hit_ratio"
	MetricMRCPredicted      = "cacheqos_sidecar_mrc_predicted_hit_ratio"
	MetricMRCAchieved       = "cacheqos_sidecar_mrc_achieved_hit_ratio"
	MetricMRCSampledReads   = "cacheqos_sidecar_mrc_sampled_accesses"
	MetricPlanGeneration    = "cacheqos_sidecar_plan_generation"
)

// Metrics the operator exports on its own /metrics endpoint (controller-runtime's registry).
const (
	// OperatorPlanDuration is a histogram of whole allocations (metrics, solve, writes), by cluster.
	OperatorPlanDuration = "cacheqos_operator_plan_duration_seconds"
	// OperatorSolverStatus is 1 for the solver status of a cluster's last plan and 0 for the others.
	OperatorSolverStatus = "cacheqos_operator_solver_status"
	// OperatorPlanObjective is the expected hits per second of a cluster's last plan.
	OperatorPlanObjective = "cacheqos_operator_plan_objective"
	// OperatorTenantsMeetingSLO counts a cluster's tenants whose SLOMet condition is True.
	OperatorTenantsMeetingSLO = "cacheqos_operator_tenants_meeting_slo"
	// OperatorTenantSLOMet is 1 when a tenant meets its objective, 0 when it misses it (absent
	// while it cannot be judged).
	OperatorTenantSLOMet = "cacheqos_operator_tenant_slo_met"
	// OperatorReconcileErrors counts failed reconciles and allocations, by controller.
	OperatorReconcileErrors = "cacheqos_operator_reconcile_errors_total"
)

// OperatorMetricNames lists every metric the operator exports.
func OperatorMetricNames() []string {
	return []string{
		OperatorPlanDuration, OperatorSolverStatus, OperatorPlanObjective,
		OperatorTenantsMeetingSLO, OperatorTenantSLOMet, OperatorReconcileErrors,
	}
}

// Label names.
const (
	LabelTenant     = "tenant"
	LabelNode       = "node"
	LabelSizeBytes  = "size_bytes"
	LabelLE         = "le"
	LabelCluster    = "cluster"
	LabelStatus     = "status"
	LabelController = "controller"
)

// FormatDuration formats d as a Prometheus duration: whole seconds when d is a whole number
// of seconds, else whole milliseconds (at least 1ms).
func FormatDuration(d time.Duration) string {
	if d >= time.Second && d%time.Second == 0 {
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return fmt.Sprintf("%dms", max(d.Milliseconds(), 1))
}

// nodeSelector is the label matcher selecting the series of the given nodes.
func nodeSelector(nodes []string) string {
	quoted := make([]string, len(nodes))
	for i, n := range nodes {
		quoted[i] = regexp.QuoteMeta(n)
	}
	slices.Sort(quoted)
	return fmt.Sprintf("{%s=~%s}", LabelNode, strconv.Quote(strings.Join(quoted, "|")))
}

// The allocator's queries. sel is nodeSelector's matcher, w the rate window.

func tenantNodeRate(metric, sel string, w time.Duration) string {
	return fmt.Sprintf("sum by (%s, %s) (rate(%s%s[%s]))", LabelTenant, LabelNode, metric, sel, FormatDuration(w))
}

func tenantRate(metric, sel string, w time.Duration) string {
	return fmt.Sprintf("sum by (%s) (rate(%s%s[%s]))", LabelTenant, metric, sel, FormatDuration(w))
}

func tenantLatencyBuckets(sel string, w time.Duration) string {
	return fmt.Sprintf("sum by (%s, %s) (rate(%s_bucket%s[%s]))", LabelTenant, LabelLE, MetricRequestDuration, sel, FormatDuration(w))
}

func tenantNodeCurve(sel string) string {
	return fmt.Sprintf("max by (%s, %s, %s) (%s%s)", LabelTenant, LabelNode, LabelSizeBytes, MetricMRCHitRatio, sel)
}

func tenantNodeGauge(metric, sel string) string {
	return fmt.Sprintf("max by (%s, %s) (%s%s)", LabelTenant, LabelNode, metric, sel)
}

// nodeSampleAge is, per node, how old the newest sample of the sidecar's always-present
// plan generation gauge is, computed by Prometheus so clock skew does not matter.
func nodeSampleAge(sel string) string {
	return fmt.Sprintf("time() - max by (%s) (timestamp(%s%s))", LabelNode, MetricPlanGeneration, sel)
}

// AlertScope identifies one CacheCluster's series in alert expressions.
type AlertScope struct {
	// Namespace and Job are the labels Prometheus puts on the scraped sidecar series (the
	// ServiceMonitor's Service namespace and name).
	Namespace, Job string
	// Cluster is the LabelCluster value of the operator's metrics ("<namespace>/<name>").
	Cluster string
}

// AlertRule is one Prometheus alerting rule.
type AlertRule struct {
	Name        string
	Expr        string
	For         time.Duration
	Severity    string
	Summary     string
	Description string
}

// ThrottledAlertRatio is the share of a tenant's requests that must wait for tokens before the
// throttling alert fires.
const ThrottledAlertRatio = 0.05

// Alerts returns the alerting rules of one CacheCluster: tenants missing their SLO, tenants
// throttled, plans that fell back from the solver or were infeasible, and sidecars down.
func Alerts(s AlertScope) []AlertRule {
	sidecars := fmt.Sprintf("{namespace=%s, job=%s}", strconv.Quote(s.Namespace), strconv.Quote(s.Job))
	cluster := fmt.Sprintf("%s=%s", LabelCluster, strconv.Quote(s.Cluster))
	return []AlertRule{
		{
			Name:        "CacheQoSTenantSLOMissed",
			Expr:        fmt.Sprintf("%s{%s} == 0", OperatorTenantSLOMet, cluster),
			For:         10 * time.Minute,
			Severity:    "warning",
			Summary:     "A cacheqos tenant misses its SLO",
			Description: "Tenant {{ $labels.tenant }} of CacheCluster " + s.Cluster + " has missed its objective for 10 minutes; see `kubectl get tenantslo` and the SLOMet condition for target vs observed.",
		},
		{
			Name: "CacheQoSTenantThrottled",
			Expr: fmt.Sprintf("sum by (%[1]s) (rate(%[2]s%[3]s[5m])) / sum by (%[1]s) (rate(%[4]s%[3]s[5m])) > %[5]s",
				LabelTenant, MetricThrottledRequests, sidecars, MetricRequests, strconv.FormatFloat(ThrottledAlertRatio, 'f', -1, 64)),
			For:         15 * time.Minute,
			Severity:    "info",
			Summary:     "A cacheqos tenant is being throttled",
			Description: "More than 5% of tenant {{ $labels.tenant }}'s requests on CacheCluster " + s.Cluster + " wait for its bandwidth or ops limit.",
		},
		{
			Name:        "CacheQoSSolverDegraded",
			Expr:        fmt.Sprintf("max by (%s, %s) (%s{%s, %s=~\"Fallback|Infeasible\"}) == 1", LabelCluster, LabelStatus, OperatorSolverStatus, cluster, LabelStatus),
			For:         15 * time.Minute,
			Severity:    "warning",
			Summary:     "cacheqos plans come from the greedy fallback or are infeasible",
			Description: "The allocator of CacheCluster " + s.Cluster + " has reported {{ $labels.status }} for 15 minutes; see status.lastPlan.message.",
		},
		{
			Name:        "CacheQoSSidecarDown",
			Expr:        fmt.Sprintf("up%s == 0", sidecars),
			For:         5 * time.Minute,
			Severity:    "critical",
			Summary:     "A cacheqos sidecar is not serving metrics",
			Description: "The sidecar {{ $labels.pod }} of CacheCluster " + s.Cluster + " has been unreachable for 5 minutes; its node's partitions are not served.",
		},
	}
}
