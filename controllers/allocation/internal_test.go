package allocation

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/conditions"
	"github.com/cacheqos/cacheqos/controllers/internal/objects"
	"github.com/cacheqos/cacheqos/internal/allocator"
	"github.com/cacheqos/cacheqos/internal/allocator/planning"
	"github.com/cacheqos/cacheqos/internal/promquery"
)

func TestMergedCurve(t *testing.T) {
	local := []promquery.CurvePoint{{SizeBytes: 100, HitRatio: 0.2}, {SizeBytes: 200, HitRatio: 0.5}, {SizeBytes: 400, HitRatio: 0.8}}
	one := &promquery.TenantMeasurement{Nodes: map[string]*promquery.TenantNodeMeasurement{"a": {RequestsPerSecond: 10, Curve: local}}}
	got := mergedCurve(one, []string{"a"})
	want := []planning.MissRatioPoint{{SizeBytes: 100, MissRatio: 0.8}, {SizeBytes: 200, MissRatio: 0.5}, {SizeBytes: 400, MissRatio: 0.2}}
	if !curvesClose(got, want) {
		t.Errorf("one node: %v, want %v", got, want)
	}
	// Two nodes with half the requests each and the same local curve: a local partition of s
	// bytes sees half the keys, so the total size doing as well is 2s.
	two := &promquery.TenantMeasurement{Nodes: map[string]*promquery.TenantNodeMeasurement{
		"a": {RequestsPerSecond: 10, Curve: local}, "b": {RequestsPerSecond: 10, Curve: local},
	}}
	got = mergedCurve(two, []string{"a", "b"})
	want = []planning.MissRatioPoint{{SizeBytes: 200, MissRatio: 0.8}, {SizeBytes: 400, MissRatio: 0.5}, {SizeBytes: 800, MissRatio: 0.2}}
	if !curvesClose(got, want) {
		t.Errorf("two nodes: %v, want %v", got, want)
	}
	// Nodes outside the cluster and nodes without curves are ignored.
	if got := mergedCurve(two, []string{"c"}); got != nil {
		t.Errorf("no node in scope: %v", got)
	}
}

func curvesClose(a, b []planning.MissRatioPoint) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].SizeBytes != b[i].SizeBytes || math.Abs(a[i].MissRatio-b[i].MissRatio) > 1e-9 {
			return false
		}
	}
	return true
}

// TestPlansRoundTrip: an allocation written into plans reads back as the same allocation, so
// a restarted operator starts from exactly the plan in force.
func TestPlansRoundTrip(t *testing.T) {
	tenants := map[string]*v1.TenantSLO{
		"ns/web":   {Spec: v1.TenantSLOSpec{EvictionPolicy: v1.EvictionLFU}},
		"ns/batch": {},
	}
	alloc := view{
		"ns/web": {
			{Node: "a", MemoryBytes: 3 << 30, RoutingWeight: 750_000, BandwidthLimitBytesPerSecond: 5e6},
			{Node: "b", MemoryBytes: 1 << 30, RoutingWeight: 250_000, OpsLimitPerSecond: 100},
		},
		"ns/batch": {{Node: "b", MemoryBytes: 512 << 20, RoutingWeight: 1_000_000}},
	}
	hosts := map[string]string{"a": "10.0.0.1", "b": "10.0.0.2"}
	nodes := []string{"a", "b"}
	byNode := tenantsByNode(alloc, tenants, hosts, nodes)
	var plans []v1.CacheNodePlan
	for _, node := range nodes {
		p := v1.CacheNodePlan{Spec: v1.CacheNodePlanSpec{NodeName: node}}
		p.Spec.SetPartitions(byNode[node].partitions)
		p.Spec.SetRemoteTenants(byNode[node].remote)
		plans = append(plans, p)
	}
	if got := currentView(plans); !equality.Semantic.DeepEqual(got, alloc) {
		t.Errorf("read back %+v\nwant %+v", got, alloc)
	}
	web := plans[0].Spec.Partitions[0]
	if web.EvictionPolicy != v1.EvictionLFU || web.BandwidthLimit.Value() != 5e6 || web.OpsLimit != nil || len(web.Routes) != 2 || web.Routes[1].Address() != "10.0.0.2:7380" {
		t.Errorf("web's partition on a: %+v", web)
	}
	if batch := plans[1].Spec.Partitions[0]; batch.Tenant != "ns/batch" || batch.EvictionPolicy != v1.EvictionLRU {
		t.Errorf("batch's partition: %+v", batch)
	}
	// batch has no partition on a: a's plan lists it with its routes only, b lists no remote
	// tenant (it holds both).
	if remote := plans[0].Spec.RemoteTenants; len(remote) != 1 || remote[0].Tenant != "ns/batch" || len(remote[0].Routes) != 1 || remote[0].Routes[0].Address() != "10.0.0.2:7380" {
		t.Errorf("remote tenants of a: %+v, want ns/batch routed to b", remote)
	}
	if remote := plans[1].Spec.RemoteTenants; len(remote) != 0 {
		t.Errorf("remote tenants of b: %+v, want none", remote)
	}

	// A node whose sidecar has no address yet gets no route in other nodes' plans, and its own
	// plan routes to itself by node name (its sidecar serves that route locally); the
	// allocation still reads back exactly.
	// batch, held only by b, has no known route: a lists it routed to b by b's name, so a
	// client of a logs in and gets the sidecar's error for a peer it cannot reach.
	byNode = tenantsByNode(alloc, tenants, map[string]string{"a": "10.0.0.1"}, nodes)
	if remote := byNode["a"].remote; len(remote) != 1 || remote[0].Tenant != "ns/batch" || len(remote[0].Routes) != 1 ||
		remote[0].Routes[0] != (v1.TenantRoute{NodeName: "b", Host: "b", Port: objects.PeerPort, Weight: 1_000_000}) {
		t.Errorf("remote tenants of a without b's address: %+v, want ns/batch routed to b by name", remote)
	}
	if routes := byNode["a"].partitions[0].Routes; len(routes) != 1 || routes[0].NodeName != "a" {
		t.Errorf("routes of web on a without b's address: %+v, want only a", routes)
	}
	for _, p := range byNode["b"].partitions {
		want := map[string][]string{"ns/web": {"b", "a"}, "ns/batch": {"b"}}[p.Tenant]
		var got []string
		for _, r := range p.Routes {
			got = append(got, r.NodeName)
		}
		if own := p.Routes[0]; !slices.Equal(got, want) || own.Address() != "b:7380" {
			t.Errorf("routes of %s on b without b's address: %+v, want nodes %v, b first by name", p.Tenant, p.Routes, want)
		}
	}
	plans[1].Spec.SetPartitions(byNode["b"].partitions)
	plans[0].Spec.SetPartitions(byNode["a"].partitions)
	if got := currentView(plans); !equality.Semantic.DeepEqual(got, alloc) {
		t.Errorf("read back without b's address %+v\nwant %+v", got, alloc)
	}
}

