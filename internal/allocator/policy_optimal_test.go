package allocator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/allocator/planning"
	"github.com/cacheqos/cacheqos/internal/cpsat"
)

// tinySnapshot is a random instance small enough for exhaustive search: two nodes with a few
// hundred bytes and tight ops, three tenants with random curves, objectives, priorities,
// spreads, minimums and current placements.
func tinySnapshot(rng *rand.Rand) *planning.Snapshot {
	var nodes []planning.Node
	for _, name := range []string{"n1", "n2"} {
		nodes = append(nodes, planning.Node{Name: name, MemoryBytes: 80 + rng.Int64N(120),
			OpsPerSecond: 10 + rng.Int64N(20), BandwidthBytesPerSecond: bigRate})
	}
	var tenants []planning.Tenant
	for k := range 3 {
		t := planning.Tenant{ID: fmt.Sprintf("tiny/t%d", k)}
		h := 0.0
		for _, size := range []float64{20 + float64(rng.IntN(20)), 60 + float64(rng.IntN(40)), 150 + float64(rng.IntN(100))} {
			h = math.Min(0.99, h+0.1+0.4*rng.Float64())
			t.MissRatioCurve = append(t.MissRatioCurve, planning.MissRatioPoint{SizeBytes: int64(size), MissRatio: 1 - h})
		}
		node := nodes[rng.IntN(2)].Name
		t.Rates = rates(node, 2+8*rng.Float64())
		if rng.IntN(2) == 0 {
			t.Current = on(node, rng.Int64N(60))
		}
		if rng.IntN(2) == 0 {
			t.Class, t.Priority = planning.ClassStrict, int32(rng.IntN(4))
			t.Objective = hitObjective(math.Round(h*(0.3+0.6*rng.Float64())*100) / 100)
		}
		if rng.IntN(3) == 0 {
			t.Memory.MinBytes = 5 + rng.Int64N(20)
		}
		t.Spread = planning.Spread{MinNodes: 1, MaxNodes: int32(1 + rng.IntN(2))}
		tenants = append(tenants, t)
	}
	return snapshotOf(nodes, tenants...)
}

// exhaustiveBest enumerates every level (only fixed[k] for tenant k, with fixed levels) and
// every split of every tenant over its candidates and returns the best objective of a
// solution satisfying every constraint (the churn cap only with churn).
func exhaustiveBest(o *optInstance, fixed []int, churn bool) (int64, bool) {
	type option struct {
		level int
		units []int64
	}
	var compositions func(total int64, parts int) [][]int64
	compositions = func(total int64, parts int) [][]int64 {
		if parts == 1 {
			return [][]int64{{total}}
		}
		var out [][]int64
		for first := int64(0); first <= total; first++ {
			for _, rest := range compositions(total-first, parts-1) {
				out = append(out, append([]int64{first}, rest...))
			}
		}
		return out
	}
	options := make([][]option, len(o.p.tenants))
	for k := range o.p.tenants {
		for t := range o.levels[k].len() {
			if fixed != nil && t != fixed[k] {
				continue
			}
			for _, units := range compositions(o.units[k], len(o.cands[k])) {
				options[k] = append(options[k], option{level: t, units: units})
			}
		}
	}
	s := solution{level: make([]int, len(o.p.tenants)), units: make([][]int64, len(o.p.tenants))}
	best, found := int64(math.MinInt64), false
	var search func(k int)
	search = func(k int) {
		if k == len(o.p.tenants) {
			if o.check(s, churn) == nil {
				best, found = max(best, o.modelObjective(s)), true
			}
			return
		}
		for _, op := range options[k] {
			s.level[k], s.units[k] = op.level, op.units
			search(k + 1)
		}
	}
	search(0)
	return best, found
}

