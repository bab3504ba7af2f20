package allocator

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/allocator/planning"
)

// checkPlanInvariants checks what every policy's plan must satisfy: the hard constraints
// (memory bounds, allowed nodes, spread, node capacity) and a well-formed plan.
func checkPlanInvariants(t *testing.T, label string, s *planning.Snapshot, plan *planning.Plan) {
	t.Helper()
	capacity := map[string]int64{}
	for _, n := range s.Nodes {
		capacity[n.Name] = n.MemoryBytes
	}
	used := map[string]int64{}
	for i, tp := range plan.Tenants {
		st := s.Tenants[i]
		if tp.ID != st.ID {
			t.Fatalf("%s: tenant %d is %s, want %s", label, i, tp.ID, st.ID)
		}
		if len(tp.Partitions) == 0 {
			t.Errorf("%s: %s has no partition: its keys go nowhere", label, tp.ID)
		}
		var total, weight int64
		for _, part := range tp.Partitions {
			if len(st.AllowedNodes) > 0 && !slices.Contains(st.AllowedNodes, part.Node) {
				t.Errorf("%s: %s placed on %s, not allowed", label, tp.ID, part.Node)
			}
			// A partition without memory beside one with memory counts toward a spread but
			// holds none of the keys routed to it. The papers' policies may leave one, the
			// optimal policy may not.
			empty := part.MemoryBytes == 0 && tp.MemoryBytes > 0 && label == PolicyOptimal
			if part.MemoryBytes < 0 || empty || part.RoutingWeight <= 0 {
				t.Errorf("%s: %s on %s: %d bytes, weight %d", label, tp.ID, part.Node, part.MemoryBytes, part.RoutingWeight)
			}
			used[part.Node] += part.MemoryBytes
			total += part.MemoryBytes
			weight += int64(part.RoutingWeight)
		}
		if total != tp.MemoryBytes {
			t.Errorf("%s: %s partitions sum to %d, memoryBytes says %d", label, tp.ID, total, tp.MemoryBytes)
		}
		if weight < 1_000_000-int64(len(tp.Partitions)) || weight > 1_000_000+int64(len(tp.Partitions)) {
			t.Errorf("%s: %s routing weights sum to %d ppm", label, tp.ID, weight)
		}
		if st.Memory.MaxBytes > 0 && total > st.Memory.MaxBytes {
			t.Errorf("%s: %s holds %d above its maximum %d", label, tp.ID, total, st.Memory.MaxBytes)
		}
		if total < st.Memory.MinBytes {
			t.Errorf("%s: %s holds %d below its minimum %d", label, tp.ID, total, st.Memory.MinBytes)
		}
		if n := len(tp.Partitions); n < int(max(1, st.Spread.MinNodes)) || (st.Spread.MaxNodes > 0 && n > int(st.Spread.MaxNodes)) {
			t.Errorf("%s: %s on %d nodes, spread %+v", label, tp.ID, n, st.Spread)
		}
		if tp.Verdict == "" || tp.Explanation == "" {
			t.Errorf("%s: %s without verdict or explanation", label, tp.ID)
		}
	}
	for node, u := range used {
		if u > capacity[node] {
			t.Errorf("%s: node %s holds %d, capacity %d", label, node, u, capacity[node])
		}
	}
	for _, f := range []planning.Format{planning.FormatJSON, planning.FormatYAML} {
		data, err := planning.Encode(plan, f)
		if err != nil {
			t.Fatalf("%s: encode %s: %v", label, f, err)
		}
		if _, err := planning.DecodePlan(data); err != nil {
			t.Fatalf("%s: the %s plan does not decode: %v", label, f, err)
		}
	}
}

func TestEveryPolicyRespectsNodeCapacity(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for i := range 30 {
		cfg := genConfig{
			tenants: 3 + rng.IntN(25), nodes: 1 + rng.IntN(6), oversubscription: 0.5 + 2*rng.Float64(),
			strictShare: rng.Float64(), cliffShare: rng.Float64() / 2, maxSpread: 1 + rng.IntN(3), restricted: rng.IntN(2) == 0,
		}
		s := randomSnapshot(rng, cfg)
		for _, policy := range PolicyNames() {
			if policy == PolicyOptimal && i%3 != 0 {
				continue // the solver runs on a third of the instances to keep the test fast
			}
			plan, err := Plan(t.Context(), s, Options{Policy: policy, Workers: 1, TimeLimit: time.Second})
			if errors.Is(err, ErrInfeasibleSnapshot) {
				continue
			}
			if err != nil {
				t.Fatalf("instance %d %s: %v", i, policy, err)
			}
			checkPlanInvariants(t, policy, s, plan)
		}
	}
}