// TestRoutesHoldOwnNode: whatever addresses are known and however many nodes hold a tenant,
// every partition's routes hold its own node once, first (the schema's rule), then the others
// sorted, within MaxRoutesPerTenant.
func TestRoutesHoldOwnNode(t *testing.T) {
	tenants := map[string]*v1.TenantSLO{"ns/wide": {}}
	for _, nodes := range []int{1, 3, v1.MaxRoutesPerTenant, v1.MaxRoutesPerTenant + 5} {
		for _, known := range []int{0, 1, nodes / 2, nodes} {
			var parts []planning.Partition
			hosts := map[string]string{}
			for i := range nodes {
				node := fmt.Sprintf("node-%04d", i)
				parts = append(parts, planning.Partition{Node: node, MemoryBytes: 64 << 20, RoutingWeight: int32(1 + i%7)})
				if i < known {
					hosts[node] = fmt.Sprintf("10.0.%d.%d", i/256, i%256)
				}
			}
			for node, planned := range tenantsByNode(view{"ns/wide": parts}, tenants, hosts, nil) {
				routes := planned.partitions[0].Routes
				own := 0
				for i, r := range routes {
					if r.NodeName == node {
						own++
					}
					if i > 1 && routes[i-1].NodeName >= r.NodeName {
						t.Fatalf("%d nodes, %d known: routes of %s after the first not sorted by node: %v", nodes, known, node, routes)
					}
				}
				if own != 1 || routes[0].NodeName != node || len(routes) > v1.MaxRoutesPerTenant {
					t.Fatalf("%d nodes, %d known: %s's routes hold it %d times, first %s, %d routes", nodes, known, node, own, routes[0].NodeName, len(routes))
				}
			}
		}
	}
}

func TestLateNodes(t *testing.T) {
	now := time.Unix(10_000, 0)
	plan := func(node string, gen, applied int64, written time.Time) v1.CacheNodePlan {
		p := v1.CacheNodePlan{Spec: v1.CacheNodePlanSpec{NodeName: node, PlanGeneration: gen}, Status: v1.CacheNodePlanStatus{AppliedGeneration: applied}}
		p.Annotations = map[string]string{objects.AnnotationPlanWrittenAt: written.UTC().Format(time.RFC3339)}
		return p
	}
	plans := []v1.CacheNodePlan{
		plan("applied", 3, 3, now.Add(-time.Hour)),
		plan("late", 3, 2, now.Add(-2*time.Minute)),
		plan("recent", 3, 2, now.Add(-30*time.Second)),
		plan("rewritten-now", 3, 3, now.Add(-time.Hour)),
	}
	generations := map[string]int64{"applied": 3, "late": 3, "recent": 3, "rewritten-now": 4}
	got := lateNodes(plans, generations, time.Minute, now)
	if len(got) != 1 || got[0] != "late" {
		t.Errorf("late nodes %v, want [late]", got)
	}
}

func TestAllocationOf(t *testing.T) {
	a := allocationOf([]planning.Partition{
		{Node: "a", MemoryBytes: 1 << 30, BandwidthLimitBytesPerSecond: 100, OpsLimitPerSecond: 10},
		{Node: "b", MemoryBytes: 1 << 30, BandwidthLimitBytesPerSecond: 50},
		{Node: "c", MemoryBytes: 0},
	}, map[string]int64{"a": 4, "b": 7})
	if a.Memory.Cmp(resource.MustParse("2Gi")) != 0 || a.NodeCount != 2 || len(a.Nodes) != 2 || a.PlanGeneration != 7 {
		t.Errorf("allocation %+v", a)
	}
	if a.BandwidthLimit == nil || a.BandwidthLimit.Value() != 150 {
		t.Errorf("bandwidth limit %v, want 150 (every partition limited)", a.BandwidthLimit)
	}
	if a.OpsLimit != nil {
		t.Errorf("ops limit %v, want none (one partition is unlimited)", *a.OpsLimit)
	}
}

