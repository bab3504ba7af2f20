package allocator

import (
	"cmp"
	"container/heap"
	"hash/fnv"
	"math"
	"slices"
)

// maxLoadCoef bounds the load coefficient of one split unit (load units; the largest node has
// loadResolution).
const maxLoadCoef = 100 * loadResolution

// splitUnitsMulti is the number of units a tenant allowed on several nodes splits its keys
// into: 12 allows equal splits over 1, 2, 3, 4, 6 and 12 nodes and near-equal ones otherwise.
const splitUnitsMulti = 12

// optInstance is the optimal policy's discretized problem: size levels, split units and
// candidate nodes per tenant, node capacities and load coefficients in integer units.
type optInstance struct {
	p      *problem
	sc     scaling
	levels []levelSet
	// units[k] is U_k: tenant k's keys are split into U_k equal units over its nodes, and its
	// routing weight on a node is the number of units there.
	units []int64
	// spreadMin, spreadMax are the tenant's spread bounds within its candidates.
	spreadMin, spreadMax []int
	cands                [][]int
	// loadCaps is the utilization each node is planned under (problem.loadCaps).
	loadCaps []float64
	// per node, in model units
	memQuanta               []int64
	opsCap, bytesCap, guCap []int64
	// per tenant, load of one split unit in model units
	opsCoef, bytesCoef, guCoef []int64
	// curQuanta[k][node] is the current memory in quanta (rounded).
	curQuanta []map[int]int64
	// churnUnits is MaxChurnBytes in movement units (-1: none).
	churnUnits int64
	// memoryStopped records that a solve stopped at Options.MemoryLimit.
	memoryStopped bool
}

// solution is a choice of level and split for every tenant.
type solution struct {
	level []int
	// units[k][i] is the number of split units of tenant k on cands[k][i]; its memory there
	// is units * levels[k].quanta[level] / U_k quanta.
	units [][]int64
}

// memQuantaOf is the memory in quanta tenant k holds with u units at level t.
func (o *optInstance) memQuantaOf(k, t int, u int64) int64 {
	return o.levels[k].quanta[t] / o.units[k] * u
}

func newOptInstance(p *problem) *optInstance {
	o := &optInstance{p: p}
	m := len(p.tenants)
	sizes := make([][]int64, m)
	terms := 0
	for k := range p.tenants {
		sizes[k] = p.levelCandidates(k)
		terms += len(sizes[k])
	}
	o.units = make([]int64, m)
	o.spreadMin, o.spreadMax = make([]int, m), make([]int, m)
	pairs := 0
	for k, t := range p.tenants {
		o.units[k] = 1
		if t.spreadMax > 1 {
			o.units[k] = splitUnitsMulti * ceilDiv(int64(t.spreadMin), splitUnitsMulti)
		}
		o.spreadMin[k] = t.spreadMin
		o.spreadMax[k] = min(t.spreadMax, int(o.units[k]))
		pairs += o.candidateLimit(k)
	}
	o.sc = p.newScaling(terms+pairs, pairs)
	o.levels = make([]levelSet, m)
	for k := range p.tenants {
		o.levels[k] = p.buildLevels(k, sizes[k], o.units[k], o.sc)
	}
	o.initCapacities()
	return o
}

// candidateLimit is how many candidate nodes tenant k gets in the models: all its allowed
// nodes when few, else a few more than it may spread over.
func (o *optInstance) candidateLimit(k int) int {
	t := &o.p.tenants[k]
	return min(len(t.allowed), max(o.spreadMax[k]+2, 4, o.spreadMin[k]))
}

