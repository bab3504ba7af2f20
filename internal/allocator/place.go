package allocator

import (
	"cmp"
	"math"
	"slices"
)

// placer places tenants one at a time onto nodes, tracking what is left: memory, ops and
// bandwidth headroom under the utilization cap, and unreserved bandwidth for guarantees. It is
// the placement of the heuristic policies and of the optimal policy's greedy solution.
type placer struct {
	p                            *problem
	freeMem                      []int64
	opsHead, bytesHead, guarHead []float64
}

// newPlacer starts a placement of empty nodes whose load headroom is up to utilization
// caps[j] (MaxUtilization on every node when caps is nil).
func newPlacer(p *problem, caps []float64) *placer {
	pl := &placer{
		p: p, freeMem: make([]int64, len(p.nodes)), opsHead: make([]float64, len(p.nodes)),
		bytesHead: make([]float64, len(p.nodes)), guarHead: make([]float64, len(p.nodes)),
	}
	for j, n := range p.nodes {
		u := p.opts.maxUtilization()
		if caps != nil {
			u = caps[j]
		}
		pl.freeMem[j] = n.memory
		pl.opsHead[j] = n.ops*u - n.bgOps
		pl.bytesHead[j] = n.bandwidth*u - n.bgBytes
		pl.guarHead[j] = n.bandwidth
	}
	return pl
}

// loadShare is the largest fraction of tenant k's traffic node j can take without exceeding
// its ops, bandwidth and guarantee headroom.
func (pl *placer) loadShare(k, j int) float64 {
	t := &pl.p.tenants[k]
	share := math.Inf(1)
	for _, r := range [][2]float64{{pl.opsHead[j], t.reqRate}, {pl.bytesHead[j], t.byteRate}, {pl.guarHead[j], t.guaranteed}} {
		if r[1] > 0 {
			share = math.Min(share, math.Max(0, r[0])/r[1])
		}
	}
	return share
}

// candidates orders tenant k's allowed nodes: the nodes it is on now first (most bytes
// first), then by the smallest of free memory, ops and bandwidth headroom relative to the
// node's capacity, ties by index.
func (pl *placer) candidates(k int) []int {
	t := &pl.p.tenants[k]
	type scored struct {
		node    int
		current int64
		score   float64
	}
	list := make([]scored, len(t.allowed))
	for i, j := range t.allowed {
		n := &pl.p.nodes[j]
		list[i] = scored{node: j, score: math.Min(float64(pl.freeMem[j])/float64(n.memory), math.Min(pl.opsHead[j]/n.ops, pl.bytesHead[j]/n.bandwidth))}
	}
	for _, c := range t.current {
		if i, ok := slices.BinarySearch(t.allowed, c.node); ok && c.bytes > 0 {
			list[i].current = c.bytes
		}
	}
	slices.SortFunc(list, func(a, b scored) int {
		if a.current != b.current {
			return cmp.Compare(b.current, a.current)
		}
		if a.score != b.score {
			return cmp.Compare(b.score, a.score)
		}
		return a.node - b.node
	})
	out := make([]int, len(list))
	for i, s := range list {
		out[i] = s.node
	}
	return out
}

