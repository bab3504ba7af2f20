package opmetrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
)

func TestObjective(t *testing.T) {
	cases := []struct {
		name       string
		objective  v1.Objective
		wantName   string
		wantTarget float64
		wantOK     bool
	}{
		{"hit ratio", v1.Objective{HitRatio: &v1.HitRatioObjective{Ratio: "0.95"}}, ObjectiveHitRatio, 0.95, true},
		{"mean latency by default", v1.Objective{Latency: &v1.LatencyObjective{Target: metav1.Duration{Duration: 800 * time.Microsecond}}},
			ObjectiveLatencyMean, 0.0008, true},
		{"mean latency", v1.Objective{Latency: &v1.LatencyObjective{Target: metav1.Duration{Duration: time.Millisecond}, Statistic: v1.LatencyMean}},
			ObjectiveLatencyMean, 0.001, true},
		{"p99 latency", v1.Objective{Latency: &v1.LatencyObjective{Target: metav1.Duration{Duration: 2 * time.Millisecond}, Statistic: v1.LatencyP99}},
			ObjectiveLatencyP99, 0.002, true},
		{"degradation", v1.Objective{MaxDegradation: &v1.MaxDegradationObjective{Factor: "1.05"}}, ObjectiveMaxDegradation, 1.05, true},
		{"malformed ratio", v1.Objective{HitRatio: &v1.HitRatioObjective{Ratio: "1.5"}}, ObjectiveHitRatio, 0, false},
		{"none", v1.Objective{}, "", 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			name, target, ok := Objective(&c.objective)
			if name != c.wantName || ok != c.wantOK || (ok && target != c.wantTarget) {
				t.Errorf("Objective = %q, %v, %v; want %q, %v, %v", name, target, ok, c.wantName, c.wantTarget, c.wantOK)
			}
		})
	}
}

