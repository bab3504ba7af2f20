package allocator

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/allocator/planning"
)

// The exact checker: the true optimum of the optimal policy's first two tiers (strict
// objectives met with their priority weights and safety margins, then expected hits) over
// real sizes in bytes, independent of the policy's levels, split units and quanta. Loads are
// not modelled (the instances it is used on have rates far below the nodes' capacities), nor
// movement (the third tier).
//
// Memory: a tenant on the node set N_k (a subset of its allowed nodes of spread.maxNodes
// nodes: a larger set never constrains memory more) with sizes S_k fits exactly when every
// set of nodes T holds what the tenants confined to it need, sum_{k: N_k ⊆ T} S_k <= mem(T)
// (Hall's condition for the transportation problem; the nodes are few, so every T is listed).
// That region is a polymatroid, over which a separable concave objective is maximized by
// filling the steepest segments first, each as far as the tightest set allows. Each tenant's
// value g_k(S) = big*tier1_k(S) + rate_k*h_k(S) is piecewise linear with upward jumps (at the
// need and the safe size), so the checker branches on the intervals of S_k between its
// breakpoints: in each node of the search the greedy over the upper concave hulls of the g_k
// on their intervals is an upper bound, its sizes a feasible solution, and an interval where
// the hull and g_k differ is split at a breakpoint, until they agree.
type exactChecker struct {
	p     *problem
	nodes int
	mem   []int64 // per node mask T: memory of the nodes in T
	big   float64 // a strict objective's weight unit: more than every expected hit together
	// sloUnit is the policy's: one more than the strict tenants, so margins never buy an objective.
	sloUnit int64
}

// exactValue is a solution's value, tier by tier.
type exactValue struct {
	tier1 int64
	hits  float64
}

func newExactChecker(p *problem) *exactChecker {
	e := &exactChecker{p: p, nodes: len(p.nodes), sloUnit: 1}
	e.mem = make([]int64, 1<<e.nodes)
	for mask := range e.mem {
		for j := range e.nodes {
			if mask&(1<<j) != 0 {
				e.mem[mask] += p.nodes[j].memory
			}
		}
	}
	var rate float64
	for k, t := range p.tenants {
		rate += p.hitValueWeight(k)
		if t.strict {
			e.sloUnit++
		}
	}
	e.big = 2*rate + 1
	return e
}

func (e *exactChecker) tier1(k int, size int64) int64 {
	t, n := &e.p.tenants[k], e.p.needs[k]
	if !t.strict || !n.reachable || size < n.bytes {
		return 0
	}
	v := (1 + int64(t.priority)) * e.sloUnit
	if size >= n.safeBytes {
		v++
	}
	return v
}

func (e *exactChecker) g(k int, size int64) float64 {
	return e.big*float64(e.tier1(k, size)) + e.p.hitValueWeight(k)*e.p.tenants[k].curve.At(size)
}

// value is the two tiers of a plan's sizes.
func (e *exactChecker) value(sizes []int64) exactValue {
	var v exactValue
	for k, s := range sizes {
		v.tier1 += e.tier1(k, s)
		v.hits += e.p.hitValueWeight(k) * e.p.tenants[k].curve.At(s)
	}
	return v
}

// breakpoints are where g_k may bend or jump inside (lo, hi).
func (e *exactChecker) breakpoints(k int, lo, hi int64) []int64 {
	n := e.p.needs[k]
	out := e.p.tenants[k].curve.Breakpoints(lo, hi)
	for _, b := range []int64{n.bytes, n.safeBytes} {
		if b > lo && b < hi {
			out = append(out, b)
		}
	}
	return uniqueSorted(out)
}

type hullPoint struct {
	x int64
	y float64
}

// hull is the upper concave hull of g_k over [lo, hi] (its vertices, ascending).
func (e *exactChecker) hull(k int, lo, hi int64) []hullPoint {
	xs := append(append([]int64{lo}, e.breakpoints(k, lo, hi)...), hi)
	var h []hullPoint
	for _, x := range uniqueSorted(xs) {
		pt := hullPoint{x, e.g(k, x)}
		for len(h) >= 2 {
			a, b := h[len(h)-2], h[len(h)-1]
			if (b.y-a.y)*float64(pt.x-a.x) > (pt.y-a.y)*float64(b.x-a.x) {
				break
			}
			h = h[:len(h)-1]
		}
		h = append(h, pt)
	}
	return h
}

