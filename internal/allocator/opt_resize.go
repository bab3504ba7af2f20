package allocator

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/cacheqos/cacheqos/internal/cpsat"
)

// The resize stage of the optimal policy: the plan found over levels and split units is
// re-sized in fine quanta (the models' memory quantum, at most 2^20 per node) with every
// tenant's nodes and routing fractions kept, so its loads, spread and allowed nodes do not
// change. Each tenant's expected hits are its curve, piecewise linear in its size: on a
// concave stretch bounded by the upper hull's lines, elsewhere by one Boolean per segment
// (the segment its size is in). The first tier (objectives met, margins) may not drop in
// total, though a margin may move from one tenant to another, and memory minimums and maximums
// hold exactly. The levels' coarse grid, which left memory
// unused or spent on a tenant worth less, no longer limits the sizes.

// resizeScale is what the largest possible total of expected hits is worth in the resize
// model: enough resolution (1e-9 of the total), small enough that a hull line's coefficients
// (times at most 2^22 quanta of one tenant) stay far within int64.
const resizeScale = 1 << 30

// routingPPM is the resolution of the kept routing fractions.
const routingPPM = 1_000_000

// resizeTimeShare is the share of the planning time kept for the resize stage.
const resizeTimeShare = 0.15

type resizeTenant struct {
	fixed  bool
	nodes  []int
	weight []int64 // ppm of the tenant's traffic and memory per node, summing to routingPPM
	lo, hi int64   // size bounds in quanta
	size   cpsat.Var
	hint   int64 // the size in quanta the search starts from
	// hintLo is the floor the hint is raised to: the size at which the tenant keeps its strict
	// tier of c (lo is only its minimum, as the tier may move to another tenant).
	hintLo int64
	// slack is the bytes a size may lose to rounding each node's share down.
	slack int64
	// mem and use are the free split's memory (quanta) and use of each of nodes.
	mem, use []cpsat.Var
}

// resize re-sizes candidate c in fine quanta; it returns the better of c and the result, and
// a note. It first lets every tenant's memory move freely between its candidate nodes (within
// its spread; loads are then checked on the result, as the objective counts overload), then,
// if that does not improve c, keeps every tenant's nodes and routing fractions. With a plan in
// force that keeps every constraint, the order turns: the nodes and routing fractions are kept
// first, and the free split, which re-routes keys between nodes, is taken only when it meets
// more strict objectives or expects rerouteMinGain more hits. The re-routed keys start cold
// and the objective does not charge that (movement is its last tier), so in a loop every small
// gain on the curves moved keys, the cold keys lowered the observed ratios, the corrected
// curves asked for another plan, and it moved again; never re-routing left plans over 1% below
// the optimum where a tenant's curve has a cliff past its node's free memory.
func (o *optInstance) resize(ctx context.Context, deadline time.Time, c optCandidate) (optCandidate, string) {
	work := o.p.opts.WorkLimit * resizeTimeShare
	if _, inForce := o.currentCandidate(); inForce {
		kept, keptNote := o.resizeWith(ctx, deadline, work, c, false)
		free, freeNote := o.resizeWith(ctx, deadline, work/2, kept, true)
		if free.obj > kept.obj && !o.paysForRerouting(kept, free) {
			return kept, fmt.Sprintf("%s; %s, not taken: less than %.1f%% more expected hits", keptNote, freeNote, 100*rerouteMinGain)
		}
		return free, keptNote + "; " + freeNote
	}
	free, freeNote := o.resizeWith(ctx, time.Now().Add(time.Until(deadline)*2/3), work*2/3, c, true)
	if free.obj > c.obj {
		return free, freeNote
	}
	kept, keptNote := o.resizeWith(ctx, deadline, work/3, c, false)
	return kept, freeNote + "; " + keptNote
}

// rerouteMinGain is the share of expected hits a free split must add, at the same strict tier,
// to re-route keys of a plan in force: under half the 0.5% the plans are held to against the
// exact optimum. In a loop the control loop asks 2% of a new plan on top.
const rerouteMinGain = 0.002

