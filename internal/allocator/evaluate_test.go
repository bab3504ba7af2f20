package allocator

import (
	"math"
	"strings"
	"testing"

	"github.com/cacheqos/cacheqos/internal/allocator/planning"
)

func TestPredictionsFollowTheLatencyModel(t *testing.T) {
	// One node serving 1000 ops/s with 500 ops/s of background and a tenant at 300: utilization
	// 0.8, M/M/1 delay (1/1000)/(1-0.8) = 5 ms. The tenant gets 600 of the 1000 bytes (hit
	// ratio 0.6 on a linear curve): latency 0.6*1 ms + 0.4*10 ms + 5 ms = 9.6 ms.
	s := snapshotOf([]planning.Node{{Name: "n1", MemoryBytes: 1000, OpsPerSecond: 1000, BandwidthBytesPerSecond: bigRate,
		Load: planning.Load{OpsPerSecond: 800}}},
		planning.Tenant{ID: "a/web", Objective: &planning.Objective{LatencySeconds: ptr(0.0097)},
			Memory: planning.Memory{MaxBytes: 600}, MissRatioCurve: mrc(1000, 1), Rates: rates("n1", 300),
			Observed: planning.Observation{HitLatencySeconds: 0.001, MissLatencySeconds: 0.01}})
	plan := mustPlan(t, s, Options{Policy: PolicyEqual})
	tp := tenantOf(t, plan, "a/web")
	if math.Abs(tp.Predicted.HitRatio-0.6) > 1e-12 || tp.Predicted.LatencySeconds == nil ||
		math.Abs(*tp.Predicted.LatencySeconds-0.0096) > 1e-12 {
		t.Fatalf("prediction %+v, latency %v; want hit ratio 0.6 and 9.6 ms", tp.Predicted, tp.Predicted.LatencySeconds)
	}
	if tp.Verdict != planning.VerdictMeetsSLO {
		t.Errorf("verdict %s %q, want MeetsSLO (9.6 ms <= 9.7 ms)", tp.Verdict, tp.Reason)
	}
	n := plan.Nodes[0]
	if math.Abs(n.Utilization-0.8) > 1e-12 || n.QueueDelaySeconds == nil || math.Abs(*n.QueueDelaySeconds-0.005) > 1e-12 {
		t.Errorf("node %+v", n)
	}
	if tp.Partitions[0].RoutingWeight != 1_000_000 {
		t.Errorf("routing weight %d ppm, want all of it", tp.Partitions[0].RoutingWeight)
	}
}

func TestAnOpsLimitBelowDemandSaturatesTheTenant(t *testing.T) {
	s := snapshotOf([]planning.Node{memNode("n1", 100)},
		planning.Tenant{ID: "a/busy", OpsLimitPerSecond: 50, Rates: rates("n1", 80),
			Objective: &planning.Objective{LatencySeconds: ptr(0.01)}, MissRatioCurve: mrc(100, 0.9),
			Observed: planning.Observation{HitLatencySeconds: 0.001, MissLatencySeconds: 0.005}})
	tp := tenantOf(t, mustPlan(t, s, Options{Policy: PolicyEqual}), "a/busy")
	if !tp.Predicted.Saturated || tp.Predicted.LatencySeconds != nil || tp.Verdict != planning.VerdictBestEffort {
		t.Errorf("prediction %+v verdict %s; want saturated by its own 50 ops/s limit", tp.Predicted, tp.Verdict)
	}
	if tp.Partitions[0].OpsLimitPerSecond != 50 {
		t.Errorf("ops limit %d, want 50", tp.Partitions[0].OpsLimitPerSecond)
	}
}