func hullAt(h []hullPoint, x int64) float64 {
	i := sort.Search(len(h), func(i int) bool { return h[i].x >= x })
	switch {
	case i < len(h) && h[i].x == x:
		return h[i].y
	case i == 0 || i == len(h):
		return math.Inf(-1)
	}
	a, b := h[i-1], h[i]
	return a.y + (b.y-a.y)*float64(x-a.x)/float64(b.x-a.x)
}

// relax runs the greedy over the hulls for node sets sets and intervals lo, hi: the bound,
// the sizes it reaches (feasible), or ok=false when even the lower ends do not fit.
func (e *exactChecker) relax(sets []int, lo, hi []int64) (bound float64, sizes []int64, ok bool) {
	sizes = slices.Clone(lo)
	used := make([]int64, len(e.mem))
	for k, s := range sizes {
		for mask := range e.mem {
			if sets[k]&^mask == 0 {
				used[mask] += s
			}
		}
	}
	for mask := 1; mask < len(e.mem); mask++ {
		if used[mask] > e.mem[mask] {
			return 0, nil, false
		}
	}
	type segment struct {
		k     int
		bytes int64
		slope float64
	}
	var segs []segment
	for k := range sizes {
		h := e.hull(k, lo[k], hi[k])
		bound += h[0].y
		for i := 1; i < len(h); i++ {
			if dy := h[i].y - h[i-1].y; dy > 0 {
				segs = append(segs, segment{k, h[i].x - h[i-1].x, dy / float64(h[i].x-h[i-1].x)})
			}
		}
	}
	slices.SortStableFunc(segs, func(a, b segment) int { return cmp.Compare(b.slope, a.slope) })
	for _, s := range segs {
		room := s.bytes
		for mask := range e.mem {
			if sets[s.k]&^mask == 0 {
				room = min(room, e.mem[mask]-used[mask])
			}
		}
		if room <= 0 {
			continue
		}
		sizes[s.k] += room
		bound += s.slope * float64(room)
		for mask := range e.mem {
			if sets[s.k]&^mask == 0 {
				used[mask] += room
			}
		}
	}
	return bound, sizes, true
}

// optimum is the best value over every choice of node sets.
func (e *exactChecker) optimum() (exactValue, []int64, bool) {
	p := e.p
	choices := make([][]int, len(p.tenants))
	for k, t := range p.tenants {
		allowed := 0
		for _, j := range t.allowed {
			allowed |= 1 << j
		}
		for mask := 1; mask < len(e.mem); mask++ {
			if mask&^allowed == 0 && bits.OnesCount(uint(mask)) == t.spreadMax {
				choices[k] = append(choices[k], mask)
			}
		}
	}
	lo, hi := make([]int64, len(p.tenants)), make([]int64, len(p.tenants))
	for k, t := range p.tenants {
		lo[k], hi[k] = t.minBytes, t.maxBytes
	}
	best, bestSizes, found := math.Inf(-1), []int64(nil), false
	sets := make([]int, len(p.tenants))
	var walk func(k int)
	walk = func(k int) {
		if k == len(p.tenants) {
			if v, s, ok := e.branchAndBound(sets, lo, hi, best); ok && v > best {
				best, bestSizes, found = v, s, true
			}
			return
		}
		for _, m := range choices[k] {
			sets[k] = m
			walk(k + 1)
		}
	}
	walk(0)
	if !found {
		return exactValue{}, nil, false
	}
	return e.value(bestSizes), bestSizes, true
}

// branchAndBound maximizes sum g_k for fixed node sets, returning a solution better than
// incumbent when there is one.
func (e *exactChecker) branchAndBound(sets []int, lo, hi []int64, incumbent float64) (float64, []int64, bool) {
	type node struct{ lo, hi []int64 }
	stack := []node{{slices.Clone(lo), slices.Clone(hi)}}
	best, bestSizes := incumbent, []int64(nil)
	tolerance := func(v float64) float64 { return 1e-9 * math.Max(1, math.Abs(v)) }
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		bound, sizes, ok := e.relax(sets, n.lo, n.hi)
		if !ok || bound <= best+tolerance(best) {
			continue
		}
		var value float64
		worst, worstGap := -1, 0.0
		for k, s := range sizes {
			v := e.g(k, s)
			value += v
			if gap := hullAt(e.hull(k, n.lo[k], n.hi[k]), s) - v; gap > worstGap+tolerance(v) {
				worst, worstGap = k, gap
			}
		}
		if value > best {
			best, bestSizes = value, sizes
		}
		if worst < 0 || bound-value <= tolerance(bound) {
			continue
		}
		// Split the worst tenant's interval at the breakpoint nearest its size, or, with none
		// inside, just below the jump at its upper end.
		k, s := worst, sizes[worst]
		split := n.hi[k]
		if bps := e.breakpoints(k, n.lo[k], n.hi[k]); len(bps) > 0 {
			split = slices.MinFunc(bps, func(a, b int64) int { return cmp.Compare(abs64(a-s), abs64(b-s)) })
		}
		left, right := node{slices.Clone(n.lo), slices.Clone(n.hi)}, node{slices.Clone(n.lo), slices.Clone(n.hi)}
		left.hi[k], right.lo[k] = split-1, split
		stack = append(stack, left, right)
	}
	return best, bestSizes, bestSizes != nil
}

