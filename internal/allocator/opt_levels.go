package allocator

import (
	"math"
	"slices"
)

// Resolutions of the optimal policy's integer objective. The objective is lexicographic:
//
//	W1 * (strict objectives met, each weighted (1+priority) * U, plus 1 for each one met with
//	      its safety margin; U = strict tenants + 1, so margins never buy an objective)
//	+ W2 * (expected hits, scaled so the largest possible total is hitsResolution)
//	- movement (in units of moveUnit bytes, scaled so twice the total memory is moveResolution)
//
// with W2 larger than any possible movement and W1 larger than any possible W2*hits, so no
// amount of a lower tier can buy one unit of a higher one (the proof is the construction of
// W1 and W2 in newScaling). The resolutions shrink when the model is so large that the
// objective's coefficients could overflow int64 (the solver validates that too).
const (
	defaultHitsResolution = 1_000_000
	defaultMoveResolution = 10_000
	minHitsResolution     = 1_000
	// memoryQuantaPerNode bounds a node's memory in the models' quanta.
	memoryQuantaPerNode = 1 << 20
	// loadResolution is the largest node capacity in the models' load units.
	loadResolution = 10_000_000
	// objectiveBudget bounds the sum of |objective coefficients| (the solver's own limit is
	// int64; we keep a factor 4 of margin).
	objectiveBudget = math.MaxInt64 / 4
)

// scaling holds the units and tier weights of the optimal policy's models.
type scaling struct {
	quantum int64 // bytes per memory quantum
	// sloUnit is U above: what meeting a strict objective of priority 0 is worth in the first
	// tier, more than every safety margin together.
	sloUnit int64
	// moveUnit is the movement unit in quanta: movement is counted as ceil(|delta| / moveUnit).
	moveUnit       int64
	hitsResolution int64
	w1, w2         int64
	// hitValueTotal is the largest possible hit value (sum of hitValueWeight).
	hitValueTotal float64
	// opsScale, bytesScale convert ops/s and bytes/s to load units.
	opsScale, bytesScale float64
}

// newScaling picks units for a model with `terms` objective coefficients and `pairs`
// (tenant, node) movement variables.
func (p *problem) newScaling(terms, pairs int) scaling {
	var maxMem int64
	var maxOps, maxBW float64
	for _, n := range p.nodes {
		maxMem = max(maxMem, n.memory)
		maxOps = math.Max(maxOps, n.ops)
		maxBW = math.Max(maxBW, n.bandwidth)
	}
	sc := scaling{quantum: max(1, ceilDiv(maxMem, memoryQuantaPerNode))}
	totalQuanta := p.totalMemory / sc.quantum
	for k := range p.tenants {
		sc.hitValueTotal += p.hitValueWeight(k)
	}
	sc.opsScale = loadResolution / maxOps
	sc.bytesScale = loadResolution / maxBW
	sc.sloUnit = 1
	maxPriority := int64(0)
	for _, t := range p.tenants {
		if t.strict {
			sc.sloUnit++
			maxPriority = max(maxPriority, int64(t.priority))
		}
	}
	maxWeight := (1+maxPriority)*sc.sloUnit + 1
	for moveRes, hitsRes := int64(defaultMoveResolution), int64(defaultHitsResolution); ; {
		sc.moveUnit = max(1, ceilDiv(2*totalQuanta, moveRes))
		sc.hitsResolution = hitsRes
		// Movement in units never exceeds (new + current memory) / unit + 1 per pair.
		maxMove := 2*moveRes + 2*int64(pairs) + 2
		sc.w2 = maxMove + 1
		// Hits never exceed the resolution plus one unit of rounding per tenant.
		sc.w1 = sc.w2*(hitsRes+int64(len(p.tenants))+1) + 1
		perTerm := float64(sc.w1)*float64(maxWeight) + float64(sc.w2)*float64(hitsRes+1) + float64(maxMove)
		if perTerm*float64(max(1, terms)) < objectiveBudget || hitsRes <= minHitsResolution {
			return sc
		}
		hitsRes /= 10
		moveRes = max(100, moveRes/2)
	}
}

func ceilDiv(a, b int64) int64 {
	if a <= 0 {
		return 0
	}
	return (a + b - 1) / b
}

// levelSet is a tenant's candidate total sizes in the optimal policy, ascending, with each
// one's objective tiers.
type levelSet struct {
	bytes  []int64
	quanta []int64 // memory reserved in quanta: a multiple of the tenant's split units
	// slo is the first tier: (1+priority)*sloUnit when the size meets a strict, reachable
	// objective, plus 1 when it also has the safety margin; else 0.
	slo    []int64
	hits   []int64 // scaled expected hits
	moveLB []int64 // floor(|bytes - current total| / moveUnit bytes): a lower bound of the movement
}

func (l *levelSet) len() int { return len(l.bytes) }

// value is the level's objective coefficient in the sizing model.
func (l *levelSet) value(sc scaling, t int) int64 {
	return sc.w1*l.slo[t] + sc.w2*l.hits[t] - l.moveLB[t]
}