// pick walks tenant k's candidates and takes nodes while it may spread further and until it
// has at least n nodes whose room (given by roomOf, in the caller's units) covers need. It
// tries the preferred order (current nodes first) and then the nodes with the most room first,
// each first within the load headroom and then by memory alone. It reports whether the room
// covers need.
func (pl *placer) pick(k, n int, need int64, roomOf func(j int, respectLoad bool) int64) ([]int, []int64, bool) {
	t := &pl.p.tenants[k]
	preferred := pl.candidates(k)
	var chosen []int
	var room []int64
	take := func(order []int, rooms func(j int) int64) bool {
		chosen, room = chosen[:0], room[:0]
		var total int64
		for _, j := range order {
			if len(chosen) >= t.spreadMax || (len(chosen) >= n && total >= need) {
				break
			}
			if r := rooms(j); r > 0 {
				chosen = append(chosen, j)
				room = append(room, r)
				total += r
			}
		}
		return total >= need
	}
	if take(preferred, func(j int) int64 { return roomOf(j, true) }) {
		return chosen, room, true
	}
	for _, respectLoad := range []bool{true, false} {
		rooms := make(map[int]int64, len(preferred))
		share := make(map[int]float64, len(preferred))
		for _, j := range preferred {
			rooms[j] = roomOf(j, respectLoad)
			share[j] = pl.loadShare(k, j)
		}
		// Within the load headroom: the roomiest nodes first. Beyond it (nothing else fits):
		// the nodes with the most load headroom first, to overload as little as possible.
		order := slices.Clone(preferred)
		slices.SortFunc(order, func(a, b int) int {
			if !respectLoad && share[a] != share[b] {
				return cmp.Compare(share[b], share[a])
			}
			if rooms[a] != rooms[b] {
				return cmp.Compare(rooms[b], rooms[a])
			}
			return a - b
		})
		if take(order, func(j int) int64 { return rooms[j] }) {
			return chosen, room, true
		}
	}
	return chosen, room, false
}

// splitWeights are the weights a tenant's size is split with over the chosen nodes: what it
// has there now, or, on new ground, each node's room.
func (pl *placer) splitWeights(k int, chosen []int, room []int64) []float64 {
	t := &pl.p.tenants[k]
	weights := make([]float64, len(chosen))
	for i, j := range chosen {
		for _, c := range t.current {
			if c.node == j {
				weights[i] = float64(c.bytes)
			}
		}
	}
	if slices.Max(weights) == 0 {
		for i := range chosen {
			weights[i] = float64(room[i])
		}
	}
	return weights
}

// place puts size bytes of tenant k on count nodes (clamped to its spread; more if they do not
// fit), splitting in proportion to what it has there now, or to what each node can take, and
// commits them. It returns the parts and the bytes it could not place. When the load headroom
// stops it, the rest is placed by memory alone (the evaluation then reports the overload).
func (pl *placer) place(k int, size int64, count int) ([]part, int64) {
	t := &pl.p.tenants[k]
	n := min(max(count, t.spreadMin), t.spreadMax)
	if size == 0 {
		return pl.commit(k, pl.routeOnly(pl.candidates(k), n)), 0
	}
	chosen, room, _ := pl.pick(k, n, size, func(j int, respectLoad bool) int64 {
		r := pl.freeMem[j]
		if respectLoad {
			r = int64(math.Min(float64(r), pl.loadShare(k, j)*float64(size)))
		}
		return r
	})
	if len(chosen) == 0 {
		return pl.commit(k, pl.routeOnly(pl.candidates(k), n)), size
	}
	split := splitProportional(size, pl.splitWeights(k, chosen, room), room)
	var parts []part
	var placed int64
	for i, j := range chosen {
		if split[i] > 0 {
			parts = append(parts, part{node: j, bytes: split[i]})
			placed += split[i]
		}
	}
	slices.SortFunc(parts, func(a, b part) int { return a.node - b.node })
	return pl.commit(k, parts), size - placed
}

// placeUnits places all of a tenant whose memory is units equal units of unitBytes (its keys
// split the same way), in whole units, or nothing: the parts carry the units as routing weight
// and units*unitBytes as memory. It reports whether the tenant fit.
func (pl *placer) placeUnits(k int, units, unitBytes int64, count int) ([]part, bool) {
	t := &pl.p.tenants[k]
	n := min(max(count, t.spreadMin), t.spreadMax)
	chosen, room, ok := pl.pick(k, n, units, func(j int, respectLoad bool) int64 {
		r := units
		if unitBytes > 0 {
			r = min(r, pl.freeMem[j]/unitBytes)
		}
		if respectLoad {
			r = min(r, int64(math.Floor(pl.loadShare(k, j)*float64(units)+1e-9)))
		}
		return r
	})
	if !ok {
		return nil, false
	}
	split := splitProportional(units, pl.splitWeights(k, chosen, room), room)
	// Every chosen node up to the spread minimum gets a unit, taken from the largest share.
	for i := range split {
		if split[i] == 0 && i < n && room[i] > 0 {
			if big := slices.Index(split, slices.Max(split)); split[big] > 1 {
				split[big]--
				split[i]++
			}
		}
	}
	var parts []part
	for i, j := range chosen {
		if split[i] > 0 {
			parts = append(parts, part{node: j, bytes: split[i] * unitBytes, weight: split[i]})
		}
	}
	slices.SortFunc(parts, func(a, b part) int { return a.node - b.node })
	return pl.commit(k, parts), true
}