// exactComparison compares a policy's plans with the exact optimum on random tight instances.
type exactComparison struct {
	instances, infeasible, violations int
	tier1Below, tier1Above            int
	hitsGaps                          []float64 // relative, where the first tier equals the optimum's
	// optimalWithGap counts plans reported Optimal that are more than the solver's tolerance
	// (0.05%) below the optimum's expected hits.
	optimalWithGap int
	worst          string
}

func compareWithExact(t testing.TB, seed uint64, n int, opts Options) exactComparison {
	rng := rand.New(rand.NewPCG(seed, 16))
	var c exactComparison
	for i := range n {
		s := tightSnapshot(rng)
		c.instances++
		p, err := newProblem(s, opts)
		if errors.Is(err, ErrInfeasibleSnapshot) {
			c.infeasible++ // minimums above the total memory, a spread wider than allowed...
			continue
		}
		if err != nil {
			t.Fatalf("instance %d: %v", i, err)
		}
		opt, optSizes, feasible := newExactChecker(p).optimum()
		plan, err := Plan(t.Context(), s, opts)
		switch {
		case !feasible && errors.Is(err, ErrInfeasibleSnapshot):
			c.infeasible++
			continue
		case !feasible:
			t.Fatalf("instance %d: the checker finds no packing, the policy says %v", i, err)
		case err != nil:
			t.Fatalf("instance %d: feasible (optimum %+v) but Plan: %v", i, opt, err)
		}
		if v := newPlanViolations(p, s, plan); len(v) > 0 {
			c.violations++
			t.Errorf("instance %d: %s", i, strings.Join(v, "; "))
		}
		sizes := make([]int64, len(plan.Tenants))
		for k, tp := range plan.Tenants {
			sizes[k] = tp.MemoryBytes
		}
		got := newExactChecker(p).value(sizes)
		switch {
		case got.tier1 < opt.tier1:
			c.tier1Below++
			t.Logf("instance %d: strict tier %d, the optimum's %d (%s, %s)", i, got.tier1, opt.tier1, plan.Solver.Status, plan.Solver.Fallback)
		case got.tier1 > opt.tier1 || got.hits > opt.hits*(1+1e-9)+1e-9:
			c.tier1Above++
			t.Errorf("instance %d: the plan (%+v) beats the exact optimum (%+v): the checker is wrong", i, got, opt)
		default:
			gap := 0.0
			if opt.hits > 0 {
				gap = (opt.hits - got.hits) / opt.hits
			}
			c.hitsGaps = append(c.hitsGaps, gap)
			// The reported gap is against plans meeting the same strict objectives (with the
			// same margins): a valid bound where the optimum meets the same ones.
			same := true
			for k := range sizes {
				same = same && newExactChecker(p).tier1(k, sizes[k]) == newExactChecker(p).tier1(k, optSizes[k])
			}
			if r := plan.Solver; r.Gap > 1 || (same && r.Gap < gap-1e-6) {
				t.Errorf("instance %d: reported gap %v, the true gap is %v: the bound is not valid", i, r.Gap, gap)
			}
			if plan.Solver.Status == "Optimal" && gap > 0.0005 {
				c.optimalWithGap++
			}
			if gap >= slices.Max(append([]float64{0}, c.hitsGaps[:len(c.hitsGaps)-1]...)) {
				c.worst = fmt.Sprintf("instance %d: %.2f hits/s of %.2f", i, got.hits, opt.hits)
			}
		}
	}
	return c
}

