package allocator

import (
	"cmp"
	"context"
	"math"
	"slices"
	"strconv"

	"github.com/cacheqos/cacheqos/internal/curve"
)

// elephantHysteresis keeps a tenant the plan in force already isolates an elephant until its
// rate falls this fraction below the 1/K threshold, so that it does not flap when tenants join
// or leave (K changes the threshold).
const elephantHysteresis = 0.05

// runLACS is LACS (Algorithm 2 of the paper) with tenants' partitions as the cached objects.
//
// Isolation guarantee: every tenant must do no worse than in an isolated cache with 1/K of the
// memory and 1/K of the ops and bandwidth of every node, its traffic spread over its allowed
// nodes in proportion to their ops capacity (T*_k in the shared latency model: hit/miss
// latency plus M/M/1 queueing).
//
//  1. Sharing phase. Sizing (the paper's LP P3): maximize the expected hits subject to the
//     aggregate memory and to every tenant hitting at least as much as with 1/K of it. On
//     curves this LP is a greedy walk along each tenant's upper concave hull, steepest
//     segments first (exact for the LP). Placement (Algorithm 1): the optimal per-node load
//     split of P4 (minimize the M/M/1 delay, solved by its KKT conditions), then best-fit of
//     the tenants' chunks (a tenant spread over n nodes is n chunks) in descending load onto
//     the node with the most cache-load quota, else the most total-load quota — with a memory
//     check the paper lacks: a chunk only goes where its bytes fit.
//  2. If some tenant is worse off than isolated: elephants are the tenants whose request or
//     byte rate exceeds 1/K of the aggregate capacity. First their cache is revoked (sizing
//     rerun without them; memory minimums are kept); they still route their traffic.
//  3. If isolation still fails: the biggest elephant is throttled to 1/K of every node's
//     bandwidth and ops (its partitions get those token-bucket caps and the others are placed
//     on the remaining capacity), then the next biggest, until isolation holds or every
//     elephant is throttled, which the plan reports as infeasible overload. The smallest
//     sufficient number of throttled elephants is found by bisection rather than one by one.
func runLACS(ctx context.Context, p *problem) (*allocation, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l := newLACS(p)
	revoked := make([]bool, len(p.tenants))
	sizes := l.size(revoked)
	a := l.round(sizes, revoked, nil)
	if l.isolationHolds(a) {
		a.planNotes = append(a.planNotes, "lacs: the sharing phase meets the isolation guarantee")
		return a, nil
	}
	elephants := l.elephants()
	if len(elephants) == 0 {
		a.planNotes = append(a.planNotes, "lacs: the isolation guarantee fails but no tenant is an elephant")
		return a, nil
	}
	for _, k := range elephants {
		revoked[k] = true
	}
	sizes = l.size(revoked)
	if a = l.round(sizes, revoked, nil); l.isolationHolds(a) {
		a.planNotes = append(a.planNotes, "lacs: revoking the elephants' cache restores the isolation guarantee")
		return a, nil
	}
	// The paper throttles the biggest elephant, then the next, until isolation holds. Throttling
	// one more elephant only lowers the load the others see, so the smallest sufficient prefix
	// of the elephants (biggest first) is found by bisection: the same answer in log(E) rounds
	// instead of E, each of which re-places every tenant.
	if a = l.round(sizes, revoked, elephants); !l.isolationHolds(a) {
		a.planNotes = append(a.planNotes, "lacs: infeasible: every elephant is throttled and the isolation guarantee still fails (aggregate overload)")
		return a, nil
	}
	lo, hi := 1, len(elephants) // throttling all of them works, throttling lo-1 does not
	for lo < hi {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		mid := (lo + hi) / 2
		if l.isolationHolds(l.round(sizes, revoked, elephants[:mid])) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	a = l.round(sizes, revoked, elephants[:lo])
	a.planNotes = append(a.planNotes, "lacs: throttling the "+plural(lo, "biggest elephant")+" restores the isolation guarantee")
	return a, nil
}

func plural(n int, what string) string {
	if n == 1 {
		return what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

type lacs struct {
	p *problem
	// isoBytes is the 1/K memory share, isoSize[k] the smallest size matching what tenant k
	// hits with it, isoLatency[k] its isolated latency T*_k.
	isoBytes   int64
	isoSize    []int64
	isoLatency []float64
}

func newLACS(p *problem) *lacs {
	m := len(p.tenants)
	l := &lacs{p: p, isoSize: make([]int64, m), isoLatency: make([]float64, m)}
	if m == 0 {
		return l
	}
	l.isoBytes = p.totalMemory / int64(m)
	for k := range p.tenants {
		t := &p.tenants[k]
		share := min(l.isoBytes, t.maxBytes)
		h := t.curve.At(share)
		size, _ := t.curve.MinSize(h)
		l.isoSize[k] = min(max(size, t.minBytes), t.maxBytes)
		l.isoLatency[k] = curve.MeanLatency(h, t.hitLatency, t.missLatency) + l.isolatedQueueDelay(k)
	}
	return l
}

// isolatedQueueDelay is tenant k's mean queueing delay alone on 1/K of each allowed node, its
// traffic split in proportion to the nodes' ops capacity.
func (l *lacs) isolatedQueueDelay(k int) float64 {
	p := l.p
	t := &p.tenants[k]
	K := float64(len(p.tenants))
	var opsTotal float64
	for _, j := range t.allowed {
		opsTotal += p.nodes[j].ops
	}
	var delay float64
	for _, j := range t.allowed {
		n := &p.nodes[j]
		share := n.ops / opsTotal
		rho := math.Max(t.reqRate*share/(n.ops/K), t.byteRate*share/(n.bandwidth/K))
		d, _ := curve.QueueDelayAtUtilization(n.ops/K, rho)
		delay += share * d
	}
	return delay
}

// elephants lists the tenants whose rate exceeds 1/K of the aggregate ops or bandwidth,
// biggest (by share of the aggregate) first.
func (l *lacs) elephants() []int {
	p := l.p
	var ops, bw float64
	for _, n := range p.nodes {
		ops += n.ops
		bw += n.bandwidth
	}
	K := float64(len(p.tenants))
	share := func(k int) float64 {
		t := &p.tenants[k]
		return math.Max(t.reqRate/(ops/K), t.byteRate/(bw/K))
	}
	var out []int
	for k := range p.tenants {
		threshold := 1.0
		if p.tenants[k].wasIsolated {
			threshold -= elephantHysteresis
		}
		if share(k) > threshold {
			out = append(out, k)
		}
	}
	slices.SortStableFunc(out, func(a, b int) int { return cmp.Compare(share(b), share(a)) })
	return out
}

func (l *lacs) isolationHolds(a *allocation) bool {
	as := l.p.assess(a)
	for k := range l.p.tenants {
		if !a.isolated[k] && as.latency[k] > l.isoLatency[k]*(1+1e-9) {
			return false
		}
	}
	return true
}

// round places the sizes once, the throttled tenants on their own 1/K slices, and notes why
// each tenant got what it got.
func (l *lacs) round(sizes []int64, revoked []bool, throttled []int) *allocation {
	p := l.p
	a := newAllocation(len(p.tenants))
	for _, k := range throttled {
		a.isolated[k] = true
	}
	l.place(a, sizes, a.isolated)
	for k := range p.tenants {
		switch {
		case a.isolated[k]:
			a.note(k, "lacs: elephant: cache revoked and bandwidth throttled to 1/K of every node")
		case revoked[k]:
			a.note(k, "lacs: elephant: cache revoked (memory minimum kept); traffic still routed")
		default:
			a.note(k, "lacs: at least the %s that matches a 1/K share (%s), spare by expected hits", bytesHuman(l.isoSize[k]), bytesHuman(l.isoBytes))
		}
	}
	return a
}

// hullSegment is a piece of a tenant's upper concave hull: bytes more memory bring gain more
// expected hits per second.
type hullSegment struct {
	tenant int
	bytes  int64
	slope  float64
}

// size solves P3 on the curves: every tenant not revoked starts at its isolation size (revoked
// ones at their minimum) and the remaining memory goes along the hull segments in order of
// decreasing hits per byte, the last one partially.
func (l *lacs) size(revoked []bool) []int64 {
	p := l.p
	sizes := make([]int64, len(p.tenants))
	free := p.totalMemory
	var segs []hullSegment
	for k := range p.tenants {
		t := &p.tenants[k]
		if revoked[k] {
			sizes[k] = t.minBytes
			free -= sizes[k]
			continue
		}
		sizes[k] = l.isoSize[k]
		free -= sizes[k]
		hull := t.curve.UpperHull(sizes[k], t.maxBytes)
		for i := 1; i < len(hull); i++ {
			d := hull[i].SizeBytes - hull[i-1].SizeBytes
			gain := t.reqRate * (hull[i].HitRatio - hull[i-1].HitRatio)
			if d > 0 {
				segs = append(segs, hullSegment{tenant: k, bytes: d, slope: gain / float64(d)})
			}
		}
	}
	slices.SortStableFunc(segs, func(a, b hullSegment) int { return cmp.Compare(b.slope, a.slope) })
	for _, s := range segs {
		if free <= 0 {
			break
		}
		take := min(s.bytes, free)
		sizes[s.tenant] += take
		free -= take
	}
	return sizes
}

// loadQuotas solves P4 for the ops load: minimize sum_j L_j/(mu_j - L_j) subject to
// sum_j L_j = total, which the KKT conditions give as L_j = max(0, mu_j - sqrt(mu_j/nu)) with
// nu found by bisection. mu_j is the capacity left for the tenants being placed. An
// overloaded fleet gets quotas in proportion to capacity.
func loadQuotas(mu []float64, total float64) []float64 {
	out := make([]float64, len(mu))
	var capacity float64
	for _, m := range mu {
		capacity += math.Max(0, m)
	}
	if capacity <= 0 {
		return out
	}
	if total >= capacity {
		for j, m := range mu {
			out[j] = math.Max(0, m) / capacity * total
		}
		return out
	}
	at := func(nu float64) float64 {
		var s float64
		for j, m := range mu {
			out[j] = 0
			if m > 0 {
				out[j] = math.Max(0, m-math.Sqrt(m/nu))
			}
			s += out[j]
		}
		return s
	}
	lo, hi := 1e-300, 1.0
	for at(hi) < total {
		hi *= 4
	}
	for range 200 {
		mid := math.Sqrt(lo * hi)
		if at(mid) < total {
			lo = mid
		} else {
			hi = mid
		}
	}
	at(hi)
	return out
}

type lacsChunk struct {
	tenant, index int
	bytes         int64
	load          float64
	cacheLoad     float64
}

// place is Algorithm 1 with a memory check; isolated tenants get equal 0-byte routing shares
// (plus their memory minimum) on every allowed node, each with its own 1/K slice.
func (l *lacs) place(a *allocation, sizes []int64, isolated []bool) {
	p := l.p
	K := float64(len(p.tenants))
	mu := make([]float64, len(p.nodes))
	freeMem := make([]int64, len(p.nodes))
	for j, n := range p.nodes {
		mu[j] = n.ops - n.bgOps
		freeMem[j] = n.memory
	}
	var total, cacheTotal float64
	var chunks []lacsChunk
	for k := range p.tenants {
		t := &p.tenants[k]
		if isolated[k] {
			split := splitProportional(sizes[k], equalWeights(len(t.allowed)), unlimitedRoom(len(t.allowed)))
			for i, j := range t.allowed {
				mu[j] -= p.nodes[j].ops / K
				a.parts[k] = append(a.parts[k], part{node: j, bytes: split[i], weight: 1})
				freeMem[j] -= split[i]
			}
			continue
		}
		n := p.nodeCount(k)
		hit := t.curve.At(sizes[k])
		split := splitProportional(sizes[k], equalWeights(n), unlimitedRoom(n))
		for i := range n {
			c := lacsChunk{tenant: k, index: i, bytes: split[i], load: t.reqRate / float64(n)}
			c.cacheLoad = c.load * hit
			chunks = append(chunks, c)
			total += c.load
			cacheTotal += c.cacheLoad
		}
	}
	quota := loadQuotas(mu, total)
	cacheQuota := make([]float64, len(quota))
	for j := range quota {
		if total > 0 {
			cacheQuota[j] = quota[j] * cacheTotal / total
		}
	}
	slices.SortStableFunc(chunks, func(a, b lacsChunk) int { return cmp.Compare(b.load, a.load) })
	onNode := make(map[[2]int]int) // (tenant, node) -> index in a.parts[tenant]
	for _, c := range chunks {
		t := &p.tenants[c.tenant]
		fits := func(j int) bool {
			_, taken := onNode[[2]int{c.tenant, j}]
			return !taken && freeMem[j] >= c.bytes
		}
		best := func(score []float64, ok func(int) bool) int {
			pick := -1
			for _, j := range t.allowed {
				if ok(j) && (pick < 0 || score[j] > score[pick]) {
					pick = j
				}
			}
			return pick
		}
		j := best(cacheQuota, fits)
		if j < 0 || cacheQuota[j] < c.cacheLoad {
			j = best(quota, fits)
		}
		bytes := c.bytes
		if j < 0 {
			// No allowed node has room for the whole chunk (or a node of its own): the one with
			// the most free memory takes what fits, and the note says so.
			j = best(asFloat(freeMem), func(int) bool { return true })
			bytes = max(0, min(bytes, freeMem[j]))
			a.note(c.tenant, "lacs: memory check: a chunk of %s got only %s", bytesHuman(c.bytes), bytesHuman(bytes))
		}
		quota[j] -= c.load
		cacheQuota[j] -= c.cacheLoad
		freeMem[j] -= bytes
		if i, ok := onNode[[2]int{c.tenant, j}]; ok {
			a.parts[c.tenant][i].bytes += bytes
			a.parts[c.tenant][i].weight++
			continue
		}
		onNode[[2]int{c.tenant, j}] = len(a.parts[c.tenant])
		a.parts[c.tenant] = append(a.parts[c.tenant], part{node: j, bytes: bytes, weight: 1})
	}
	for k := range a.parts {
		slices.SortFunc(a.parts[k], func(a, b part) int { return a.node - b.node })
	}
}

func equalWeights(n int) []float64 {
	w := make([]float64, n)
	for i := range w {
		w[i] = 1
	}
	return w
}

func unlimitedRoom(n int) []int64 {
	r := make([]int64, n)
	for i := range r {
		r[i] = unlimited
	}
	return r
}

func asFloat(xs []int64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = float64(x)
	}
	return out
}
