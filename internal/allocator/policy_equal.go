package allocator

import (
	"context"
	"sort"
)

// runEqual is the fair-share baseline of Maxperf and Soft-QoS: every tenant gets 1/N of the
// aggregate memory. Memory bounds are respected by max-min fair water-filling: tenants whose
// maximum is below the level keep their maximum, tenants whose minimum is above it keep their
// minimum, and everyone else gets the same level.
func runEqual(ctx context.Context, p *problem) (*allocation, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	a := newAllocation(len(p.tenants))
	sizes := p.fairSizes()
	for k := range p.tenants {
		a.note(k, "equal: max-min fair share of the %s aggregate", bytesHuman(p.totalMemory))
	}
	p.placeAll(a, sizes)
	return a, nil
}

// fairSizes water-fills the aggregate memory: sizes[k] = clamp(level, min_k, max_k) with the
// highest level whose total fits, then the bytes left by rounding go one each to the tenants
// at the level, in index order.
func (p *problem) fairSizes() []int64 {
	m := len(p.tenants)
	sizes := make([]int64, m)
	if m == 0 {
		return sizes
	}
	total := func(level int64) int64 {
		var s int64
		for _, t := range p.tenants {
			s += min(max(level, t.minBytes), t.maxBytes)
		}
		return s
	}
	// The largest level in [0, totalMemory] whose total fits (total(0) = sum of minimums fits).
	level := int64(sort.Search(int(min(p.totalMemory, 1<<62)), func(l int) bool { return total(int64(l)+1) > p.totalMemory }))
	var used int64
	for k, t := range p.tenants {
		sizes[k] = min(max(level, t.minBytes), t.maxBytes)
		used += sizes[k]
	}
	for k, t := range p.tenants {
		if used == p.totalMemory {
			break
		}
		if sizes[k] == level && level < t.maxBytes && level >= t.minBytes {
			sizes[k]++
			used++
		}
	}
	return sizes
}