func TestThrottledCondition(t *testing.T) {
	traffic := &promquery.TenantMeasurement{Nodes: map[string]*promquery.TenantNodeMeasurement{"a": {RequestsPerSecond: 100, BytesPerSecond: 1000}}}
	limited := func(ops, bytes int64) *v1.TenantAllocation {
		a := &v1.TenantAllocation{}
		if ops > 0 {
			a.OpsLimit = ptr.To(ops)
		}
		if bytes > 0 {
			a.BandwidthLimit = resource.NewQuantity(bytes, resource.DecimalSI)
		}
		return a
	}
	isolated := func(a *v1.TenantAllocation) *v1.TenantAllocation {
		a.Isolated = true
		return a
	}
	tests := []struct {
		name      string
		throttled float64
		alloc     *v1.TenantAllocation
		status    metav1.ConditionStatus
		reason    string
		isolated  bool // the message says the tenant is isolated
	}{
		{"nothing held", 0, limited(100, 0), metav1.ConditionFalse, v1.ReasonWithinLimits, false},
		{"noise", minThrottledRate / 2, limited(100, 0), metav1.ConditionFalse, v1.ReasonWithinLimits, false},
		{"ops limit in use", 5, limited(110, 0), metav1.ConditionTrue, v1.ReasonOpsLimited, false},
		{"bandwidth limit in use", 5, limited(0, 1100), metav1.ConditionTrue, v1.ReasonBandwidthLimited, false},
		{"both: the fuller one", 5, limited(1000, 1100), metav1.ConditionTrue, v1.ReasonBandwidthLimited, false},
		{"isolated elephant", 5, isolated(limited(110, 0)), metav1.ConditionTrue, v1.ReasonOpsLimited, true},
		{"isolated, nothing held", 0, isolated(limited(110, 0)), metav1.ConditionFalse, v1.ReasonWithinLimits, false},
	}
	for _, tt := range tests {
		m := *traffic
		m.ThrottledPerSecond = tt.throttled
		c := throttledCondition(&m, tt.alloc)
		if c.Status != tt.status || c.Reason != tt.reason || strings.Contains(c.Message, "isolated by policy lacs") != tt.isolated {
			t.Errorf("%s: %s/%s (%s), want %s/%s, isolation mentioned %v", tt.name, c.Status, c.Reason, c.Message, tt.status, tt.reason, tt.isolated)
		}
	}
}

func TestSLOCondition(t *testing.T) {
	hitRatio := &v1.TenantSLO{Spec: v1.TenantSLOSpec{Objective: v1.Objective{HitRatio: &v1.HitRatioObjective{Ratio: "0.9"}}}}
	latency := &v1.TenantSLO{Spec: v1.TenantSLOSpec{Objective: v1.Objective{Latency: &v1.LatencyObjective{Target: metav1.Duration{Duration: time.Millisecond}, Statistic: v1.LatencyMean}}}}
	measured := func(hits, misses, latencySum float64) *promquery.TenantMeasurement {
		return &promquery.TenantMeasurement{HitsPerSecond: hits, MissesPerSecond: misses, LatencySumPerSecond: latencySum, LatencyCountPerSecond: hits + misses}
	}
	tests := []struct {
		name     string
		tenant   *v1.TenantSLO
		m        *promquery.TenantMeasurement
		plan     *planning.TenantPlan
		status   metav1.ConditionStatus
		reason   string
		contains string
	}{
		{"no traffic", hitRatio, nil, nil, metav1.ConditionUnknown, v1.ReasonAwaitingMetrics, "no hit ratio observed over the last 30s; target 0.9"},
		{"met", hitRatio, measured(95, 5, 0), nil, metav1.ConditionTrue, v1.ReasonTargetMet, "observed hit ratio 0.95 meets target 0.9"},
		{"missed", hitRatio, measured(80, 20, 0), &planning.TenantPlan{Verdict: planning.VerdictMeetsSLO}, metav1.ConditionFalse, v1.ReasonTargetMissed, "observed hit ratio 0.8 misses target 0.9"},
		{"unreachable", hitRatio, measured(80, 20, 0), &planning.TenantPlan{Verdict: planning.VerdictInfeasible, Reason: "the curve tops out at 0.85"},
			metav1.ConditionFalse, v1.ReasonTargetUnreachable, "cannot meet it: the curve tops out at 0.85"},
		{"latency met", latency, measured(50, 50, 0.05), nil, metav1.ConditionTrue, v1.ReasonTargetMet, "observed mean latency 500µs meets target 1ms"},
		{"latency missed", latency, measured(50, 50, 0.2), nil, metav1.ConditionFalse, v1.ReasonTargetMissed, "observed mean latency 2ms misses target 1ms"},
	}
	for _, tt := range tests {
		j := judge(tt.tenant, tt.m, nil, 0)
		c := sloCondition(tt.tenant, j, tt.plan, "", 30*time.Second)
		if c.Status != tt.status || c.Reason != tt.reason || !strings.Contains(c.Message, tt.contains) {
			t.Errorf("%s: %s/%s %q, want %s/%s containing %q", tt.name, c.Status, c.Reason, c.Message, tt.status, tt.reason, tt.contains)
		}
	}
}

func TestSummarize(t *testing.T) {
	plan := func(s *planning.SolverReport) *planning.Plan {
		return &planning.Plan{Policy: "optimal", Solver: s, Summary: planning.Summary{ExpectedHitsPerSecond: 1234.56789, MovementBytes: 2 << 30}}
	}
	tests := []struct {
		name     string
		plan     *planning.Plan
		fallback string
		status   string
	}{
		{"heuristic policy", plan(nil), "", v1.SolverStatusNotUsed},
		{"proven optimal", plan(&planning.SolverReport{Status: "Optimal"}), "", v1.SolverStatusOptimal},
		{"time limit", plan(&planning.SolverReport{Status: "Feasible"}), "", v1.SolverStatusFeasible},
		{"greedy", plan(&planning.SolverReport{Status: "Greedy", Fallback: "OR-Tools unavailable"}), "OR-Tools unavailable", v1.SolverStatusFallback},
	}
	for _, tt := range tests {
		s := summarize(tt.plan, tt.fallback)
		if s.SolverStatus != tt.status || s.Objective != "1234.5679" || s.MovedMemory.Cmp(resource.MustParse("1Gi")) != 0 {
			t.Errorf("%s: %+v", tt.name, s)
		}
		if tt.fallback != "" && !strings.Contains(s.Message, tt.fallback) {
			t.Errorf("%s: message %q lacks the fallback reason", tt.name, s.Message)
		}
	}
}