func (o *optInstance) initCapacities() {
	p, sc := o.p, o.sc
	n, m := len(p.nodes), len(p.tenants)
	o.memQuanta = make([]int64, n)
	o.opsCap, o.bytesCap, o.guCap = make([]int64, n), make([]int64, n), make([]int64, n)
	// When the fleet as a whole is busier than the utilization cap, the cap is raised to the
	// fleet's utilization so that some placement exists; the plan then reports the overload.
	demandOps, demandBytes, capOps, capBytes := p.fleetLoad()
	// The caps are lowered on the nodes of strict tenants with a queueing budget (loadCaps);
	// raised, when the fleet cannot carry its demand under them, to 1.05 times the fleet's
	// utilization.
	o.loadCaps = p.loadCaps()
	var capOpsUnder, capBytesUnder float64
	for j, nd := range p.nodes {
		capOpsUnder += nd.ops * o.loadCaps[j]
		capBytesUnder += nd.bandwidth * o.loadCaps[j]
	}
	fleetUtil := 1.05 * math.Max(demandOps/capOps, demandBytes/capBytes)
	overloaded := 1.05*demandOps > capOpsUnder || 1.05*demandBytes > capBytesUnder
	for j, nd := range p.nodes {
		util := o.loadCaps[j]
		if overloaded {
			util = math.Max(util, fleetUtil)
		}
		o.memQuanta[j] = nd.memory / sc.quantum
		o.opsCap[j] = int64(math.Max(0, (nd.ops*util-nd.bgOps)*sc.opsScale))
		o.bytesCap[j] = int64(math.Max(0, (nd.bandwidth*util-nd.bgBytes)*sc.bytesScale))
		o.guCap[j] = int64(nd.bandwidth * sc.bytesScale)
	}
	o.opsCoef, o.bytesCoef, o.guCoef = make([]int64, m), make([]int64, m), make([]int64, m)
	o.curQuanta = make([]map[int]int64, m)
	for k, t := range p.tenants {
		u := float64(o.units[k])
		// A unit carrying more than maxLoadCoef (a hundred times the largest node) cannot fit
		// anywhere anyway; capping keeps every constraint's sum far from int64 overflow.
		coef := func(rate, scale float64) int64 { return int64(math.Min(maxLoadCoef, math.Ceil(rate/u*scale))) }
		o.opsCoef[k] = coef(t.reqRate, sc.opsScale)
		o.bytesCoef[k] = coef(t.byteRate, sc.bytesScale)
		o.guCoef[k] = coef(t.guaranteed, sc.bytesScale)
		o.curQuanta[k] = make(map[int]int64, len(t.current))
		for _, c := range t.current {
			o.curQuanta[k][c.node] = int64(math.Round(float64(c.bytes) / float64(sc.quantum)))
		}
	}
	o.churnUnits = -1
	if p.opts.MaxChurnBytes > 0 {
		o.churnUnits = p.opts.MaxChurnBytes / (sc.moveUnit * sc.quantum)
	}
}

// moveUnits is the movement of a tenant's memory on one node, in movement units (bytes).
func (o *optInstance) moveUnits(from, to int64) int64 {
	return ceilDiv(abs64(to-from), o.sc.moveUnit*o.sc.quantum)
}

// tiers returns the three tiers of the objective for levels and parts given in bytes. Each
// tenant is scored by the bytes it holds, its expected hits exactly (scaled as the models
// scale them, but not rounded per tenant: with thousands of tenants the models' per-tenant
// rounding is coarser than the differences between plans).
func (o *optInstance) tiers(level []int, parts [][]part) (slo int64, hits float64, move int64) {
	for k, t := range o.p.tenants {
		b := totalBytes(parts[k])
		s, _ := o.p.tierValues(k, b, o.sc)
		slo += s
		if o.sc.hitValueTotal > 0 {
			hits += float64(o.sc.hitsResolution) * o.p.hitValueWeight(k) * t.curve.At(b) / o.sc.hitValueTotal
		}
		move += o.movementOf(t.current, parts[k])
	}
	return slo, hits, move
}

func (o *optInstance) movementOf(from, to []part) int64 {
	var d int64
	i, j := 0, 0
	for i < len(from) || j < len(to) {
		switch {
		case j == len(to) || (i < len(from) && from[i].node < to[j].node):
			d += o.moveUnits(from[i].bytes, 0)
			i++
		case i == len(from) || to[j].node < from[i].node:
			d += o.moveUnits(0, to[j].bytes)
			j++
		default:
			d += o.moveUnits(from[i].bytes, to[j].bytes)
			i++
			j++
		}
	}
	return d
}

