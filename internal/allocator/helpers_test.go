package allocator

import (
	"context"
	"os"
	"testing"

	"github.com/cacheqos/cacheqos/internal/allocator/planning"
	"github.com/cacheqos/cacheqos/internal/cpsat"
)

// needSolver fails a test that needs OR-Tools when the library cannot be loaded: the solver
// tests run against the real library, never silently without it.
func needSolver(t testing.TB) {
	t.Helper()
	if err := cpsat.Available(); err != nil {
		if os.Getenv(cpsat.LibraryEnv) != "" {
			t.Fatalf("OR-Tools is configured but unavailable: %v", err)
		}
		t.Fatalf("OR-Tools not found (run `make bootstrap` and test through make, or set %s): %v", cpsat.LibraryEnv, err)
	}
}

// bigRate is a node capacity that never constrains the examples.
const bigRate = int64(1) << 40

func snapshotOf(nodes []planning.Node, tenants ...planning.Tenant) *planning.Snapshot {
	return &planning.Snapshot{APIVersion: planning.APIVersion, Kind: planning.KindSnapshot, Nodes: nodes, Tenants: tenants}
}

// memNode is a node with the given memory and capacities too large to matter.
func memNode(name string, memory int64) planning.Node {
	return planning.Node{Name: name, MemoryBytes: memory, BandwidthBytesPerSecond: bigRate, OpsPerSecond: bigRate}
}

func mustPlan(t testing.TB, s *planning.Snapshot, opts Options) *planning.Plan {
	t.Helper()
	plan, err := Plan(context.Background(), s, opts)
	if err != nil {
		t.Fatalf("Plan(%s): %v", opts.Policy, err)
	}
	return plan
}

func tenantOf(t testing.TB, plan *planning.Plan, id string) planning.TenantPlan {
	t.Helper()
	for _, tp := range plan.Tenants {
		if tp.ID == id {
			return tp
		}
	}
	t.Fatalf("tenant %s not in the plan", id)
	return planning.TenantPlan{}
}

func memoryOf(plan *planning.Plan) map[string]int64 {
	out := make(map[string]int64, len(plan.Tenants))
	for _, tp := range plan.Tenants {
		out[tp.ID] = tp.MemoryBytes
	}
	return out
}

// hitObjective is a hit-ratio objective.
func hitObjective(h float64) *planning.Objective { return &planning.Objective{HitRatio: ptr(h)} }

// history turns (size, hit ratio) pairs into observed points.
func history(pairs ...float64) []planning.HitRatioPoint {
	var out []planning.HitRatioPoint
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, planning.HitRatioPoint{SizeBytes: int64(pairs[i]), HitRatio: pairs[i+1]})
	}
	return out
}

// mrc turns (size, hit ratio) pairs into a miss-ratio curve.
func mrc(pairs ...float64) []planning.MissRatioPoint {
	var out []planning.MissRatioPoint
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, planning.MissRatioPoint{SizeBytes: int64(pairs[i]), MissRatio: 1 - pairs[i+1]})
	}
	return out
}

// on places current memory on a node.
func on(node string, bytes int64) planning.Current {
	return planning.Current{Partitions: []planning.CurrentPartition{{Node: node, MemoryBytes: bytes}}}
}

func rates(node string, rps float64) []planning.NodeRate {
	return []planning.NodeRate{{Node: node, RequestsPerSecond: rps}}
}