// paysForRerouting says whether candidate to, which re-routes keys of from, is worth it: more
// strict objectives met, or rerouteMinGain more expected hits at the same strict tier.
func (o *optInstance) paysForRerouting(from, to optCandidate) bool {
	sloFrom, hitsFrom, _ := o.tiers(from.levels, from.parts)
	sloTo, hitsTo, _ := o.tiers(to.levels, to.parts)
	return sloTo > sloFrom || (sloTo == sloFrom && hitsTo > hitsFrom*(1+rerouteMinGain))
}

// resizeWith builds and solves the resize model: with freeSplit, each tenant's memory per
// candidate node is a variable (at most spread.maxNodes of them used, routing then follows
// memory); without, its nodes and routing fractions are those of c.
func (o *optInstance) resizeWith(ctx context.Context, deadline time.Time, work float64, c optCandidate, freeSplit bool) (optCandidate, string) {
	p, q := o.p, o.sc.quantum
	label := "resize (routing kept)"
	if freeSplit {
		label = "resize (free split)"
	}
	m := cpsat.NewModel()
	capacity := make([]int64, len(p.nodes))
	scale := int64(routingPPM)
	if freeSplit {
		scale = 1
	}
	for j, n := range p.nodes {
		capacity[j] = n.memory / q * scale
	}
	rts := make([]resizeTenant, len(p.tenants))
	var hitsTerms, moveTerms []cpsat.Term
	nodeTerms := make([][]cpsat.Term, len(p.nodes))
	for k, t := range p.tenants {
		rt := &rts[k]
		ps := c.parts[k]
		weights := splitProportional(routingPPM, fractions(ps), unlimitedRoom(len(ps)))
		for i, pt := range ps {
			rt.nodes = append(rt.nodes, pt.node)
			rt.weight = append(rt.weight, weights[i])
		}
		total := totalBytes(ps)
		tierSLO, _ := p.tierValues(k, total, o.sc)
		floor := t.minBytes
		if n := p.needs[k]; tierSLO > 0 {
			floor = max(floor, n.bytes)
			if s, _ := p.tierValues(k, n.bytes, o.sc); s < tierSLO {
				floor = max(floor, n.safeBytes)
			}
		}
		if !freeSplit {
			// Each node's bytes are rounded down from its share: a byte per node of slack.
			rt.slack = int64(len(ps))
		}
		rt.hintLo = ceilDiv(floor+rt.slack, q)
		rt.lo = ceilDiv(t.minBytes+rt.slack, q)
		// Rounded up, as the sizes at a tenant's maximum (often where its margin is) would
		// otherwise be out of reach and the tenant fixed; the bytes are cut back to the
		// maximum below.
		rt.hi = ceilDiv(t.maxBytes, q)
		if (!freeSplit && slices.Contains(weights, 0)) || rt.hintLo > rt.hi || len(ps) == 0 {
			rt.fixed = true
			for _, pt := range ps {
				capacity[pt.node] -= ceilDiv(pt.bytes, q) * scale
			}
			continue
		}
		rt.size = m.NewIntVar(rt.lo, rt.hi, fmt.Sprintf("s_%d", k))
		rt.hint = min(max(total/q-int64(len(ps)), rt.hintLo), rt.hi)
		if freeSplit {
			moveTerms = append(moveTerms, o.addFreeSplit(m, k, rt, ps, nodeTerms)...)
		} else {
			for i, j := range rt.nodes {
				nodeTerms[j] = append(nodeTerms[j], cpsat.Term{Var: rt.size, Coef: rt.weight[i]})
			}
		}
		if !freeSplit {
			m.Hint(rt.size, rt.hint)
		}
		if h := o.addHitsCurve(m, k, rt); h >= 0 {
			// Expected hits first, then (free split) the movement, in the models' units: W2
			// exceeds any movement.
			hitsTerms = append(hitsTerms, cpsat.Term{Var: h, Coef: o.sc.w2})
		}
	}
	tierTerms, tierMost := o.addStrictTiers(m, rts, c)
	for j := range p.nodes {
		if capacity[j] < 0 {
			return c, label + " skipped: a tenant it cannot resize overfills a node"
		}
		addCapacity(m, nodeTerms[j], capacity[j])
	}
	m.Maximize(append(append(hitsTerms, moveTerms...), tierTerms...))
	left := time.Until(deadline) - time.Duration(m.NumVars()+m.NumConstraints())*solverOverheadPerItem
	if left < 20*time.Millisecond {
		return c, "no time left for the " + label
	}
	res, err := o.solve(ctx, m, cpsat.Params{TimeLimit: left, WorkLimit: work, Workers: p.opts.Workers, Seed: p.opts.Seed,
		Presolve: m.NumVars() < 5000, RelativeGap: o.resizeGapWithTiers(c, tierMost)})
	if err != nil {
		return c, fmt.Sprintf("%s: solver error: %v", label, err)
	}
	status := res.Status.String()
	if res.Stopped {
		status += "; " + o.stopped(res)
	}
	if !res.HasSolution() {
		return c, fmt.Sprintf("%s: no solution (%s)", label, status)
	}
	parts := make([][]part, len(p.tenants))
	for k := range p.tenants {
		rt := &rts[k]
		switch {
		case rt.fixed:
			parts[k] = c.parts[k]
		case freeSplit:
			for i, j := range rt.nodes {
				if res.Value(rt.use[i]) == 1 {
					parts[k] = append(parts[k], part{node: j, bytes: res.Value(rt.mem[i]) * q})
				}
			}
			trimToMax(parts[k], p.tenants[k].maxBytes)
			parts[k] = routedByBytes(parts[k])
		default:
			bytes := min(res.Value(rt.size)*q, p.tenants[k].maxBytes)
			for i, j := range rt.nodes {
				// floor(bytes * w / 1e6) without overflowing int64
				share := bytes/routingPPM*rt.weight[i] + bytes%routingPPM*rt.weight[i]/routingPPM
				parts[k] = append(parts[k], part{node: j, bytes: share, weight: rt.weight[i]})
			}
		}
	}
	if v := p.hardViolations(parts); len(v) > 0 {
		return c, fmt.Sprintf("%s rejected: %s", label, v[0])
	}
	if o.churnUnits >= 0 && o.withinChurn(c.parts) && !o.withinChurn(parts) {
		return c, fmt.Sprintf("%s rejected: it moves more than the churn cap", label)
	}
	resized := optCandidate{levels: c.levels, parts: parts, obj: o.objective(c.levels, parts)}
	if resized.obj <= c.obj {
		return c, fmt.Sprintf("%s %s: nothing better", label, status)
	}
	return resized, fmt.Sprintf("%s %s", label, status)
}

