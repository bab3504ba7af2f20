package sim

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/cacheqos/cacheqos/internal/allocator/planning"
	"github.com/cacheqos/cacheqos/internal/curve"
	"github.com/cacheqos/cacheqos/internal/mrc"
)

// The feasibility oracle decides whether a scenario's strict objectives can be met with a
// margin by a plan that knows every tenant's exact curve in every interval. It replays each
// strict tenant's own request stream (the one a run with the same seed sends) through an
// exact LRU stack, so that in every interval it knows the smallest memory giving any hit
// ratio. The plan it looks for is static: each strict tenant keeps, from its arrival to its
// departure, the most it needs in any of its counted intervals. The rule:
//
//   - in each counted interval j of strict tenant k, the required hit ratio h is the target
//     (hit-ratio objectives); for a mean-latency objective L, h = (t_miss + q − L) /
//     (t_miss − t_hit), where q is the M/M/1 delay at utilization OracleLoadSlack × (the
//     fleet's requests per second in j) / (its ops capacity), and the fleet is infeasible
//     when that utilization reaches OracleMaxUtilization; for a degradation objective f,
//     h = (t_miss + q − f × lat_eq) / (t_miss − t_hit), where lat_eq is the tenant's latency
//     with its fair share in j (the fleet's memory over the tenants active in j, as the equal
//     policy gives it) at the exact hit ratio of that share.
//   - need_j = max(size(min(h + OracleHitRatioMargin, 1)), (1 + OracleMemoryMargin) × size(h)),
//     size(x) being the smallest LRU size (objects counted in the scenario engine's bytes) at
//     which a fraction x of interval j's requests hit (0 when h ≤ 0). A target above the
//     interval's re-referenced fraction is unreachable, and the fleet infeasible. The tenant's
//     need is the largest need_j.
//   - in every interval, the needs of the strict tenants active in it pack into the nodes:
//     most constrained first (need over the nodes it may use), each tenant spread over the
//     MaxNodes nodes (every node when unset) with the most free memory, levelling what is
//     left. The scenario is feasible when every interval packs.
//
// The packing is greedy, so the oracle may reject a fleet a cleverer packing would hold; it
// never accepts one that cannot be packed.
const (
	OracleHitRatioMargin = 0.02
	OracleMemoryMargin   = 0.10
	// OracleLoadSlack scales the fleet's mean utilization for the queueing delay: keys do not
	// spread load evenly over the nodes.
	OracleLoadSlack      = 1.3
	OracleMaxUtilization = 0.95
)

// demandProfile is a strict tenant's exact LRU stack distances, per interval of a run.
type demandProfile struct {
	// distances[i] holds the sorted stack distances (bytes) of interval i's re-references.
	distances [][]int64
	// requests[i] is the number of requests the tenant sends in interval i.
	requests []int
}

// expectedRequests is how many requests t sends in interval i of sc (its rate times the
// interval's length; a run draws Poisson arrivals around it).
func expectedRequests(sc *Scenario, t *Tenant, i int) int {
	if !t.activeAt(i) {
		return 0
	}
	return int(math.Round(t.rateAt(i) * sc.intervalSeconds()))
}

// exactProfile replays t's requests of a run with seed through an exact LRU stack.
func exactProfile(sc *Scenario, t *Tenant, seed uint64) (*demandProfile, error) {
	gen, err := t.requests(seed)
	if err != nil {
		return nil, err
	}
	stack, err := mrc.NewExactLRU([]int64{1})
	if err != nil {
		return nil, err
	}
	model, err := sc.engineModel()
	if err != nil {
		return nil, err
	}
	p := &demandProfile{distances: make([][]int64, sc.Intervals), requests: make([]int, sc.Intervals)}
	for i := range sc.Intervals {
		n := expectedRequests(sc, t, i)
		p.requests[i] = n
		for range n {
			a := gen.Next()
			if d, seen := stack.Access(a.Key, objectBytes(model, a)); seen {
				p.distances[i] = append(p.distances[i], d)
			}
		}
		slices.Sort(p.distances[i])
	}
	return p, nil
}

// hitRatio is interval i's exact LRU hit ratio at size bytes.
func (p *demandProfile) hitRatio(i int, size int64) float64 {
	if p.requests[i] == 0 {
		return math.NaN()
	}
	hits, _ := slices.BinarySearch(p.distances[i], size+1)
	return float64(hits) / float64(p.requests[i])
}