func TestOptimalEqualsExhaustiveSearch(t *testing.T) {
	needSolver(t)
	rng := rand.New(rand.NewPCG(7, 11))
	compared := 0
	for i := range 8 {
		s := tinySnapshot(rng)
		p, err := newProblem(s, Options{SizeLevels: 4, Workers: 1, ProveOptimal: true, TimeLimit: 20 * time.Second})
		if err != nil {
			t.Fatalf("instance %d: %v", i, err)
		}
		o := newOptInstance(p)
		levels, parts := o.greedyPlace(o.greedySizing())
		o.chooseCandidates(parts)
		want, feasible := exhaustiveBest(o, nil, true)
		res, err := o.solveJoint(context.Background(), time.Now().Add(20*time.Second), optCandidate{levels: levels, parts: parts, obj: o.objective(levels, parts)})
		if !feasible {
			if err == nil {
				t.Errorf("instance %d: exhaustive search finds nothing feasible but the solver returned %+v", i, res.solution)
			}
			continue
		}
		if err != nil {
			t.Fatalf("instance %d: %v", i, err)
		}
		if got := o.modelObjective(res.solution); got != want || res.status != "Optimal" {
			t.Errorf("instance %d: solver objective %d (%s), exhaustive optimum %d", i, got, res.status, want)
		}
		compared++
	}
	if compared < 6 {
		t.Errorf("only %d of 8 random instances were feasible: the generator needs slack", compared)
	}
}

// stageTenant is a tenant of the placement-stage tests: measured on node at rps requests/s,
// on one node, holding current bytes there now.
func stageTenant(id, node string, rps float64, current int64) planning.Tenant {
	t := planning.Tenant{ID: id, Rates: rates(node, rps), MissRatioCurve: mrc(20, 0.3, 80, 0.7, 160, 0.9),
		Spread: planning.Spread{MinNodes: 1, MaxNodes: 1}}
	if current > 0 {
		t.Current = on(node, current)
	}
	return t
}

// greedyStagePlacement is the placement stage's input on s, planned with 4 levels, proofs of
// optimality and the churn cap maxChurn: the greedy sizing's levels placed greedily.
func greedyStagePlacement(t *testing.T, s *planning.Snapshot, maxChurn int64) (*optInstance, optCandidate) {
	t.Helper()
	p, err := newProblem(s, Options{SizeLevels: 4, Workers: 1, ProveOptimal: true, TimeLimit: 20 * time.Second, MaxChurnBytes: maxChurn})
	if err != nil {
		t.Fatal(err)
	}
	o := newOptInstance(p)
	levels, reserved := o.greedyPlace(o.greedySizing())
	parts := o.trimToLevels(levels, reserved)
	o.chooseCandidates(reserved)
	return o, optCandidate{levels: levels, parts: parts, obj: o.objective(levels, parts)}
}