// TestEveryTenantIsPlannedAPartition: the memory minimum handed to the allocator is never
// below the engine's smallest partition, so no admitted tenant is left without a partition to
// connect to.
func TestEveryTenantIsPlannedAPartition(t *testing.T) {
	mi := func(n int64) *resource.Quantity { return resource.NewQuantity(n<<20, resource.BinarySI) }
	tests := []struct {
		name     string
		engine   v1.Engine
		class    v1.TenantClass
		min, max *resource.Quantity
		wantMin  int64
		wantMax  int64
	}{
		{"best effort without a minimum", v1.EngineRedis, v1.ClassBestEffort, nil, mi(64), 4 << 20, 64 << 20},
		{"best effort's minimum is no guarantee", v1.EngineRedis, v1.ClassBestEffort, mi(16), nil, 4 << 20, 0},
		{"strict below the engine's minimum", v1.EngineMemcached, v1.ClassStrict, mi(2), nil, 8 << 20, 0},
		{"strict above it", v1.EngineRedis, v1.ClassStrict, mi(8), mi(32), 8 << 20, 32 << 20},
		{"a maximum below it is raised", v1.EngineRedis, v1.ClassBestEffort, nil, mi(1), 4 << 20, 4 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &v1.TenantSLO{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "t"}}
			s.Spec.Class = tt.class
			s.Spec.Memory = v1.MemoryRange{Min: tt.min, Max: tt.max}
			s.Spec.Objective.HitRatio = &v1.HitRatioObjective{Ratio: "0.5"}
			in := &inputs{cluster: &v1.CacheCluster{Spec: v1.CacheClusterSpec{Engine: tt.engine}}}
			pt := snapshotTenant(s, nil, in, &clusterState{})
			if pt.Memory.MinBytes != tt.wantMin || pt.Memory.MaxBytes != tt.wantMax {
				t.Errorf("memory range [%d, %d], want [%d, %d]", pt.Memory.MinBytes, pt.Memory.MaxBytes, tt.wantMin, tt.wantMax)
			}
		})
	}
}

// TestViewRaisesSliversToTheEngineMinimum: partitions are whole MiB, one the engine cannot run
// is raised to its minimum, and routing-only entries (no memory) stay as they are.
func TestViewRaisesSliversToTheEngineMinimum(t *testing.T) {
	plan := &planning.Plan{Tenants: []planning.TenantPlan{{ID: "ns/t", Partitions: []planning.Partition{
		{Node: "a", MemoryBytes: 100<<20 + 300<<10}, {Node: "b", MemoryBytes: 1 << 20}, {Node: "c"}, {Node: "d", MemoryBytes: 27<<20 - 100},
	}}}}
	got := viewOf(plan, 4<<20)["ns/t"]
	if got[0].MemoryBytes != 100<<20 || got[1].MemoryBytes != 4<<20 || got[2].MemoryBytes != 0 || got[3].MemoryBytes != 27<<20 {
		t.Errorf("partitions %+v", got)
	}
	if plan.Tenants[0].Partitions[1].MemoryBytes != 1<<20 {
		t.Error("viewOf changed the plan it was given")
	}
}

// TestViewWeighsRoutesByMemory: the routing weights of the partitions the view holds follow
// their memory after rounding and raising. The e2e case: a tenant planned 2, 2 and 4 MiB on
// three nodes (weights 25/25/50%) runs three 4 MiB redis partitions, which must route a third
// of the keys each. A draining partition (weight 0) and a routing-only entry keep theirs.
func TestViewWeighsRoutesByMemory(t *testing.T) {
	for _, tc := range []struct {
		name  string
		parts []planning.Partition
		want  []int32
	}{
		{"raised slivers", []planning.Partition{
			{Node: "a", MemoryBytes: 2 << 20, RoutingWeight: 250_000},
			{Node: "b", MemoryBytes: 2 << 20, RoutingWeight: 250_000},
			{Node: "c", MemoryBytes: 4 << 20, RoutingWeight: 500_000},
		}, []int32{333_333, 333_333, 333_333}},
		{"rounded", []planning.Partition{
			{Node: "a", MemoryBytes: 30<<20 + 400<<10, RoutingWeight: 751_000},
			{Node: "b", MemoryBytes: 10<<20 - 400<<10, RoutingWeight: 249_000},
		}, []int32{750_000, 250_000}},
		{"draining and routing-only", []planning.Partition{
			{Node: "a", MemoryBytes: 8 << 20, RoutingWeight: 1_000_000},
			{Node: "b", MemoryBytes: 8 << 20},
			{Node: "c", RoutingWeight: 7},
		}, []int32{1_000_000, 0, 7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := viewOf(&planning.Plan{Tenants: []planning.TenantPlan{{ID: "ns/t", Partitions: tc.parts}}}, 4<<20)["ns/t"]
			for i, p := range got {
				if p.RoutingWeight != tc.want[i] {
					t.Errorf("%s: %d bytes of memory weigh %d, want %d (all: %+v)", p.Node, p.MemoryBytes, p.RoutingWeight, tc.want[i], got)
				}
			}
		})
	}
}