// objective is the lexicographic objective of levels and parts in the models' units, with the
// models' penalty for load above the utilization caps.
func (o *optInstance) objective(level []int, parts [][]part) int64 {
	slo, hits, move := o.tiers(level, parts)
	return o.sc.w1*slo + int64(math.Round(float64(o.sc.w2)*(hits-float64(o.partsOverload(parts))))) - move
}

// partsOverload is the overload of parts as the models count it: each part carries its routing
// fraction of the tenant's split units.
func (o *optInstance) partsOverload(parts [][]part) int64 {
	ops := make([]float64, len(o.p.nodes))
	bytes := make([]float64, len(o.p.nodes))
	for k, ps := range parts {
		for i, f := range fractions(ps) {
			units := f * float64(o.units[k])
			ops[ps[i].node] += float64(o.opsCoef[k]) * units
			bytes[ps[i].node] += float64(o.bytesCoef[k]) * units
		}
	}
	var over int64
	for j := range o.p.nodes {
		over += int64(math.Round(math.Max(0, ops[j]-float64(o.opsCap[j])) + math.Max(0, bytes[j]-float64(o.bytesCap[j]))))
	}
	return over
}

// upgrade is a greedy step: moving tenant k to level `to` gains `gain` objective per quantum.
type upgrade struct {
	k, from, to int
	gain        float64
}

type upgradeHeap []upgrade