// TestColdStartPlacementAtTheBoundIsNotSolved runs the decomposed method's placement stage
// (levels fixed by the greedy sizing) on small fleets: at a cold start where the greedy
// placement reaches the stage's bound, the stage says its placement is optimal and not solved,
// and its answer is the one the solve gives and the exhaustive search's optimum; otherwise
// the solve runs.
func TestColdStartPlacementAtTheBoundIsNotSolved(t *testing.T) {
	needSolver(t)
	nodesOf := func(memory, ops int64) []planning.Node {
		return []planning.Node{
			{Name: "n1", MemoryBytes: memory, OpsPerSecond: ops, BandwidthBytesPerSecond: bigRate},
			{Name: "n2", MemoryBytes: memory, OpsPerSecond: ops, BandwidthBytesPerSecond: bigRate},
		}
	}
	nodes := func(ops int64) []planning.Node { return nodesOf(200, ops) }
	// fixed is a tenant of exactly 600 MiB that may spread over both nodes.
	fixed := func(id, node string) planning.Tenant {
		t := stageTenant(id, node, 5, 0)
		t.Memory = planning.Memory{MinBytes: 600 * mib, MaxBytes: 600 * mib}
		t.Spread.MaxNodes = 2
		return t
	}
	for _, tc := range []struct {
		name   string
		s      *planning.Snapshot
		solved bool
	}{
		{name: "cold start, room for everyone", solved: false,
			s: snapshotOf(nodes(bigRate), stageTenant("t/a", "n1", 5, 0), stageTenant("t/b", "n1", 5, 0), stageTenant("t/c", "n2", 5, 0))},
		// Three tenants of 8 requests/s on two nodes under 9: the greedy placement overloads a
		// node, which the bound (no tenant alone overloads a node) does not count.
		{name: "cold start, a node overloaded", solved: true,
			s: snapshotOf(nodes(10), stageTenant("t/a", "n1", 8, 0), stageTenant("t/b", "n1", 8, 0), stageTenant("t/c", "n2", 8, 0))},
		// Three tenants of 600 MiB on two nodes of 1 GiB: one is split, and each of its parts
		// rounds its movement up (the movement unit is about 420 KiB), which the bound does not
		// count: the placement may be optimal, but the bound does not prove it.
		{name: "cold start, a tenant split", solved: true,
			s: snapshotOf(nodesOf(gib, bigRate), fixed("t/a", "n1"), fixed("t/b", "n2"), fixed("t/c", "n1"))},
		{name: "plan in force", solved: true,
			s: snapshotOf(nodes(bigRate), stageTenant("t/a", "n1", 5, 40), stageTenant("t/b", "n1", 5, 0), stageTenant("t/c", "n2", 5, 0))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, placed := greedyStagePlacement(t, tc.s, 0)
			deadline := time.Now().Add(20 * time.Second)
			got, notes := o.placementStage(context.Background(), deadline, placed, placed, false, cpsat.Optimal)
			solved, solvedNotes := o.solvePlacement(context.Background(), deadline, placed, placed, false, cpsat.Optimal)
			said := strings.Join(notes, "\n")
			if skipped := strings.Contains(said, "not solved"); skipped == tc.solved {
				t.Fatalf("placement solve skipped: %v, want %v; notes %q", skipped, !tc.solved, notes)
			}
			if !strings.Contains(said, "placement Optimal") || !strings.Contains(strings.Join(solvedNotes, "\n"), "placement Optimal") {
				t.Errorf("stage notes %q, the solve's %q: want placement Optimal in both", notes, solvedNotes)
			}
			if !reflect.DeepEqual(got, solved) {
				t.Errorf("stage answer %+v, the solve's %+v", got, solved)
			}
			best, feasible := exhaustiveBest(o, placed.levels, true)
			if !feasible {
				t.Fatal("exhaustive search finds no placement of the greedy levels")
			}
			if bound := o.placementBound(placed.levels); o.coldStart() && best > bound {
				t.Errorf("exhaustive optimum %d above the stage's bound %d", best, bound)
			}
			if obj := o.modelObjective(o.toSolution(got.levels, got.parts)); obj != best {
				t.Errorf("stage answer's model objective %d, exhaustive optimum %d", obj, best)
			}
		})
	}
}

// TestPlacementStageWithoutTheChurnCapKeepsItsAnswer runs the decomposed method's placement
// stage as it runs once the sizing stage found no sizing within the churn cap: without the
// cap. The answer moves more than the cap (the plan in force holds 40 bytes of one tenant,
// the cap is 1 byte, and two tenants are new) and is kept, not rejected against the cap the
// model was built without.
func TestPlacementStageWithoutTheChurnCapKeepsItsAnswer(t *testing.T) {
	needSolver(t)
	s := snapshotOf([]planning.Node{memNode("n1", 200), memNode("n2", 200)}, stageTenant("t/a", "n1", 5, 40), stageTenant("t/b", "n1", 5, 0), stageTenant("t/c", "n2", 5, 0))
	o, placed := greedyStagePlacement(t, s, 1)
	got, notes := o.placementStage(context.Background(), time.Now().Add(20*time.Second), placed, placed, false, cpsat.Optimal)
	if said := strings.Join(notes, "\n"); strings.Contains(said, "rejected") || !strings.Contains(said, "placement Optimal") {
		t.Errorf("notes %q: want the placement solved to optimality and kept", notes)
	}
	if o.withinChurn(got.parts) {
		t.Errorf("the answer moves at most the 1-byte cap: %+v", got.parts)
	}
	best, _ := exhaustiveBest(o, placed.levels, false)
	if obj := o.modelObjective(o.toSolution(got.levels, got.parts)); obj != best {
		t.Errorf("answer's model objective %d, exhaustive optimum without the cap %d", obj, best)
	}
}

