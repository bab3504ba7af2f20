// Package opmetrics holds the operator's own metrics, registered with controller-runtime's
// registry so the manager's metrics endpoint serves them. The names the operator's alert
// expressions read come from promquery; the per-tenant and per-node gauges the dashboard
// compares with the sidecars' series are named here. docs/metrics.md lists them all.
package opmetrics

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/internal/promquery"
)

// LabelObjective names a tenant's objective on the objective gauges.
const LabelObjective = "objective"

// Objective label values: the kind of a tenant's objective and the unit of its target and
// observed value.
const (
	ObjectiveHitRatio       = "hit_ratio"            // a ratio in (0, 1]
	ObjectiveLatencyMean    = "latency_mean_seconds" // seconds
	ObjectiveLatencyP99     = "latency_p99_seconds"  // seconds
	ObjectiveMaxDegradation = "max_degradation"      // latency over the fair-share latency
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
	// TenantObjectiveTarget is an admitted tenant's objective target.
	TenantObjectiveTarget = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cacheqos_operator_tenant_objective_target",
		Help: "Target of the tenant's objective, in the unit the objective label names (hit_ratio: a ratio, latency_*_seconds: seconds, max_degradation: a factor).",
	}, []string{promquery.LabelCluster, promquery.LabelTenant, LabelObjective})
	// TenantObjectiveObserved is the value the last judgement of a tenant's objective observed.
	TenantObjectiveObserved = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cacheqos_operator_tenant_objective_observed",
		Help: "Observed value of the tenant's objective the operator last judged it by, in the target's unit; absent while nothing was observed.",
	}, []string{promquery.LabelCluster, promquery.LabelTenant, LabelObjective})
	// TenantAllocatedBytes is the memory the plan in force gives each partition of a tenant.
	TenantAllocatedBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cacheqos_operator_tenant_allocated_bytes",
		Help: "Memory the CacheCluster's plan gives the tenant's partition on the node.",
	}, []string{promquery.LabelCluster, promquery.LabelTenant, promquery.LabelNode})
	// NodeMemoryCapacity is the memory of a node that tenant partitions share.
	NodeMemoryCapacity = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cacheqos_operator_node_memory_capacity_bytes",
		Help: "Memory of the node that the CacheCluster's tenant partitions share: spec.capacity.memory less the headroom.",
	}, []string{promquery.LabelCluster, promquery.LabelNode})
	// NodeBandwidthCapacity is a node's network budget for cache traffic.
	NodeBandwidthCapacity = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cacheqos_operator_node_bandwidth_capacity_bytes_per_second",
		Help: "Network budget of the node for the CacheCluster's traffic (spec.capacity.bandwidth).",
	}, []string{promquery.LabelCluster, promquery.LabelNode})
	// NodeOpsCapacity is how many requests per second a node serves at acceptable latency.
	NodeOpsCapacity = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cacheqos_operator_node_ops_capacity_per_second",
		Help: "Requests per second the node serves for the CacheCluster at acceptable latency (spec.capacity.opsPerSecond).",
	}, []string{promquery.LabelCluster, promquery.LabelNode})
	// ReconcileErrors counts failed reconciles and allocations.
	ReconcileErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: promquery.OperatorReconcileErrors,
		Help: "Reconciles and allocations that returned an error, by controller.",
	}, []string{promquery.LabelController})
	// UndecodableObjects counts stored objects a list left out because the Go types cannot
	// hold them (see v1alpha1.SetUndecodableHandler).
	UndecodableObjects = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cacheqos_operator_undecodable_objects_total",
		Help: "Stored cacheqos objects left out of a list because they do not decode (each list that meets one counts it again), by kind.",
	}, []string{LabelKind})
)

// LabelKind is the kind of a cacheqos object.
const LabelKind = "kind"

// SolverStatuses are the values of the status label of SolverStatus.
var SolverStatuses = []string{
	v1.SolverStatusOptimal, v1.SolverStatusFeasible, v1.SolverStatusInfeasible,
	v1.SolverStatusFallback, v1.SolverStatusNotUsed,
}

func init() {
	crmetrics.Registry.MustRegister(PlanDuration, SolverStatus, PlanObjective, TenantsMeetingSLO, TenantSLOMet,
		TenantObjectiveTarget, TenantObjectiveObserved, TenantAllocatedBytes,
		NodeMemoryCapacity, NodeBandwidthCapacity, NodeOpsCapacity, ReconcileErrors, UndecodableObjects)
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
	for _, vec := range clusterGauges() {
		vec.DeletePartialMatch(match)
	}
}

// clusterGauges are the gauge vectors labelled by cluster.
func clusterGauges() []*prometheus.GaugeVec {
	return []*prometheus.GaugeVec{
		SolverStatus, PlanObjective, TenantsMeetingSLO, TenantSLOMet, TenantObjectiveTarget, TenantObjectiveObserved,
		TenantAllocatedBytes, NodeMemoryCapacity, NodeBandwidthCapacity, NodeOpsCapacity,
	}
}

