package allocator

import (
	"context"
	"fmt"
	"math"

	"github.com/cacheqos/cacheqos/internal/curve"
)

// defaultMaxperfDegradation is Maxperf's default objective: at most 5% worse than the fair
// share, used for tenants that state no objective.
const defaultMaxperfDegradation = 1.05

// runMaxperf is Maxperf's two stages.
//
// Sizing, with all nodes as one pool: C_min is the smallest size meeting the tenant's
// objective; a maximum degradation delta relative to the fair share (1/N of the aggregate) is
// the paper's form, and tenants without an objective get its default 1.05. The curve is the
// shared monotone fit instead of Neville's polynomial (see package curve). A tenant whose need
// is out of reach or above what it may have falls back to the fair share (reported). The spare
// C_free = C_total - sum C_min is split by projected gain: C'_j = C_free * (Lat_j - min Lat_j)
// / sum_k (Lat_k - min Lat_k), with Lat_j the latency at C_min and min Lat_j the latency at
// the largest size it may have (equal split when every gain is 0). When even the minimums do
// not fit, every tenant gets the fair share.
//
// Placement: the paper's LP — c_ij >= 0 on the nodes tenant i may use, sum_j c_ij = C_i,
// sum_i c_ij <= C_j, maximize min c_ij — solved exactly (see maxMinPlacement). Spread bounds
// are not part of Maxperf and are ignored; allowed nodes are its "subset of servers".
func runMaxperf(ctx context.Context, p *problem) (*allocation, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	a := newAllocation(len(p.tenants))
	m := len(p.tenants)
	minimums := make([]int64, m)
	var sum int64
	for k := range p.tenants {
		t := &p.tenants[k]
		need, ok := p.maxperfMinimum(k)
		if !ok {
			need = min(max(p.fairShare, t.minBytes), t.maxBytes)
			a.note(k, "maxperf: objective out of reach (%s); fair-share fallback", p.needs[k].why)
		}
		minimums[k] = need
		sum += need
	}
	var sizes []int64
	if sum > p.totalMemory {
		sizes = p.fairSizes()
		a.planNotes = append(a.planNotes, "maxperf: the objectives' minimums exceed the aggregate memory; every tenant gets the fair share")
	} else {
		gains := make([]float64, m)
		room := make([]int64, m)
		for k := range p.tenants {
			gains[k] = math.Max(0, p.latencyAt(k, minimums[k])-p.latencyAt(k, p.tenants[k].maxBytes))
			room[k] = p.tenants[k].maxBytes - minimums[k]
		}
		spare := splitProportional(p.totalMemory-sum, gains, room)
		sizes = make([]int64, m)
		for k := range sizes {
			sizes[k] = minimums[k] + spare[k]
			a.note(k, "maxperf: minimum %s plus %s of spare by projected latency gain", bytesHuman(minimums[k]), bytesHuman(spare[k]))
		}
	}
	parts, placed := p.maxMinPlacement(sizes)
	for k := range p.tenants {
		if placed[k] < sizes[k] {
			a.note(k, "maxperf: only %s of %s fits on its allowed nodes (partial connectivity)", bytesHuman(placed[k]), bytesHuman(sizes[k]))
		}
		a.parts[k] = parts[k]
	}
	return a, nil
}

// maxperfMinimum is the smallest size meeting tenant k's objective, a default maximum
// degradation of 1.05 for tenants without one; false when out of reach.
func (p *problem) maxperfMinimum(k int) (int64, bool) {
	t := &p.tenants[k]
	if t.objective != nil {
		n := p.needs[k]
		return n.bytes, n.reachable
	}
	h, ok := curve.HitRatioForLatency(defaultMaxperfDegradation*p.latencyAt(k, p.fairShare), t.hitLatency, t.missLatency, 0)
	if !ok {
		return 0, false
	}
	size, ok := t.curve.MinSize(h)
	size = max(size, t.minBytes)
	return size, ok && size <= t.maxBytes
}

