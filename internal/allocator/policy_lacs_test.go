package allocator

import (
	"math"
	"strings"
	"testing"

	"github.com/cacheqos/cacheqos/internal/allocator/planning"
	"github.com/cacheqos/cacheqos/internal/curve"
)

// lacsToy is LACS' Fig. 2 in our terms: two servers with one unit (1000 bytes) of cache and 5
// requests/s each; users A and B each read two unit files, A at 1 request/s per file, B at
// `bRate` per file, spread over both servers. A miss costs delta seconds, a hit nothing.
func lacsToy(bRate, delta, background float64) *planning.Snapshot {
	node := func(name string) planning.Node {
		return planning.Node{Name: name, MemoryBytes: 1000, OpsPerSecond: 5, BandwidthBytesPerSecond: bigRate,
			Load: planning.Load{OpsPerSecond: background}}
	}
	user := func(id string, perFile float64) planning.Tenant {
		return planning.Tenant{
			ID: id,
			// Two equally popular files: the hit ratio grows linearly to 1 at two units.
			MissRatioCurve: mrc(2000, 1),
			Observed:       planning.Observation{MissLatencySeconds: delta},
			Rates:          []planning.NodeRate{{Node: "s1", RequestsPerSecond: perFile}, {Node: "s2", RequestsPerSecond: perFile}},
			Current: planning.Current{Partitions: []planning.CurrentPartition{
				{Node: "s1", MemoryBytes: 500}, {Node: "s2", MemoryBytes: 500}}},
		}
	}
	return snapshotOf([]planning.Node{node("s1"), node("s2")}, user("toy/a", 1), user("toy/b", bRate))
}

func latencyOf(t *testing.T, tp planning.TenantPlan) float64 {
	t.Helper()
	if tp.Predicted.LatencySeconds == nil {
		return math.Inf(1)
	}
	return *tp.Predicted.LatencySeconds
}

func TestLACSToyIsolationBaseline(t *testing.T) {
	p, err := newProblem(lacsToy(3, 1, 0), Options{})
	if err != nil {
		t.Fatal(err)
	}
	l := newLACS(p)
	// Isolated: half the cache (hit ratio 0.5) and half of each server (2.5 requests/s) for
	// 1 request/s: 0.5*delta + 1/(2.5-1) = 0.5 + 0.67 s.
	if want := 0.5 + 2.0/3; math.Abs(l.isoLatency[0]-want) > 1e-9 {
		t.Errorf("T*_A = %v, want %v", l.isoLatency[0], want)
	}
	// Max-min (the equal policy): each user caches one file, each server sees 1 + 3 = 4
	// requests/s, so A waits 1/(5-4) = 1 s and is worse off than isolated.
	plan := mustPlan(t, lacsToy(3, 1, 0), Options{Policy: PolicyEqual})
	a := tenantOf(t, plan, "toy/a")
	if got := latencyOf(t, a); math.Abs(got-1.5) > 1e-9 || got <= l.isoLatency[0] {
		t.Errorf("max-min latency of A = %v, want 0.5 + 1 s, worse than isolated %v", got, l.isoLatency[0])
	}
	for _, np := range plan.Nodes {
		if np.QueueDelaySeconds == nil || math.Abs(*np.QueueDelaySeconds-1) > 1e-9 {
			t.Errorf("node %s queueing %v, want 1 s", np.Name, np.QueueDelaySeconds)
		}
	}
	// B at 4 requests/s per file or more makes both servers unstable.
	plan = mustPlan(t, lacsToy(4, 1, 0), Options{Policy: PolicyEqual})
	for _, np := range plan.Nodes {
		if !np.Saturated {
			t.Errorf("B at 4/s: node %s not saturated (utilization %v)", np.Name, np.Utilization)
		}
	}
}