// cliffAndConcave has 100 bytes for a cliff tenant (nothing below 75 bytes, 0.95 from there)
// and a concave one (1 - e^{-s/20}); both serve 100 requests/s.
func cliffAndConcave() *planning.Snapshot {
	concave := mrc(10, 1-math.Exp(-0.5), 20, 1-math.Exp(-1), 30, 1-math.Exp(-1.5), 40, 1-math.Exp(-2),
		60, 1-math.Exp(-3), 100, 1-math.Exp(-5))
	return snapshotOf([]planning.Node{memNode("n1", 100)},
		planning.Tenant{ID: "a/cliff", MissRatioCurve: mrc(74, 0, 75, 0.95), Rates: rates("n1", 100)},
		planning.Tenant{ID: "a/concave", MissRatioCurve: concave, Rates: rates("n1", 100)})
}

func TestOptimalBeatsGreedyOnACliff(t *testing.T) {
	needSolver(t)
	// Marginal allocation follows the steep start of the concave curve, then the cliff's hull
	// segment (75 bytes) no longer fits: it ends with everything on the concave tenant. The
	// solver jumps the cliff: 75 + 25 bytes, about 95 + 71 hits/s instead of 99.
	greedy := mustPlan(t, cliffAndConcave(), Options{DisableSolver: true})
	solved := mustPlan(t, cliffAndConcave(), Options{Workers: 1})
	if greedy.Solver.Fallback == "" || greedy.Solver.Status != "Greedy" {
		t.Errorf("greedy plan solver report %+v", greedy.Solver)
	}
	if m := memoryOf(solved); m["a/cliff"] < 75 {
		t.Errorf("solver gave the cliff tenant %d bytes, want at least 75: %v", m["a/cliff"], m)
	}
	if g, s := greedy.Summary.ExpectedHitsPerSecond, solved.Summary.ExpectedHitsPerSecond; s < g*1.5 {
		t.Errorf("solver %v hits/s vs greedy %v: want the cliff jumped", s, g)
	}
	// The bound over real sizes (the concave hull's LP) cannot certify a jumped cliff: the
	// plan is the optimum, but reported Feasible with the hull's gap, not Optimal.
	if solved.Solver.Status != "Feasible" || solved.Solver.Objective <= solved.Solver.GreedyObjective || solved.Solver.Gap > 0.01 {
		t.Errorf("solver report %+v", solved.Solver)
	}
	// With a strict objective on the concave tenant (hit ratio 0.65: 21 bytes, 22 with the
	// safety margin), the solver still jumps the cliff and meets the objective.
	s := cliffAndConcave()
	s.Tenants[1].Class, s.Tenants[1].Objective = planning.ClassStrict, hitObjective(0.65)
	withSLO := mustPlan(t, s, Options{Workers: 1})
	if m := memoryOf(withSLO); m["a/cliff"] < 75 || tenantOf(t, withSLO, "a/concave").Verdict != planning.VerdictMeetsSLO {
		t.Errorf("with an objective: memory %v, concave verdict %s", m, tenantOf(t, withSLO, "a/concave").Verdict)
	}
}

func TestOptimalSafetyMargin(t *testing.T) {
	needSolver(t)
	// Linear curves (hit ratio = size/100 bytes): an objective of 0.5 needs 50 bytes, and 52
	// with the safety margin (the larger of hit ratio 0.51 and 3% more memory, rounded up).
	strict := func(id string) planning.Tenant {
		return planning.Tenant{ID: id, Class: planning.ClassStrict, Objective: hitObjective(0.5), MissRatioCurve: mrc(100, 1), Rates: rates("n1", 10)}
	}
	bestEffort := planning.Tenant{ID: "b/bulk", MissRatioCurve: mrc(100, 1), Rates: rates("n1", 1000)}
	for _, tc := range []struct {
		name    string
		tenants []planning.Tenant
		want    map[string]int64
	}{
		// The margin comes before a best-effort tenant's hits, even one with 100x the traffic
		// (which gets the rest, to the byte).
		{"ahead of best-effort hits", []planning.Tenant{strict("a/web"), bestEffort}, map[string]int64{"a/web": 52, "b/bulk": 48}},
		// Margins never cost an objective: both fit without them, not with them.
		{"never at an objective's expense", []planning.Tenant{strict("a/web"), strict("a/api")}, map[string]int64{"a/web": 50, "a/api": 50}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := mustPlan(t, snapshotOf([]planning.Node{memNode("n1", 100)}, tc.tenants...), Options{Workers: 1})
			if got := memoryOf(plan); !maps.Equal(got, tc.want) {
				t.Errorf("memory %v, want %v", got, tc.want)
			}
			for _, tenant := range tc.tenants {
				if tenant.Class == planning.ClassStrict && tenantOf(t, plan, tenant.ID).Verdict != planning.VerdictMeetsSLO {
					t.Errorf("%s: verdict %s, want %s", tenant.ID, tenantOf(t, plan, tenant.ID).Verdict, planning.VerdictMeetsSLO)
				}
			}
		})
	}
}

