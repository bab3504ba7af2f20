package sim

import (
	"context"
	"slices"
	"testing"

	"github.com/cacheqos/cacheqos/internal/allocator"
	"github.com/cacheqos/cacheqos/internal/allocator/planning"
)

func pooledScenario() *Scenario {
	return &Scenario{
		Name: "pooled", Title: "pooled", Description: "test",
		Nodes: nodes(2, 4*mib, 1e6, plenty),
		Tenants: []Tenant{
			strict("s/strict", "zipf:keys=5000,skew=0.9,value=100", 1000, Objective{HitRatio: 0.5}),
			bestEffort("b/one", "loop:keys=1000,value=100", 2000, Objective{}),
			bestEffort("b/two", "loop:keys=1000,value=100", 2000, Objective{}),
		},
		Intervals: 2, IntervalSeconds: 2, Warmup: 1, PoolBestEffort: true,
	}
}

func partitions(ps ...planning.Partition) []planning.Partition { return ps }

func onNode(node string, memory int64) planning.Partition {
	return planning.Partition{Node: node, MemoryBytes: memory, RoutingWeight: 1_000_000}
}

// TestPoolsFollowThePlan applies plans one after the other and checks the caches in force:
// one pool per node holding the best-effort tenants' memory there, shared by them, strict
// tenants apart, and the movement counted on the pools rather than on the shares.
func TestPoolsFollowThePlan(t *testing.T) {
	steps := []struct {
		name  string
		plan  []planning.TenantPlan
		pools []int64 // per node; -1: no pool
		// reserved lists the best-effort tenants that missed every read of the interval before
		// (the others hit half): they are kept out of the pools.
		reserved []string
		moved    int64
	}{
		{
			name: "first plan",
			plan: []planning.TenantPlan{
				{ID: "s/strict", Partitions: partitions(onNode("node-01", mib))},
				{ID: "b/one", Partitions: partitions(onNode("node-01", mib), onNode("node-02", mib))},
				{ID: "b/two", Partitions: partitions(onNode("node-01", 2*mib))},
			},
			pools: []int64{3 * mib, mib},
			moved: 5 * mib,
		},
		{
			name: "shares change inside the pools",
			plan: []planning.TenantPlan{
				{ID: "s/strict", Partitions: partitions(onNode("node-01", mib))},
				{ID: "b/one", Partitions: partitions(onNode("node-01", 2*mib), onNode("node-02", 0))},
				{ID: "b/two", Partitions: partitions(onNode("node-01", mib), onNode("node-02", mib))},
			},
			pools: []int64{3 * mib, mib},
			moved: 0,
		},
		{
			name: "the strict tenant grows, a pool shrinks, the other goes",
			plan: []planning.TenantPlan{
				{ID: "s/strict", Partitions: partitions(onNode("node-01", 2*mib))},
				{ID: "b/one", Partitions: partitions(onNode("node-01", mib))},
				{ID: "b/two", Partitions: partitions(onNode("node-01", mib))},
			},
			pools: []int64{2 * mib, -1},
			moved: mib + mib + mib,
		},
		{
			name: "a tenant that stopped hitting leaves the pool for a partition",
			plan: []planning.TenantPlan{
				{ID: "s/strict", Partitions: partitions(onNode("node-01", 2*mib))},
				{ID: "b/one", Partitions: partitions(onNode("node-01", mib))},
				{ID: "b/two", Partitions: partitions(onNode("node-01", mib))},
			},
			pools:    []int64{mib, -1},
			reserved: []string{"b/two"},
			moved:    mib + mib,
		},
		{
			name: "and comes back",
			plan: []planning.TenantPlan{
				{ID: "s/strict", Partitions: partitions(onNode("node-01", 2*mib))},
				{ID: "b/one", Partitions: partitions(onNode("node-01", mib))},
				{ID: "b/two", Partitions: partitions(onNode("node-01", mib))},
			},
			pools: []int64{2 * mib, -1},
			moved: mib + mib,
		},
	}
	e, err := newEngine(pooledScenario(), allocator.PolicyEqual, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range steps {
		for _, ts := range e.tenants {
			ts.measured = true
			ts.stats[0] = nodeStats{requests: 100, hits: 50, misses: 50}
			if slices.Contains(step.reserved, ts.spec.ID) {
				ts.stats[0] = nodeStats{requests: 100, misses: 100}
			}
		}
		before := e.footprint()
		if err := e.apply(&planning.Plan{Tenants: step.plan}); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if got := movedBytes(before, e.footprint()); got != step.moved {
			t.Errorf("%s: moved %d bytes, want %d", step.name, got, step.moved)
		}
		for j, want := range step.pools {
			pool := e.pools[j]
			switch {
			case want < 0 && pool != nil:
				t.Errorf("%s: node %d keeps a pool of %d bytes", step.name, j, pool.memory)
			case want >= 0 && (pool == nil || pool.memory != want):
				t.Errorf("%s: node %d pool %+v, want %d bytes", step.name, j, pool, want)
			}
			for _, ts := range e.tenants {
				part := ts.parts[j]
				if part == nil {
					continue
				}
				want := ts.spec.Class != planning.ClassStrict && !slices.Contains(step.reserved, ts.spec.ID)
				if shared := pool != nil && part.cache == pool.cache; shared != want {
					t.Errorf("%s: %s on node %d uses the pool: %v", step.name, ts.spec.ID, j, shared)
				}
			}
		}
	}
}

// TestPooledTenantsKeepTheirKeysAndCurves runs two best-effort tenants looping over the same
// key names in one pool: neither reads the other's keys (each misses every one of its keys
// once), and each still gets its own miss-ratio curve in the snapshot.
func TestPooledTenantsKeepTheirKeysAndCurves(t *testing.T) {
	sc := pooledScenario()
	sc.Nodes = sc.Nodes[:1]
	e, err := newEngine(sc, allocator.PolicyEqual, 1)
	if err != nil {
		t.Fatal(err)
	}
	plan := &planning.Plan{Tenants: []planning.TenantPlan{
		{ID: "s/strict", Partitions: partitions(onNode("node-01", mib))},
		{ID: "b/one", Partitions: partitions(onNode("node-01", mib))},
		{ID: "b/two", Partitions: partitions(onNode("node-01", mib))},
	}}
	if err := e.apply(plan); err != nil {
		t.Fatal(err)
	}
	e.simulate(0)
	e.measure(0)
	snap := e.snapshot(1)
	for _, ts := range e.tenants[1:] {
		st := ts.stats[0]
		if st.requests < 2000 {
			t.Fatalf("%s sent %d requests, want several passes over its 1,000 keys", ts.spec.ID, st.requests)
		}
		if st.misses < 1000 {
			t.Errorf("%s missed %d times: it read keys it never wrote", ts.spec.ID, st.misses)
		}
		if st.hits == 0 {
			t.Errorf("%s never hit in a pool that holds both loops", ts.spec.ID)
		}
		for _, pt := range snap.Tenants {
			if pt.ID == ts.spec.ID && len(pt.MissRatioCurve) == 0 {
				t.Errorf("%s has no miss-ratio curve of its own", ts.spec.ID)
			}
		}
	}
}

// TestPooledRunsAreDeterministic runs a scenario with pools through the control loop twice:
// the same requests hit the same caches, and the movement counted is the pools'.
func TestPooledRunsAreDeterministic(t *testing.T) {
	sc := smallScenario()
	sc.PoolBestEffort = true
	var runs [2]*RunResult
	for k := range runs {
		r, err := Run(context.Background(), sc, allocator.PolicyEqual, 1)
		if err != nil {
			t.Fatal(err)
		}
		runs[k] = r
	}
	for k, tr := range runs[0].Tenants {
		if !slices.Equal(tr.Hits, runs[1].Tenants[k].Hits) || !slices.Equal(tr.Requests, runs[1].Tenants[k].Requests) {
			t.Errorf("%s: hits %v then %v", tr.ID, tr.Hits, runs[1].Tenants[k].Hits)
		}
	}
	for i := range runs[0].Intervals {
		if a, b := runs[0].Intervals[i].MovedBytes, runs[1].Intervals[i].MovedBytes; a != b {
			t.Errorf("interval %d: moved %d then %d bytes", i, a, b)
		}
	}
}