// trimToMax takes what parts hold above maxBytes (less than a quantum) from the largest part.
func trimToMax(parts []part, maxBytes int64) {
	over := totalBytes(parts) - maxBytes
	if over <= 0 {
		return
	}
	largest := 0
	for i, pt := range parts {
		if pt.bytes > parts[largest].bytes {
			largest = i
		}
	}
	parts[largest].bytes -= over
}

// addFreeSplit gives tenant k a memory variable per candidate node (quanta) and a Boolean for
// using it, within its spread, summing to its size; the current nodes are the hint.
func (o *optInstance) addFreeSplit(m *cpsat.Model, k int, rt *resizeTenant, current []part, nodeTerms [][]cpsat.Term) (moves []cpsat.Term) {
	hinted := rt.nodes
	// The hint: the candidate's memory per node in quanta, rounded down, the size their sum.
	hintedQuanta := make([]int64, len(current))
	rt.hint = 0
	for i, pt := range current {
		hintedQuanta[i] = pt.bytes / o.sc.quantum
		rt.hint += hintedQuanta[i]
	}
	if len(hintedQuanta) > 0 {
		// Rounding down may leave the hint a quantum short of the tenant's floor.
		hintedQuanta[0] += max(0, rt.hintLo-rt.hint)
		rt.hint = max(rt.hint, rt.hintLo)
	}
	m.Hint(rt.size, rt.hint)
	rt.nodes = slices.Clone(o.cands[k])
	for _, j := range hinted {
		if !slices.Contains(rt.nodes, j) {
			rt.nodes = append(rt.nodes, j)
		}
	}
	sum := []cpsat.Term{{Var: rt.size, Coef: -1}}
	var count []cpsat.Term
	for _, j := range rt.nodes {
		capQ := o.memQuanta[j]
		mem := m.NewIntVar(0, capQ, fmt.Sprintf("m_%d_%d", k, j))
		use := m.NewBoolVar(fmt.Sprintf("u_%d_%d", k, j))
		rt.mem, rt.use = append(rt.mem, mem), append(rt.use, use)
		// A node it uses holds at least a quantum of it: a node counted toward its spread
		// without memory would route nothing there.
		m.AddLinear([]cpsat.Term{{Var: mem, Coef: 1}, {Var: use, Coef: -capQ}}, math.MinInt64, 0)
		m.AddLinear([]cpsat.Term{{Var: mem, Coef: 1}, {Var: use, Coef: -1}}, 0, math.MaxInt64)
		sum = append(sum, cpsat.Term{Var: mem, Coef: 1})
		count = append(count, cpsat.Term{Var: use, Coef: 1})
		nodeTerms[j] = append(nodeTerms[j], cpsat.Term{Var: mem, Coef: 1})
		i := slices.Index(hinted, j)
		m.Hint(use, boolToInt(i >= 0))
		hintMem := int64(0)
		if i >= 0 {
			hintMem = hintedQuanta[i]
		}
		m.Hint(mem, hintMem)
		// The movement from the plan in force, as the models count it: moveUnit*d >= |mem - cur|.
		cur := o.curQuanta[k][j]
		d := m.NewIntVar(0, ceilDiv(max(capQ, cur), o.sc.moveUnit)+1, fmt.Sprintf("d_%d_%d", k, j))
		m.AddLinear([]cpsat.Term{{Var: d, Coef: o.sc.moveUnit}, {Var: mem, Coef: -1}}, -cur, math.MaxInt64)
		m.AddLinear([]cpsat.Term{{Var: d, Coef: o.sc.moveUnit}, {Var: mem, Coef: 1}}, cur, math.MaxInt64)
		m.Hint(d, ceilDiv(abs64(hintMem-cur), o.sc.moveUnit))
		moves = append(moves, cpsat.Term{Var: d, Coef: -1})
	}
	m.AddLinear(sum, 0, 0)
	t := &o.p.tenants[k]
	m.AddLinear(count, int64(t.spreadMin), int64(t.spreadMax))
	return moves
}