// TestDegradation: a maxDegradation objective is judged for every tenant whose fair-share
// service the curve predicts, including one whose every read misses (a scan), where hit and
// miss latencies cannot be told apart.
func TestDegradation(t *testing.T) {
	measure := func(hits, misses float64, curve []promquery.CurvePoint) *promquery.TenantMeasurement {
		// Hits take 1 ms and misses 9 ms; the histogram's buckets hold them apart.
		return &promquery.TenantMeasurement{
			Nodes:         map[string]*promquery.TenantNodeMeasurement{"a": {RequestsPerSecond: hits + misses, Curve: curve}},
			HitsPerSecond: hits, MissesPerSecond: misses,
			LatencySumPerSecond: hits*0.001 + misses*0.009, LatencyCountPerSecond: hits + misses,
			LatencyBuckets: []promquery.Bucket{{UpperBound: 0.002, Count: hits}, {UpperBound: 0.01, Count: hits + misses}, {UpperBound: math.Inf(1), Count: hits + misses}},
		}
	}
	flat := []promquery.CurvePoint{{SizeBytes: 1 << 20, HitRatio: 0}, {SizeBytes: 1 << 30, HitRatio: 0}}
	rising := []promquery.CurvePoint{{SizeBytes: 1 << 20, HitRatio: 0.5}, {SizeBytes: 1 << 30, HitRatio: 0.9}}
	tests := []struct {
		name   string
		tm     *promquery.TenantMeasurement
		want   float64
		judged bool
	}{
		{"a scan: no share would serve it better", measure(0, 100, flat), 1, true},
		{"served as a fair share would", measure(90, 10, rising), 1, true},
		{"a fair share would hit more", measure(50, 50, rising), (0.5*0.001 + 0.5*0.009) / (0.9*0.001 + 0.1*0.009), true},
		{"no curve yet", measure(50, 50, nil), 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, judged := degradation(tt.tm, []string{"a"}, 1<<30)
			if judged != tt.judged || math.Abs(got-tt.want) > 0.05*tt.want {
				t.Errorf("degradation = %.3f (judged %v), want %.3f (judged %v)", got, judged, tt.want, tt.judged)
			}
		})
	}
}

// TestThrottledDemandIsRemembered: while a tenant's limits hold its requests back, its served
// rate is its limit; the snapshot keeps the demand measured before, so LACS does not release
// an elephant only to throttle it again.
func TestThrottledDemandIsRemembered(t *testing.T) {
	st := &clusterState{demand: map[string][]planning.NodeRate{}}
	rate := func(node string, req, bytes float64) planning.NodeRate {
		return planning.NodeRate{Node: node, RequestsPerSecond: req, BytesPerSecond: bytes}
	}
	steps := []struct {
		name      string
		measured  []planning.NodeRate
		throttled bool
		want      []planning.NodeRate
	}{
		{"flooding, not limited yet", []planning.NodeRate{rate("a", 9000, 40e6)}, false, []planning.NodeRate{rate("a", 9000, 40e6)}},
		{"held at its limit", []planning.NodeRate{rate("a", 480, 2e6)}, true, []planning.NodeRate{rate("a", 9000, 40e6)}},
		{"still held, on a new node too", []planning.NodeRate{rate("b", 100, 1e6), rate("a", 480, 2e6)}, true,
			[]planning.NodeRate{rate("a", 9000, 40e6), rate("b", 100, 1e6)}},
		{"calm: under its limit", []planning.NodeRate{rate("a", 50, 1e5)}, false, []planning.NodeRate{rate("a", 50, 1e5)}},
		{"held again: the calm rate is the demand now", []planning.NodeRate{rate("a", 480, 2e6)}, true, []planning.NodeRate{rate("a", 480, 2e6)}},
	}
	for _, s := range steps {
		if got := st.demandOf("ns/elephant", s.measured, s.throttled); !equality.Semantic.DeepEqual(got, s.want) {
			t.Errorf("%s: %+v, want %+v", s.name, got, s.want)
		}
	}
}

// TestRestoreIsolation: a restarted loop takes the isolated tenants and their demand from the
// statuses once, and later statuses do not override what it has learned since.
func TestRestoreIsolation(t *testing.T) {
	slo := func(name string, a *v1.TenantAllocation) *v1.TenantSLO {
		return &v1.TenantSLO{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name}, Status: v1.TenantSLOStatus{Allocation: a}}
	}
	demand := []v1.NodeTraffic{{NodeName: "a", OpsPerSecond: 9000, BytesPerSecond: resource.MustParse("40M")}}
	st := &clusterState{isolated: map[string]bool{}, demand: map[string][]planning.NodeRate{}}
	st.restore([]*v1.TenantSLO{
		slo("elephant", &v1.TenantAllocation{Isolated: true, Demand: demand}),
		slo("no-demand", &v1.TenantAllocation{Isolated: true}),
		slo("mouse", &v1.TenantAllocation{Demand: demand}),
		slo("new", nil),
	})
	wantIsolated := map[string]bool{"team/elephant": true, "team/no-demand": true}
	wantDemand := map[string][]planning.NodeRate{"team/elephant": {{Node: "a", RequestsPerSecond: 9000, BytesPerSecond: 40e6}}}
	if !equality.Semantic.DeepEqual(st.isolated, wantIsolated) || !equality.Semantic.DeepEqual(st.demand, wantDemand) {
		t.Fatalf("restored isolated %v demand %v, want %v and %v", st.isolated, st.demand, wantIsolated, wantDemand)
	}
	if got := trafficOf(wantDemand["team/elephant"]); !equality.Semantic.DeepEqual(got, demand) {
		t.Errorf("trafficOf(ratesOf(d)) = %+v, want %+v", got, demand)
	}
	st.isolated["team/elephant"] = false
	st.restore([]*v1.TenantSLO{slo("elephant", &v1.TenantAllocation{Isolated: true, Demand: demand})})
	if st.isolated["team/elephant"] {
		t.Error("a second restore overrode what the loop decided since")
	}
}

// unreachableAPI fails every Get, as a client does while the API server is unreachable: a
// fault envtest cannot produce on demand, hence this stand-in.
type unreachableAPI struct{ client.Client }

func (unreachableAPI) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return errors.New("dial tcp: connection refused")
}