func TestOptimalRespectsPriorityWhenObjectivesConflict(t *testing.T) {
	needSolver(t)
	// 100 bytes, two strict tenants each needing 80: only one objective can be met, and it is
	// the higher priority one's; the other is Infeasible with the reason.
	tenant := func(id string, priority int32) planning.Tenant {
		return planning.Tenant{ID: id, Class: planning.ClassStrict, Priority: priority,
			Objective: hitObjective(0.8), MissRatioCurve: mrc(100, 1), Rates: rates("n1", 10)}
	}
	for _, order := range [][2]int32{{1, 5}, {5, 1}} {
		s := snapshotOf([]planning.Node{memNode("n1", 100)}, tenant("a/first", order[0]), tenant("a/second", order[1]))
		plan := mustPlan(t, s, Options{Workers: 1})
		winner, loser := "a/second", "a/first"
		if order[0] > order[1] {
			winner, loser = loser, winner
		}
		w, l := tenantOf(t, plan, winner), tenantOf(t, plan, loser)
		if w.Verdict != planning.VerdictMeetsSLO || w.MemoryBytes < 80 {
			t.Errorf("priorities %v: winner %s %s with %d bytes", order, winner, w.Verdict, w.MemoryBytes)
		}
		if l.Verdict != planning.VerdictInfeasible || !strings.Contains(l.Reason, "higher priority") {
			t.Errorf("priorities %v: loser %s %s %q", order, loser, l.Verdict, l.Reason)
		}
		if plan.Summary.StrictMet != 1 || plan.Summary.StrictTenants != 2 {
			t.Errorf("summary %+v", plan.Summary)
		}
	}
}

// withCurrent returns a copy of s whose current allocations are the plan's, with the hit
// ratios observed at those sizes being the ones the plan predicted.
func withCurrent(s *planning.Snapshot, plan *planning.Plan) *planning.Snapshot {
	out := *s
	out.Tenants = append([]planning.Tenant(nil), s.Tenants...)
	for i := range out.Tenants {
		tp := plan.Tenants[i]
		var cur planning.Current
		for _, part := range tp.Partitions {
			cur.Partitions = append(cur.Partitions, planning.CurrentPartition{Node: part.Node, MemoryBytes: part.MemoryBytes})
		}
		out.Tenants[i].Current = cur
		out.Tenants[i].Observed.HitRatio = ptr(tp.Predicted.HitRatio)
	}
	return &out
}

func TestOptimalSmallChangesGiveSmallPlanChanges(t *testing.T) {
	needSolver(t)
	rng := rand.New(rand.NewPCG(3, 5))
	s := randomSnapshot(rng, genConfig{tenants: 30, nodes: 4, oversubscription: 1.3, strictShare: 0.3, maxSpread: 2})
	// Stopped by a count of solver work, not by the clock: on a loaded machine a wall-clock
	// limit stopped the first solve early, with the greedy plan, and the second solve's better
	// plan then moved everything.
	deterministic := Options{Workers: 1, TimeLimit: 5 * time.Minute, WorkLimit: 8}
	first := mustPlan(t, s, deterministic)
	// The same fleet with the plan in force and every rate 1% higher.
	next := withCurrent(s, first)
	for i := range next.Tenants {
		rs := append([]planning.NodeRate(nil), next.Tenants[i].Rates...)
		for j := range rs {
			rs[j].RequestsPerSecond *= 1.01
		}
		next.Tenants[i].Rates = rs
	}
	second := mustPlan(t, next, deterministic)
	share := float64(second.Summary.MovementBytes) / float64(second.Summary.MemoryBytes)
	t.Logf("first plan moved %.1f%% of the memory, the second %.2f%%", 100*float64(first.Summary.MovementBytes)/float64(first.Summary.MemoryBytes), 100*share)
	if share > 0.05 {
		t.Errorf("a 1%% rate change moved %.1f%% of the memory", 100*share)
		for i, tp := range second.Tenants {
			if f := first.Tenants[i]; f.MemoryBytes != tp.MemoryBytes || len(f.Partitions) != len(tp.Partitions) || f.Partitions[0].Node != tp.Partitions[0].Node {
				t.Logf("%s: %d on %v -> %d on %v", tp.ID, f.MemoryBytes, f.Partitions, tp.MemoryBytes, tp.Partitions)
			}
		}
		t.Logf("first %+v\nsecond %+v", first.Solver, second.Solver)
	}
}

