// Package opmetrics holds the operator's own metrics, registered with controller-runtime's
// registry so the manager's metrics endpoint serves them. Names come from promquery, which
// the PrometheusRule's alert expressions use too.
package opmetrics

import (
	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/internal/promquery"
)

// Controller label values of ReconcileErrors.
const (
	ControllerCacheCluster = "cachecluster"
	ControllerTenantSLO    = "tenantslo"
	ControllerAllocation   = "allocation"
)

var (
	// PlanDuration observes whole allocations per cluster.
	PlanDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    promquery.OperatorPlanDuration,
		Help:    "Duration of one allocation of a CacheCluster: metrics, solve and writes.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
	}, []string{promquery.LabelCluster})
	// SolverStatus is 1 for the status of a cluster's last plan, 0 for the other statuses.
	SolverStatus = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: promquery.OperatorSolverStatus,
		Help: "1 for the solver status of the CacheCluster's last plan (Optimal, Feasible, Infeasible, Fallback, NotUsed), 0 for the others.",
	}, []string{promquery.LabelCluster, promquery.LabelStatus})
	// PlanObjective is the expected hits per second of a cluster's last plan.
	PlanObjective = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: promquery.OperatorPlanObjective,
		Help: "Expected hits per second over all tenants under the CacheCluster's last plan.",
	}, []string{promquery.LabelCluster})
	// TenantsMeetingSLO counts the tenants of a cluster whose SLOMet condition is True.
	TenantsMeetingSLO = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: promquery.OperatorTenantsMeetingSLO,
		Help: "Tenants of the CacheCluster whose observed objective meets its target.",
	}, []string{promquery.LabelCluster})
	// TenantSLOMet is 1 when a tenant meets its objective and 0 when it misses it.
	TenantSLOMet = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: promquery.OperatorTenantSLOMet,
		Help: "1 when the tenant's observed objective meets its target, 0 when it misses it; absent while it cannot be judged.",
	}, []string{promquery.LabelCluster, promquery.LabelTenant})
	// ReconcileErrors counts failed reconciles and allocations.
	ReconcileErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: promquery.OperatorReconcileErrors,
		Help: "Reconciles and allocations that returned an error, by controller.",
	}, []string{promquery.LabelController})
)

// SolverStatuses are the values of the status label of SolverStatus.
var SolverStatuses = []string{
	v1.SolverStatusOptimal, v1.SolverStatusFeasible, v1.SolverStatusInfeasible,
	v1.SolverStatusFallback, v1.SolverStatusNotUsed,
}

func init() {
	crmetrics.Registry.MustRegister(PlanDuration, SolverStatus, PlanObjective, TenantsMeetingSLO, TenantSLOMet, ReconcileErrors)
}

// SetSolverStatus sets cluster's status series: 1 for status, 0 for the others.
func SetSolverStatus(cluster, status string) {
	for _, s := range SolverStatuses {
		v := 0.0
		if s == status {
			v = 1
		}
		SolverStatus.WithLabelValues(cluster, s).Set(v)
	}
}

// ForgetCluster deletes every series of a deleted cluster.
func ForgetCluster(cluster string) {
	match := prometheus.Labels{promquery.LabelCluster: cluster}
	PlanDuration.DeletePartialMatch(match)
	SolverStatus.DeletePartialMatch(match)
	PlanObjective.DeletePartialMatch(match)
	TenantsMeetingSLO.DeletePartialMatch(match)
	TenantSLOMet.DeletePartialMatch(match)
}

// CountError counts err, when not nil, against controller.
func CountError(controller string, err error) {
	if err != nil {
		ReconcileErrors.WithLabelValues(controller).Inc()
	}
}
