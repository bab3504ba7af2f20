package allocator

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/cacheqos/cacheqos/internal/cpsat"
)

// The hard constraints of every plan, whatever the policy: every tenant holds between its
// memory minimum and maximum, on allowed nodes only, on between spread.minNodes and
// spread.maxNodes nodes each receiving part of its traffic, and no node holds more memory
// than it has. A policy's answer that breaks any of them is repaired (see enforceHard); when
// the memory minimums cannot be packed at all, Plan fails with an UnpackableError.

// UnpackableError reports memory minimums that cannot be placed together within the nodes'
// memory, allowed nodes and spreads. It wraps ErrInfeasibleSnapshot.
type UnpackableError struct {
	// Tenants are the IDs of a set of tenants whose minimums cannot be packed together
	// (irreducible when Proven and the search had time to reduce it).
	Tenants []string
	// Proven is true when the solver proved that no packing exists; false when none was
	// found (the greedy packing failed and the solver was unavailable or out of time).
	Proven bool
	// Why says how it was established.
	Why string
}

func (e *UnpackableError) Error() string {
	verb := "cannot be packed together"
	if !e.Proven {
		verb = "could not be packed together"
	}
	return fmt.Sprintf("%v: the memory minimums of %s %s within the nodes' memory, allowed nodes and spreads (%s)",
		ErrInfeasibleSnapshot, strings.Join(e.Tenants, ", "), verb, e.Why)
}

func (e *UnpackableError) Unwrap() error { return ErrInfeasibleSnapshot }

// hardViolations lists the hard constraints parts break, one line each.
func (p *problem) hardViolations(parts [][]part) []string {
	var out []string
	used := make([]int64, len(p.nodes))
	for k, ps := range parts {
		out = append(out, p.tenantViolations(k, ps)...)
		for _, pt := range ps {
			used[pt.node] += pt.bytes
		}
	}
	for j, n := range p.nodes {
		if used[j] > n.memory {
			out = append(out, fmt.Sprintf("node %s holds %s of %s", n.name, bytesHuman(used[j]), bytesHuman(n.memory)))
		}
	}
	return out
}

// tenantViolations lists the hard constraints tenant k's own parts break (all but the nodes'
// memory).
func (p *problem) tenantViolations(k int, ps []part) []string {
	t := &p.tenants[k]
	if len(ps) == 0 {
		return []string{fmt.Sprintf("%s has no partition", t.id)}
	}
	out := p.placementViolations(k, ps)
	var total int64
	for i, f := range fractions(ps) {
		pt := ps[i]
		if pt.bytes < 0 || f <= 0 {
			out = append(out, fmt.Sprintf("%s on %s: %d bytes, routing fraction %g", t.id, p.nodes[pt.node].name, pt.bytes, f))
		}
		total += pt.bytes
	}
	if total < t.minBytes || total > t.maxBytes {
		out = append(out, fmt.Sprintf("%s holds %s outside [%s, %s]", t.id, bytesHuman(total), bytesHuman(t.minBytes), bytesHuman(t.maxBytes)))
	}
	return out
}

// placementViolations lists where tenant k's parts break its placement: a node it may not use
// or uses twice, or a number of nodes outside its spread.
func (p *problem) placementViolations(k int, ps []part) []string {
	t := &p.tenants[k]
	var out []string
	seen := make(map[int]bool, len(ps))
	for _, pt := range ps {
		if _, ok := slices.BinarySearch(t.allowed, pt.node); !ok || seen[pt.node] {
			out = append(out, fmt.Sprintf("%s on %s: not allowed or twice", t.id, p.nodes[pt.node].name))
		}
		seen[pt.node] = true
	}
	if len(ps) < t.spreadMin || len(ps) > t.spreadMax {
		out = append(out, fmt.Sprintf("%s on %d nodes outside [%d, %d]", t.id, len(ps), t.spreadMin, t.spreadMax))
	}
	return out
}