// Replanning a fleet with its own plan in force keeps it, and the note says why: it scores at
// least as well as the best plan found (the greedy plan replanned), or it is within the
// solver's tolerance of it (with a plan in force the resize keeps the solve's routing, so its
// best plan may differ from the plan in force by less than the tolerance).
func TestOptimalKeptPlanNoteSaysWhy(t *testing.T) {
	needSolver(t)
	const atLeast = "optimal: the plan in force scores at least as well as the best plan found; kept"
	const within = "optimal: the plan in force is within the solver's tolerance of the best plan found; kept"
	for _, tc := range []struct {
		name  string
		opts  Options
		notes []string
	}{
		{"greedy", Options{DisableSolver: true}, []string{atLeast}},
		{"solver", Options{Workers: 1, TimeLimit: 10 * time.Second}, []string{atLeast, within}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, 5))
			s := randomSnapshot(rng, genConfig{tenants: 30, nodes: 4, oversubscription: 1.3, strictShare: 0.3, maxSpread: 2})
			first := mustPlan(t, s, tc.opts)
			again := mustPlan(t, withCurrent(s, first), tc.opts)
			if again.Summary.MovementBytes != 0 || !slices.ContainsFunc(again.Notes, func(n string) bool { return slices.Contains(tc.notes, n) }) {
				t.Errorf("moved %d bytes, notes %v", again.Summary.MovementBytes, again.Notes)
			}
		})
	}
}

func TestOptimalMaxChurnCapsMovement(t *testing.T) {
	needSolver(t)
	rng := rand.New(rand.NewPCG(8, 9))
	s := randomSnapshot(rng, genConfig{tenants: 12, nodes: 3, oversubscription: 1.5, maxSpread: 2})
	free := mustPlan(t, s, Options{Workers: 1})
	limit := free.Summary.MovementBytes / 2
	capped := mustPlan(t, s, Options{Workers: 1, MaxChurnBytes: limit})
	// Movement is counted in units of at most 1/5000 of the memory: allow that rounding.
	slack := capped.Summary.MemoryBytes / 1000
	if capped.Summary.MovementBytes > limit+slack {
		t.Errorf("movement %d above the cap %d (solver %+v, notes %v)", capped.Summary.MovementBytes, limit, capped.Solver, capped.Notes)
	}
}

// A plan the stages over real sizes put in force is sized in quanta, not levels, so the
// models cannot always express a plan near it. Under a small churn cap the plan in force
// (which moves nothing) is then the answer, not a plan breaking the cap or a greedy fallback.
func TestOptimalSmallChurnCapKeepsAPlanSizedInQuanta(t *testing.T) {
	needSolver(t)
	for _, tc := range []struct {
		name      string
		rateScale float64
	}{
		{"same rates", 1},
		{"rates 1% higher", 1.01},
		{"rates 3% lower", 0.97},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(2, 4))
			s := randomSnapshot(rng, genConfig{tenants: 6, nodes: 3, oversubscription: 1.2, strictShare: 0.5, maxSpread: 3})
			first := mustPlan(t, s, Options{Workers: 1})
			for _, tp := range first.Tenants {
				if tp.MemoryBytes == 0 {
					t.Fatalf("%s has no memory: the plan in force would not be kept for that alone", tp.ID)
				}
			}
			next := withCurrent(s, first)
			for i := range next.Tenants {
				rs := slices.Clone(next.Tenants[i].Rates)
				for j := range rs {
					rs[j].RequestsPerSecond *= tc.rateScale
				}
				next.Tenants[i].Rates = rs
			}
			limit := first.Summary.MemoryBytes / 100
			capped := mustPlan(t, next, Options{Workers: 1, MaxChurnBytes: limit})
			if capped.Summary.MovementBytes > limit || capped.Solver.Fallback != "" {
				t.Errorf("moved %d bytes (cap %d), solver %+v, notes %v", capped.Summary.MovementBytes, limit, capped.Solver, capped.Notes)
			}
			if capped.Summary.StrictMet < first.Summary.StrictMet && tc.rateScale == 1 {
				t.Errorf("strict objectives met dropped from %d to %d", first.Summary.StrictMet, capped.Summary.StrictMet)
			}
		})
	}
}