func (h upgradeHeap) Len() int { return len(h) }
func (h upgradeHeap) Less(i, j int) bool {
	if h[i].gain != h[j].gain {
		return h[i].gain > h[j].gain
	}
	return h[i].k < h[j].k
}
func (h upgradeHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *upgradeHeap) Push(x any)   { *h = append(*h, x.(upgrade)) }
func (h *upgradeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// greedySizing picks a level per tenant: everyone at its lowest level; then strict tenants, by
// priority and then smallest need, jump to the level meeting their objective while memory
// lasts; then, repeatedly, the upgrade with the best objective gain per quantum that fits (the
// steepest segment of each tenant's hull over the levels left).
func (o *optInstance) greedySizing() []int {
	p := o.p
	m := len(p.tenants)
	level := make([]int, m)
	var budget, used int64
	for _, q := range o.memQuanta {
		budget += q
	}
	for k := range level {
		used += o.levels[k].quanta[0]
	}
	strict := make([]int, 0, m)
	for k := range p.tenants {
		if slices.ContainsFunc(o.levels[k].slo, func(s int64) bool { return s > 0 }) {
			strict = append(strict, k)
		}
	}
	slices.SortStableFunc(strict, func(a, b int) int {
		if pa, pb := p.tenants[a].priority, p.tenants[b].priority; pa != pb {
			return cmp.Compare(pb, pa)
		}
		return cmp.Compare(p.needs[a].bytes, p.needs[b].bytes)
	})
	for _, k := range strict {
		l := &o.levels[k]
		t := slices.IndexFunc(l.slo, func(s int64) bool { return s > 0 })
		if extra := l.quanta[t] - l.quanta[level[k]]; used+extra <= budget {
			level[k] = t
			used += extra
		}
	}
	best := func(k int) (upgrade, bool) {
		l := &o.levels[k]
		from := level[k]
		base := l.value(o.sc, from)
		up := upgrade{k: k, from: from, to: -1}
		for t := from + 1; t < l.len(); t++ {
			extra := l.quanta[t] - l.quanta[from]
			gain := float64(l.value(o.sc, t) - base)
			if gain <= 0 || used+extra > budget {
				continue
			}
			g := gain / float64(max(extra, 1))
			if up.to < 0 || g > up.gain {
				up.to, up.gain = t, g
			}
		}
		return up, up.to >= 0
	}
	h := &upgradeHeap{}
	for k := range p.tenants {
		if up, ok := best(k); ok {
			*h = append(*h, up)
		}
	}
	heap.Init(h)
	for h.Len() > 0 {
		up := heap.Pop(h).(upgrade)
		l := &o.levels[up.k]
		if up.from != level[up.k] || used+l.quanta[up.to]-l.quanta[up.from] > budget {
			// Stale or no longer fits: recompute this tenant's best step.
			if next, ok := best(up.k); ok {
				heap.Push(h, next)
			}
			continue
		}
		used += l.quanta[up.to] - l.quanta[up.from]
		level[up.k] = up.to
		if next, ok := best(up.k); ok {
			heap.Push(h, next)
		}
	}
	return level
}

// greedyPlace places the levels' reservations with the heuristic placer in whole split
// units. A tenant that does not fit either gets room made for it, by lowering tenants already
// placed on one of its nodes when that loses less objective than lowering it (see makeRoom),
// or drops a level and tries again (at its lowest level it is placed by bytes, whatever fits,
// and runOptimal repairs the plan: see enforceHard).
// The memory that packing leaves free then goes to level upgrades that fit on the nodes the
// tenants already use (see fillUpgrades).
func (o *optInstance) greedyPlace(level []int) ([]int, [][]part) {
	p := o.p
	level = slices.Clone(level)
	sizes := make([]int64, len(p.tenants))
	for k := range sizes {
		sizes[k] = o.levels[k].quanta[level[k]] * o.sc.quantum
	}
	parts := make([][]part, len(p.tenants))
	pl := newPlacer(p, o.loadCaps)
	for j := range pl.freeMem {
		pl.freeMem[j] = o.memQuanta[j] * o.sc.quantum // the models' view of the node
	}
	for _, k := range p.placementOrder(sizes) {
		l := &o.levels[k]
		U := o.units[k]
		madeRoom := false
		for {
			ps, ok := pl.placeUnits(k, U, l.quanta[level[k]]/U*o.sc.quantum, p.nodeCount(k))
			if ok {
				parts[k] = ps
				break
			}
			if !madeRoom && o.makeRoom(k, level, parts, pl) {
				madeRoom = true
				continue
			}
			if level[k] == 0 {
				parts[k], _ = pl.place(k, l.bytes[0], p.nodeCount(k))
				break
			}
			level[k]--
		}
	}
	o.fillUpgrades(level, parts, pl.freeMem)
	return level, parts
}

// makeRoom tries to fit tenant k at its current level, which fits nowhere, by lowering the
// levels of tenants already placed on one of its allowed nodes: on each node it prices the
// cheapest downgrades (least objective lost per byte freed) that free a node's share of k,
// and it performs the cheapest such set when it costs less than lowering k itself to the
// highest level that fits as things are. It reports whether it freed the room.
func (o *optInstance) makeRoom(k int, level []int, parts [][]part, pl *placer) bool {
	p := o.p
	l := &o.levels[k]
	n := int64(min(max(p.nodeCount(k), o.spreadMin[k]), o.spreadMax[k]))
	share := func(t int) int64 { return ceilDiv(l.quanta[t], n) * o.sc.quantum }
	var mostFree int64
	for _, j := range p.tenants[k].allowed {
		mostFree = max(mostFree, pl.freeMem[j])
	}
	// The alternative is the highest lower level whose share fits the roomiest node (at least
	// one level down). When not even the lowest level fits, making room is the only way to give
	// the tenant its memory minimum, whatever it costs.
	fallback := max(0, level[k]-1)
	for fallback > 0 && share(fallback) > mostFree {
		fallback--
	}
	dropCost := l.value(o.sc, level[k]) - l.value(o.sc, fallback)
	if level[k] == 0 || share(fallback) > mostFree {
		dropCost = math.MaxInt64
	}
	need := share(level[k])
	holders := make(map[int][]int)
	for i, ps := range parts {
		for _, pt := range ps {
			if pt.weight > 0 {
				holders[pt.node] = append(holders[pt.node], i)
			}
		}
	}
	type step struct{ tenant, to int }
	bestNode, bestCost := -1, dropCost
	var bestSteps []step
	for _, j := range p.tenants[k].allowed {
		free := pl.freeMem[j]
		if free >= need {
			continue
		}
		// Lower the holders one level at a time, cheapest objective per byte freed here first.
		lv := make(map[int]int, len(holders[j]))
		for _, i := range holders[j] {
			lv[i] = level[i]
		}
		var cost int64
		var steps []step
		for free < need && cost < bestCost {
			pick, pickRatio, pickFreed := -1, math.Inf(1), int64(0)
			for _, i := range holders[j] {
				if lv[i] == 0 {
					continue
				}
				freed := o.unitShift(i, lv[i], lv[i]-1) * unitsOn(parts[i], j)
				lost := o.levels[i].value(o.sc, lv[i]) - o.levels[i].value(o.sc, lv[i]-1)
				if freed > 0 && float64(lost)/float64(freed) < pickRatio {
					pick, pickRatio, pickFreed = i, float64(lost)/float64(freed), freed
				}
			}
			if pick < 0 {
				break
			}
			cost += o.levels[pick].value(o.sc, lv[pick]) - o.levels[pick].value(o.sc, lv[pick]-1)
			lv[pick]--
			free += pickFreed
			steps = append(steps, step{tenant: pick, to: lv[pick]})
		}
		if free >= need && cost < bestCost {
			bestNode, bestCost, bestSteps = j, cost, steps
		}
	}
	if bestNode < 0 {
		return false
	}
	for _, st := range bestSteps {
		perUnit := o.levels[st.tenant].quanta[st.to] / o.units[st.tenant] * o.sc.quantum
		for c := range parts[st.tenant] {
			pt := &parts[st.tenant][c]
			pl.freeMem[pt.node] += pt.bytes - perUnit*pt.weight
			pt.bytes = perUnit * pt.weight
		}
		level[st.tenant] = st.to
	}
	return true
}

// unitShift is how many bytes one split unit of tenant i frees going from level a to b.
func (o *optInstance) unitShift(i, a, b int) int64 {
	return (o.levels[i].quanta[a] - o.levels[i].quanta[b]) / o.units[i] * o.sc.quantum
}

// unitsOn is how many split units parts hold on node j.
func unitsOn(parts []part, j int) int64 {
	for _, pt := range parts {
		if pt.node == j {
			return pt.weight
		}
	}
	return 0
}

// trimToLevels turns greedy parts, which hold each level's reservation (whole quanta per
// split unit), into what the tenants get: the level's bytes split in proportion to the units,
// never more than reserved. Parts placed by bytes are already exact.
func (o *optInstance) trimToLevels(level []int, parts [][]part) [][]part {
	out := make([][]part, len(parts))
	for k, ps := range parts {
		if len(ps) == 0 || ps[0].weight == 0 {
			out[k] = ps
			continue
		}
		room := make([]int64, len(ps))
		weights := make([]float64, len(ps))
		for i, pt := range ps {
			room[i], weights[i] = pt.bytes, float64(pt.weight)
		}
		split := splitProportional(o.levels[k].bytes[level[k]], weights, room)
		out[k] = make([]part, len(ps))
		for i, pt := range ps {
			out[k][i] = part{node: pt.node, bytes: split[i], weight: pt.weight}
		}
	}
	return out
}

// fillUpgrades raises levels into the memory left free on each tenant's own nodes, best
// objective gain per quantum first, keeping every tenant's split units (so its routing and
// load stay the same). Parts must be in whole units (weight = units, bytes = reserved memory).
func (o *optInstance) fillUpgrades(level []int, parts [][]part, free []int64) {
	fits := func(k, to int) bool {
		if parts[k] == nil || parts[k][0].weight == 0 {
			return false
		}
		extra := (o.levels[k].quanta[to] - o.levels[k].quanta[level[k]]) / o.units[k] * o.sc.quantum
		for _, pt := range parts[k] {
			if extra*pt.weight > free[pt.node] {
				return false
			}
		}
		return true
	}
	best := func(k int) (upgrade, bool) {
		l := &o.levels[k]
		up := upgrade{k: k, from: level[k], to: -1}
		base := l.value(o.sc, level[k])
		for t := level[k] + 1; t < l.len(); t++ {
			gain := float64(l.value(o.sc, t) - base)
			if gain <= 0 || !fits(k, t) {
				continue
			}
			if g := gain / float64(max(1, l.quanta[t]-l.quanta[level[k]])); up.to < 0 || g > up.gain {
				up.to, up.gain = t, g
			}
		}
		return up, up.to >= 0
	}
	h := &upgradeHeap{}
	for k := range o.p.tenants {
		if up, ok := best(k); ok {
			*h = append(*h, up)
		}
	}
	heap.Init(h)
	for h.Len() > 0 {
		up := heap.Pop(h).(upgrade)
		if up.from != level[up.k] || !fits(up.k, up.to) {
			if next, ok := best(up.k); ok {
				heap.Push(h, next)
			}
			continue
		}
		perUnit := (o.levels[up.k].quanta[up.to] - o.levels[up.k].quanta[up.from]) / o.units[up.k] * o.sc.quantum
		for i := range parts[up.k] {
			pt := &parts[up.k][i]
			free[pt.node] -= perUnit * pt.weight
			pt.bytes += perUnit * pt.weight
		}
		level[up.k] = up.to
		if next, ok := best(up.k); ok {
			heap.Push(h, next)
		}
	}
}

func boolToInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// maxCandidatePairs bounds the (tenant, candidate node) pairs of the models when the usual
// candidate limits would exceed it: CP-SAT's memory grows with the model (about 1.8 KB per
// variable and constraint, three of each per pair), and at 2,000 tenants on 200 nodes the
// usual limits gave 28,000 pairs, a placement model of 84,400 variables and 300 MiB of solver
// heap (docs/scale.md, "The placement model at fleet scale"). 10,000 pairs is above every
// fleet of the tests and of the simulator, whose models keep the usual limits.
const maxCandidatePairs = 10000

// fleetCandidateLimits returns each tenant's candidate limit when the usual ones
// (candidateLimit) add up to more than maxCandidatePairs, else nil. Each tenant then keeps
// the nodes it must be able to express (those it is on now and those of the greedy solution)
// and shares what the bound leaves over them evenly, at least one more node each (somewhere
// to move to), never more than its usual limit.
func (o *optInstance) fleetCandidateLimits(greedy [][]part) []int {
	p := o.p
	usual := 0
	for k := range p.tenants {
		usual += o.candidateLimit(k)
	}
	if usual <= maxCandidatePairs {
		return nil
	}
	needed := make([]int, len(p.tenants))
	total := 0
	for k, t := range p.tenants {
		nodes := make(map[int]bool)
		for _, c := range t.current {
			if _, ok := slices.BinarySearch(t.allowed, c.node); ok && c.bytes > 0 {
				nodes[c.node] = true
			}
		}
		for _, pt := range greedy[k] {
			nodes[pt.node] = true
		}
		needed[k] = max(len(nodes), o.spreadMin[k])
		total += needed[k]
	}
	extra := max(1, (maxCandidatePairs-total)/len(p.tenants))
	limits := make([]int, len(p.tenants))
	for k := range p.tenants {
		limits[k] = min(o.candidateLimit(k), needed[k]+extra)
	}
	return limits
}

// chooseCandidates fixes each tenant's candidate nodes for the models: every allowed node when
// there are few, else the nodes it is on now, the nodes the greedy solution uses, the allowed
// nodes with the most free memory after the greedy solution, and a few spread by a hash of the
// tenant's id (so that tenants do not all compete for the same spare nodes); at fleet scale
// fewer of the last two (fleetCandidateLimits).
func (o *optInstance) chooseCandidates(greedy [][]part) {
	p := o.p
	fleetLimits := o.fleetCandidateLimits(greedy)
	free := make([]int64, len(p.nodes))
	for j, n := range p.nodes {
		free[j] = n.memory
	}
	for _, ps := range greedy {
		for _, pt := range ps {
			free[pt.node] -= pt.bytes
		}
	}
	// One order of every node by free memory (most first, ties by index) serves every tenant.
	byFree := make([]int, len(p.nodes))
	for j := range byFree {
		byFree[j] = j
	}
	slices.SortFunc(byFree, func(a, b int) int {
		if free[a] != free[b] {
			return cmp.Compare(free[b], free[a])
		}
		return a - b
	})
	o.cands = make([][]int, len(p.tenants))
	for k, t := range p.tenants {
		limit := o.candidateLimit(k)
		if fleetLimits != nil {
			limit = fleetLimits[k]
		}
		if len(t.allowed) <= limit {
			o.cands[k] = slices.Clone(t.allowed)
			continue
		}
		seen := make(map[int]bool, limit)
		var out []int
		add := func(j int) {
			if !seen[j] && len(out) < limit {
				seen[j] = true
				out = append(out, j)
			}
		}
		for _, c := range t.current {
			if c.bytes > 0 {
				if _, ok := slices.BinarySearch(t.allowed, c.node); ok {
					add(c.node)
				}
			}
		}
		for _, pt := range greedy[k] {
			add(pt.node)
		}
		roomy := 0
		for _, j := range byFree {
			if len(out) >= limit || roomy >= (limit+1)/2 {
				break
			}
			if _, ok := slices.BinarySearch(t.allowed, j); ok {
				add(j)
				roomy++
			}
		}
		h := fnv.New64a()
		h.Write([]byte(t.id))
		seed := h.Sum64()
		for i := uint64(0); len(out) < limit; i++ {
			add(t.allowed[(seed+i*2654435761)%uint64(len(t.allowed))])
		}
		slices.Sort(out)
		o.cands[k] = out
	}
}

// toSolution expresses levels and parts as model values: the split units on the candidates,
// from the parts' routing fractions (exact for parts placed in whole units); parts off the
// candidates are dropped (the candidates include every greedy node).
func (o *optInstance) toSolution(level []int, parts [][]part) solution {
	s := solution{level: slices.Clone(level), units: make([][]int64, len(level))}
	for k := range level {
		cands := o.cands[k]
		fr := fractions(parts[k])
		weights := make([]float64, len(cands))
		for i, pt := range parts[k] {
			if c := slices.Index(cands, pt.node); c >= 0 {
				weights[c] = fr[i]
			}
		}
		s.units[k] = splitProportional(o.units[k], weights, unlimitedRoom(len(cands)))
	}
	return s
}

// currentSolution expresses the plan in force as a model solution: every tenant at the level
// closest to its current total, split over its current nodes in proportion to its current
// memory there. Tenants without memory now take the fallback's level and split.
func (o *optInstance) currentSolution(fallback solution) solution {
	s := solution{level: slices.Clone(fallback.level), units: make([][]int64, len(fallback.units))}
	for k, t := range o.p.tenants {
		s.units[k] = fallback.units[k]
		if t.currentTotal == 0 {
			continue
		}
		l := &o.levels[k]
		closest := 0
		for i, b := range l.bytes {
			if abs64(b-t.currentTotal) < abs64(l.bytes[closest]-t.currentTotal) {
				closest = i
			}
		}
		weights := make([]float64, len(o.cands[k]))
		for _, c := range t.current {
			if i := slices.Index(o.cands[k], c.node); i >= 0 {
				weights[i] = float64(c.bytes)
			}
		}
		s.level[k] = closest
		s.units[k] = splitProportional(o.units[k], weights, unlimitedRoom(len(weights)))
	}
	return s
}

// bestHint returns the better of the greedy solution and the plan in force (when the latter
// satisfies every constraint), so that a plan that is still good is kept rather than
// reshuffled for a gain the solver would not prove within its time.
func (o *optInstance) bestHint(greedy solution) solution {
	current := o.currentSolution(greedy)
	if o.check(current, true) == nil && o.modelObjective(current) >= o.modelObjective(greedy) {
		return current
	}
	return greedy
}

// partsOf turns a solution into parts in bytes: each tenant's level size split over its nodes
// in proportion to its units there (never more than the quanta reserved there), with the
// units as routing weights.
func (o *optInstance) partsOf(s solution) [][]part {
	out := make([][]part, len(s.level))
	for k := range s.level {
		size := o.levels[k].bytes[s.level[k]]
		room := make([]int64, len(s.units[k]))
		weights := make([]float64, len(s.units[k]))
		for i, u := range s.units[k] {
			room[i] = o.memQuantaOf(k, s.level[k], u) * o.sc.quantum
			weights[i] = float64(u)
		}
		split := splitProportional(size, weights, room)
		for i, j := range o.cands[k] {
			if s.units[k][i] > 0 {
				out[k] = append(out[k], part{node: j, bytes: split[i], weight: s.units[k][i]})
			}
		}
	}
	return out
}