// enforceHard makes a policy's allocation satisfy every hard constraint. When it breaks some,
// the tenants that break them are first re-placed alone in the memory the others leave (each
// as close to the policy's size as fits); when that cannot give each its minimum, every tenant
// is re-placed: the minimums packed first (greedily, else by the solver), then each tenant
// grown toward the policy's size on its nodes. Notes say what was repaired. It fails with an
// UnpackableError when the minimums cannot be packed.
func (p *problem) enforceHard(ctx context.Context, a *allocation) error {
	violations := p.hardViolations(a.parts)
	if len(violations) == 0 {
		return nil
	}
	want := make([]int64, len(p.tenants))
	for k, t := range p.tenants {
		want[k] = min(max(totalBytes(a.parts[k]), t.minBytes), t.maxBytes)
	}
	prefer := a.parts
	summary := violations[0]
	if len(violations) > 1 {
		summary += fmt.Sprintf(" and %d more", len(violations)-1)
	}
	if parts, moved, ok := p.repairViolators(prefer, want); ok {
		a.parts = parts
		a.planNotes = append(a.planNotes, fmt.Sprintf("the policy's plan broke hard constraints (%s); %d tenants re-placed within them", summary, len(moved)))
		for _, k := range moved {
			p.noteRepaired(a, k, want[k])
		}
		return nil
	}
	base, how, err := p.packMinimums(ctx, prefer)
	if err != nil {
		return err
	}
	a.parts = p.grow(base, want, prefer)
	a.planNotes = append(a.planNotes, fmt.Sprintf("the policy's plan broke hard constraints (%s); every tenant re-placed: memory minimums packed first (%s), then each grown toward the policy's size", summary, how))
	for k := range p.tenants {
		p.noteRepaired(a, k, want[k])
	}
	return p.mustHold(a.parts)
}

func (p *problem) noteRepaired(a *allocation, k int, want int64) {
	if got := totalBytes(a.parts[k]); got < want {
		a.note(k, "re-placed within the hard constraints: got %s of the %s the policy sized for it", bytesHuman(got), bytesHuman(want))
	} else {
		a.note(k, "re-placed within the hard constraints")
	}
}

// mustHold is the last check of a repaired allocation.
func (p *problem) mustHold(parts [][]part) error {
	if v := p.hardViolations(parts); len(v) > 0 {
		return fmt.Errorf("internal error: the repaired plan still breaks hard constraints: %s", strings.Join(v, "; "))
	}
	return nil
}

// repairViolators re-places, alone, the tenants whose parts break a hard constraint (or sit on
// a node over its memory), in the memory the other tenants leave, largest minimum first. It
// reports the tenants it moved, and false when one of them cannot get its minimum that way.
func (p *problem) repairViolators(parts [][]part, want []int64) ([][]part, []int, bool) {
	used := make([]int64, len(p.nodes))
	for _, ps := range parts {
		for _, pt := range ps {
			if pt.node >= 0 && pt.node < len(p.nodes) {
				used[pt.node] += pt.bytes
			}
		}
	}
	over := make([]bool, len(p.nodes))
	for j, n := range p.nodes {
		over[j] = used[j] > n.memory
	}
	out := make([][]part, len(parts))
	free := make([]int64, len(p.nodes))
	for j, n := range p.nodes {
		free[j] = n.memory
	}
	var moved []int
	for k, ps := range parts {
		if len(p.tenantViolations(k, ps)) > 0 || slices.ContainsFunc(ps, func(pt part) bool { return over[pt.node] }) {
			moved = append(moved, k)
			continue
		}
		out[k] = ps
		for _, pt := range ps {
			free[pt.node] -= pt.bytes
		}
	}
	slices.SortStableFunc(moved, func(a, b int) int { return cmp.Compare(p.tenants[b].minBytes, p.tenants[a].minBytes) })
	for _, k := range moved {
		ps, ok := p.fitTenant(k, want[k], free, parts[k])
		if !ok {
			return nil, nil, false
		}
		out[k] = ps
	}
	return out, moved, p.hardViolations(out) == nil
}