// newPlanViolations lists the hard constraints a plan breaks, read from the plan document.
func newPlanViolations(p *problem, s *planning.Snapshot, plan *planning.Plan) []string {
	index := map[string]int{}
	for j, n := range s.Nodes {
		index[n.Name] = j
	}
	parts := make([][]part, len(plan.Tenants))
	for k, tp := range plan.Tenants {
		for _, pt := range tp.Partitions {
			parts[k] = append(parts[k], part{node: index[pt.Node], bytes: pt.MemoryBytes, weight: int64(pt.RoutingWeight)})
		}
	}
	return p.hardViolations(parts)
}

func (c exactComparison) summary() string {
	g := slices.Clone(c.hitsGaps)
	slices.Sort(g)
	var mean float64
	for _, x := range g {
		mean += x
	}
	median, worst := 0.0, 0.0
	if len(g) > 0 {
		mean /= float64(len(g))
		median, worst = g[len(g)/2], g[len(g)-1]
	}
	above := func(limit float64) int {
		return len(g) - sort.SearchFloat64s(g, math.Nextafter(limit, 1))
	}
	return fmt.Sprintf("%d instances (%d infeasible, proven by both): constraint violations %d; strict tier below the optimum %d; "+
		"expected-hits gap where the strict tier is optimal (%d plans): median %.3f%%, mean %.3f%%, worst %.3f%% (%s), "+
		"above 0.05%% %d, above 0.5%% %d, above 1%% %d; reported Optimal above 0.05%% %d",
		c.instances, c.infeasible, c.violations, c.tier1Below, len(g), 100*median, 100*mean, 100*worst, c.worst,
		above(0.0005), above(0.005), above(0.01), c.optimalWithGap)
}

// The checker against brute force on tiny instances: one node, two tenants, sizes enumerated
// on a grid that contains every breakpoint.
func TestExactCheckerMatchesEnumeration(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for i := range 30 {
		const unit = 1 << 20
		mem := (4 + rng.Int64N(8)) * unit
		var tenants []planning.Tenant
		for k := range 2 {
			a, b := (1+rng.Int64N(6))*unit, (7+rng.Int64N(6))*unit
			tn := planning.Tenant{ID: fmt.Sprintf("t/%d", k), Rates: rates("n1", 1+float64(rng.IntN(100))),
				MissRatioCurve: mrc(float64(a), rng.Float64()*0.5, float64(b), 0.5+rng.Float64()*0.5)}
			tn.Memory.MinBytes = rng.Int64N(3) * unit
			tenants = append(tenants, tn)
		}
		s := snapshotOf([]planning.Node{memNode("n1", mem)}, tenants...)
		p, err := newProblem(s, Options{})
		if err != nil {
			t.Fatal(err)
		}
		e := newExactChecker(p)
		got, _, ok := e.optimum()
		if !ok {
			t.Fatalf("instance %d: no optimum", i)
		}
		want := math.Inf(-1)
		for a := p.tenants[0].minBytes; a <= mem; a += unit {
			for b := p.tenants[1].minBytes; a+b <= mem; b += unit {
				want = math.Max(want, e.value([]int64{a, b}).hits)
			}
		}
		if math.Abs(got.hits-want) > 1e-9*want {
			t.Errorf("instance %d: checker %v, enumeration %v", i, got.hits, want)
		}
	}
}

// The optimal policy against the exact optimum on random instances like issue 16's: no
// constraint broken, never below its strict tier, within the solver's tolerance (0.05%) of its
// expected hits (the issue asks for 0.5%), none reported Optimal further than that. The search
// is bounded by work, not time, so a loaded machine gets the same plans (0.05 already gives
// them; a wall-clock limit of 2 s failed under load).
func TestOptimalAgainstExactChecker(t *testing.T) {
	needSolver(t)
	c := compareWithExact(t, 2026, 60, Options{Workers: 1, WorkLimit: 1, TimeLimit: time.Minute})
	t.Log(c.summary())
	if c.violations > 0 || c.tier1Above > 0 || c.tier1Below > 0 || slices.Max(append(c.hitsGaps, 0)) > targetHitsGap || c.optimalWithGap > 0 {
		t.Errorf("want no violation, never below the optimum's strict tier, within 0.05%% of its expected hits: %s", c.summary())
	}
}

// exactSeed is the random instances' seed: 2026, or CACHEQOS_EXACT_SEED to draw another 200
// (a check that the policy is not tuned to one set).
func exactSeed(b *testing.B) uint64 {
	v := os.Getenv("CACHEQOS_EXACT_SEED")
	if v == "" {
		return 2026
	}
	seed, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		b.Fatalf("CACHEQOS_EXACT_SEED %q: %v", v, err)
	}
	return seed
}