func TestOptimalFallsBackToGreedyWithoutTheLibrary(t *testing.T) {
	if os.Getenv("CACHEQOS_TEST_CHILD") == "fallback" {
		plan := mustPlan(t, cliffAndConcave(), Options{})
		if plan.Solver.Status != "Greedy" || !strings.Contains(plan.Solver.Fallback, "OR-Tools unavailable") {
			t.Fatalf("solver report %+v", plan.Solver)
		}
		return
	}
	// The library is loaded once per process: check the fallback in a child process whose
	// library path does not exist.
	cmd := exec.Command(os.Args[0], "-test.run=^TestOptimalFallsBackToGreedyWithoutTheLibrary$", "-test.count=1")
	cmd.Env = append(os.Environ(), "CACHEQOS_TEST_CHILD=fallback", cpsat.LibraryEnv+"="+t.TempDir()+"/missing.so")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "PASS") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func TestOptimalCancellationReturnsPromptly(t *testing.T) {
	needSolver(t)
	s := randomSnapshot(rand.New(rand.NewPCG(1, 1)), genConfig{tenants: 300, nodes: 30, oversubscription: 1.5, strictShare: 0.3, maxSpread: 3})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	start := time.Now()
	plan, err := Plan(ctx, s, Options{TimeLimit: time.Minute, ProveOptimal: true})
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	if elapsed := time.Since(start); elapsed > 20*time.Second {
		t.Errorf("cancelled plan took %v", elapsed)
	}
	if len(plan.Tenants) != 300 {
		t.Errorf("plan has %d tenants", len(plan.Tenants))
	}
	if _, err := Plan(ctx, s, Options{}); err == nil {
		t.Error("Plan with a done context succeeded")
	}
}

// TestOptimalMemoryLimitKeepsAValidPlan: a memory limit below what any process holds stops
// every solve at its first reading; the plan then keeps every hard constraint, is at least
// as good as the greedy one, and says why. A limit far above the process changes nothing.
func TestOptimalMemoryLimitKeepsAValidPlan(t *testing.T) {
	needSolver(t)
	s := randomSnapshot(rand.New(rand.NewPCG(1, 1)), genConfig{tenants: 300, nodes: 30, oversubscription: 1.5, strictShare: 0.3, maxSpread: 3})
	greedy := mustPlan(t, s, Options{DisableSolver: true})
	for _, tc := range []struct {
		name    string
		limit   int64
		stopped bool
	}{
		{name: "one byte", limit: 1, stopped: true},
		{name: "64 GiB", limit: 64 * gib, stopped: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := mustPlan(t, s, Options{TimeLimit: 5 * time.Second, Workers: 1, ProveOptimal: true, MemoryLimit: tc.limit})
			checkPlanInvariants(t, tc.name, s, plan)
			said := strings.Contains(plan.Solver.Fallback+strings.Join(plan.Notes, "\n"), "stopped at the memory limit")
			if said != tc.stopped {
				t.Errorf("memory limit named: %v, want %v; fallback %q, notes %q", said, tc.stopped, plan.Solver.Fallback, plan.Notes)
			}
			if got, floor := plan.Summary, greedy.Summary; got.StrictMet < floor.StrictMet || got.ExpectedHitsPerSecond < floor.ExpectedHitsPerSecond*(1-1e-9) {
				t.Errorf("plan meets %d strict objectives with %.0f hits/s; the greedy plan %d with %.0f", got.StrictMet, got.ExpectedHitsPerSecond, floor.StrictMet, floor.ExpectedHitsPerSecond)
			}
		})
	}
}