// TestAllocationRetriesWhenTheClusterCannotBeRead: an error reading the cluster schedules the
// next attempt instead of dropping the cluster from the loop.
func TestAllocationRetriesWhenTheClusterCannotBeRead(t *testing.T) {
	l := New(unreachableAPI{}, unreachableAPI{}, nil, logr.Discard(), Options{})
	next, err := l.allocate(t.Context(), types.NamespacedName{Namespace: "ns", Name: "c"})
	if err == nil || next != retryAfterError {
		t.Errorf("allocate = %s, %v; want a retry after %s and the error", next, err, retryAfterError)
	}
}

// TestUnpackableMessages: each tenant of an unpackable set is told the others' minimums and
// placements and the nodes' memory, and whether the solver proved it or only found no packing.
func TestUnpackableMessages(t *testing.T) {
	snap := &planning.Snapshot{
		Nodes: []planning.Node{{Name: "n1", MemoryBytes: 1 << 30}, {Name: "n2", MemoryBytes: 1 << 30}, {Name: "n3", MemoryBytes: 1 << 30}},
		Tenants: []planning.Tenant{
			{ID: "a/one", Memory: planning.Memory{MinBytes: 700 << 20}, Spread: planning.Spread{MaxNodes: 1}},
			{ID: "b/two", Memory: planning.Memory{MinBytes: 1536 << 20}, Spread: planning.Spread{MinNodes: 2, MaxNodes: 2}},
			{ID: "c/any", Memory: planning.Memory{MinBytes: 4 << 20}},
		},
	}
	tests := []struct {
		name string
		err  *allocator.UnpackableError
		want map[string][]string
	}{
		{"none", nil, nil},
		{"proven", &allocator.UnpackableError{Tenants: []string{"a/one", "b/two", "c/any"}, Proven: true, Why: "proven by the solver"}, map[string][]string{
			"a/one": {"minimum of a/one (memory.min 700.0 MiB, on 1 node) cannot be placed beside those of b/two (memory.min 1.5 GiB, on 2 nodes) and c/any (memory.min 4.0 MiB, on 1 to 3 nodes) on 3 nodes of 1.0 GiB", "(proven by the solver)"},
			"b/two": {"b/two (memory.min 1.5 GiB, on 2 nodes) cannot be placed beside those of a/one", "c/any"},
			"c/any": {"beside those of a/one (memory.min 700.0 MiB, on 1 node) and b/two"},
		}},
		{"not proven", &allocator.UnpackableError{Tenants: []string{"a/one"}, Why: "the greedy packing failed and the solver found none in time (Unknown)"}, map[string][]string{
			"a/one": {"a/one (memory.min 700.0 MiB, on 1 node) could not be placed on its own on 3 nodes", "(the greedy packing failed and the solver found none in time (Unknown))"},
		}},
	}
	for _, tt := range tests {
		got := unpackableMessages(snap, tt.err)
		if len(got) != len(tt.want) {
			t.Errorf("%s: messages for %d tenants, want %d: %v", tt.name, len(got), len(tt.want), got)
		}
		for id, wants := range tt.want {
			for _, w := range wants {
				if !strings.Contains(got[id], w) {
					t.Errorf("%s: %s's message %q lacks %q", tt.name, id, got[id], w)
				}
			}
		}
	}
}

func TestCurveCondition(t *testing.T) {
	measured := func(c *promquery.CurveCheck) *promquery.TenantMeasurement {
		return &promquery.TenantMeasurement{Nodes: map[string]*promquery.TenantNodeMeasurement{"a": {CurveCheck: c}}}
	}
	tests := []struct {
		name   string
		tm     *promquery.TenantMeasurement
		status metav1.ConditionStatus
		reason string
		says   string // in the message
	}{
		{"not measured", nil, metav1.ConditionUnknown, v1.ReasonAwaitingMetrics, "no partition"},
		{"no curve exported", measured(nil), metav1.ConditionUnknown, v1.ReasonAwaitingMetrics, "no partition"},
		{"few samples", measured(&promquery.CurveCheck{Predicted: 0.9, Achieved: 0.2, SampledReads: 40}), metav1.ConditionUnknown, v1.ReasonTooFewSamples, "40 sampled reads"},
		{"matches", measured(&promquery.CurveCheck{Predicted: 0.80, Achieved: 0.77, SampledReads: 5000}), metav1.ConditionTrue, v1.ReasonCurveMatches, "predicts hit ratio 0.800"},
		{"optimistic curve", measured(&promquery.CurveCheck{Predicted: 0.80, Achieved: 0.64, SampledReads: 5000}), metav1.ConditionFalse, v1.ReasonCurveOff, "achieved 0.640 (difference -0.160"},
		{"pessimistic curve", measured(&promquery.CurveCheck{Predicted: 0.40, Achieved: 0.52, SampledReads: 5000}), metav1.ConditionFalse, v1.ReasonCurveOff, "difference +0.120"},
		// 150 reads at 0.5: three standard deviations are 0.122, so 0.1 is noise.
		{"within the noise of a small sample", measured(&promquery.CurveCheck{Predicted: 0.5, Achieved: 0.6, SampledReads: 150}), metav1.ConditionTrue, v1.ReasonCurveMatches, "tolerance 0.122"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := curveCondition(tt.tm)
			if c.Type != v1.ConditionCurveAccurate || c.Status != tt.status || c.Reason != tt.reason || !strings.Contains(c.Message, tt.says) {
				t.Errorf("%s %s/%s (%s), want %s/%s saying %q", c.Type, c.Status, c.Reason, c.Message, tt.status, tt.reason, tt.says)
			}
		})
	}
}