// BenchmarkExactGap prints the distribution of the gap to the exact optimum over 200 random
// instances like issue 16's, for the optimal policy, its greedy solution alone and the previous
// formulation (levels and split units, without the stages over real sizes).
func BenchmarkExactGap(b *testing.B) {
	needSolver(b)
	for range b.N {
		for _, opts := range []Options{{Workers: 1}, {DisableSolver: true}, {Workers: 1, levelsOnly: true}} {
			start := time.Now()
			c := compareWithExact(b, exactSeed(b), 200, opts)
			label := "optimal"
			switch {
			case opts.DisableSolver:
				label = "greedy alone"
			case opts.levelsOnly:
				label = "previous formulation (levels and split units only)"
			}
			b.Logf("%s (%.1fs): %s", label, time.Since(start).Seconds(), c.summary())
		}
	}
}

// Two strict tenants on two nodes of 2 GiB, where the true optimum and the split units' plan
// have the same strict score but spend the margins differently: t/1 (priority 0, allowed on n0
// only) meets its objective with its margin, t/2 (priority 1, spread over both nodes, a steep
// curve) without; moving t/1's margin (30 MB) to t/2 gives t/2 its margin and ~49 hits/s more.
// The split units cannot express the optimum (t/2's twelfths do not fit beside t/1 and t/0),
// and a resize that kept each tenant's strict tier could not trade the margins. It was
// reported Optimal 9% below the true optimum (random instance 89 of seed 7).
const marginTradeSnapshot = `{"apiVersion":"cacheqos.io/planning/v1","kind":"PlanningSnapshot","nodes":[{"name":"n0","memoryBytes":2147483648,"bandwidthBytesPerSecond":1000000000,"opsPerSecond":1000000},{"name":"n1","memoryBytes":2147483648,"bandwidthBytesPerSecond":1000000000,"opsPerSecond":1000000}],"tenants":[{"id":"t/0","class":"strict","objective":{"hitRatio":0.6236097599897725},"memory":{"minBytes":603680807},"rates":[{"node":"n0","requestsPerSecond":806.995506109454}],"missRatioCurve":[{"sizeBytes":893284253,"missRatio":0.9},{"sizeBytes":1339926379,"missRatio":0.4},{"sizeBytes":2679852759,"missRatio":0.30000000000000004}],"current":{"partitions":[{"node":"n0","memoryBytes":536638566}]}},{"id":"t/1","class":"strict","objective":{"hitRatio":0.44330467753782665},"memory":{"minBytes":644587925},"allowedNodes":["n0"],"rates":[{"node":"n1","requestsPerSecond":255.08394126036518}],"missRatioCurve":[{"sizeBytes":587846340,"missRatio":0.7},{"sizeBytes":1175692680,"missRatio":0.5},{"sizeBytes":2351385360,"missRatio":0.30000000000000004},{"sizeBytes":4702770721,"missRatio":0.19999999999999996}],"current":{"partitions":[{"node":"n0","memoryBytes":1758733953}]}},{"id":"t/2","class":"strict","priority":1,"objective":{"hitRatio":0.45166040158559395},"rates":[{"node":"n1","requestsPerSecond":527.5159894717358}],"missRatioCurve":[{"sizeBytes":2463167963,"missRatio":0.99},{"sizeBytes":2736853293,"missRatio":0.09999999999999998}]}]}`

// With the strict tiers only held in the resize (not valued), the joint model's plan, which
// could not give t/1 its margin in whole split units, stayed at that tier: 21 against the
// optimum's 22 (random instance 55 of seed 2026).
const strictTierInResizeSnapshot = `{"apiVersion":"cacheqos.io/planning/v1","kind":"PlanningSnapshot","nodes":[{"name":"n0","memoryBytes":1073741824,"bandwidthBytesPerSecond":1000000000,"opsPerSecond":1000000},{"name":"n1","memoryBytes":2147483648,"bandwidthBytesPerSecond":1000000000,"opsPerSecond":1000000}],"tenants":[{"id":"t/0","class":"strict","priority":2,"objective":{"hitRatio":0.5301502401916975},"memory":{"minBytes":381148939,"maxBytes":1509035415},"rates":[{"node":"n1","requestsPerSecond":462.02434850196477}],"missRatioCurve":[{"sizeBytes":281971619,"missRatio":0.7},{"sizeBytes":563943238,"missRatio":0.5},{"sizeBytes":1127886476,"missRatio":0.30000000000000004},{"sizeBytes":2255772952,"missRatio":0.19999999999999996}],"current":{"partitions":[{"node":"n1","memoryBytes":507040097}]}},{"id":"t/1","class":"strict","priority":1,"objective":{"hitRatio":0.6466926730607898},"memory":{"minBytes":804720097,"maxBytes":2692161077},"allowedNodes":["n1"],"rates":[{"node":"n1","requestsPerSecond":492.55575353666273}],"missRatioCurve":[{"sizeBytes":471860245,"missRatio":0.7},{"sizeBytes":943720490,"missRatio":0.5},{"sizeBytes":1887440980,"missRatio":0.30000000000000004},{"sizeBytes":3774881961,"missRatio":0.19999999999999996}],"current":{"partitions":[{"node":"n1","memoryBytes":614985450}]}},{"id":"t/2","class":"strict","priority":1,"objective":{"hitRatio":0.6754941691068534},"memory":{"minBytes":855307098},"rates":[{"node":"n1","requestsPerSecond":257.5919527401435}],"missRatioCurve":[{"sizeBytes":3486518873,"missRatio":0.99},{"sizeBytes":3873909859,"missRatio":0.09999999999999998}],"current":{"partitions":[{"node":"n1","memoryBytes":806928793}]}}]}`