// addStrictTiers lets the resized tenants' strict tiers (objective met, margin) move between
// them as long as their total does not drop: a Boolean per threshold a tenant's size may cross
// (size >= threshold when it is set), their tier values summing to at least c's. Keeping each
// tenant's own tier instead missed plans with the same strict score that spend a margin's
// bytes on a tenant whose hits are worth more (TestOptimalMatchesExactOnFoundCases). It
// returns the tiers as objective terms weighted above every expected hit and movement, so that
// a tier the levels could not reach is taken (TestOptimalMatchesExactOnFoundCases), and the
// most they add to the objective; none when that weight would overflow the objective (then
// the tier only holds).
func (o *optInstance) addStrictTiers(m *cpsat.Model, rts []resizeTenant, c optCandidate) ([]cpsat.Term, float64) {
	p, q := o.p, o.sc.quantum
	var terms []cpsat.Term
	var required, most int64
	for k := range p.tenants {
		rt := &rts[k]
		n := p.needs[k]
		if rt.fixed || !p.tenants[k].strict || !n.reachable {
			continue
		}
		current, _ := p.tierValues(k, totalBytes(c.parts[k]), o.sc)
		required += current
		var below int64 // the tier value of the threshold below, met by every size
		for _, bytes := range []int64{n.bytes, n.safeBytes} {
			tier, _ := p.tierValues(k, bytes, o.sc)
			threshold := ceilDiv(bytes+rt.slack, q)
			switch {
			case tier == below: // no margin beyond the objective's size
			case threshold <= rt.lo:
				required -= tier - below
			case threshold <= rt.hi:
				b := m.NewBoolVar(fmt.Sprintf("tier_%d_%d", k, threshold))
				m.AddLinear([]cpsat.Term{{Var: rt.size, Coef: 1}, {Var: b, Coef: -threshold}}, 0, math.MaxInt64)
				m.Hint(b, boolToInt(rt.hint >= threshold))
				terms = append(terms, cpsat.Term{Var: b, Coef: tier - below})
				most += tier - below
			}
			below = tier
		}
	}
	if required > 0 {
		m.AddLinear(terms, required, math.MaxInt64)
	}
	// The hits terms total at most W2 times resizeScale plus a unit per tenant for rounding,
	// and W2 exceeds any movement.
	weight := float64(o.sc.w2) * float64(resizeScale+len(p.tenants)+2)
	if most == 0 || weight*float64(most) > math.MaxInt64/4 {
		return nil, 0
	}
	objective := make([]cpsat.Term, len(terms))
	for i, t := range terms {
		objective[i] = cpsat.Term{Var: t.Var, Coef: t.Coef * int64(weight)}
	}
	return objective, weight * float64(most)
}