func TestPlanRejectsBadInput(t *testing.T) {
	s := snapshotOf([]planning.Node{memNode("n1", 100)},
		planning.Tenant{ID: "a/one", Memory: planning.Memory{MinBytes: 70}},
		planning.Tenant{ID: "a/two", Memory: planning.Memory{MinBytes: 70}})
	cases := []struct {
		name string
		s    *planning.Snapshot
		opts Options
		want string
	}{
		{"minimums above capacity", s, Options{}, "memory minimums total 140 B but the nodes hold 100 B"},
		{"unknown policy", s, Options{Policy: "fastest"}, `unknown policy "fastest"`},
		{"bad utilization", s, Options{MaxUtilization: 1.5}, "MaxUtilization"},
		{"bad objective", s, Options{Objective: "money"}, `unknown objective "money"`},
		{"negative work limit", s, Options{WorkLimit: -1}, "WorkLimit -1 must be a finite number >= 0"},
		{"infinite work limit", s, Options{WorkLimit: math.Inf(1)}, "WorkLimit +Inf must be a finite number >= 0"},
		{"negative memory limit", s, Options{MemoryLimit: -1}, "MemoryLimit -1 must be a byte count >= 0"},
		{"invalid snapshot", snapshotOf(nil), Options{}, "nodes: at least one node is required"},
		{"spread wider than allowed", snapshotOf([]planning.Node{memNode("n1", 100)},
			planning.Tenant{ID: "a/one", Spread: planning.Spread{MinNodes: 2}}), Options{}, "spread.minNodes 2 but only 1 allowed nodes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Plan(t.Context(), c.s, c.opts)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
}

func TestExtremeMagnitudesNeverBreakTheModel(t *testing.T) {
	needSolver(t)
	// The largest nodes and rates the schema allows next to a node of one byte and one op/s:
	// every coefficient must stay within int64 and the solver must accept the models.
	huge := planning.MaxNodeMemoryBytes
	nodes := []planning.Node{
		{Name: "huge-1", MemoryBytes: huge, OpsPerSecond: planning.MaxRate, BandwidthBytesPerSecond: planning.MaxRate},
		{Name: "huge-2", MemoryBytes: huge, OpsPerSecond: planning.MaxRate, BandwidthBytesPerSecond: planning.MaxRate},
		{Name: "tiny", MemoryBytes: 1, OpsPerSecond: 1, BandwidthBytesPerSecond: 1},
	}
	var tenants []planning.Tenant
	for i, rate := range []float64{planning.MaxRate, 1e-9, 1, planning.MaxRate / 3} {
		tenants = append(tenants, planning.Tenant{
			ID: "x/t" + string(rune('a'+i)), Class: planning.ClassStrict, Priority: planning.MaxPriority,
			Objective:      hitObjective(0.5),
			MissRatioCurve: mrc(1, 0.9, float64(huge), 0.1, float64(2*huge), 0.01),
			Rates:          []planning.NodeRate{{Node: "huge-1", RequestsPerSecond: rate, BytesPerSecond: rate}},
			Bandwidth:      planning.Bandwidth{GuaranteedBytesPerSecond: planning.MaxRate / 4},
			Spread:         planning.Spread{MinNodes: 1, MaxNodes: 3},
			Current:        on("huge-2", huge/2),
		})
	}
	s := snapshotOf(nodes, tenants...)
	for _, opts := range []Options{{Workers: 1, TimeLimit: 3 * time.Second}, {Workers: 1, TimeLimit: 3 * time.Second, MaxChurnBytes: 1}} {
		plan, err := Plan(t.Context(), s, opts)
		if err != nil {
			t.Fatalf("Plan: %v", err)
		}
		if r := plan.Solver; r.Fallback != "" && !strings.Contains(r.Fallback, "scored higher") {
			t.Errorf("solver fell back: %+v", r)
		}
		checkPlanInvariants(t, "extreme", s, plan)
	}
}
