package allocator

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/cacheqos/cacheqos/internal/allocator/planning"
)

// On a node whose demand is beyond its utilization cap, the optimal policy holds best-effort
// tenants back, lowest priority first, none below an even share of the node, and never a
// strict tenant; a node within its cap holds no one back, nor does a node of best-effort
// tenants only that is not saturated. On a node with a strict tenant, every best-effort part
// not held back is guarded: capped above what it sends, at what it sends plus half the node's
// headroom under the cap, at least a quarter more and at least an even share, rounded up to a
// step of 2^(1/4) so that the limit does not follow every small change of traffic.
func TestBestEffortHeldBackOnOverloadedNodes(t *testing.T) {
	needSolver(t)
	const fmib = float64(mib)
	node := planning.Node{Name: "n1", MemoryBytes: 64 * mib, BandwidthBytesPerSecond: bigRate, OpsPerSecond: 10000}
	tenantAt := func(id string, class planning.Class, priority int32, rps float64) planning.Tenant {
		t := planning.Tenant{ID: id, Class: class, Priority: priority, Rates: rates("n1", rps),
			MissRatioCurve: mrc(4*fmib, 0.5, 16*fmib, 0.8, 64*fmib, 0.9)}
		if class == planning.ClassStrict {
			t.Objective = hitObjective(0.5)
		}
		return t
	}
	cases := []struct {
		name    string
		tenants []planning.Tenant
		// wantLimit is each tenant's ops limit (0: none), within 1 op/s.
		wantLimit map[string]float64
		// held: some tenant is held back under its demand.
		held bool
	}{
		{
			name: "a flood next to a strict tenant",
			tenants: []planning.Tenant{
				tenantAt("a/strict", planning.ClassStrict, 100, 3000),
				tenantAt("b/flood", planning.ClassBestEffort, 500, 20000),
			},
			// The node gives 9,000 ops/s at its 90% cap; the flood keeps what the strict
			// tenant leaves, 6,000, above its even share of 5,000.
			wantLimit: map[string]float64{"a/strict": 0, "b/flood": 6000},
			held:      true,
		},
		{
			name: "the lower priority first, down to an even share",
			tenants: []planning.Tenant{
				tenantAt("a/strict", planning.ClassStrict, 1, 2000),
				tenantAt("b/bulk", planning.ClassBestEffort, 10, 8000),
				tenantAt("c/app", planning.ClassBestEffort, 100, 4000),
			},
			// 14,000 ops/s against 9,000: the bulk tenant gives up all it can (down to 10,000/3),
			// the app the remaining 333.
			wantLimit: map[string]float64{"a/strict": 0, "b/bulk": 10000.0 / 3, "c/app": 4000 - (5000 - (8000 - 10000.0/3))},
			held:      true,
		},
		{
			name: "best effort alone, above the cap but not saturated",
			tenants: []planning.Tenant{
				tenantAt("b/bulk", planning.ClassBestEffort, 10, 6000),
				tenantAt("c/app", planning.ClassBestEffort, 100, 3500),
			},
			// 9,500 ops/s against 10,000: no strict tenant queues behind them, so no one is held
			// back or guarded.
			wantLimit: map[string]float64{"b/bulk": 0, "c/app": 0},
		},
		{
			name: "best effort alone, saturated",
			tenants: []planning.Tenant{
				tenantAt("b/bulk", planning.ClassBestEffort, 10, 8000),
				tenantAt("c/app", planning.ClassBestEffort, 100, 4000),
			},
			// 12,000 ops/s against 10,000: held back to the 90% cap, the bulk tenant first,
			// down to its even share of 5,000; the app gives up the remaining 0 and, with no
			// strict tenant to protect, is not guarded.
			wantLimit: map[string]float64{"b/bulk": 5000, "c/app": 0},
			held:      true,
		},
		{
			name: "within the cap",
			tenants: []planning.Tenant{
				tenantAt("a/strict", planning.ClassStrict, 1, 2000),
				tenantAt("b/bulk", planning.ClassBestEffort, 10, 6000),
			},
			// Guarded at 6,000 + 6,000/4 (more than half the 1,000 ops/s under the cap), 7,500,
			// rounded up to the step 2^13.
			wantLimit: map[string]float64{"a/strict": 0, "b/bulk": 8192},
		},
		{
			name: "within the cap, 3% more traffic",
			tenants: []planning.Tenant{
				tenantAt("a/strict", planning.ClassStrict, 1, 2000),
				tenantAt("b/bulk", planning.ClassBestEffort, 10, 6180),
			},
			// 7,725 rounds up to the same step: the plan's limits, and so the node's plan, stay.
			wantLimit: map[string]float64{"a/strict": 0, "b/bulk": 8192},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			plan := mustPlan(t, snapshotOf([]planning.Node{node}, tc.tenants...), Options{Policy: PolicyOptimal, Workers: 1, Seed: 1})
			for id, want := range tc.wantLimit {
				tp := tenantOf(t, plan, id)
				var got float64
				for _, p := range tp.Partitions {
					got += float64(p.OpsLimitPerSecond)
				}
				if math.Abs(got-want) > 1 {
					t.Errorf("%s: ops limit %.0f/s, want %.0f/s (%v)", id, got, want, tp.Explanation)
				}
				// A guard says so, with its limit, in the tenant's explanation.
				if guard := fmt.Sprintf("guarded at %.0f ops/s", want); want > 0 && !tc.held && !strings.Contains(tp.Explanation, guard) {
					t.Errorf("%s: explanation %q, want it to say %q", id, tp.Explanation, guard)
				}
			}
			// Whoever is held back, the node ends at the cap.
			if u := plan.Nodes[0].Utilization; tc.held && u > DefaultMaxUtilization+1e-3 {
				t.Errorf("node utilization %.3f after throttling, want at most %.2f", u, DefaultMaxUtilization)
			}
		})
	}
}