// t/0's maximum is also its safe size, which is not a whole number of the resize's quanta:
// rounded down, the margin was out of the resize's reach, so t/0 kept the split units' memory
// on n0, the only node t/1 may use, and t/1 stayed 81 MB short of its curve's breakpoint:
// 0.49% below the optimum (random instance 81 of seed 9).
const maxNotAQuantumSnapshot = `{"apiVersion":"cacheqos.io/planning/v1","kind":"PlanningSnapshot","nodes":[{"name":"n0","memoryBytes":3221225472,"bandwidthBytesPerSecond":1000000000,"opsPerSecond":1000000},{"name":"n1","memoryBytes":1073741824,"bandwidthBytesPerSecond":1000000000,"opsPerSecond":1000000},{"name":"n2","memoryBytes":2147483648,"bandwidthBytesPerSecond":1000000000,"opsPerSecond":1000000}],"tenants":[{"id":"t/0","class":"strict","priority":1,"objective":{"hitRatio":0.6940691042020011},"memory":{"maxBytes":3808699770},"spread":{"minNodes":2,"maxNodes":3},"rates":[{"node":"n1","requestsPerSecond":193.57184212341883}],"missRatioCurve":[{"sizeBytes":952174942,"missRatio":0.7},{"sizeBytes":1904349885,"missRatio":0.5},{"sizeBytes":3808699770,"missRatio":0.30000000000000004},{"sizeBytes":7617399540,"missRatio":0.19999999999999996}]},{"id":"t/1","class":"strict","priority":1,"objective":{"hitRatio":0.44318735768258155},"allowedNodes":["n0"],"rates":[{"node":"n1","requestsPerSecond":262.06288250714704}],"missRatioCurve":[{"sizeBytes":587553369,"missRatio":0.7},{"sizeBytes":1175106739,"missRatio":0.5},{"sizeBytes":2350213478,"missRatio":0.30000000000000004},{"sizeBytes":4700426957,"missRatio":0.19999999999999996}]},{"id":"t/2","memory":{"maxBytes":3844279941},"rates":[{"node":"n1","requestsPerSecond":638.4437992299027}],"missRatioCurve":[{"sizeBytes":2562853294,"missRatio":0.9},{"sizeBytes":3844279941,"missRatio":0.4},{"sizeBytes":7688559882,"missRatio":0.30000000000000004}],"current":{"partitions":[{"node":"n2","memoryBytes":1896014880}]}}]}`