// fitTenant places tenant k with as much of size as fits (at least its minimum) in free,
// which it updates: on at least spread.minNodes and at most spread.maxNodes allowed nodes,
// preferring the nodes it holds most on in prefer, else the nodes with the most free memory.
// It reports false, changing nothing, when its minimum does not fit.
func (p *problem) fitTenant(k int, size int64, free []int64, prefer []part) ([]part, bool) {
	t := &p.tenants[k]
	preferred := make(map[int]int64, len(prefer))
	for _, pt := range prefer {
		preferred[pt.node] += pt.bytes + 1 // a routed node counts even without memory
	}
	byPreference := slices.Clone(t.allowed)
	slices.SortStableFunc(byPreference, func(a, b int) int {
		if preferred[a] != preferred[b] {
			return cmp.Compare(preferred[b], preferred[a])
		}
		return cmp.Compare(free[b], free[a])
	})
	byFree := slices.Clone(t.allowed)
	slices.SortStableFunc(byFree, func(a, b int) int { return cmp.Compare(free[b], free[a]) })
	for _, order := range [][]int{byPreference, byFree} {
		var chosen []int
		var room []int64
		var total int64
		for _, j := range order {
			if len(chosen) >= t.spreadMax || (len(chosen) >= t.spreadMin && total >= size) {
				break
			}
			if size > 0 && free[j] <= 0 && len(chosen) >= t.spreadMin {
				continue
			}
			chosen = append(chosen, j)
			room = append(room, max(0, free[j]))
			total += max(0, free[j])
		}
		if len(chosen) < t.spreadMin || total < t.minBytes {
			continue
		}
		weights := make([]float64, len(chosen))
		for i, j := range chosen {
			weights[i] = float64(max(preferred[j], room[i]))
		}
		split := splitProportional(min(size, total), weights, room)
		parts := make([]part, len(chosen))
		for i, j := range chosen {
			parts[i] = part{node: j, bytes: split[i]}
			free[j] -= split[i]
		}
		return routedByBytes(parts), true
	}
	return nil, false
}

// routedByBytes sets routing weights proportional to memory (every part at least 1, so a part
// without memory still receives traffic and counts towards the spread), sorted by node.
func routedByBytes(ps []part) []part {
	for i := range ps {
		ps[i].weight = max(1, ps[i].bytes)
	}
	slices.SortFunc(ps, func(a, b part) int { return a.node - b.node })
	return ps
}

// packMinimums places every tenant at its memory minimum within the hard constraints,
// preferring the nodes of prefer: greedily (hardest tenants first), else with the solver. It
// says which did it, or returns an UnpackableError.
func (p *problem) packMinimums(ctx context.Context, prefer [][]part) ([][]part, string, error) {
	hardness := make([]float64, len(p.tenants))
	for k, t := range p.tenants {
		var reach int64
		mems := make([]int64, 0, len(t.allowed))
		for _, j := range t.allowed {
			mems = append(mems, p.nodes[j].memory)
		}
		slices.Sort(mems)
		for _, m := range mems[len(mems)-t.spreadMax:] {
			reach += m
		}
		hardness[k] = float64(t.minBytes) / float64(max(1, reach))
	}
	// Two greedy orders: the least share of what a tenant can reach first; and, as in bin
	// packing, the tenants confined to the fewest nodes first, largest first (the ones that
	// may spread fill what is left).
	byHardness := func(a, b int) int { return cmp.Compare(hardness[b], hardness[a]) }
	bySpread := func(a, b int) int {
		ta, tb := &p.tenants[a], &p.tenants[b]
		if ta.spreadMax != tb.spreadMax {
			return cmp.Compare(ta.spreadMax, tb.spreadMax)
		}
		return cmp.Compare(tb.minBytes, ta.minBytes)
	}
	for _, less := range []func(a, b int) int{byHardness, bySpread} {
		if parts, ok := p.packGreedily(less, prefer); ok {
			return parts, "greedy", nil
		}
	}
	if err := cpsat.Available(); err != nil {
		return nil, "", &UnpackableError{Tenants: p.idsWithMinimum(), Why: "the greedy packing failed and OR-Tools is unavailable to search further: " + err.Error()}
	}
	deadline := time.Now().Add(packingTimeLimit(p.opts.timeLimit()))
	all := make([]bool, len(p.tenants))
	for k := range all {
		all[k] = true
	}
	parts, status, err := p.solvePacking(ctx, all, prefer, deadline)
	switch {
	case err != nil:
		return nil, "", err
	case parts != nil:
		return parts, "by the solver, the greedy packing having failed", nil
	case status != cpsat.Infeasible:
		return nil, "", &UnpackableError{Tenants: p.idsWithMinimum(), Why: fmt.Sprintf("the greedy packing failed and the solver found none in time (%v)", status)}
	}
	// Proven infeasible: reduce to a set of tenants that is infeasible on its own, dropping
	// each tenant whose absence keeps it infeasible (while time lasts).
	in := make([]bool, len(p.tenants))
	for k, t := range p.tenants {
		in[k] = t.minBytes > 0
	}
	reduced := true
	for k := range p.tenants {
		if !in[k] {
			continue
		}
		if time.Now().After(deadline) {
			reduced = false
			break
		}
		in[k] = false
		_, st, err := p.solvePacking(ctx, in, prefer, deadline)
		if err != nil || st != cpsat.Infeasible {
			in[k] = true
		}
	}
	var ids []string
	for k, t := range p.tenants {
		if in[k] {
			ids = append(ids, t.id)
		}
	}
	why := "proven by the solver"
	if !reduced {
		why += "; the set was not reduced further in time"
	}
	return nil, "", &UnpackableError{Tenants: ids, Proven: true, Why: why}
}

