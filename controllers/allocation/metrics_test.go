package allocation_test

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/internal/testenv"
)

// The operator's per-tenant and per-node gauges, as the dashboard reads them.
const (
	metricTarget      = "cacheqos_operator_tenant_objective_target"
	metricObserved    = "cacheqos_operator_tenant_objective_observed"
	metricAllocated   = "cacheqos_operator_tenant_allocated_bytes"
	metricMemoryCap   = "cacheqos_operator_node_memory_capacity_bytes"
	metricBandwidth   = "cacheqos_operator_node_bandwidth_capacity_bytes_per_second"
	metricOpsCapacity = "cacheqos_operator_node_ops_capacity_per_second"
	metricSLOMet      = "cacheqos_operator_tenant_slo_met"
)

// clusterSeries gathers controller-runtime's registry, as the operator's /metrics serves it,
// and returns the series of cluster: metric name -> the other labels ("k=v,k=v", sorted) ->
// value (a histogram's sample count).
func clusterSeries(t *testing.T, cluster string) map[string]map[string]float64 {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			inCluster := false
			for _, l := range m.GetLabel() {
				if l.GetName() == "cluster" {
					inCluster = l.GetValue() == cluster
					continue
				}
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			if !inCluster {
				continue
			}
			slices.Sort(labels)
			if out[f.GetName()] == nil {
				out[f.GetName()] = map[string]float64{}
			}
			v := m.GetGauge().GetValue()
			if h := m.GetHistogram(); h != nil {
				v = float64(h.GetSampleCount())
			}
			out[f.GetName()][strings.Join(labels, ",")] = v
		}
	}
	return out
}

// expectSeries compares one metric's series of a cluster with want (labels -> value).
func expectSeries(got map[string]map[string]float64, metric string, want map[string]float64) error {
	have := got[metric]
	if !maps.EqualFunc(have, want, func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }) {
		return fmt.Errorf("%s: %v, want %v", metric, have, want)
	}
	return nil
}

// allocatedInPlans is what cacheqos_operator_tenant_allocated_bytes must say: every
// partition of the cluster's CacheNodePlans.
func allocatedInPlans(ns string, nodes ...string) (map[string]float64, error) {
	plans, err := plansOf(ns, nodes...)
	if err != nil {
		return nil, err
	}
	want := map[string]float64{}
	for node, spec := range plans {
		for _, p := range spec.Partitions {
			want["node="+node+",tenant="+p.Tenant] = float64(p.Memory.Value())
		}
	}
	return want, nil
}