// t/2 must be on all three nodes, and t/1's minimum leaves n1 9 MB: no twelfth of t/2 fits
// there, so the joint model is infeasible. The resize, which is not bound to split units, did
// not run after a failed solve, and the repaired greedy plan was 0.076% below the optimum
// (random instance 154 of seed 9).
const jointInfeasibleSnapshot = `{"apiVersion":"cacheqos.io/planning/v1","kind":"PlanningSnapshot","nodes":[{"name":"n0","memoryBytes":3221225472,"bandwidthBytesPerSecond":1000000000,"opsPerSecond":1000000},{"name":"n1","memoryBytes":1073741824,"bandwidthBytesPerSecond":1000000000,"opsPerSecond":1000000},{"name":"n2","memoryBytes":3221225472,"bandwidthBytesPerSecond":1000000000,"opsPerSecond":1000000}],"tenants":[{"id":"t/0","memory":{"minBytes":1013495760},"spread":{"minNodes":1,"maxNodes":1},"rates":[{"node":"n2","requestsPerSecond":384.80018754706435}],"missRatioCurve":[{"sizeBytes":1866724871,"missRatio":0.9},{"sizeBytes":2800087306,"missRatio":0.4},{"sizeBytes":5600174613,"missRatio":0.30000000000000004}]},{"id":"t/1","class":"strict","priority":2,"objective":{"hitRatio":0.31553076970832045},"memory":{"minBytes":1064112885},"allowedNodes":["n1"],"rates":[{"node":"n1","requestsPerSecond":447.4807194514693}],"missRatioCurve":[{"sizeBytes":384781957,"missRatio":0.7},{"sizeBytes":769563915,"missRatio":0.5},{"sizeBytes":1539127830,"missRatio":0.30000000000000004},{"sizeBytes":3078255660,"missRatio":0.19999999999999996}]},{"id":"t/2","memory":{"minBytes":702413457},"spread":{"minNodes":3,"maxNodes":3},"rates":[{"node":"n2","requestsPerSecond":899.1575034955553}],"missRatioCurve":[{"sizeBytes":5754581337,"missRatio":0.99},{"sizeBytes":6393979264,"missRatio":0.09999999999999998}]},{"id":"t/3","memory":{"minBytes":1277784726},"rates":[{"node":"n1","requestsPerSecond":542.2858101538461}],"missRatioCurve":[{"sizeBytes":1584072332,"missRatio":0.9},{"sizeBytes":2376108498,"missRatio":0.4},{"sizeBytes":4752216997,"missRatio":0.30000000000000004}]},{"id":"t/4","memory":{"minBytes":1336490417},"allowedNodes":["n0"],"rates":[{"node":"n1","requestsPerSecond":535.7730002293564}],"missRatioCurve":[{"sizeBytes":1022090300,"missRatio":0.7},{"sizeBytes":2044180600,"missRatio":0.5},{"sizeBytes":4088361200,"missRatio":0.30000000000000004},{"sizeBytes":8176722400,"missRatio":0.19999999999999996}]}]}`

// t/1's curve has a cliff at 3.1 GB, past the 3 GB of any node: with the plan in force (every
// tenant on one node) the resize kept each tenant's nodes, and the plan was 1.02% below the
// optimum, which spreads t/1 over three nodes (random instance 98 of seed 16).
const cliffPastANodeSnapshot = `{"apiVersion":"cacheqos.io/planning/v1","kind":"PlanningSnapshot","nodes":[{"name":"n0","memoryBytes":2147483648,"bandwidthBytesPerSecond":1000000000,"opsPerSecond":1000000},{"name":"n1","memoryBytes":4294967296,"bandwidthBytesPerSecond":1000000000,"opsPerSecond":1000000},{"name":"n2","memoryBytes":3221225472,"bandwidthBytesPerSecond":1000000000,"opsPerSecond":1000000}],"tenants":[{"id":"t/0","spread":{"minNodes":1,"maxNodes":1},"rates":[{"node":"n2","requestsPerSecond":521.820081518311}],"missRatioCurve":[{"sizeBytes":506846131,"missRatio":0.7},{"sizeBytes":1013692262,"missRatio":0.5},{"sizeBytes":2027384525,"missRatio":0.30000000000000004},{"sizeBytes":4054769051,"missRatio":0.19999999999999996}],"current":{"partitions":[{"node":"n0","memoryBytes":1697284831}]}},{"id":"t/1","rates":[{"node":"n2","requestsPerSecond":927.4447028371728}],"missRatioCurve":[{"sizeBytes":2070228181,"missRatio":0.9},{"sizeBytes":3105342272,"missRatio":0.4},{"sizeBytes":6210684545,"missRatio":0.30000000000000004}],"current":{"partitions":[{"node":"n2","memoryBytes":1738388386}]}},{"id":"t/2","allowedNodes":["n1"],"rates":[{"node":"n1","requestsPerSecond":594.2453247697224}],"missRatioCurve":[{"sizeBytes":1310373181,"missRatio":0.7},{"sizeBytes":2620746363,"missRatio":0.5},{"sizeBytes":5241492726,"missRatio":0.30000000000000004},{"sizeBytes":10482985452,"missRatio":0.19999999999999996}],"current":{"partitions":[{"node":"n1","memoryBytes":2068363850}]}},{"id":"t/3","rates":[{"node":"n1","requestsPerSecond":517.6562493928999}],"missRatioCurve":[{"sizeBytes":1056583960,"missRatio":0.7},{"sizeBytes":2113167921,"missRatio":0.5},{"sizeBytes":4226335843,"missRatio":0.30000000000000004},{"sizeBytes":8452671687,"missRatio":0.19999999999999996}],"current":{"partitions":[{"node":"n1","memoryBytes":1573740315}]}}]}`

