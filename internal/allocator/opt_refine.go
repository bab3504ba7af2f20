package allocator

import (
	"container/heap"
	"math"
)

// refineSizes re-sizes a plan on the tenants' true curves, over real sizes, with every
// tenant's nodes and routing fractions kept (so loads, spreads and allowed nodes do not
// change): every tenant starts at its floor (its minimum, and the size at which the plan meets
// its strict objective, with its margin if it has it), then, repeatedly, the tenant whose
// curve's upper hull from its size to what its nodes can still take is steepest takes that
// hull segment, whose end is a point of its curve. Unlike the levels' greedy it is not
// limited to a few sizes nor to the models' rounded hits, so it is what sizes large fleets
// (and the hint of the resize stage). It returns c when it does not improve it.
func (o *optInstance) refineSizes(c optCandidate) optCandidate {
	p := o.p
	n := len(p.tenants)
	free := make([]float64, len(p.nodes))
	for j, nd := range p.nodes {
		free[j] = float64(nd.memory)
	}
	weights := make([][]int64, n)
	size := make([]int64, n)
	for k, t := range p.tenants {
		ps := c.parts[k]
		weights[k] = splitProportional(routingPPM, fractions(ps), unlimitedRoom(len(ps)))
		total := totalBytes(ps)
		floor := t.minBytes
		if slo, _ := p.tierValues(k, total, o.sc); slo > 0 {
			need := p.needs[k]
			floor = max(floor, need.bytes)
			if s, _ := p.tierValues(k, need.bytes, o.sc); s < slo {
				floor = max(floor, need.safeBytes)
			}
		}
		// A byte per node of slack for rounding each node's share down.
		size[k] = min(total, floor+int64(len(ps)))
		for i, pt := range ps {
			free[pt.node] -= float64(size[k])*float64(weights[k][i])/routingPPM + 1
		}
	}
	for _, f := range free {
		if f < 0 {
			return c
		}
	}
	// room is how much tenant k can still grow on its nodes.
	room := func(k int) int64 {
		r := p.tenants[k].maxBytes - size[k]
		for i, pt := range c.parts[k] {
			if w := weights[k][i]; w > 0 {
				r = min(r, int64(math.Floor(free[pt.node]*routingPPM/float64(w))))
			}
		}
		return max(0, r)
	}
	step := func(k int) (upgrade, int64, bool) {
		r := room(k)
		if r <= 0 || p.hitValueWeight(k) <= 0 {
			return upgrade{}, 0, false
		}
		hull := p.tenants[k].curve.UpperHull(size[k], size[k]+r)
		if len(hull) < 2 {
			return upgrade{}, 0, false
		}
		next := hull[1]
		gain := p.hitValueWeight(k) * (next.HitRatio - hull[0].HitRatio) / float64(next.SizeBytes-size[k])
		return upgrade{k: k, gain: gain}, next.SizeBytes, gain > 0
	}
	h := &upgradeHeap{}
	for k := range p.tenants {
		if up, _, ok := step(k); ok {
			*h = append(*h, up)
		}
	}
	heap.Init(h)
	for h.Len() > 0 {
		up := heap.Pop(h).(upgrade)
		fresh, to, ok := step(up.k)
		if !ok {
			continue
		}
		if fresh.gain < up.gain*(1-1e-12) {
			heap.Push(h, fresh) // the room shrank since: re-queue at its current slope
			continue
		}
		k := up.k
		for i, pt := range c.parts[k] {
			free[pt.node] -= float64(to-size[k]) * float64(weights[k][i]) / routingPPM
		}
		size[k] = to
		if next, _, ok := step(k); ok {
			heap.Push(h, next)
		}
	}
	parts := make([][]part, n)
	for k := range p.tenants {
		for i, pt := range c.parts[k] {
			w := weights[k][i]
			share := size[k]/routingPPM*w + size[k]%routingPPM*w/routingPPM
			parts[k] = append(parts[k], part{node: pt.node, bytes: share, weight: w})
		}
		// The bytes rounding down left over (fewer than the parts) go one each to the first.
		for i := range size[k] - totalBytes(parts[k]) {
			parts[k][i].bytes++
		}
	}
	if len(p.hardViolations(parts)) > 0 {
		return c
	}
	refined := optCandidate{levels: c.levels, parts: parts, obj: o.objective(c.levels, parts)}
	if refined.obj <= c.obj {
		return c
	}
	return refined
}
