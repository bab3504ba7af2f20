package allocator

import (
	"cmp"
	"slices"
)

// hitsUpperBound bounds the expected hits (in hitValueWeight units) of every plan in which
// each tenant k holds at least floor[k] bytes: the LP over real sizes that pools every node's
// memory and relaxes each tenant's curve to its upper concave hull on [max(min, floor), max],
// solved exactly by buying hull segments in order of decreasing slope, the last one
// fractionally. It ignores placement (spreads, allowed nodes, node boundaries), so it is
// valid for any plan over real sizes, not only for the models' levels and quanta. The second
// result is false when the floors alone do not fit the memory.
func (p *problem) hitsUpperBound(floor []int64) (float64, bool) {
	type segment struct {
		bytes int64
		gain  float64
	}
	var segs []segment
	var bound float64
	free := p.totalMemory
	for k, t := range p.tenants {
		lo := max(t.minBytes, floor[k])
		w := p.hitValueWeight(k)
		hull := t.curve.UpperHull(lo, max(lo, t.maxBytes))
		bound += w * hull[0].HitRatio
		free -= lo
		for i := 1; i < len(hull); i++ {
			if dh := hull[i].HitRatio - hull[i-1].HitRatio; dh > 0 {
				segs = append(segs, segment{bytes: hull[i].SizeBytes - hull[i-1].SizeBytes, gain: w * dh})
			}
		}
	}
	if free < 0 {
		return 0, false
	}
	slices.SortFunc(segs, func(a, b segment) int {
		return cmp.Compare(b.gain*float64(a.bytes), a.gain*float64(b.bytes))
	})
	for _, s := range segs {
		if s.bytes <= free {
			bound += s.gain
			free -= s.bytes
			continue
		}
		bound += s.gain * float64(free) / float64(s.bytes)
		break
	}
	return bound, true
}

// hitsGap is the plan's expected hits below the best any plan meeting the same strict
// objectives (each at least at the size it is met at, with its margin when it has one) could
// have over real sizes, relative to that bound: a gap in [0, 1].
func (p *problem) hitsGap(parts [][]part) float64 {
	floor := make([]int64, len(p.tenants))
	var hits float64
	for k, t := range p.tenants {
		size := totalBytes(parts[k])
		hits += p.hitValueWeight(k) * t.curve.At(size)
		if n := p.needs[k]; t.strict && n.reachable && size >= n.bytes {
			floor[k] = n.bytes
			if size >= n.safeBytes {
				floor[k] = n.safeBytes
			}
		}
	}
	bound, ok := p.hitsUpperBound(floor)
	if !ok || bound <= 0 {
		return 0
	}
	return min(1, max(0, (bound-hits)/bound))
}
