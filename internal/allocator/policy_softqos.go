package allocator

import (
	"cmp"
	"context"
	"slices"
)

// runSoftQoS is Soft-QoS' partitioning (Fig. 5 of the paper) over the aggregate memory:
//
//  1. C_j, the smallest size whose fitted curve meets the tenant's objective (its memory
//     minimum when it has no objective; never below the minimum).
//  2. Grant C_j in ascending order while memory lasts; a tenant that does not fit, or whose
//     objective is out of reach, is flagged and gets nothing (beyond its memory minimum, which
//     is reserved first: a deviation the paper, having no minimums, does not need).
//  3. No tenant flagged: the spare memory is split in proportion to max(HR_j) - HR_j, the best
//     hit ratio it has shown minus the one observed now (equal split when every delta is 0).
//  4. Some flagged: the others keep exactly their minimum and the spare memory is split
//     equally among the flagged (the paper's text; its pseudo-code's literal loop gives it all
//     to the first flagged tenant, a bug).
//
// Maximum sizes cap every grant; what a cap leaves over goes to the others. The paper assumes
// equal priorities, so priority and class play no part here.
func runSoftQoS(ctx context.Context, p *problem) (*allocation, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	a := newAllocation(len(p.tenants))
	m := len(p.tenants)
	minimums := make([]int64, m)
	reachable := make([]bool, m)
	deltas := make([]float64, m)
	for k := range p.tenants {
		t := &p.tenants[k]
		n := p.needs[k]
		minimums[k], reachable[k] = n.bytes, n.reachable
		current := t.curve.At(t.currentTotal)
		if t.observed != nil {
			current = *t.observed
		}
		deltas[k] = max(0, t.maxRecorded-current)
	}
	sizes, flagged := softQoSPartition(p.totalMemory, minimums, reachable, p.floors(), p.ceilings(), deltas)
	for k := range p.tenants {
		switch {
		case flagged[k]:
			a.note(k, "softqos: flagged (its %s did not fit after the smaller minimums, or is out of reach); equal share of the leftover", bytesHuman(minimums[k]))
		case sizes[k] > minimums[k]:
			a.note(k, "softqos: minimum %s granted in ascending order, plus %s of spare in proportion to max-minus-current hit ratio %.3f",
				bytesHuman(minimums[k]), bytesHuman(sizes[k]-minimums[k]), deltas[k])
		default:
			a.note(k, "softqos: minimum %s granted in ascending order", bytesHuman(minimums[k]))
		}
	}
	p.placeAll(a, sizes)
	return a, nil
}

func (p *problem) floors() []int64 {
	out := make([]int64, len(p.tenants))
	for k, t := range p.tenants {
		out[k] = t.minBytes
	}
	return out
}

func (p *problem) ceilings() []int64 {
	out := make([]int64, len(p.tenants))
	for k, t := range p.tenants {
		out[k] = t.maxBytes
	}
	return out
}

// softQoSPartition is the arithmetic of Soft-QoS on plain numbers: capacity to split,
// per-tenant minimum sizes meeting the objectives (reachable[k] false: out of reach), floors
// reserved whatever happens, ceilings, and hit-ratio deltas max(HR)-HR. It returns the sizes
// (summing to capacity unless every tenant is at its ceiling) and which tenants are flagged.
func softQoSPartition(capacity int64, minimums []int64, reachable []bool, floors, ceilings []int64, deltas []float64) ([]int64, []bool) {
	m := len(minimums)
	sizes := slices.Clone(floors)
	flagged := make([]bool, m)
	free := capacity
	for _, f := range floors {
		free -= f
	}
	order := make([]int, m)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(minimums[a], minimums[b]) })
	for _, k := range order {
		extra := minimums[k] - floors[k]
		if !reachable[k] || extra > free {
			flagged[k] = true
			continue
		}
		sizes[k] += extra
		free -= extra
	}
	room := func(include func(k int) bool) []int64 {
		r := make([]int64, m)
		for k := range r {
			if include(k) {
				r[k] = ceilings[k] - sizes[k]
			}
		}
		return r
	}
	addSplit := func(weights []float64, r []int64) {
		split := splitProportional(free, weights, r)
		for k, s := range split {
			sizes[k] += s
			free -= s
		}
	}
	if slices.Contains(flagged, true) {
		equal := make([]float64, m)
		for k := range equal {
			equal[k] = 1
		}
		addSplit(equal, room(func(k int) bool { return flagged[k] }))
	}
	// No flagged tenant, or the flagged ones are full: the rest by max-minus-current.
	addSplit(deltas, room(func(int) bool { return true }))
	return sizes, flagged
}