// TestOperatorMetricsFollowTheCluster checks the gauges the dashboard compares the sidecars'
// series with: every admitted tenant's objective target, the memory each partition of the
// plan in force holds, and every node's capacity; and that none outlives what it describes —
// an objective that changed kind, a tenant that left, a node that left, a deleted cluster.
// The cluster names no Prometheus, so plans come from the specs and nothing is observed.
func TestOperatorMetricsFollowTheCluster(t *testing.T) {
	cacheNS, teamNS := env.Namespace(t, "opm-cache"), env.Namespace(t, "opm-team")
	nodes := []string{"opm-a", "opm-b"}
	for _, name := range nodes {
		create(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": "opm"}}})
	}
	sidecarPod(t, cacheNS, "shared", "opm-a", "10.2.0.1")
	sidecarPod(t, cacheNS, "shared", "opm-b", "10.2.0.2")
	cluster := &v1.CacheCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: cacheNS, Name: "shared"},
		Spec: v1.CacheClusterSpec{
			Engine:       v1.EngineRedis,
			NodeSelector: map[string]v1.LabelValue{"pool": "opm"},
			Capacity: v1.NodeCapacity{Memory: resource.MustParse("2Gi"), Bandwidth: resource.MustParse("125M"), OpsPerSecond: 50000,
				HeadroomPercent: ptr.To[int32](25)},
			Allocation: v1.AllocationSettings{Interval: &metav1.Duration{Duration: 5 * time.Second}, SolverTimeLimit: &metav1.Duration{Duration: time.Second},
				Policy: v1.PolicyOptimal},
		},
	}
	create(t, cluster)
	key := cacheNS + "/shared"
	tenant := func(name string, o v1.Objective) *v1.TenantSLO {
		slo := &v1.TenantSLO{
			ObjectMeta: metav1.ObjectMeta{Namespace: teamNS, Name: name},
			Spec: v1.TenantSLOSpec{
				ClusterRef: v1.ClusterReference{Namespace: cacheNS, Name: "shared"},
				Objective:  o,
				Memory:     v1.MemoryRange{Min: ptr.To(resource.MustParse("256Mi"))},
			},
		}
		create(t, slo)
		return slo
	}
	tenant("web", v1.Objective{HitRatio: &v1.HitRatioObjective{Ratio: "0.8"}})
	api := tenant("api", v1.Objective{Latency: &v1.LatencyObjective{Target: metav1.Duration{Duration: 2 * time.Millisecond}, Statistic: v1.LatencyP99}})
	web, apiID := teamNS+"/web", teamNS+"/api"

	capacity := func(nodes ...string) (memory, bandwidth, ops map[string]float64) {
		memory, bandwidth, ops = map[string]float64{}, map[string]float64{}, map[string]float64{}
		for _, n := range nodes {
			memory["node="+n] = 1536 << 20 // 2Gi less 25% headroom
			bandwidth["node="+n] = 125e6
			ops["node="+n] = 50000
		}
		return memory, bandwidth, ops
	}
	check := func(targets map[string]float64, nodes ...string) func() error {
		return func() error {
			got := clusterSeries(t, key)
			allocated, err := allocatedInPlans(cacheNS, nodes...)
			if err != nil {
				return err
			}
			tenantsPlaced := map[string]bool{}
			for labels := range allocated {
				tenantsPlaced[labels[strings.Index(labels, ",tenant=")+len(",tenant="):]] = true
			}
			if len(tenantsPlaced) != len(targets) {
				return fmt.Errorf("the plans hold %v, want every tenant of %v", tenantsPlaced, targets)
			}
			memory, bandwidth, ops := capacity(nodes...)
			return errors.Join(
				expectSeries(got, metricTarget, targets),
				expectSeries(got, metricAllocated, allocated),
				expectSeries(got, metricMemoryCap, memory),
				expectSeries(got, metricBandwidth, bandwidth),
				expectSeries(got, metricOpsCapacity, ops),
				// Without Prometheus nothing is observed, so nothing is judged.
				expectSeries(got, metricObserved, nil),
				expectSeries(got, metricSLOMet, nil),
			)
		}
	}

	testenv.Eventually(t, timeout, check(map[string]float64{
		"objective=hit_ratio,tenant=" + web:             0.8,
		"objective=latency_p99_seconds,tenant=" + apiID: 0.002,
	}, nodes...))

	// The objective changes kind: the latency target gives way to the degradation factor.
	if err := get(api, teamNS, "api"); err != nil {
		t.Fatal(err)
	}
	api.Spec.Objective = v1.Objective{MaxDegradation: &v1.MaxDegradationObjective{Factor: "1.5"}}
	if err := env.Client.Update(ctx(), api); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, timeout, check(map[string]float64{
		"objective=hit_ratio,tenant=" + web:         0.8,
		"objective=max_degradation,tenant=" + apiID: 1.5,
	}, nodes...))

	// A tenant and a node leave: their series go with them.
	if err := env.Client.Delete(ctx(), api); err != nil {
		t.Fatal(err)
	}
	leaving := &corev1.Node{}
	if err := get(leaving, "", "opm-b"); err != nil {
		t.Fatal(err)
	}
	leaving.Labels = map[string]string{"pool": "elsewhere"}
	if err := env.Client.Update(ctx(), leaving); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, timeout, check(map[string]float64{"objective=hit_ratio,tenant=" + web: 0.8}, "opm-a"))

	// The cluster is deleted: none of its series remain.
	if err := env.Client.Delete(ctx(), cluster); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, timeout, func() error {
		if got := clusterSeries(t, key); len(got) > 0 {
			return fmt.Errorf("series of the deleted cluster remain: %v", got)
		}
		return nil
	})
}

// checkObjectiveMetrics checks the objective, allocation and capacity gauges of
// TestAllocationWithPrometheus' cluster: targets from the TenantSLOs, observed hit ratios
// from the replayed traffic (web 0.9, batch 0.4), partitions as the plans hold them.
func checkObjectiveMetrics(t *testing.T, cacheNS, teamNS string) {
	t.Helper()
	web, batch := "objective=hit_ratio,tenant="+teamNS+"/web", "objective=hit_ratio,tenant="+teamNS+"/batch"
	testenv.Eventually(t, timeout, func() error {
		got := clusterSeries(t, cacheNS+"/shared")
		allocated, err := allocatedInPlans(cacheNS, "alloc-a", "alloc-b")
		if err != nil {
			return err
		}
		errs := []error{
			expectSeries(got, metricTarget, map[string]float64{web: 0.8, batch: 0.6}),
			expectSeries(got, metricAllocated, allocated),
			expectSeries(got, metricMemoryCap, map[string]float64{"node=alloc-a": 1 << 30, "node=alloc-b": 1 << 30}),
			expectSeries(got, metricBandwidth, map[string]float64{"node=alloc-a": 100e6, "node=alloc-b": 100e6}),
			expectSeries(got, metricOpsCapacity, map[string]float64{"node=alloc-a": 100000, "node=alloc-b": 100000}),
		}
		observed := got[metricObserved]
		if len(observed) != 2 || math.Abs(observed[web]-0.9) > 0.05 || math.Abs(observed[batch]-0.4) > 0.05 {
			errs = append(errs, fmt.Errorf("%s: %v, want web ~0.9 and batch ~0.4", metricObserved, observed))
		}
		return errors.Join(errs...)
	})
}