func TestCapRemoteTenants(t *testing.T) {
	remote := func(ids ...string) []v1.RemoteTenant {
		out := make([]v1.RemoteTenant, len(ids))
		for i, id := range ids {
			out[i] = v1.RemoteTenant{Tenant: id}
		}
		return out
	}
	tenantsOf := func(rs []v1.RemoteTenant) []string {
		out := make([]string, len(rs))
		for i, r := range rs {
			out[i] = r.Tenant
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		byNode  map[string][]v1.RemoteTenant
		limit   int
		want    map[string][]string
		message string
	}{{
		name:   "every list within the bound",
		byNode: map[string][]v1.RemoteTenant{"a": remote("ns/y", "ns/x"), "b": nil},
		limit:  2,
		want:   map[string][]string{"a": {"ns/y", "ns/x"}, "b": {}},
	}, {
		name:    "the first by tenant ID are kept",
		byNode:  map[string][]v1.RemoteTenant{"a": remote("ns/z", "ns/x", "ns/y"), "b": remote("ns/w", "ns/v"), "c": remote("ns/x")},
		limit:   1,
		want:    map[string][]string{"a": {"ns/x"}, "b": {"ns/v"}, "c": {"ns/x"}},
		message: "the plans of 2 nodes (a, b) can list at most 1 tenants without a partition there (the CacheNodePlan schema's bound) and leave out 3 tenants (ns/w, ns/y, ns/z)",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			byNode := map[string]*nodeTenants{}
			for node, rs := range tc.byNode {
				byNode[node] = &nodeTenants{remote: rs}
			}
			problems := capRemoteTenants(byNode, tc.limit)
			for node, want := range tc.want {
				if got := tenantsOf(byNode[node].remote); !slices.Equal(got, want) {
					t.Errorf("node %s lists %v, want %v", node, got, want)
				}
			}
			switch {
			case tc.message == "" && problems != nil:
				t.Errorf("problems %+v, want none", problems)
			case tc.message != "" && (len(problems) != 1 || problems[0].reason != conditions.ReasonTooManyRemoteTenants || !strings.HasPrefix(problems[0].message, tc.message)):
				t.Errorf("problems %+v, want one %s starting %q", problems, conditions.ReasonTooManyRemoteTenants, tc.message)
			}
		})
	}
}

// TestLatencyObjectiveWithoutHits: a tenant with a latency objective whose reads all miss
// (a loop larger than its partition) cannot split its own latency into hit and miss times. It
// takes the hit time from the cluster's other tenants and is planned strict for its objective;
// planned as best effort it would keep the smallest partition and never hit. Alone in the
// cluster it has no reference and stays best effort.
func TestLatencyObjectiveWithoutHits(t *testing.T) {
	// 80% hits at ~0.5 ms, 20% misses at ~3 ms.
	measured := &promquery.TenantMeasurement{
		HitsPerSecond: 80, MissesPerSecond: 20, LatencySumPerSecond: 0.1, LatencyCountPerSecond: 100,
		LatencyBuckets: []promquery.Bucket{{UpperBound: 0.0005}, {UpperBound: 0.001, Count: 80}, {UpperBound: 0.004, Count: 100}, {UpperBound: math.Inf(1), Count: 100}},
	}
	// Every read missed, at 4 ms.
	missing := &promquery.TenantMeasurement{
		MissesPerSecond: 50, LatencySumPerSecond: 0.2, LatencyCountPerSecond: 50,
		LatencyBuckets: []promquery.Bucket{{UpperBound: 0.004, Count: 50}, {UpperBound: math.Inf(1), Count: 50}},
	}
	slo := func(name string) *v1.TenantSLO {
		s := &v1.TenantSLO{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
		s.Spec.Class = v1.ClassStrict
		s.Spec.Objective.Latency = &v1.LatencyObjective{Target: metav1.Duration{Duration: 2 * time.Millisecond}}
		return s
	}
	for _, tt := range []struct {
		name     string
		admitted []*v1.TenantSLO
		measured map[string]*promquery.TenantMeasurement
		// reference: the loop tenant takes its hit time from the other tenant (false: alone,
		// it is planned as best effort).
		reference bool
	}{
		{"with a reference", []*v1.TenantSLO{slo("loop"), slo("web")}, map[string]*promquery.TenantMeasurement{"ns/loop": missing, "ns/web": measured}, true},
		{"alone", []*v1.TenantSLO{slo("loop")}, map[string]*promquery.TenantMeasurement{"ns/loop": missing}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &v1.CacheCluster{}
			c.Spec.Capacity.Memory, c.Spec.Capacity.Bandwidth, c.Spec.Capacity.OpsPerSecond = resource.MustParse("1Gi"), resource.MustParse("1G"), 100000
			in := &inputs{cluster: c, nodes: []string{"n1"}, admitted: tt.admitted}
			st := &clusterState{history: map[string][]planning.HitRatioPoint{}, isolated: map[string]bool{}, demand: map[string][]planning.NodeRate{}}
			snap := buildSnapshot(in, &promquery.Measurements{Tenants: tt.measured}, st)
			loop := snap.Tenants[0]
			if !tt.reference {
				if loop.Class != planning.ClassBestEffort || loop.Objective != nil {
					t.Errorf("alone: class %s, objective %+v; want best effort without one", loop.Class, loop.Objective)
				}
				return
			}
			if loop.Class != planning.ClassStrict || loop.Objective == nil || loop.Objective.LatencySeconds == nil {
				t.Fatalf("class %s, objective %+v; want strict with its latency objective", loop.Class, loop.Objective)
			}
			web := snap.Tenants[1].Observed.HitLatencySeconds
			if o := loop.Observed; web <= 0 || o.HitLatencySeconds != web || math.Abs(o.MissLatencySeconds-0.004) > 1e-9 {
				t.Errorf("hit %.6f s, miss %.6f s; want %.6f s (the other tenant's) and 0.004 s (its own mean)", o.HitLatencySeconds, o.MissLatencySeconds, web)
			}
			if err := snap.Validate(); err != nil {
				t.Errorf("the snapshot is not valid: %v", err)
			}
		})
	}
}