// routeOnly gives a tenant without memory its traffic's route: equal shares on the first n
// candidates.
func (pl *placer) routeOnly(cands []int, n int) []part {
	parts := make([]part, 0, n)
	for _, j := range cands[:min(n, len(cands))] {
		parts = append(parts, part{node: j, weight: 1})
	}
	slices.SortFunc(parts, func(a, b part) int { return a.node - b.node })
	return parts
}

// commit subtracts the parts' memory and load from the nodes.
func (pl *placer) commit(k int, parts []part) []part {
	t := &pl.p.tenants[k]
	fr := fractions(parts)
	for i, pt := range parts {
		pl.freeMem[pt.node] -= pt.bytes
		pl.opsHead[pt.node] -= t.reqRate * fr[i]
		pl.bytesHead[pt.node] -= t.byteRate * fr[i]
		pl.guarHead[pt.node] -= t.guaranteed * fr[i]
	}
	return parts
}

// placementOrder is the order the heuristic placements go in: strict tenants first by
// priority, then the hardest to fit first: the largest share of a node a tenant needs in any
// resource (its size, request rate or byte rate over its spread, relative to the mean
// capacity of its allowed nodes), which is first-fit decreasing for tenants that may go
// anywhere; ties by index.
func (p *problem) placementOrder(sizes []int64) []int {
	order := make([]int, len(p.tenants))
	need := make([]float64, len(p.tenants))
	for k := range order {
		order[k] = k
		t := &p.tenants[k]
		var mem, ops, bw float64
		for _, j := range t.allowed {
			mem += float64(p.nodes[j].memory)
			ops += p.nodes[j].ops
			bw += p.nodes[j].bandwidth
		}
		// share of one mean allowed node = amount / spread / (sum / allowed)
		n := float64(len(t.allowed)) / float64(t.spreadMax)
		need[k] = max(float64(sizes[k])/mem, t.reqRate/ops, t.byteRate/bw) * n
	}
	slices.SortFunc(order, func(a, b int) int {
		ta, tb := &p.tenants[a], &p.tenants[b]
		if ta.strict != tb.strict {
			if ta.strict {
				return -1
			}
			return 1
		}
		if ta.priority != tb.priority {
			return cmp.Compare(tb.priority, ta.priority)
		}
		if need[a] != need[b] {
			return cmp.Compare(need[b], need[a])
		}
		return a - b
	})
	return order
}

// nodeCount is how many nodes a heuristic spreads tenant k over: as many as it is on now, at
// least its spread minimum.
func (p *problem) nodeCount(k int) int {
	t := &p.tenants[k]
	n := 0
	for _, c := range t.current {
		if c.bytes > 0 {
			n++
		}
	}
	return min(max(n, t.spreadMin), t.spreadMax)
}

// placeAll places every tenant at the given total size with a fresh placer, recording a note
// for each tenant that could not get all of it.
func (p *problem) placeAll(a *allocation, sizes []int64) {
	pl := newPlacer(p, nil)
	for _, k := range p.placementOrder(sizes) {
		parts, short := pl.place(k, sizes[k], p.nodeCount(k))
		a.parts[k] = parts
		if short > 0 {
			a.note(k, "placement could fit only %s of the %s sized for it", bytesHuman(sizes[k]-short), bytesHuman(sizes[k]))
		}
	}
}