// reachable is the highest hit ratio of interval i (every re-reference a hit).
func (p *demandProfile) reachable(i int) float64 {
	if p.requests[i] == 0 {
		return math.NaN()
	}
	return float64(len(p.distances[i])) / float64(p.requests[i])
}

// sizeFor is the smallest LRU size at which a fraction h of interval i's requests hit; ok is
// false when h is above the interval's re-referenced fraction.
func (p *demandProfile) sizeFor(i int, h float64) (size int64, ok bool) {
	if h <= 0 {
		return 0, true
	}
	hits := int(math.Ceil(h*float64(p.requests[i]) - 1e-9))
	if hits > len(p.distances[i]) {
		return 0, false
	}
	return p.distances[i][hits-1], true
}

// OracleVerdict is the oracle's answer for a scenario.
type OracleVerdict struct {
	Feasible bool
	// Reason says why not: the tenant, interval and objective that failed, or the interval
	// that did not pack.
	Reason string
	// Needs[k] is the memory reserved for tenant k while it is active (0 for tenants
	// without a strict objective or never counted).
	Needs []int64
	// MinSlack is the smallest share of the fleet's memory left after packing, over intervals.
	MinSlack float64
}

// Feasibility runs the oracle on sc with the request streams of a run with seed.
func Feasibility(sc *Scenario, seed uint64) (*OracleVerdict, error) {
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	profiles := make([]*demandProfile, len(sc.Tenants))
	for k := range sc.Tenants {
		t := &sc.Tenants[k]
		if !t.isStrict() {
			continue
		}
		p, err := exactProfile(sc, t, seed)
		if err != nil {
			return nil, fmt.Errorf("tenant %s: %w", t.ID, err)
		}
		profiles[k] = p
	}
	return feasibility(sc, profiles), nil
}

// isStrict reports whether the tenant is strict with an objective the oracle must keep.
func (t *Tenant) isStrict() bool { return t.Class == planning.ClassStrict && !t.Objective.IsZero() }

// firstCounted is the first interval in which the tenant's results count.
func (t *Tenant) firstCounted(sc *Scenario) int { return t.Arrive + sc.Warmup }

func feasibility(sc *Scenario, profiles []*demandProfile) *OracleVerdict {
	v := &OracleVerdict{Feasible: true, Needs: make([]int64, len(sc.Tenants)), MinSlack: 1}
	for k := range sc.Tenants {
		need, err := staticNeed(sc, profiles[k], k)
		if err != nil {
			v.Feasible, v.Reason = false, err.Error()
			return v
		}
		v.Needs[k] = need
	}
	total := totalMemory(sc)
	for i := range sc.Intervals {
		free, err := packNeeds(sc, v.Needs, i)
		if err != nil {
			v.Feasible, v.Reason = false, fmt.Sprintf("interval %d: %v", i, err)
			return v
		}
		v.MinSlack = math.Min(v.MinSlack, float64(free)/total)
	}
	return v
}

// staticNeed is the most tenant k needs in any of its counted intervals (0 without a profile).
func staticNeed(sc *Scenario, p *demandProfile, k int) (int64, error) {
	if p == nil {
		return 0, nil
	}
	var need int64
	t := &sc.Tenants[k]
	for j := t.firstCounted(sc); j < sc.Intervals && t.activeAt(j); j++ {
		n, err := oracleNeed(sc, p, k, j)
		if err != nil {
			return 0, err
		}
		need = max(need, n)
	}
	return need, nil
}

// oracleNeed is the memory tenant k needs in interval j with the oracle's margins.
func oracleNeed(sc *Scenario, p *demandProfile, k, j int) (int64, error) {
	t := &sc.Tenants[k]
	tHit, tMiss := sc.hitLatency(), sc.missLatency()
	o := t.Objective
	var h float64
	switch {
	case o.HitRatio > 0:
		h = o.HitRatio
	default:
		q, err := oracleQueueDelay(sc, j)
		if err != nil {
			return 0, fmt.Errorf("tenant %s, interval %d: %w", t.ID, j, err)
		}
		target := o.Latency.Seconds()
		if o.MaxDegradation > 0 {
			hEq := p.hitRatio(j, fairShare(sc, j))
			target = o.MaxDegradation * (hEq*tHit + (1-hEq)*tMiss + q)
		}
		h = (tMiss + q - target) / (tMiss - tHit)
	}
	if h <= 0 {
		return 0, nil
	}
	withMargin, ok := p.sizeFor(j, math.Min(h+OracleHitRatioMargin, 1))
	base, _ := p.sizeFor(j, h)
	if !ok {
		return 0, fmt.Errorf("tenant %s, interval %d: %s needs hit ratio %.3f+%.2f, but only %.3f of its requests are re-references",
			t.ID, j, o, h, OracleHitRatioMargin, p.reachable(j))
	}
	return max(withMargin, int64(math.Ceil((1+OracleMemoryMargin)*float64(base)))), nil
}