// resizeGapWithTiers is the resize's relative gap when the strict tiers, worth up to tierMost,
// are in its objective: the solver's gap is relative to the whole objective, which the tiers
// would inflate, letting it stop far from the best expected hits; scaled by c's share of hits,
// the gap stays about the target's share of the expected-hits term.
func (o *optInstance) resizeGapWithTiers(c optCandidate, tierMost float64) float64 {
	gap := resizeGap(o.p.opts)
	if tierMost == 0 || o.sc.hitValueTotal <= 0 {
		return gap
	}
	var hits float64
	for k, t := range o.p.tenants {
		hits += resizeScale * o.p.hitValueWeight(k) * t.curve.At(totalBytes(c.parts[k])) / o.sc.hitValueTotal
	}
	hits *= float64(o.sc.w2)
	return gap * hits / (hits + tierMost)
}

func resizeGap(opts Options) float64 {
	if opts.ProveOptimal {
		return 0
	}
	return targetHitsGap
}

// addHitsCurve adds tenant k's scaled expected hits as a function of its size variable and
// returns the hits variable (-1 when the tenant's hits are worth nothing).
func (o *optInstance) addHitsCurve(m *cpsat.Model, k int, rt *resizeTenant) cpsat.Var {
	p, q := o.p, o.sc.quantum
	t := &p.tenants[k]
	if o.sc.hitValueTotal <= 0 || p.hitValueWeight(k) <= 0 {
		return -1
	}
	value := func(x int64) int64 {
		return int64(math.Round(resizeScale * p.hitValueWeight(k) * t.curve.At(x*q) / o.sc.hitValueTotal))
	}
	xs := []int64{rt.lo, rt.hi}
	for _, b := range t.curve.Breakpoints(rt.lo*q, rt.hi*q) {
		xs = append(xs, b/q, ceilDiv(b, q))
	}
	xs = uniqueSorted(xs)
	xs = slices.DeleteFunc(xs, func(x int64) bool { return x < rt.lo || x > rt.hi })
	vs := make([]int64, len(xs))
	for i, x := range xs {
		vs[i] = value(x)
	}
	h := m.NewIntVar(0, vs[len(vs)-1], fmt.Sprintf("h_%d", k))
	// The hinted hits: on the chord of the hinted size's segment, rounded down, which every
	// constraint below admits.
	hint := min(max(rt.hint, xs[0]), xs[len(xs)-1])
	hintSeg := max(0, min(len(xs)-2, sort.Search(len(xs), func(i int) bool { return xs[i] > hint })-1))
	hintHits := vs[0]
	if len(xs) > 1 {
		dx, dv := xs[hintSeg+1]-xs[hintSeg], vs[hintSeg+1]-vs[hintSeg]
		hintHits = vs[hintSeg] + dv*(hint-xs[hintSeg])/dx
	}
	m.Hint(h, hintHits)
	if len(xs) == 1 {
		m.AddLinear([]cpsat.Term{{Var: h, Coef: 1}}, math.MinInt64, vs[0])
		return h
	}
	// line i: dx*h - dv*s <= v_i*dx - dv*x_i, the chord from point i to i+1
	line := func(i int) ([]cpsat.Term, int64) {
		dx, dv := xs[i+1]-xs[i], vs[i+1]-vs[i]
		return []cpsat.Term{{Var: h, Coef: dx}, {Var: rt.size, Coef: -dv}}, vs[i]*dx - dv*xs[i]
	}
	concave := true
	for i := 1; i+1 < len(xs); i++ {
		// slope(i, i+1) <= slope(i-1, i)
		if (vs[i+1]-vs[i])*(xs[i]-xs[i-1]) > (vs[i]-vs[i-1])*(xs[i+1]-xs[i]) {
			concave = false
		}
	}
	if concave {
		for i := 0; i+1 < len(xs); i++ {
			terms, rhs := line(i)
			m.AddLinear(terms, math.MinInt64, rhs)
		}
		return h
	}
	// Not concave: the segment the size is in is chosen by one Boolean per segment, each with
	// its own share of the size and of the hits (a disaggregated form whose LP relaxation is the
	// concave hull of the curve, not a big-M one).
	var segs, sizeTerms []cpsat.Term
	hitsTerms := []cpsat.Term{{Var: h, Coef: -1}}
	sizeTerms = append(sizeTerms, cpsat.Term{Var: rt.size, Coef: -1})
	for i := 0; i+1 < len(xs); i++ {
		dx, dv := xs[i+1]-xs[i], vs[i+1]-vs[i]
		z := m.NewBoolVar(fmt.Sprintf("z_%d_%d", k, i))
		x := m.NewIntVar(0, dx, fmt.Sprintf("x_%d_%d", k, i))
		hi := m.NewIntVar(0, vs[i+1], fmt.Sprintf("hs_%d_%d", k, i))
		segs = append(segs, cpsat.Term{Var: z, Coef: 1})
		m.AddLinear([]cpsat.Term{{Var: x, Coef: 1}, {Var: z, Coef: -dx}}, math.MinInt64, 0)
		m.AddLinear([]cpsat.Term{{Var: hi, Coef: 1}, {Var: z, Coef: -vs[i+1]}}, math.MinInt64, 0)
		// dx*hs <= dx*v_i*z + dv*x: the hits on the segment's chord
		m.AddLinear([]cpsat.Term{{Var: hi, Coef: dx}, {Var: z, Coef: -dx * vs[i]}, {Var: x, Coef: -dv}}, math.MinInt64, 0)
		sizeTerms = append(sizeTerms, cpsat.Term{Var: z, Coef: xs[i]}, cpsat.Term{Var: x, Coef: 1})
		hitsTerms = append(hitsTerms, cpsat.Term{Var: hi, Coef: 1})
		if i == hintSeg {
			m.Hint(z, 1)
			m.Hint(x, hint-xs[i])
			m.Hint(hi, hintHits)
		} else {
			m.Hint(z, 0)
			m.Hint(x, 0)
			m.Hint(hi, 0)
		}
	}
	m.AddLinear(sizeTerms, 0, 0)
	m.AddLinear(hitsTerms, 0, 0)
	lits := make([]cpsat.Var, len(segs))
	for i, t := range segs {
		lits[i] = t.Var
	}
	m.AddExactlyOne(lits...)
	return h
}