// packGreedily places the minimums one tenant at a time in the order less gives.
func (p *problem) packGreedily(less func(a, b int) int, prefer [][]part) ([][]part, bool) {
	order := make([]int, len(p.tenants))
	for k := range order {
		order[k] = k
	}
	slices.SortStableFunc(order, less)
	free := make([]int64, len(p.nodes))
	for j, n := range p.nodes {
		free[j] = n.memory
	}
	parts := make([][]part, len(p.tenants))
	for _, k := range order {
		ps, ok := p.fitTenant(k, p.tenants[k].minBytes, free, prefer[k])
		if !ok {
			return nil, false
		}
		parts[k] = ps
	}
	return parts, true
}

// packingTimeLimit is the time the packing of the minimums may take when the greedy one fails.
func packingTimeLimit(limit time.Duration) time.Duration {
	return max(time.Second, limit/2)
}

func (p *problem) idsWithMinimum() []string {
	var ids []string
	for _, t := range p.tenants {
		if t.minBytes > 0 {
			ids = append(ids, t.id)
		}
	}
	return ids
}

// solvePacking is the feasibility model of the minimums of the tenants in `in` (the others are
// left out): b_kj bytes of tenant k on allowed node j, y_kj uses node j, b_kj <= min_k*y_kj,
// sum_j b_kj = min_k, spread.minNodes <= sum_j y_kj <= spread.maxNodes, sum_k b_kj <= memory_j.
// Bytes are exact (the memory is counted in bytes, or in the smallest power of two that keeps
// the model within int64, rounding minimums up and capacities down: then a packing found is
// valid and an infeasibility is not claimed as proven). It maximizes how many of the preferred
// nodes are kept. It returns the parts (nil when none) and the solver's status.
func (p *problem) solvePacking(ctx context.Context, in []bool, prefer [][]part, deadline time.Time) ([][]part, cpsat.Status, error) {
	var magnitude float64
	for k, t := range p.tenants {
		if in[k] {
			magnitude += 2 * float64(t.minBytes) * float64(len(t.allowed))
		}
	}
	unit := int64(1)
	for magnitude/float64(unit) > float64(cpsat.MaxDomainValue)/4 {
		unit *= 2
	}
	m := cpsat.NewModel()
	type cell struct {
		node int
		b, y cpsat.Var
	}
	cells := make([][]cell, len(p.tenants))
	perNode := make([][]cpsat.Term, len(p.nodes))
	var objective []cpsat.Term
	for k, t := range p.tenants {
		if !in[k] {
			continue
		}
		need := ceilDiv(t.minBytes, unit)
		var sum, count []cpsat.Term
		for _, j := range t.allowed {
			c := cell{node: j, b: m.NewIntVar(0, need, fmt.Sprintf("b_%d_%d", k, j)), y: m.NewBoolVar(fmt.Sprintf("y_%d_%d", k, j))}
			cells[k] = append(cells[k], c)
			m.AddLinear([]cpsat.Term{{Var: c.b, Coef: 1}, {Var: c.y, Coef: -need}}, math.MinInt64, 0)
			sum = append(sum, cpsat.Term{Var: c.b, Coef: 1})
			count = append(count, cpsat.Term{Var: c.y, Coef: 1})
			perNode[j] = append(perNode[j], cpsat.Term{Var: c.b, Coef: 1})
			if slices.ContainsFunc(prefer[k], func(pt part) bool { return pt.node == j }) {
				objective = append(objective, cpsat.Term{Var: c.y, Coef: 1})
			}
		}
		m.AddLinear(sum, need, need)
		m.AddLinear(count, int64(t.spreadMin), int64(t.spreadMax))
	}
	for j, n := range p.nodes {
		addCapacity(m, perNode[j], n.memory/unit)
	}
	m.Maximize(objective)
	res, err := cpsat.Solve(ctx, m, cpsat.Params{TimeLimit: max(10*time.Millisecond, time.Until(deadline)), WorkLimit: p.opts.WorkLimit, Workers: p.opts.Workers, Seed: p.opts.Seed, Presolve: true})
	if err != nil {
		return nil, 0, fmt.Errorf("packing the memory minimums: solver error: %w", err)
	}
	if !res.HasSolution() {
		status := res.Status
		if status == cpsat.Infeasible && unit > 1 {
			status = cpsat.Unknown
		}
		return nil, status, nil
	}
	parts := make([][]part, len(p.tenants))
	for k, t := range p.tenants {
		if !in[k] {
			continue
		}
		left := t.minBytes
		for _, c := range cells[k] {
			if res.Value(c.y) == 1 {
				b := min(left, res.Value(c.b)*unit)
				left -= b
				parts[k] = append(parts[k], part{node: c.node, bytes: b})
			}
		}
		parts[k] = routedByBytes(parts[k])
	}
	return parts, res.Status, nil
}