// The optimal policy's plans for these snapshots keep every hard constraint, reach the exact
// optimum's strict tier and are within the solver's tolerance of its expected hits.
func TestOptimalMatchesExactOnFoundCases(t *testing.T) {
	needSolver(t)
	for _, tc := range []struct{ name, snapshot string }{
		{"margins traded between tenants", marginTradeSnapshot},
		{"strict tier raised in the resize", strictTierInResizeSnapshot},
		{"maximum not a whole number of quanta", maxNotAQuantumSnapshot},
		{"joint model infeasible in split units", jointInfeasibleSnapshot},
		{"a cliff past a node's memory, with a plan in force", cliffPastANodeSnapshot},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := planning.DecodeSnapshot([]byte(tc.snapshot))
			if err != nil {
				t.Fatal(err)
			}
			opts := Options{Workers: 1, WorkLimit: 1, TimeLimit: time.Minute}
			p, err := newProblem(s, opts)
			if err != nil {
				t.Fatal(err)
			}
			e := newExactChecker(p)
			opt, _, ok := e.optimum()
			if !ok {
				t.Fatal("the checker finds no packing")
			}
			plan := mustPlan(t, s, opts)
			sizes := make([]int64, len(plan.Tenants))
			for k, tp := range plan.Tenants {
				sizes[k] = tp.MemoryBytes
			}
			if v := newPlanViolations(p, s, plan); len(v) > 0 {
				t.Errorf("violations: %v", v)
			}
			if got := e.value(sizes); got.tier1 != opt.tier1 || got.hits < opt.hits*(1-targetHitsGap) {
				t.Errorf("plan %+v (sizes %v, %s), exact optimum %+v: want the same strict tier and within 0.05%% of its hits",
					got, sizes, plan.Solver.Status, opt)
			}
		})
	}
}

// With a plan in force, a re-routing plan pays only for rerouteMinGain more expected hits at
// the same strict tier: instance 98's plan in force against itself with t/1 grown on its node
// until its hits are up by half and by twice that share, and against the exact optimum's
// placement (1.02% more).
func TestReroutingPaysOnlyAboveItsGain(t *testing.T) {
	s, err := planning.DecodeSnapshot([]byte(cliffPastANodeSnapshot))
	if err != nil {
		t.Fatal(err)
	}
	p, err := newProblem(s, Options{DisableSolver: true})
	if err != nil {
		t.Fatal(err)
	}
	o := newOptInstance(p)
	_, reserved := o.greedyPlace(o.greedySizing())
	o.chooseCandidates(reserved) // the nodes the plan in force is checked against
	inForce, ok := o.currentCandidate()
	if !ok {
		t.Fatal("the plan in force is not a candidate")
	}
	_, hits, _ := o.tiers(inForce.levels, inForce.parts)
	// grown is the plan in force with t/1 grown on its node until the hits rise by share.
	grown := func(share float64) optCandidate {
		c := optCandidate{levels: inForce.levels, parts: slices.Clone(inForce.parts)}
		c.parts[1] = slices.Clone(c.parts[1])
		for {
			c.parts[1][0].bytes += 1 << 20
			if _, h, _ := o.tiers(c.levels, c.parts); h >= hits*(1+share) {
				return c
			}
		}
	}
	optimum := optCandidate{levels: inForce.levels, parts: [][]part{
		{{node: 0, bytes: 2027384832}},
		{{node: 0, bytes: 117932032}, {node: 1, bytes: 1877188608}, {node: 2, bytes: 1110224896}},
		{{node: 1, bytes: 2417778688}},
		{{node: 2, bytes: 2113167360}},
	}}
	for _, tc := range []struct {
		name string
		to   optCandidate
		pays bool
	}{
		{"the plan in force itself", inForce, false},
		{"half the minimum gain", grown(rerouteMinGain / 2), false},
		{"twice the minimum gain", grown(2 * rerouteMinGain), true},
		{"the exact optimum's placement", optimum, true},
	} {
		if got := o.paysForRerouting(inForce, tc.to); got != tc.pays {
			t.Errorf("%s: pays %v, want %v", tc.name, got, tc.pays)
		}
	}
}
