package allocator

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/cacheqos/cacheqos/internal/allocator/planning"
)

func TestMaxperfCombo3SpareSplit(t *testing.T) {
	// Maxperf §5.3, combo3 on 2048 MB: minimums (412.3, 296.8, 361.7, 462.2) MB leave 515 MB,
	// split by projected gain into the finals (807.7, 312.5, 441.9, 485.9) MB. In units of
	// 0.1 MB, with gains in the proportions the finals imply:
	minimums := []int64{4123, 2968, 3617, 4622}
	free := int64(20480) - 4123 - 2968 - 3617 - 4622
	if free != 5150 {
		t.Fatalf("free = %d, want 515 MB", free)
	}
	spare := splitProportional(free, []float64{395.4, 15.7, 80.2, 23.7}, unlimitedRoom(4))
	finals := make([]int64, 4)
	var sum int64
	for i := range finals {
		finals[i] = minimums[i] + spare[i]
		sum += finals[i]
	}
	if want := []int64{8077, 3125, 4419, 4859}; !slices.Equal(finals, want) {
		t.Errorf("finals = %v, want %v (0.1 MB)", finals, want)
	}
	if sum != 20480 {
		t.Errorf("finals sum to %d, want exactly 2048 MB", sum)
	}
	// With the rounded proportions the paper prints (0.77, 0.03, 0.16, 0.04) the finals stay
	// within 3.1 MB of the paper's and still sum to exactly 2048 MB.
	spare = splitProportional(free, []float64{0.77, 0.03, 0.16, 0.04}, unlimitedRoom(4))
	sum = 0
	for i, want := range []int64{8077, 3125, 4419, 4859} {
		got := minimums[i] + spare[i]
		sum += got
		if abs64(got-want) > 31 {
			t.Errorf("app %d: %d, paper %d", i, got, want)
		}
	}
	if sum != 20480 {
		t.Errorf("rounded-proportion finals sum to %d", sum)
	}
}

func TestMaxperfAllGainsZeroSplitsEqually(t *testing.T) {
	if got := splitProportional(10, []float64{0, 0}, unlimitedRoom(2)); !slices.Equal(got, []int64{5, 5}) {
		t.Errorf("split = %v, want [5 5]", got)
	}
	// Capped receivers pass their excess on.
	if got := splitProportional(10, []float64{1, 1}, []int64{2, unlimited}); !slices.Equal(got, []int64{2, 8}) {
		t.Errorf("capped split = %v, want [2 8]", got)
	}
}