func TestLatencyObjectiveWeighsHitsByTheMissPenalty(t *testing.T) {
	// Same curves and rates; misses of a/slow cost 20 ms, of a/fast 2 ms. Maximizing hits is
	// indifferent; minimizing latency gives the memory to a/slow.
	tenant := func(id string, miss float64) planning.Tenant {
		return planning.Tenant{ID: id, MissRatioCurve: mrc(100, 1), Rates: rates("n1", 100), Memory: planning.Memory{MaxBytes: 100},
			Observed: planning.Observation{HitLatencySeconds: 0.0005, MissLatencySeconds: miss}}
	}
	s := snapshotOf([]planning.Node{memNode("n1", 100)}, tenant("a/slow", 0.02), tenant("a/fast", 0.002))
	m := memoryOf(mustPlan(t, s, Options{Objective: ObjectiveLatency, DisableSolver: true}))
	if m["a/slow"] != 100 || m["a/fast"] != 0 {
		t.Errorf("memory %v, want everything for the tenant whose misses cost most", m)
	}
}

func TestExplanationsSayWhereTheCurveCameFrom(t *testing.T) {
	s := snapshotOf([]planning.Node{memNode("n1", 1000)},
		planning.Tenant{ID: "a/mrc", MissRatioCurve: mrc(500, 0.8), Current: on("n1", 200), Observed: planning.Observation{HitRatio: ptr(0.2)}},
		planning.Tenant{ID: "a/hist", History: history(100, 0.3, 300, 0.5)},
		planning.Tenant{ID: "a/none"})
	plan := mustPlan(t, s, Options{Policy: PolicyEqual})
	for id, want := range map[string]string{
		"a/mrc":  "miss-ratio curve corrected to the observed 0.200",
		"a/hist": "monotone fit of 2 observed points",
		"a/none": "no curve data yet",
	} {
		if tp := tenantOf(t, plan, id); !strings.Contains(tp.Explanation, want) {
			t.Errorf("%s: %q, want it to mention %q", id, tp.Explanation, want)
		}
	}
}

// Evaluate assesses the allocation in force: a plan put in force is assessed as it was when
// planned, with nothing moved, and an allocation of the operator's own choosing is predicted
// from the tenants' curves at the sizes it holds.
func TestEvaluateAssessesTheAllocationInForce(t *testing.T) {
	needSolver(t)
	const fmib = float64(mib)
	nodes := []planning.Node{memNode("n1", 8*mib), memNode("n2", 8*mib)}
	tenants := []planning.Tenant{
		{ID: "a/web", Class: planning.ClassStrict, Objective: hitObjective(0.7), Rates: rates("n1", 1000), MissRatioCurve: mrc(fmib, 0.5, 2*fmib, 0.7, 4*fmib, 0.8, 8*fmib, 0.85)},
		{ID: "b/api", Class: planning.ClassStrict, Objective: hitObjective(0.6), Rates: rates("n2", 2000), MissRatioCurve: mrc(fmib, 0.3, 4*fmib, 0.6, 8*fmib, 0.7)},
		{ID: "c/batch", Rates: rates("n1", 500), MissRatioCurve: mrc(2*fmib, 0.2, 16*fmib, 0.6)},
	}
	s := snapshotOf(nodes, tenants...)
	planned := mustPlan(t, s, Options{Policy: PolicyOptimal, Workers: 1, Seed: 1})

	inForce := snapshotOf(nodes, tenants...)
	for i := range inForce.Tenants {
		var parts []planning.CurrentPartition
		for _, p := range tenantOf(t, planned, inForce.Tenants[i].ID).Partitions {
			parts = append(parts, planning.CurrentPartition{Node: p.Node, MemoryBytes: p.MemoryBytes})
		}
		inForce.Tenants[i].Current = planning.Current{Partitions: parts}
	}
	assessed, err := Evaluate(inForce, Options{Policy: PolicyOptimal})
	if err != nil {
		t.Fatal(err)
	}
	if assessed.Summary.MovementBytes != 0 {
		t.Errorf("the allocation in force moves %d bytes, want 0", assessed.Summary.MovementBytes)
	}
	if assessed.Summary.ObjectivesMet != planned.Summary.ObjectivesMet || math.Abs(assessed.Summary.ExpectedHitsPerSecond-planned.Summary.ExpectedHitsPerSecond) > 1e-6 {
		t.Errorf("assessed %+v, planned %+v", assessed.Summary, planned.Summary)
	}
	for _, want := range planned.Tenants {
		got := tenantOf(t, assessed, want.ID)
		if got.MemoryBytes != want.MemoryBytes || got.Verdict != want.Verdict || math.Abs(got.Predicted.HitRatio-want.Predicted.HitRatio) > 1e-9 {
			t.Errorf("%s: assessed %d bytes, hit ratio %.4f, %s; planned %d bytes, %.4f, %s", want.ID,
				got.MemoryBytes, got.Predicted.HitRatio, got.Verdict, want.MemoryBytes, want.Predicted.HitRatio, want.Verdict)
		}
	}

	// Sizes of our own: a/web at a point of its curve meets its target, b/api below it does not.
	mine := snapshotOf(nodes, tenants...)
	mine.Tenants[0].Current = on("n1", 2*mib)
	mine.Tenants[1].Current = on("n2", mib)
	assessed, err = Evaluate(mine, Options{Policy: PolicyOptimal})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id      string
		hit     float64
		verdict planning.Verdict
	}{{"a/web", 0.7, planning.VerdictMeetsSLO}, {"b/api", 0.3, planning.VerdictInfeasible}} {
		got := tenantOf(t, assessed, c.id)
		if math.Abs(got.Predicted.HitRatio-c.hit) > 1e-9 || got.Verdict != c.verdict {
			t.Errorf("%s: hit ratio %.4f, %s; want %.4f, %s", c.id, got.Predicted.HitRatio, got.Verdict, c.hit, c.verdict)
		}
	}
}