// Objective names a tenant's objective (an Objective* value) and returns its target in the
// unit the name says; ok is false for an objective without a valid target.
func Objective(o *v1.Objective) (name string, target float64, ok bool) {
	var err error
	switch {
	case o.HitRatio != nil:
		name = ObjectiveHitRatio
		target, err = o.HitRatio.Target()
	case o.Latency != nil:
		name, target = ObjectiveLatencyMean, o.Latency.Target.Seconds()
		if o.Latency.Statistic == v1.LatencyP99 {
			name = ObjectiveLatencyP99
		}
	case o.MaxDegradation != nil:
		name = ObjectiveMaxDegradation
		target, err = o.MaxDegradation.Target()
	default:
		return "", 0, false
	}
	return name, target, err == nil
}

// TenantAllocation is what the operator publishes about one admitted tenant.
type TenantAllocation struct {
	// ID is the tenant's ID (<namespace>/<name>).
	ID        string
	Objective *v1.Objective
	// MemoryBytes maps nodes to the memory of the tenant's partition there.
	MemoryBytes map[string]int64
}

// PublishAllocation exports a cluster's node capacities and its admitted tenants'
// objective targets and partition sizes, and deletes the cluster's series of nodes,
// tenants, partitions and objectives no longer among them, including the SLO-met and
// observed series of tenants that left, so no dashboard shows what is gone.
func PublishAllocation(cluster string, capacity *v1.NodeCapacity, nodes []string, tenants []TenantAllocation) {
	inCluster := map[string]bool{}
	for _, n := range nodes {
		inCluster[n] = true
		NodeMemoryCapacity.WithLabelValues(cluster, n).Set(float64(capacity.PartitionableMemory()))
		NodeBandwidthCapacity.WithLabelValues(cluster, n).Set(float64(capacity.Bandwidth.Value()))
		NodeOpsCapacity.WithLabelValues(cluster, n).Set(float64(capacity.OpsPerSecond))
	}
	// objectives maps every tenant to its objective's name ("" without a valid target).
	objectives := map[string]string{}
	partitions := map[[2]string]bool{}
	for _, t := range tenants {
		name, target, ok := Objective(t.Objective)
		objectives[t.ID] = name
		if ok {
			TenantObjectiveTarget.WithLabelValues(cluster, t.ID, name).Set(target)
		}
		for node, bytes := range t.MemoryBytes {
			if bytes > 0 {
				partitions[[2]string{t.ID, node}] = true
				TenantAllocatedBytes.WithLabelValues(cluster, t.ID, node).Set(float64(bytes))
			}
		}
	}
	node := func(l prometheus.Labels) bool { return inCluster[l[promquery.LabelNode]] }
	tenant := func(l prometheus.Labels) bool { _, ok := objectives[l[promquery.LabelTenant]]; return ok }
	objective := func(l prometheus.Labels) bool { return objectives[l[promquery.LabelTenant]] == l[LabelObjective] }
	deleteStale(NodeMemoryCapacity, cluster, node)
	deleteStale(NodeBandwidthCapacity, cluster, node)
	deleteStale(NodeOpsCapacity, cluster, node)
	deleteStale(TenantSLOMet, cluster, tenant)
	deleteStale(TenantObjectiveTarget, cluster, objective)
	deleteStale(TenantObjectiveObserved, cluster, objective)
	deleteStale(TenantAllocatedBytes, cluster, func(l prometheus.Labels) bool {
		return partitions[[2]string{l[promquery.LabelTenant], l[promquery.LabelNode]}]
	})
}

// SetTenantObserved exports the value a judgement of a tenant's objective observed; ok
// false (nothing observed) removes it.
func SetTenantObserved(cluster, tenant string, o *v1.Objective, value float64, ok bool) {
	name, _, valid := Objective(o)
	if !valid {
		return
	}
	if !ok {
		TenantObjectiveObserved.DeleteLabelValues(cluster, tenant, name)
		return
	}
	TenantObjectiveObserved.WithLabelValues(cluster, tenant, name).Set(value)
}

// deleteStale deletes the series of cluster in vec that keep rejects. The series are read
// back from the vector itself rather than from a record kept beside it, so nothing set
// earlier can escape.
func deleteStale(vec *prometheus.GaugeVec, cluster string, keep func(prometheus.Labels) bool) {
	metrics := make(chan prometheus.Metric)
	go func() {
		vec.Collect(metrics)
		close(metrics)
	}()
	var stale []prometheus.Labels
	for m := range metrics {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			// A gauge's Write cannot fail; a series that cannot be read cannot be judged.
			continue
		}
		labels := prometheus.Labels{}
		for _, lp := range pb.GetLabel() {
			labels[lp.GetName()] = lp.GetValue()
		}
		if labels[promquery.LabelCluster] == cluster && !keep(labels) {
			stale = append(stale, labels)
		}
	}
	// Deleted only after Collect finished: it holds the vector's lock while it sends.
	for _, labels := range stale {
		vec.Delete(labels)
	}
}

// CountError counts err, when not nil, against controller.
func CountError(controller string, err error) {
	if err != nil {
		ReconcileErrors.WithLabelValues(controller).Inc()
	}
}
