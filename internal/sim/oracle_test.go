package sim

import (
	"context"
	"testing"

	"github.com/cacheqos/cacheqos/internal/allocator"
	"github.com/cacheqos/cacheqos/internal/allocator/planning"
)

// staticOraclePlan is the plan the oracle vouches for: every strict tenant its need, placed
// as the oracle packs them all at once, and the memory left on each node split evenly among
// the best-effort tenants. ok is false when the strict needs do not pack all at once.
func staticOraclePlan(sc *Scenario, v *OracleVerdict) (*planning.Plan, bool) {
	placed, err := placeNeeds(sc, v.Needs, func(int) bool { return true })
	if err != nil {
		return nil, false
	}
	var others []int
	left := make([]int64, len(sc.Nodes))
	for j, n := range sc.Nodes {
		left[j] = n.MemoryBytes
	}
	for k := range sc.Tenants {
		if placed[k] == nil {
			others = append(others, k)
			continue
		}
		for j, b := range placed[k] {
			left[j] -= b
		}
	}
	for _, k := range others {
		placed[k] = make([]int64, len(sc.Nodes))
		for j := range left {
			placed[k][j] = left[j] / int64(len(others))
		}
	}
	plan := &planning.Plan{}
	for k, t := range sc.Tenants {
		tp := planning.TenantPlan{ID: t.ID}
		for j, b := range placed[k] {
			if b > 0 {
				tp.Partitions = append(tp.Partitions, planning.Partition{Node: sc.Nodes[j].Name, MemoryBytes: b, RoutingWeight: int32(b)})
				tp.MemoryBytes += b
			}
		}
		plan.Tenants = append(plan.Tenants, tp)
	}
	return plan, true
}

// runStatic simulates sc with one plan in force from the first interval to the last.
func runStatic(t *testing.T, sc *Scenario, plan *planning.Plan, seed uint64) *RunResult {
	t.Helper()
	e, err := newEngine(sc, allocator.PolicyEqual, seed)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.apply(plan); err != nil {
		t.Fatal(err)
	}
	for i := range sc.Intervals {
		e.simulate(i)
		e.measure(i)
	}
	e.result.Policy = "oracle-static"
	return e.result
}

// TestOracleStaticPlanHoldsInTheSimulator checks the oracle against the simulator: the
// static plan it vouches for meets the strict objectives of drawn fleets when simulated with
// either cache model, so that the fuzz criteria ask for something a plan can do.
func TestOracleStaticPlanHoldsInTheSimulator(t *testing.T) {
	ctx := context.Background()
	opts := DefaultFuzzOptions()
	opts.Intervals = 8
	checked := 0
	for seed := uint64(1); checked < 3 && seed < 200; seed++ {
		f, err := DrawFleet(seed, opts)
		if err != nil {
			t.Fatal(err)
		}
		if !f.Verdict.Feasible || len(f.Scenario.Tenants) > 8 {
			continue
		}
		plan, ok := staticOraclePlan(f.Scenario, f.Verdict)
		if !ok {
			continue
		}
		checked++
		for _, cache := range CacheModels() {
			sc := *f.Scenario
			sc.Cache = cache
			equal, err := Run(ctx, &sc, allocator.PolicyEqual, seed)
			if err != nil {
				t.Fatal(err)
			}
			res := &ScenarioResult{Scenario: &sc, Seed: seed, Runs: []*RunResult{equal, runStatic(t, &sc, plan, seed)}}
			res.Summarize()
			if s := res.Summaries[1]; !(s.SLOAttainment >= AttainmentFloor) {
				t.Errorf("fleet %#x (%s) with %s: the oracle's static plan attains %.3f, want at least %.2f", seed, f.Describe(), cache, s.SLOAttainment, AttainmentFloor)
				for k, ts := range s.Tenants {
					if sc.Tenants[k].isStrict() {
						t.Logf("  %s %s: attainment %.2f, hit ratio %.3f with %d bytes", ts.ID, ts.Objective, ts.Attainment, ts.HitRatio, f.Verdict.Needs[k])
					}
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no small feasible fleet drawn")
	}
}