func TestLatencyObjectivePlannedAtItsQueueingBudget(t *testing.T) {
	needSolver(t)
	// Two nodes of 5,000 ops/s carrying 5,000 requests/s: the fleet's utilization is 0.5, so a
	// latency objective's nodes are planned under 0.7 (halfway to the 0.9 cap), an M/M/1 delay
	// of (1/5000)/(1-0.7) = 0.67 ms. A 1.6 ms target with 0.2 ms hits and 10 ms misses then
	// needs a hit ratio of (10 + 0.67 - 1.6)/9.8 = 0.925, which the curve reaches; at the
	// cap's 2 ms of queueing it would be out of reach even if every request hit.
	node := func(name string) planning.Node {
		return planning.Node{Name: name, MemoryBytes: 64 * mib, BandwidthBytesPerSecond: bigRate, OpsPerSecond: 5000}
	}
	lat := planning.Observation{HitLatencySeconds: 0.0002, MissLatencySeconds: 0.01}
	s := snapshotOf([]planning.Node{node("n1"), node("n2")},
		planning.Tenant{ID: "a/loop", Class: planning.ClassStrict, Objective: &planning.Objective{LatencySeconds: ptr(0.0016)},
			Rates: rates("n1", 3000), MissRatioCurve: mrc(4<<20, 0.1, 8<<20, 0.99, 64<<20, 0.99), Observed: lat},
		planning.Tenant{ID: "b/bulk", Rates: rates("n2", 2000), MissRatioCurve: mrc(64<<20, 0.9), Observed: lat})
	plan := mustPlan(t, s, Options{Policy: PolicyOptimal, Workers: 1, Seed: 1})
	tp := tenantOf(t, plan, "a/loop")
	if tp.Verdict != planning.VerdictMeetsSLO || tp.Predicted.LatencySeconds == nil || *tp.Predicted.LatencySeconds > 0.0016 {
		t.Fatalf("a/loop: verdict %s %q, prediction %+v; want its 1.6 ms met (%s)", tp.Verdict, tp.Reason, tp.Predicted, tp.Explanation)
	}
	if strings.Contains(tp.Explanation, "out of reach") {
		t.Errorf("a/loop: %q; want its objective planned as reachable", tp.Explanation)
	}
	for _, p := range tp.Partitions {
		for _, n := range plan.Nodes {
			if n.Name == p.Node && n.Utilization > 0.7+1e-6 {
				t.Errorf("node %s at utilization %.3f, above the 0.7 its queueing budget allows", n.Name, n.Utilization)
			}
		}
	}
}