func TestWithinNoise(t *testing.T) {
	base := func() *v1.TenantObservation {
		return &v1.TenantObservation{ObjectiveValue: "0.8", HitRatio: "0.8", MeanLatency: &metav1.Duration{Duration: 200 * time.Microsecond},
			OpsPerSecond: 20, BytesPerSecond: resource.MustParse("10k")}
	}
	for _, tc := range []struct {
		name   string
		change func(o *v1.TenantObservation)
		want   bool
	}{
		{"the same", func(*v1.TenantObservation) {}, true},
		{"one request/s less of 20", func(o *v1.TenantObservation) { o.OpsPerSecond = 19 }, true},
		{"bytes 4% lower", func(o *v1.TenantObservation) { o.BytesPerSecond = resource.MustParse("9625") }, true},
		{"hit ratio 0.005 higher", func(o *v1.TenantObservation) { o.HitRatio, o.ObjectiveValue = "0.805", "0.805" }, true},
		{"latency 3% higher", func(o *v1.TenantObservation) { o.MeanLatency.Duration = 206 * time.Microsecond }, true},
		{"hit ratio 0.02 lower", func(o *v1.TenantObservation) { o.HitRatio, o.ObjectiveValue = "0.78", "0.78" }, false},
		{"rate 10% higher", func(o *v1.TenantObservation) { o.OpsPerSecond = 22 }, false},
		{"latency 10% higher", func(o *v1.TenantObservation) { o.MeanLatency.Duration = 220 * time.Microsecond }, false},
		{"latency no longer measured", func(o *v1.TenantObservation) { o.MeanLatency = nil }, false},
		{"an objective value of another kind", func(o *v1.TenantObservation) { o.ObjectiveValue = "1ms" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fresh := base()
			tc.change(fresh)
			if got := withinNoise(base(), fresh); got != tc.want {
				t.Errorf("withinNoise = %v, want %v", got, tc.want)
			}
		})
	}
	if !closeValues("1.02ms", "1ms") || closeValues("1.1ms", "1ms") || closeValues("", "0.5") {
		t.Error("closeValues: durations within 5% are close, 10% apart or empty against a value are not")
	}
	if withinNoise(nil, base()) {
		t.Error("withinNoise: nothing written yet is not within noise of an observation")
	}
}

// statusApplies counts the status applies sent through it; any other request fails.
// TestStatusHoldsComparesWithTheObject: a tenant status is to be applied when the object, as
// read, differs from it in a field the loop owns (whoever changed it), and not when only
// another manager's fields changed, even at a resourceVersion the loop never wrote.
func TestStatusHoldsComparesWithTheObject(t *testing.T) {
	written := metav1.NewTime(time.Date(2026, 11, 27, 5, 0, 0, 0, time.UTC))
	desired := func() tenantStatus {
		return tenantStatus{
			Allocation: &v1.TenantAllocation{Memory: resource.MustParse("128Mi"), NodeCount: 1, Decision: "Kept",
				Nodes: []v1.NodeAllocation{{NodeName: "a", Memory: resource.MustParse("128Mi")}}},
			Observed:          &v1.TenantObservation{Time: written, HitRatio: "0.9", OpsPerSecond: 20},
			PredictedHitRatio: "0.9",
			Conditions: []metav1.Condition{
				{Type: v1.ConditionSLOMet, Status: metav1.ConditionTrue, Reason: v1.ReasonTargetMet, Message: "met", LastTransitionTime: written},
				{Type: v1.ConditionAllocated, Status: metav1.ConditionTrue, Reason: "Kept", Message: "kept", LastTransitionTime: written},
			},
		}
	}
	// held is the tenant as the loop's own apply of desired left it, beside the reconciler's Ready.
	held := func() *v1.TenantSLO {
		d := desired()
		ready := metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: "PartitionsRunning", Message: "running", LastTransitionTime: written}
		return &v1.TenantSLO{
			ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "t", ResourceVersion: "7"},
			Status: v1.TenantSLOStatus{Conditions: append([]metav1.Condition{ready}, d.Conditions...),
				Allocation: d.Allocation, Observed: d.Observed, PredictedHitRatio: d.PredictedHitRatio},
		}
	}
	for _, tc := range []struct {
		name   string
		change func(tenant *v1.TenantSLO, st *tenantStatus)
		holds  bool
	}{
		{"nothing changed", func(*v1.TenantSLO, *tenantStatus) {}, true},
		{"another manager changed its own condition", func(tn *v1.TenantSLO, _ *tenantStatus) {
			tn.ResourceVersion = "8"
			tn.Status.Conditions[0].Message = "running on 2 nodes"
		}, true},
		{"the loop's times carry sub-second digits the status does not", func(_ *v1.TenantSLO, st *tenantStatus) {
			st.Conditions[0].LastTransitionTime = metav1.NewTime(written.Add(300 * time.Millisecond))
		}, true},
		{"another manager overwrote the decision", func(tn *v1.TenantSLO, _ *tenantStatus) {
			tn.Status.Allocation = tn.Status.Allocation.DeepCopy()
			tn.Status.Allocation.Decision = "Raised"
		}, false},
		{"the loop's condition changed", func(_ *v1.TenantSLO, st *tenantStatus) { st.Conditions[0].Message = "met again" }, false},
		{"the loop drops a condition it wrote", func(_ *v1.TenantSLO, st *tenantStatus) { st.Conditions = st.Conditions[:1] }, false},
		{"the loop clears a tenant no longer admitted", func(_ *v1.TenantSLO, st *tenantStatus) { *st = tenantStatus{} }, false},
		{"a tenant without the loop's fields is cleared", func(tn *v1.TenantSLO, st *tenantStatus) {
			tn.Status = v1.TenantSLOStatus{Conditions: tn.Status.Conditions[:1]}
			*st = tenantStatus{}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tenant, st := held(), desired()
			tc.change(tenant, &st)
			if got := statusHolds(tenant, st); got != tc.holds {
				t.Errorf("statusHolds = %v, want %v", got, tc.holds)
			}
		})
	}
}
