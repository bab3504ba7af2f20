package allocator

import (
	"slices"
	"strings"
	"testing"

	"github.com/cacheqos/cacheqos/internal/allocator/planning"
)

func TestSoftQoSPartitionPaperExamples(t *testing.T) {
	cases := []struct {
		name        string
		minimums    []int64
		deltas      []float64
		wantSizes   []int64
		wantFlagged []bool
	}{
		{
			// Soft-QoS §III: minimums 15/30/30 of 100 blocks, hit rates 70/90/90, maxima
			// 85/92/95: the 25 free blocks go 17/2/6.
			name: "no flagged app", minimums: []int64{15, 30, 30}, deltas: []float64{0.15, 0.02, 0.05},
			wantSizes: []int64{15 + 17, 30 + 2, 30 + 6}, wantFlagged: []bool{false, false, false},
		},
		{
			// Minimums 80/70/40: app 3 first (ascending), apps 1 and 2 do not fit and share the
			// 60 left equally: 30/30/40.
			name: "apps 1 and 2 flagged", minimums: []int64{80, 70, 40}, deltas: []float64{0.15, 0.02, 0.05},
			wantSizes: []int64{30, 30, 40}, wantFlagged: []bool{true, true, false},
		},
		{
			// Three flagged apps share what is left equally, the rounding unit to the first.
			name: "three flagged share equally", minimums: []int64{110, 120, 130}, deltas: []float64{0.1, 0.2, 0.3},
			wantSizes: []int64{34, 33, 33}, wantFlagged: []bool{true, true, true},
		},
		{
			// Every delta 0: no division by zero, the spare is split equally.
			name: "all deltas zero", minimums: []int64{10, 10, 10}, deltas: []float64{0, 0, 0},
			wantSizes: []int64{34, 33, 33}, wantFlagged: []bool{false, false, false},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := len(c.minimums)
			reachable := []bool{true, true, true}
			if c.name == "three flagged share equally" {
				reachable = []bool{false, false, false}
			}
			sizes, flagged := softQoSPartition(100, c.minimums, reachable, make([]int64, n), []int64{100, 100, 100}, c.deltas)
			if !slices.Equal(sizes, c.wantSizes) || !slices.Equal(flagged, c.wantFlagged) {
				t.Fatalf("sizes %v flagged %v, want %v %v", sizes, flagged, c.wantSizes, c.wantFlagged)
			}
			var sum int64
			for _, s := range sizes {
				sum += s
			}
			if sum != 100 {
				t.Fatalf("sizes sum to %d, want the whole 100-block cache", sum)
			}
		})
	}
}

// softQoSTenant builds a tenant whose fitted curve needs exactly `need` blocks for its target:
// observed hit ratio `current` at `size` blocks, and a recorded best of `best` at `bestAt`.
func softQoSTenant(id string, size int64, current float64, bestAt, best, target float64) planning.Tenant {
	return planning.Tenant{
		ID: id, Class: planning.ClassStrict, Objective: hitObjective(target),
		Observed: planning.Observation{HitRatio: ptr(current)},
		History:  history(bestAt, best),
		Current:  on("cache", size),
	}
}

func TestSoftQoSEndToEndPaperExamples(t *testing.T) {
	// Example 1: current 40/30/30 blocks; minimums 15/30/30; hit rates 70/90/90; maxima
	// 85/92/95. Curve of app 1: (0,0)-(40,0.70)-(100,0.85), so 0.2625 needs 15 blocks.
	s := snapshotOf([]planning.Node{memNode("cache", 100)},
		softQoSTenant("apps/one", 40, 0.70, 100, 0.85, 0.2625),
		softQoSTenant("apps/two", 30, 0.90, 60, 0.92, 0.90),
		softQoSTenant("apps/three", 30, 0.90, 80, 0.95, 0.90))
	plan := mustPlan(t, s, Options{Policy: PolicySoftQoS})
	got := memoryOf(plan)
	want := map[string]int64{"apps/one": 15 + 17, "apps/two": 30 + 2, "apps/three": 30 + 6}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("%s got %d blocks, want %d (extra 17/2/6)", id, got[id], w)
		}
	}
	// Example 2: minimums 80/70/40: 30/30/40, apps 1 and 2 flagged and not meeting their QoS.
	s = snapshotOf([]planning.Node{memNode("cache", 100)},
		softQoSTenant("apps/one", 40, 0.70, 100, 0.85, 0.80),
		softQoSTenant("apps/two", 30, 0.90, 100, 0.97, 0.94),
		softQoSTenant("apps/three", 30, 0.90, 80, 0.95, 0.91))
	plan = mustPlan(t, s, Options{Policy: PolicySoftQoS})
	got = memoryOf(plan)
	want = map[string]int64{"apps/one": 30, "apps/two": 30, "apps/three": 40}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("%s got %d blocks, want %d", id, got[id], w)
		}
	}
	for _, id := range []string{"apps/one", "apps/two"} {
		tp := tenantOf(t, plan, id)
		if tp.Verdict != planning.VerdictInfeasible || !strings.Contains(tp.Explanation, "flagged") {
			t.Errorf("%s: verdict %s, explanation %q; want Infeasible and flagged", id, tp.Verdict, tp.Explanation)
		}
	}
	if tp := tenantOf(t, plan, "apps/three"); tp.Verdict != planning.VerdictMeetsSLO {
		t.Errorf("apps/three: verdict %s, want MeetsSLO", tp.Verdict)
	}
}

func TestSoftQoSTargetAboveWholeCacheIsFlagged(t *testing.T) {
	// The whole cache gives at most 0.6: a target of 0.9 is flagged and the tenant is best
	// effort, while the other tenant keeps its minimum.
	s := snapshotOf([]planning.Node{memNode("cache", 100)},
		planning.Tenant{ID: "a/greedy", Objective: hitObjective(0.9), History: history(100, 0.6)},
		planning.Tenant{ID: "a/modest", Objective: hitObjective(0.5), History: history(100, 1.0)})
	plan := mustPlan(t, s, Options{Policy: PolicySoftQoS})
	greedy := tenantOf(t, plan, "a/greedy")
	if greedy.Verdict != planning.VerdictBestEffort || !strings.Contains(greedy.Reason, "tops out at hit ratio 0.600") {
		t.Errorf("a/greedy: %s %q, want BestEffort because the curve tops out", greedy.Verdict, greedy.Reason)
	}
	if m := memoryOf(plan); m["a/modest"] != 50 || m["a/greedy"] != 50 {
		t.Errorf("memory %v, want the modest tenant at its 50 minimum and the rest to the flagged one", m)
	}
}

func TestSoftQoSSameWorkloadDifferentTargets(t *testing.T) {
	// Two instances of one workload with different targets get different allocations.
	curve := history(20, 0.4, 50, 0.7, 100, 0.9)
	s := snapshotOf([]planning.Node{memNode("cache", 100)},
		planning.Tenant{ID: "a/low", Objective: hitObjective(0.4), History: curve},
		planning.Tenant{ID: "a/high", Objective: hitObjective(0.7), History: curve})
	m := memoryOf(mustPlan(t, s, Options{Policy: PolicySoftQoS}))
	if m["a/low"] >= m["a/high"] {
		t.Errorf("memory %v: the higher target should get more", m)
	}
}