// levelCandidates returns the sizes worth considering for tenant k, ascending: its bounds,
// its current size, the size its objective needs, the vertices of its curve's upper hull (the
// sizes a marginal allocator stops at), and a geometric and a uniform grid, reduced to at most
// opts.SizeLevels by keeping the mandatory ones, then, greedily, the size the current
// selection predicts worst (the largest hit-ratio error of linear interpolation between the
// kept sizes), then the grid sizes farthest from the kept ones.
func (p *problem) levelCandidates(k int) []int64 {
	t := &p.tenants[k]
	lo, hi := t.minBytes, t.maxBytes
	mandatory := []int64{lo}
	if n := p.needs[k]; n.reachable && n.hasObjective {
		mandatory = append(mandatory, n.bytes, n.safeBytes)
	}
	if t.currentTotal >= lo && t.currentTotal <= hi {
		mandatory = append(mandatory, t.currentTotal)
	}
	var optional []int64
	optional = append(optional, hi)
	for _, pt := range t.curve.UpperHull(lo, hi) {
		optional = append(optional, pt.SizeBytes)
	}
	optional = append(optional, t.curve.Breakpoints(lo, hi)...)
	const grid = 16
	for i := 1; i < grid; i++ {
		optional = append(optional, lo+(hi-lo)*int64(i)/grid)
	}
	if geoLo := max(lo, hi/4096, 1); hi > geoLo {
		ratio := math.Pow(float64(hi)/float64(geoLo), 1.0/grid)
		for i, s := 1, float64(geoLo); i < grid; i++ {
			s *= ratio
			optional = append(optional, int64(s))
		}
	}
	kept := uniqueSorted(mandatory)
	limit := p.opts.sizeLevels()
	optional = uniqueSorted(optional)
	for len(kept) < limit {
		best, bestErr := int64(-1), 1e-9
		for _, s := range optional {
			if s < lo || s > hi || slices.Contains(kept, s) {
				continue
			}
			if e := math.Abs(t.curve.At(s) - interpolate(t, kept, s)); e > bestErr {
				best, bestErr = s, e
			}
		}
		if best < 0 {
			break
		}
		kept = uniqueSorted(append(kept, best))
	}
	// The kept sizes now describe the curve exactly. Remaining slots go to the grid sizes
	// farthest from every kept size, so that memory a coarse choice would leave unused can go
	// to a tenant on a linear stretch of its curve.
	for len(kept) < limit {
		best, bestDist := int64(-1), int64(0)
		for _, s := range optional {
			if s < lo || s > hi {
				continue
			}
			i, found := slices.BinarySearch(kept, s)
			if found {
				continue
			}
			dist := int64(math.MaxInt64)
			if i > 0 {
				dist = s - kept[i-1]
			}
			if i < len(kept) {
				dist = min(dist, kept[i]-s)
			}
			if dist > bestDist {
				best, bestDist = s, dist
			}
		}
		if best < 0 {
			break
		}
		kept = uniqueSorted(append(kept, best))
	}
	return kept
}

// interpolate predicts the hit ratio at s by linear interpolation between the kept sizes
// (flat outside them).
func interpolate(t *tenant, kept []int64, s int64) float64 {
	i, _ := slices.BinarySearch(kept, s)
	switch {
	case i == 0:
		return t.curve.At(kept[0])
	case i == len(kept):
		return t.curve.At(kept[len(kept)-1])
	}
	a, b := kept[i-1], kept[i]
	ha, hb := t.curve.At(a), t.curve.At(b)
	return ha + (hb-ha)*float64(s-a)/float64(b-a)
}

func uniqueSorted(xs []int64) []int64 {
	out := slices.Clone(xs)
	slices.Sort(out)
	return slices.Compact(out)
}

// buildLevels computes tenant k's level set and removes dominated levels: a level is dropped
// when a smaller one is at least as good on every tier (meets the objective, hits, movement),
// because it only costs memory.
//
// Each level reserves a whole number of units of memory: quanta is the smallest multiple of
// units (the tenant's split units) whose quanta hold the level's bytes, so that every split
// unit carries the same whole number of quanta.
func (p *problem) buildLevels(k int, sizes []int64, units int64, sc scaling) levelSet {
	t := &p.tenants[k]
	var l levelSet
	for _, s := range sizes {
		slo, hits := p.tierValues(k, s, sc)
		move := abs64(s-t.currentTotal) / (sc.moveUnit * sc.quantum)
		dominated := false
		for i := range l.bytes {
			if l.slo[i] >= slo && l.hits[i] >= hits && l.moveLB[i] <= move {
				dominated = true
				break
			}
		}
		if dominated {
			continue
		}
		l.bytes = append(l.bytes, s)
		l.quanta = append(l.quanta, units*ceilDiv(s, sc.quantum*units))
		l.slo = append(l.slo, slo)
		l.hits = append(l.hits, hits)
		l.moveLB = append(l.moveLB, move)
	}
	return l
}

// tierValues is what tenant k holding size bytes is worth in the first two tiers: its strict
// objective met (and with its margin), and its scaled expected hits.
func (p *problem) tierValues(k int, size int64, sc scaling) (slo, hits int64) {
	t := &p.tenants[k]
	n := p.needs[k]
	if t.strict && n.reachable && size >= n.bytes {
		slo = (1 + int64(t.priority)) * sc.sloUnit
		if size >= n.safeBytes {
			slo++
		}
	}
	if sc.hitValueTotal > 0 {
		hits = int64(math.Round(float64(sc.hitsResolution) * p.hitValueWeight(k) * t.curve.At(size) / sc.hitValueTotal))
	}
	return slo, hits
}