func TestMaxMinPlacementTwoByTwoIsBalanced(t *testing.T) {
	// Two applications (600 and 400) on two servers of 500: the LP maximizes the smallest
	// share, 200, and both servers end exactly full.
	s := snapshotOf([]planning.Node{memNode("s1", 500), memNode("s2", 500)},
		planning.Tenant{ID: "a/one"}, planning.Tenant{ID: "a/two"})
	p, err := newProblem(s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	parts, placed := p.maxMinPlacement([]int64{600, 400})
	if placed[0] != 600 || placed[1] != 400 {
		t.Fatalf("placed %v", placed)
	}
	smallest := int64(math.MaxInt64)
	perNode := map[int]int64{}
	for _, ps := range parts {
		for _, pt := range ps {
			smallest = min(smallest, pt.bytes)
			perNode[pt.node] += pt.bytes
		}
	}
	if smallest != 200 {
		t.Errorf("smallest share %d, want 200: %v", smallest, parts)
	}
	if perNode[0] != 500 || perNode[1] != 500 {
		t.Errorf("per-node sums %v, want 500 each", perNode)
	}
}

// degradationTenant has a steadily rising curve and a Maxperf objective.
func degradationTenant(id string, delta float64) planning.Tenant {
	return planning.Tenant{
		ID: id, Objective: &planning.Objective{MaxDegradation: ptr(delta)},
		MissRatioCurve: mrc(1000, 0.99),
		Observed:       planning.Observation{HitLatencySeconds: 0.0002, MissLatencySeconds: 0.01},
	}
}

func TestMaxperfBaselineFollowsTheNumberOfTenants(t *testing.T) {
	// With delta = 1 a tenant needs exactly its fair share: 1/N of the aggregate, so adding
	// tenants moves every baseline.
	for _, n := range []int{2, 4} {
		var tenants []planning.Tenant
		for i := range n {
			tenants = append(tenants, degradationTenant("a/t"+string(rune('0'+i)), 1))
		}
		s := snapshotOf([]planning.Node{memNode("n1", 500), memNode("n2", 500)}, tenants...)
		p, err := newProblem(s, Options{})
		if err != nil {
			t.Fatal(err)
		}
		for k := range p.tenants {
			if need, ok := p.maxperfMinimum(k); !ok || need != int64(1000/n) {
				t.Errorf("N=%d: tenant %d needs %d, %v; want the fair share %d", n, k, need, ok, 1000/n)
			}
		}
	}
}

func TestMaxperfEndToEnd(t *testing.T) {
	// Four tenants, four nodes: every objective met (delta 1.05), per-node partitions sum to
	// the node capacity, and each tenant is spread over every node (max-min).
	var nodes []planning.Node
	for _, n := range []string{"s1", "s2", "s3", "s4"} {
		nodes = append(nodes, memNode(n, 512))
	}
	s := snapshotOf(nodes,
		planning.Tenant{ID: "w/glimpse", MissRatioCurve: mrc(256, 0.2, 1024, 0.9, 2048, 0.95)},
		planning.Tenant{ID: "w/viewperf", MissRatioCurve: mrc(256, 0.5, 2048, 0.55)},
		planning.Tenant{ID: "w/tpch", MissRatioCurve: mrc(512, 0.4, 2048, 0.7)},
		planning.Tenant{ID: "w/cscope", MissRatioCurve: mrc(512, 0.6, 2048, 0.65)},
	)
	plan := mustPlan(t, s, Options{Policy: PolicyMaxperf})
	for _, np := range plan.Nodes {
		if np.MemoryBytes != 512 {
			t.Errorf("node %s holds %d, want its full 512", np.Name, np.MemoryBytes)
		}
	}
	var sum int64
	for _, tp := range plan.Tenants {
		sum += tp.MemoryBytes
		if len(tp.Partitions) != 4 {
			t.Errorf("%s on %d nodes, want all 4", tp.ID, len(tp.Partitions))
		}
	}
	if sum != 2048 {
		t.Errorf("tenants hold %d, want 2048", sum)
	}
	if m := memoryOf(plan); m["w/glimpse"] <= m["w/viewperf"] {
		t.Errorf("memory %v: glimpse has the largest projected gain", m)
	}
}

func TestMaxperfNeedAboveConnectedCapacityFallsBackToFairShare(t *testing.T) {
	s := snapshotOf([]planning.Node{memNode("n1", 100), memNode("n2", 100)},
		planning.Tenant{ID: "a/huge", Objective: hitObjective(0.95), MissRatioCurve: mrc(1000, 0.96), AllowedNodes: []string{"n1"}},
		planning.Tenant{ID: "a/small", MissRatioCurve: mrc(100, 0.9)})
	plan := mustPlan(t, s, Options{Policy: PolicyMaxperf})
	huge := tenantOf(t, plan, "a/huge")
	if !strings.Contains(huge.Explanation, "fair-share fallback") || huge.MemoryBytes != 100 {
		t.Errorf("a/huge: %d bytes, %q; want the fair share 100 and the fallback reported", huge.MemoryBytes, huge.Explanation)
	}
}

func TestMaxperfPartialConnectivityIsDetected(t *testing.T) {
	// Both tenants may only use n1 (100 bytes) but the pooled sizing gives them 100 each: the
	// placement LP is infeasible, which is detected and reported, and nothing overflows n1.
	s := snapshotOf([]planning.Node{memNode("n1", 100), memNode("n2", 100)},
		planning.Tenant{ID: "a/one", MissRatioCurve: mrc(100, 0.9), AllowedNodes: []string{"n1"}},
		planning.Tenant{ID: "a/two", MissRatioCurve: mrc(100, 0.9), AllowedNodes: []string{"n1"}})
	plan := mustPlan(t, s, Options{Policy: PolicyMaxperf})
	if plan.Nodes[0].MemoryBytes > 100 {
		t.Fatalf("n1 holds %d of its 100", plan.Nodes[0].MemoryBytes)
	}
	reported := 0
	for _, tp := range plan.Tenants {
		if strings.Contains(tp.Explanation, "partial connectivity") {
			reported++
		}
	}
	if reported == 0 {
		t.Errorf("partial connectivity not reported: %+v", plan.Tenants)
	}
}