// oracleQueueDelay is the queueing delay the oracle assumes in interval i.
func oracleQueueDelay(sc *Scenario, i int) (float64, error) {
	var rate, ops float64
	for k := range sc.Tenants {
		if t := &sc.Tenants[k]; t.activeAt(i) {
			rate += t.rateAt(i)
		}
	}
	for _, n := range sc.Nodes {
		ops += n.OpsPerSecond
	}
	rho := OracleLoadSlack * rate / ops
	if rho >= OracleMaxUtilization {
		return 0, fmt.Errorf("utilization %.2f (with the %.1f× slack for uneven load) leaves latency unbounded", rho, OracleLoadSlack)
	}
	d, _ := curve.QueueDelayAtUtilization(ops/float64(len(sc.Nodes)), rho)
	return d, nil
}

// fairShare is the equal policy's share in interval i: the fleet's memory over its active
// tenants.
func fairShare(sc *Scenario, i int) int64 {
	active := 0
	for k := range sc.Tenants {
		if sc.Tenants[k].activeAt(i) {
			active++
		}
	}
	return int64(totalMemory(sc)) / int64(max(active, 1))
}

// packNeeds places the needs of the tenants active in interval i on the nodes and returns the
// memory left over.
func packNeeds(sc *Scenario, needs []int64, i int) (int64, error) {
	placed, err := placeNeeds(sc, needs, func(k int) bool { return sc.Tenants[k].activeAt(i) })
	if err != nil {
		return 0, err
	}
	left := int64(totalMemory(sc))
	for _, perNode := range placed {
		for _, b := range perNode {
			left -= b
		}
	}
	return left, nil
}

// placeNeeds places the needs of the tenants include selects: placed[k][j] is tenant k's
// memory on node j.
func placeNeeds(sc *Scenario, needs []int64, include func(k int) bool) ([][]int64, error) {
	free := make([]int64, len(sc.Nodes))
	for j, n := range sc.Nodes {
		free[j] = n.MemoryBytes
	}
	width := func(k int) int {
		if m := int(sc.Tenants[k].MaxNodes); m > 0 {
			return min(m, len(sc.Nodes))
		}
		return len(sc.Nodes)
	}
	var order []int
	for k, need := range needs {
		if need > 0 && include(k) {
			order = append(order, k)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return -cmp.Compare(float64(needs[a])/float64(width(a)), float64(needs[b])/float64(width(b)))
	})
	placed := make([][]int64, len(needs))
	for _, k := range order {
		nodes := make([]int, len(free))
		for j := range nodes {
			nodes[j] = j
		}
		slices.SortStableFunc(nodes, func(a, b int) int { return -cmp.Compare(free[a], free[b]) })
		nodes = nodes[:width(k)]
		before := slices.Clone(free)
		if !level(free, nodes, needs[k]) {
			return nil, fmt.Errorf("tenant %s needs %s on at most %d nodes; they have less free", sc.Tenants[k].ID, planning.FormatBytes(needs[k]), width(k))
		}
		placed[k] = make([]int64, len(free))
		for j := range free {
			placed[k][j] = before[j] - free[j]
		}
	}
	return placed, nil
}

// level takes need bytes from the nodes' free memory so that what is left is as even as
// possible (water-filling from the top); false when they do not have need bytes.
func level(free []int64, nodes []int, need int64) bool {
	var have int64
	for _, j := range nodes {
		have += free[j]
	}
	if have < need {
		return false
	}
	// nodes are sorted by free memory, largest first: lower the top to a common level.
	remaining := need
	for c := 1; c <= len(nodes) && remaining > 0; c++ {
		next := int64(0)
		if c < len(nodes) {
			next = free[nodes[c]]
		}
		top := free[nodes[0]]
		// Lowering the top c nodes (all at the same level now) to next frees c*(top-next).
		if step := int64(c) * (top - next); step >= remaining {
			drop, extra := remaining/int64(c), remaining%int64(c)
			for x := range c {
				free[nodes[x]] = top - drop
				if int64(x) < extra {
					free[nodes[x]]--
				}
			}
			remaining = 0
		} else {
			for x := range c {
				free[nodes[x]] = next
			}
			remaining -= step
		}
	}
	return remaining == 0
}