func TestLACSRevokesThenThrottlesTheElephant(t *testing.T) {
	cases := []struct {
		name          string
		delta         float64
		wantThrottled bool
	}{
		// A miss costs 1 s: giving A the elephant's cache (hit ratio 1) is enough.
		{"revocation suffices", 1, false},
		// A miss costs 0.5 s: the cache alone cannot compensate 1 s of queueing, so B is
		// throttled to half of each server.
		{"throttling needed", 0.5, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := lacsToy(3, c.delta, 0)
			p, err := newProblem(s, Options{})
			if err != nil {
				t.Fatal(err)
			}
			iso := newLACS(p).isoLatency[0]
			plan := mustPlan(t, s, Options{Policy: PolicyLACS})
			a, b := tenantOf(t, plan, "toy/a"), tenantOf(t, plan, "toy/b")
			if b.MemoryBytes != 0 || a.MemoryBytes != 2000 {
				t.Errorf("memory A %d, B %d: want the elephant's cache revoked and given to A", a.MemoryBytes, b.MemoryBytes)
			}
			if got := latencyOf(t, a); got > iso+1e-9 {
				t.Errorf("A's latency %v is worse than isolated %v", got, iso)
			}
			if b.Isolated != c.wantThrottled {
				t.Errorf("B isolated = %v, want %v", b.Isolated, c.wantThrottled)
			}
			// The elephant's traffic is still routed: its keys stay readable.
			var weight int64
			for _, part := range b.Partitions {
				weight += int64(part.RoutingWeight)
				if c.wantThrottled && part.OpsLimitPerSecond != 3 {
					t.Errorf("B on %s limited to %d ops/s, want ceil(5/2)", part.Node, part.OpsLimitPerSecond)
				}
			}
			if weight < 999_000 {
				t.Errorf("B's routing weights sum to %d ppm", weight)
			}
		})
	}
}

func TestLACSAggregateOverloadTerminatesInfeasible(t *testing.T) {
	// Background load saturates both servers: no amount of throttling restores A's
	// isolation; LACS throttles its only elephant, stops and reports.
	plan := mustPlan(t, lacsToy(3, 0.5, 10), Options{Policy: PolicyLACS})
	if !strings.Contains(strings.Join(plan.Notes, " "), "infeasible") {
		t.Errorf("notes %v, want the overload reported as infeasible", plan.Notes)
	}
	if b := tenantOf(t, plan, "toy/b"); !b.Isolated {
		t.Error("the elephant was not throttled before giving up")
	}
}

func TestLACSElephantHysteresis(t *testing.T) {
	// K = 2 over 10 requests/s: the threshold is 5. Just below it, a tenant the plan in
	// force already isolates stays an elephant; one that was not does not become one.
	for _, c := range []struct {
		rate        float64
		wasIsolated bool
		want        bool
	}{
		{4.9, true, true}, {4.9, false, false}, {5.2, false, true}, {4.7, true, false},
	} {
		s := lacsToy(c.rate/2, 1, 0)
		s.Tenants[1].Current.Isolated = c.wasIsolated
		p, err := newProblem(s, Options{})
		if err != nil {
			t.Fatal(err)
		}
		got := len(newLACS(p).elephants()) == 1
		if got != c.want {
			t.Errorf("rate %v, was isolated %v: elephant = %v, want %v", c.rate, c.wasIsolated, got, c.want)
		}
	}
}

func TestLoadQuotasSolveP4(t *testing.T) {
	// Homogeneous servers get equal loads; heterogeneous ones satisfy the KKT condition
	// mu/(mu-L)^2 equal on every loaded server.
	q := loadQuotas([]float64{5, 5}, 8)
	if math.Abs(q[0]-4) > 1e-6 || math.Abs(q[1]-4) > 1e-6 {
		t.Errorf("homogeneous quotas %v, want 4/4", q)
	}
	q = loadQuotas([]float64{10, 5}, 9)
	if math.Abs(q[0]+q[1]-9) > 1e-6 {
		t.Fatalf("quotas %v do not sum to 9", q)
	}
	k0, k1 := 10/((10-q[0])*(10-q[0])), 5/((5-q[1])*(5-q[1]))
	if math.Abs(k0-k1)/k0 > 1e-6 {
		t.Errorf("quotas %v violate the KKT condition (%v vs %v)", q, k0, k1)
	}
	d, _ := curve.QueueDelay(10, q[0])
	if d <= 0 {
		t.Error("quota saturates a server")
	}
}