// TestWorkLimitMakesStoppedPlansReproducible plans a snapshot whose search the work limit
// stops before its gap target: once alone, then twice at the same time (each solve slower,
// competing for the cores). With one worker the three plans are the same.
func TestWorkLimitMakesStoppedPlansReproducible(t *testing.T) {
	needSolver(t)
	s := benchSnapshot(60, 6)
	opts := Options{Workers: 1, WorkLimit: 0.02, TimeLimit: time.Minute}
	plans := make([]*planning.Plan, 3)
	plans[0] = mustPlan(t, s, opts)
	errs := make([]error, len(plans))
	var wg sync.WaitGroup
	for run := 1; run < len(plans); run++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			plans[run], errs[run] = Plan(t.Context(), s, opts)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for run, plan := range plans {
		if plan.Solver.Status != "Feasible" {
			t.Fatalf("run %d: solver status %q (%s), want Feasible: stopped by the work limit", run, plan.Solver.Status, plan.Solver.Fallback)
		}
		plan.Solver = nil // wall times differ
		if run > 0 && !reflect.DeepEqual(plan, plans[0]) {
			t.Errorf("run %d: the plan differs from the first run's", run)
		}
	}
}

func TestPlansAreDeterministic(t *testing.T) {
	needSolver(t)
	s := randomSnapshot(rand.New(rand.NewPCG(4, 4)), genConfig{tenants: 10, nodes: 3, oversubscription: 1.4, strictShare: 0.4, cliffShare: 0.3, maxSpread: 2})
	for _, policy := range PolicyNames() {
		opts := Options{Policy: policy, Workers: 1, ProveOptimal: true, TimeLimit: 30 * time.Second}
		a, b := mustPlan(t, s, opts), mustPlan(t, s, opts)
		a.Solver, b.Solver = nil, nil // wall times differ
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: two plans of the same snapshot differ", policy)
		}
	}
}

// TestCandidatesAtFleetScale checks the models' candidate nodes: below maxCandidatePairs each
// tenant gets its usual limit; above it (the operator benchmark's 2,000 tenants on 200 nodes,
// each on another node now than its measured one) the pairs stay within the bound, and every
// tenant keeps the nodes it is on now, those of the greedy placement, and at least one more.
func TestCandidatesAtFleetScale(t *testing.T) {
	for _, tc := range []struct {
		name           string
		tenants, nodes int
		usual          bool
	}{
		{name: "small fleet", tenants: 100, nodes: 20, usual: true},
		{name: "2,000 tenants on 200 nodes", tenants: 2000, nodes: 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := operatorFleetSnapshot(tc.tenants, tc.nodes)
			for i := range s.Tenants {
				s.Tenants[i].Current = on(s.Nodes[(i+1)%tc.nodes].Name, 64*mib)
			}
			p, err := newProblem(s, Options{})
			if err != nil {
				t.Fatal(err)
			}
			o := newOptInstance(p)
			_, reserved := o.greedyPlace(o.greedySizing())
			o.chooseCandidates(reserved)
			pairs := 0
			for k, tn := range p.tenants {
				cands := o.cands[k]
				pairs += len(cands)
				if tc.usual {
					if len(cands) != o.candidateLimit(k) {
						t.Fatalf("tenant %d: %d candidates, want its usual %d", k, len(cands), o.candidateLimit(k))
					}
					continue
				}
				kept := map[int]bool{}
				for _, c := range tn.current {
					kept[c.node] = true
				}
				for _, pt := range reserved[k] {
					kept[pt.node] = true
				}
				for j := range kept {
					if !slices.Contains(cands, j) {
						t.Fatalf("tenant %d: node %d (current or greedy) not among its candidates %v", k, j, cands)
					}
				}
				if len(cands) <= len(kept) {
					t.Fatalf("tenant %d: candidates %v leave it no node beyond its current and greedy ones %v", k, cands, kept)
				}
			}
			if !tc.usual && pairs > maxCandidatePairs {
				t.Errorf("%d candidate pairs, above the bound %d", pairs, maxCandidatePairs)
			}
			t.Logf("%d candidate pairs", pairs)
		})
	}
}
