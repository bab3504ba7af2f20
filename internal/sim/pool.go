package sim

import (
	"github.com/cacheqos/cacheqos/internal/allocator/planning"
	"github.com/cacheqos/cacheqos/internal/keyhash"
)

// Pooling best-effort tenants is an experiment of the simulator only (Scenario.PoolBestEffort);
// the operator and the sidecar do not do it yet. Strict tenants keep their partitions; the
// best-effort tenants on a node share one cache there, as one engine process would, whose size
// is the sum of the memory the plan gives them on that node. A pooled tenant without a
// spread limit (MaxNodes) has its keys spread over every pool by pool size, as the shared
// baseline spreads everyone's over the nodes; one with a limit keeps the plan's nodes and
// weights. Each tenant keeps its own curve recorder and token buckets (the plan's limits,
// split by the routing weights); only the cache is shared. The workload's keys already carry
// the tenant's ID, as the proxy's per-tenant namespace would. A tenant that barely hits (a
// scan) keeps a partition of its own (minPooledHitRatio). docs/control-loop.md has the
// measurements.

// pooledNote says in reports that a run pooled best-effort tenants.
const pooledNote = "Best-effort tenants share one pooled cache per node under every policy but shared (a simulator experiment, not in the operator yet)."

// nodePool is the cache the pooled tenants share on one node.
type nodePool struct {
	cache  Cache
	memory int64
}

// minPooledHitRatio: a best-effort tenant that hit less than this in the last interval (a
// scan) gets a partition of its own; in a pool, LRU would give it space by its request rate,
// which it cannot use, at the expense of the tenants that can.
const minPooledHitRatio = 0.05

// poolable reports whether tenant ts goes to its nodes' pools: a best-effort tenant, unless
// its last interval was measured and it barely hit.
func (e *engine) poolable(ts *tenantState) bool {
	if !e.sc.PoolBestEffort || ts.spec.Class == planning.ClassStrict {
		return false
	}
	var hits, served int64
	for _, st := range ts.stats {
		hits += st.hits
		served += st.served()
	}
	return !ts.measured || served == 0 || float64(hits) >= minPooledHitRatio*float64(served)
}

// applyPooled puts plan in force with pools, and counts as interval ir's movement what the
// caches in force really change by. A plan kept in force is applied again, so that pool
// membership follows the last measurements.
func (e *engine) applyPooled(ir *IntervalRun, plan *planning.Plan) error {
	before := e.footprint()
	if err := e.apply(plan); err != nil {
		return err
	}
	ir.MovedBytes = movedBytes(before, e.footprint())
	return nil
}

// inForce is the plan in force.
func (e *engine) inForce() *planning.Plan {
	plan := &planning.Plan{}
	for _, ts := range e.tenants {
		if ts.plan != nil {
			plan.Tenants = append(plan.Tenants, *ts.plan)
		}
	}
	return plan
}

// applyPools sizes each node's pool to what plan gives the pooled tenants there: created when
// the node gets its first pooled partition (cold), resized as one cache, dropped with the last.
func (e *engine) applyPools(plan *planning.Plan) error {
	if !e.sc.PoolBestEffort {
		return nil
	}
	if e.pools == nil {
		e.pools = make([]*nodePool, len(e.sc.Nodes))
	}
	sizes := make([]int64, len(e.sc.Nodes))
	used := make([]bool, len(e.sc.Nodes))
	for _, ts := range e.tenants {
		ts.pooled = false
	}
	for _, tp := range plan.Tenants {
		ts := e.tenantByID(tp.ID)
		if ts == nil || !e.poolable(ts) {
			continue
		}
		ts.pooled = true
		for _, p := range tp.Partitions {
			j := e.nodeIndex[p.Node]
			sizes[j] += p.MemoryBytes
			used[j] = true
		}
	}
	for j, n := range e.sc.Nodes {
		switch pool := e.pools[j]; {
		case !used[j]:
			e.pools[j] = nil
		case pool == nil:
			c, err := NewCache(e.sc.Cache, cacheCapacity(e.model, sizes[j]), keyhash.Mix(e.seed^keyhash.Salt("pool@"+n.Name)))
			if err != nil {
				return err
			}
			e.pools[j] = &nodePool{cache: c, memory: sizes[j]}
		case pool.memory != sizes[j]:
			if err := pool.cache.SetCapacity(cacheCapacity(e.model, sizes[j])); err != nil {
				return err
			}
			pool.memory = sizes[j]
		}
	}
	return nil
}

// pooledPartitions is where tenant ts, pooled, is served under plan tp: over every pool by
// pool size (the plan's total memory and limits split by those weights), or the plan's own
// partitions when the tenant's spread is limited.
func (e *engine) pooledPartitions(ts *tenantState, tp *planning.TenantPlan) []planning.Partition {
	if ts.spec.MaxNodes > 0 {
		return tp.Partitions
	}
	var poolBytes, bandwidth, ops int64
	for _, pool := range e.pools {
		if pool != nil {
			poolBytes += pool.memory
		}
	}
	for _, p := range tp.Partitions {
		bandwidth += p.BandwidthLimitBytesPerSecond
		ops += p.OpsLimitPerSecond
	}
	var out []planning.Partition
	for j, pool := range e.pools {
		if pool == nil {
			continue
		}
		share := 1.0
		if poolBytes > 0 {
			share = float64(pool.memory) / float64(poolBytes)
		}
		split := func(total int64) int64 {
			if total == 0 {
				return 0
			}
			return max(1, int64(share*float64(total)))
		}
		out = append(out, planning.Partition{
			Node: e.sc.Nodes[j].Name, MemoryBytes: int64(share * float64(tp.MemoryBytes)), RoutingWeight: int32(share * 1e6),
			BandwidthLimitBytesPerSecond: split(bandwidth), OpsLimitPerSecond: split(ops),
		})
	}
	return out
}

// placement identifies one cache in force: a tenant's partition on a node, or (tenant "") the
// node's pool.
type placement struct {
	tenant string
	node   int
}

// footprint returns the memory of every cache in force: reserved partitions and pools.
func (e *engine) footprint() map[placement]int64 {
	out := make(map[placement]int64)
	for _, ts := range e.tenants {
		for j, p := range ts.parts {
			if p != nil && !p.pooled {
				out[placement{ts.spec.ID, j}] = p.memory
			}
		}
	}
	for j, pool := range e.pools {
		if pool != nil {
			out[placement{"", j}] = pool.memory
		}
	}
	return out
}

// movedBytes is the L1 distance between two footprints: what a plan really moves when the
// pooled tenants' shares of a pool change without changing its size.
func movedBytes(before, after map[placement]int64) int64 {
	var moved int64
	for k, b := range before {
		moved += abs64(after[k] - b)
	}
	for k, a := range after {
		if _, ok := before[k]; !ok {
			moved += a
		}
	}
	return moved
}

func abs64(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}