// maxMinPlacement solves Maxperf's placement LP exactly on whole bytes: the largest t such
// that every (tenant, allowed node) pair of a tenant with memory gets at least t bytes, each
// tenant gets exactly its size and no node more than its memory. For a given t this is a
// transportation problem (supply: size - t*allowed per tenant; capacity: memory -
// t*tenants-allowed-there per node), feasible exactly when its maximum flow saturates the
// supply, and feasibility only gets harder as t grows, so t is found by binary search with a
// max-flow per step, and c_ij = t + flow_ij. Tenants allowed on the same nodes are
// interchangeable in that problem, so the flow runs on groups of them (few, however many
// tenants there are) and each group's flow to each node is then divided among its tenants
// (northwest-corner rule, which only needs every tenant of a group to reach every node of it).
// When even t = 0 cannot place every size (partial connectivity), each tenant gets what the
// maximum flow places. It returns the parts and the bytes placed per tenant. Tenants without
// memory are routed equally over their allowed nodes.
func (p *problem) maxMinPlacement(sizes []int64) ([][]part, []int64) {
	m, n := len(p.tenants), len(p.nodes)
	degree := make([]int64, n)
	groupOf := map[string]int{}
	var groups [][]int // tenant indices with memory, by allowed set
	for k, t := range p.tenants {
		if sizes[k] == 0 {
			continue
		}
		for _, j := range t.allowed {
			degree[j]++
		}
		key := fmt.Sprint(t.allowed)
		g, ok := groupOf[key]
		if !ok {
			g = len(groups)
			groupOf[key] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], k)
	}
	type solved struct {
		g     *flowGraph
		src   []int   // per group: its source edge
		edges [][]int // per group, per allowed node: edge id
	}
	supply := func(k int, t int64, sz []int64) int64 { return sz[k] - t*int64(len(p.tenants[k].allowed)) }
	solve := func(t int64, sz []int64) (solved, bool) {
		g := newFlowGraph(len(groups) + n + 2)
		s, sink := len(groups)+n, len(groups)+n+1
		sv := solved{g: g, src: make([]int, len(groups)), edges: make([][]int, len(groups))}
		for j, nd := range p.nodes {
			c := nd.memory - t*degree[j]
			if c < 0 {
				return sv, false
			}
			g.addEdge(len(groups)+j, sink, c)
		}
		var want int64
		for gi, members := range groups {
			var d int64
			for _, k := range members {
				c := supply(k, t, sz)
				if c < 0 {
					return sv, false
				}
				d += c
			}
			want += d
			sv.src[gi] = g.addEdge(s, gi, d)
			for _, j := range p.tenants[members[0]].allowed {
				sv.edges[gi] = append(sv.edges[gi], g.addEdge(gi, len(groups)+j, 1<<62))
			}
		}
		return sv, g.maxFlow(s, sink) == want
	}
	// split divides each group's flow to each node among its tenants, capping each tenant at
	// its supply; it returns per tenant the flow to each of its allowed nodes.
	split := func(sv solved, t int64, sz []int64) [][]int64 {
		out := make([][]int64, m)
		for gi, members := range groups {
			allowed := p.tenants[members[0]].allowed
			flows := make([]int64, len(allowed))
			for i, e := range sv.edges[gi] {
				flows[i] = sv.g.flow(e)
			}
			node := 0
			for _, k := range members {
				out[k] = make([]int64, len(allowed))
				need := supply(k, t, sz)
				for need > 0 && node < len(flows) {
					take := min(need, flows[node])
					out[k][node] += take
					flows[node] -= take
					need -= take
					if flows[node] == 0 {
						node++
					}
				}
			}
		}
		return out
	}
	sz := sizes
	base, ok := solve(0, sz)
	if !ok {
		// Partial connectivity: each tenant keeps what the maximum flow places.
		flows := split(base, 0, sz)
		sz = make([]int64, m)
		for k := range sz {
			for _, f := range flows[k] {
				sz[k] += f
			}
		}
		base, _ = solve(0, sz)
	}
	// The answer lies in [0, hi]: no pair can get more than size/allowed.
	hi := int64(math.MaxInt64)
	for k, t := range p.tenants {
		if sz[k] > 0 {
			hi = min(hi, sz[k]/int64(len(t.allowed)))
		}
	}
	if hi == math.MaxInt64 {
		hi = 0
	}
	best, bestT, lo := base, int64(0), int64(0)
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if sv, ok := solve(mid, sz); ok {
			best, bestT, lo = sv, mid, mid
		} else {
			hi = mid - 1
		}
	}
	flows := split(best, bestT, sz)
	parts := make([][]part, m)
	placed := make([]int64, m)
	for k, t := range p.tenants {
		if sz[k] == 0 {
			for _, j := range t.allowed {
				parts[k] = append(parts[k], part{node: j, weight: 1})
			}
			continue
		}
		for i, j := range t.allowed {
			if c := bestT + flows[k][i]; c > 0 {
				parts[k] = append(parts[k], part{node: j, bytes: c})
				placed[k] += c
			}
		}
	}
	return parts, placed
}