// grow raises every tenant from its packed minimum toward want, in the heuristic placement
// order: first on the nodes it is on, the ones it holds most on in prefer first, then on
// further allowed nodes (preferred, then roomiest) while its spread allows.
func (p *problem) grow(base [][]part, want []int64, prefer [][]part) [][]part {
	free := make([]int64, len(p.nodes))
	for j, n := range p.nodes {
		free[j] = n.memory
	}
	out := make([][]part, len(base))
	for k, ps := range base {
		out[k] = slices.Clone(ps)
		for _, pt := range ps {
			free[pt.node] -= pt.bytes
		}
	}
	for _, k := range p.placementOrder(want) {
		t := &p.tenants[k]
		extra := want[k] - totalBytes(out[k])
		if extra <= 0 {
			continue
		}
		preferred := make(map[int]int64)
		for _, pt := range prefer[k] {
			preferred[pt.node] += pt.bytes + 1
		}
		rank := func(a, b int) int {
			if preferred[a] != preferred[b] {
				return cmp.Compare(preferred[b], preferred[a])
			}
			return cmp.Compare(free[b], free[a])
		}
		slices.SortStableFunc(out[k], func(a, b part) int { return rank(a.node, b.node) })
		for i := range out[k] {
			add := min(extra, free[out[k][i].node])
			out[k][i].bytes += add
			free[out[k][i].node] -= add
			extra -= add
		}
		others := slices.Clone(t.allowed)
		slices.SortStableFunc(others, rank)
		for _, j := range others {
			if extra <= 0 || len(out[k]) >= t.spreadMax {
				break
			}
			if free[j] <= 0 || slices.ContainsFunc(out[k], func(pt part) bool { return pt.node == j }) {
				continue
			}
			add := min(extra, free[j])
			out[k] = append(out[k], part{node: j, bytes: add})
			free[j] -= add
			extra -= add
		}
		out[k] = routedByBytes(out[k])
	}
	return out
}