// expect compares every series of c with the exposition text want.
func expect(t *testing.T, want string, c prometheus.Collector) {
	t.Helper()
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// TestPublishAllocation publishes two allocations of one cluster and a judgement, and checks
// the series after each: the second allocation drops a node, a tenant and a partition and
// changes a tenant's objective, and their series go; another cluster's stay.
func TestPublishAllocation(t *testing.T) {
	capacity := &v1.NodeCapacity{Memory: resource.MustParse("1000"), Bandwidth: resource.MustParse("2M"), OpsPerSecond: 300, HeadroomPercent: ptr.To[int32](10)}
	hitRatio := &v1.Objective{HitRatio: &v1.HitRatioObjective{Ratio: "0.9"}}
	p99 := &v1.Objective{Latency: &v1.LatencyObjective{Target: metav1.Duration{Duration: 3 * time.Millisecond}, Statistic: v1.LatencyP99}}
	t.Cleanup(func() { ForgetCluster("ns/a"); ForgetCluster("ns/b") })

	PublishAllocation("ns/b", capacity, []string{"n9"}, []TenantAllocation{{ID: "t/other", Objective: hitRatio, MemoryBytes: map[string]int64{"n9": 5}}})
	PublishAllocation("ns/a", capacity, []string{"n1", "n2"}, []TenantAllocation{
		{ID: "t/web", Objective: hitRatio, MemoryBytes: map[string]int64{"n1": 400, "n2": 300}},
		{ID: "t/api", Objective: p99, MemoryBytes: map[string]int64{"n2": 200, "n1": 0}},
	})
	SetTenantObserved("ns/a", "t/web", hitRatio, 0.93, true)
	SetTenantObserved("ns/a", "t/api", p99, 0.0025, true)
	TenantSLOMet.WithLabelValues("ns/a", "t/api").Set(1)
	expect(t, `
# HELP cacheqos_operator_tenant_allocated_bytes Memory the CacheCluster's plan gives the tenant's partition on the node.
# TYPE cacheqos_operator_tenant_allocated_bytes gauge
cacheqos_operator_tenant_allocated_bytes{cluster="ns/a",node="n1",tenant="t/web"} 400
cacheqos_operator_tenant_allocated_bytes{cluster="ns/a",node="n2",tenant="t/api"} 200
cacheqos_operator_tenant_allocated_bytes{cluster="ns/a",node="n2",tenant="t/web"} 300
cacheqos_operator_tenant_allocated_bytes{cluster="ns/b",node="n9",tenant="t/other"} 5
`, TenantAllocatedBytes)
	expect(t, `
# HELP cacheqos_operator_tenant_objective_observed Observed value of the tenant's objective the operator last judged it by, in the target's unit; absent while nothing was observed.
# TYPE cacheqos_operator_tenant_objective_observed gauge
cacheqos_operator_tenant_objective_observed{cluster="ns/a",objective="hit_ratio",tenant="t/web"} 0.93
cacheqos_operator_tenant_objective_observed{cluster="ns/a",objective="latency_p99_seconds",tenant="t/api"} 0.0025
`, TenantObjectiveObserved)
	expect(t, `
# HELP cacheqos_operator_node_memory_capacity_bytes Memory of the node that the CacheCluster's tenant partitions share: spec.capacity.memory less the headroom.
# TYPE cacheqos_operator_node_memory_capacity_bytes gauge
cacheqos_operator_node_memory_capacity_bytes{cluster="ns/a",node="n1"} 900
cacheqos_operator_node_memory_capacity_bytes{cluster="ns/a",node="n2"} 900
cacheqos_operator_node_memory_capacity_bytes{cluster="ns/b",node="n9"} 900
`, NodeMemoryCapacity)

	// n2 leaves with web's partition there, api's objective becomes a hit ratio, and web's
	// next judgement observes nothing; then api leaves.
	PublishAllocation("ns/a", capacity, []string{"n1"}, []TenantAllocation{
		{ID: "t/web", Objective: hitRatio, MemoryBytes: map[string]int64{"n1": 500}},
		{ID: "t/api", Objective: hitRatio, MemoryBytes: map[string]int64{"n1": 100}},
	})
	SetTenantObserved("ns/a", "t/web", hitRatio, 0, false)
	expect(t, `
# HELP cacheqos_operator_tenant_objective_target Target of the tenant's objective, in the unit the objective label names (hit_ratio: a ratio, latency_*_seconds: seconds, max_degradation: a factor).
# TYPE cacheqos_operator_tenant_objective_target gauge
cacheqos_operator_tenant_objective_target{cluster="ns/a",objective="hit_ratio",tenant="t/api"} 0.9
cacheqos_operator_tenant_objective_target{cluster="ns/a",objective="hit_ratio",tenant="t/web"} 0.9
cacheqos_operator_tenant_objective_target{cluster="ns/b",objective="hit_ratio",tenant="t/other"} 0.9
`, TenantObjectiveTarget)
	expect(t, "", TenantObjectiveObserved)
	PublishAllocation("ns/a", capacity, []string{"n1"}, []TenantAllocation{{ID: "t/web", Objective: hitRatio, MemoryBytes: map[string]int64{"n1": 600}}})
	expect(t, `
# HELP cacheqos_operator_tenant_allocated_bytes Memory the CacheCluster's plan gives the tenant's partition on the node.
# TYPE cacheqos_operator_tenant_allocated_bytes gauge
cacheqos_operator_tenant_allocated_bytes{cluster="ns/a",node="n1",tenant="t/web"} 600
cacheqos_operator_tenant_allocated_bytes{cluster="ns/b",node="n9",tenant="t/other"} 5
`, TenantAllocatedBytes)
	expect(t, `
# HELP cacheqos_operator_node_ops_capacity_per_second Requests per second the node serves for the CacheCluster at acceptable latency (spec.capacity.opsPerSecond).
# TYPE cacheqos_operator_node_ops_capacity_per_second gauge
cacheqos_operator_node_ops_capacity_per_second{cluster="ns/a",node="n1"} 300
cacheqos_operator_node_ops_capacity_per_second{cluster="ns/b",node="n9"} 300
`, NodeOpsCapacity)
	expect(t, "", TenantSLOMet)

	ForgetCluster("ns/a")
	expect(t, `
# HELP cacheqos_operator_node_bandwidth_capacity_bytes_per_second Network budget of the node for the CacheCluster's traffic (spec.capacity.bandwidth).
# TYPE cacheqos_operator_node_bandwidth_capacity_bytes_per_second gauge
cacheqos_operator_node_bandwidth_capacity_bytes_per_second{cluster="ns/b",node="n9"} 2e+06
`, NodeBandwidthCapacity)
}
