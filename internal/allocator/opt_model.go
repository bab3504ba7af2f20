package allocator

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/cacheqos/cacheqos/internal/cpsat"
)

// placementModel is a CP-SAT model of the optimal policy. With levels == nil it is the joint
// model, choosing every tenant's size level and split; with fixed levels it is the placement
// stage of the decomposed method.
//
// Variables per tenant k: a Boolean x_kt per size level t (joint model only, exactly one
// true), and per level t and candidate node j the number of split units w_ktj in [0, U_k]
// with sum_j w_ktj = U_k * x_kt, so that the units on a node, u_kj = sum_t w_ktj, are the
// tenant's routing weight there and its memory there is exactly sum_t (quanta_t/U_k) * w_ktj
// (levels reserve a multiple of U_k quanta). This disaggregated form has no big-M and keeps
// the LP relaxation tight. Per candidate node also a Boolean y_kj (uses the node) and the
// movement d_kj.
//
// Constraints: y_kj <= u_kj <= U_k*y_kj; spreadMin_k <= sum_j y_kj <= spreadMax_k;
// moveUnit*d_kj >= |memory_kj - current_kj|; per node: memory, reserved guarantees under the
// bandwidth, ops and bandwidth load under the utilization cap plus an overload variable;
// optionally total movement under MaxChurn. Objective: maximize W1*slo + W2*hits over the
// chosen levels minus W2*overload minus sum d.
type placementModel struct {
	o      *optInstance
	m      *cpsat.Model
	levels []int // fixed levels, nil for the joint model
	// active[k] lists the levels modelled for tenant k, x[k][i] the level Boolean of
	// active[k][i] (joint model only), w[k][i][c] the units of that level on cands[k][c].
	active [][]int
	x      [][]cpsat.Var
	w      [][][]cpsat.Var
	y, d   [][]cpsat.Var
	// over holds the overload variables of the placement-only model, with their terms and
	// capacity, so that hints can set them.
	over []overload
	// constMove is the movement off the candidates (memory on nodes that are not candidates
	// any more), a constant subtracted from the model's objective.
	constMove int64
	// churn says whether the model caps the total movement at the churn cap.
	churn bool
}

type overload struct {
	v        cpsat.Var
	terms    []cpsat.Term
	capacity int64
}

func (o *optInstance) buildPlacementModel(levels []int, churn bool) *placementModel {
	p := o.p
	nt := len(p.tenants)
	pm := &placementModel{o: o, m: cpsat.NewModel(), levels: levels, churn: churn && o.churnUnits >= 0,
		active: make([][]int, nt), x: make([][]cpsat.Var, nt), w: make([][][]cpsat.Var, nt),
		y: make([][]cpsat.Var, nt), d: make([][]cpsat.Var, nt)}
	m := pm.m
	nodeMem := make([][]cpsat.Term, len(p.nodes))
	nodeOps := make([][]cpsat.Term, len(p.nodes))
	nodeBytes := make([][]cpsat.Term, len(p.nodes))
	nodeGu := make([][]cpsat.Term, len(p.nodes))
	var objective, allMoves []cpsat.Term
	for k := range p.tenants {
		l := &o.levels[k]
		U := o.units[k]
		cands := o.cands[k]
		if levels == nil {
			for t := range l.len() {
				pm.active[k] = append(pm.active[k], t)
			}
		} else {
			pm.active[k] = []int{levels[k]}
		}
		units := make([][]cpsat.Term, len(cands)) // u_kj as a sum of w
		memory := make([][]cpsat.Term, len(cands))
		for _, t := range pm.active[k] {
			var row []cpsat.Term
			ws := make([]cpsat.Var, len(cands))
			for c, j := range cands {
				ws[c] = m.NewIntVar(0, U, fmt.Sprintf("w_%d_%d_%d", k, t, j))
				row = append(row, cpsat.Term{Var: ws[c], Coef: 1})
				units[c] = append(units[c], cpsat.Term{Var: ws[c], Coef: 1})
				memory[c] = append(memory[c], cpsat.Term{Var: ws[c], Coef: l.quanta[t] / U})
			}
			pm.w[k] = append(pm.w[k], ws)
			if len(pm.active[k]) > 1 {
				x := m.NewBoolVar(fmt.Sprintf("x_%d_%d", k, t))
				pm.x[k] = append(pm.x[k], x)
				if v := o.sc.w1*l.slo[t] + o.sc.w2*l.hits[t]; v != 0 {
					objective = append(objective, cpsat.Term{Var: x, Coef: v})
				}
				m.AddLinear(append(row, cpsat.Term{Var: x, Coef: -U}), 0, 0)
			} else {
				m.AddLinear(row, U, U)
			}
		}
		if len(pm.x[k]) > 0 {
			m.AddExactlyOne(pm.x[k]...)
		}
		var nodeCount []cpsat.Term
		for c, j := range cands {
			y := m.NewBoolVar(fmt.Sprintf("y_%d_%d", k, j))
			cur := o.curQuanta[k][j]
			d := m.NewIntVar(0, ceilDiv(max(o.memQuanta[j], cur), o.sc.moveUnit)+1, fmt.Sprintf("d_%d_%d", k, j))
			pm.y[k], pm.d[k] = append(pm.y[k], y), append(pm.d[k], d)
			m.AddLinear(append(slices.Clone(units[c]), cpsat.Term{Var: y, Coef: -U}), math.MinInt64, 0)
			m.AddLinear(append(slices.Clone(units[c]), cpsat.Term{Var: y, Coef: -1}), 0, math.MaxInt64)
			moveTerms := []cpsat.Term{{Var: d, Coef: o.sc.moveUnit}}
			m.AddLinear(append(slices.Clone(moveTerms), negate(memory[c])...), -cur, math.MaxInt64)
			if cur > 0 {
				m.AddLinear(append(moveTerms, memory[c]...), cur, math.MaxInt64)
			}
			nodeCount = append(nodeCount, cpsat.Term{Var: y, Coef: 1})
			allMoves = append(allMoves, cpsat.Term{Var: d, Coef: 1})
			objective = append(objective, cpsat.Term{Var: d, Coef: -1})
			nodeMem[j] = append(nodeMem[j], memory[c]...)
			nodeOps[j] = append(nodeOps[j], scaled(units[c], o.opsCoef[k])...)
			nodeBytes[j] = append(nodeBytes[j], scaled(units[c], o.bytesCoef[k])...)
			nodeGu[j] = append(nodeGu[j], scaled(units[c], o.guCoef[k])...)
		}
		m.AddLinear(nodeCount, int64(o.spreadMin[k]), int64(o.spreadMax[k]))
		for node, cur := range o.curQuanta[k] {
			if !slices.Contains(cands, node) {
				pm.constMove += ceilDiv(cur, o.sc.moveUnit)
			}
		}
	}
	for j := range p.nodes {
		addCapacity(m, nodeMem[j], o.memQuanta[j])
		addCapacity(m, nodeGu[j], o.guCap[j])
		// Load above the utilization cap is allowed but costs W2 per load unit, as much as a
		// unit of expected hits (1% of the largest node's capacity weighs 10% of all hits), so
		// that an overloaded fleet still gets its least-bad plan and a warm start that is a
		// little over the cap is still a solution.
		for _, load := range []struct {
			terms    []cpsat.Term
			capacity int64
		}{{nodeOps[j], o.opsCap[j]}, {nodeBytes[j], o.bytesCap[j]}} {
			if len(load.terms) == 0 {
				continue
			}
			over := m.NewIntVar(0, sumCoefs(load.terms)*maxUnits(o.units), fmt.Sprintf("over_%d", j))
			m.AddLinear(append(slices.Clone(load.terms), cpsat.Term{Var: over, Coef: -1}), math.MinInt64, load.capacity)
			objective = append(objective, cpsat.Term{Var: over, Coef: -o.sc.w2})
			pm.over = append(pm.over, overload{v: over, terms: load.terms, capacity: load.capacity})
		}
	}
	if pm.churn {
		m.AddLinear(allMoves, math.MinInt64, max(0, o.churnUnits-pm.constMove))
	}
	m.Maximize(objective)
	return pm
}

func sumCoefs(terms []cpsat.Term) int64 {
	var s int64
	for _, t := range terms {
		s += abs64(t.Coef)
	}
	return s
}

func maxUnits(units []int64) int64 { return slices.Max(units) }

func negate(terms []cpsat.Term) []cpsat.Term {
	out := make([]cpsat.Term, len(terms))
	for i, t := range terms {
		out[i] = cpsat.Term{Var: t.Var, Coef: -t.Coef}
	}
	return out
}

// scaled multiplies every coefficient by c (nothing when c is 0).
func scaled(terms []cpsat.Term, c int64) []cpsat.Term {
	if c == 0 {
		return nil
	}
	out := make([]cpsat.Term, len(terms))
	for i, t := range terms {
		out[i] = cpsat.Term{Var: t.Var, Coef: t.Coef * c}
	}
	return out
}

func addCapacity(m *cpsat.Model, terms []cpsat.Term, capacity int64) {
	if len(terms) > 0 {
		m.AddLinear(terms, math.MinInt64, capacity)
	}
}

// hint sets a solution as the model's warm start.
func (pm *placementModel) hint(s solution) {
	o := pm.o
	for k := range o.p.tenants {
		for i, t := range pm.active[k] {
			chosen := t == s.level[k]
			if len(pm.x[k]) > 0 {
				pm.m.Hint(pm.x[k][i], boolToInt(chosen))
			}
			for c := range o.cands[k] {
				u := s.units[k][c]
				if !chosen {
					u = 0
				}
				pm.m.Hint(pm.w[k][i][c], u)
			}
		}
		for c, j := range o.cands[k] {
			pm.m.Hint(pm.y[k][c], boolToInt(s.units[k][c] > 0))
			pm.m.Hint(pm.d[k][c], o.nodeMove(k, j, o.memQuantaOf(k, s.level[k], s.units[k][c])))
		}
	}
	if len(pm.over) == 0 {
		return
	}
	// The overloads follow from the units: evaluate each load expression on the hint.
	value := make(map[cpsat.Var]int64)
	for k := range o.p.tenants {
		for i, t := range pm.active[k] {
			for c := range o.cands[k] {
				if t == s.level[k] {
					value[pm.w[k][i][c]] = s.units[k][c]
				}
			}
		}
	}
	for _, ov := range pm.over {
		var load int64
		for _, term := range ov.terms {
			load += term.Coef * value[term.Var]
		}
		pm.m.Hint(ov.v, max(0, load-ov.capacity))
	}
}

// nodeMove is the movement of tenant k on node j when it gets q quanta there.
func (o *optInstance) nodeMove(k, j int, q int64) int64 {
	return ceilDiv(abs64(q-o.curQuanta[k][j]), o.sc.moveUnit)
}

// read extracts the solution from a solver result.
func (pm *placementModel) read(r *cpsat.Result) solution {
	o := pm.o
	nt := len(o.p.tenants)
	s := solution{level: make([]int, nt), units: make([][]int64, nt)}
	for k := range o.p.tenants {
		pick := 0
		for i, x := range pm.x[k] {
			if r.Value(x) == 1 {
				pick = i
			}
		}
		s.level[k] = pm.active[k][pick]
		for c := range o.cands[k] {
			s.units[k] = append(s.units[k], r.Value(pm.w[k][pick][c]))
		}
	}
	return s
}

// modelObjective is the placement model's objective for a solution (without the constant
// movement off the candidates).
func (o *optInstance) modelObjective(s solution) int64 {
	v := -o.sc.w2 * o.overload(s)
	for k := range o.p.tenants {
		l := &o.levels[k]
		v += o.sc.w1*l.slo[s.level[k]] + o.sc.w2*l.hits[s.level[k]]
		for c, j := range o.cands[k] {
			v -= o.nodeMove(k, j, o.memQuantaOf(k, s.level[k], s.units[k][c]))
		}
	}
	return v
}

// errViolation reports a solution that breaks a constraint of the model.
var errViolation = errors.New("constraint violated")

// check verifies every constraint of the placement model for a solution: the exhaustive
// search of the tests uses it, and solver answers pass it before they are used.
func (o *optInstance) check(s solution, churn bool) error {
	p := o.p
	mem := make([]int64, len(p.nodes))
	gu := make([]int64, len(p.nodes))
	var moves, constMove int64
	for k := range p.tenants {
		U := o.units[k]
		var units, count int64
		for c, j := range o.cands[k] {
			u := s.units[k][c]
			if u < 0 || u > U {
				return fmt.Errorf("%w: tenant %d node %d: %d units of %d", errViolation, k, j, u, U)
			}
			q := o.memQuantaOf(k, s.level[k], u)
			units += u
			count += boolToInt(u > 0)
			mem[j] += q
			gu[j] += o.guCoef[k] * u
			moves += o.nodeMove(k, j, q)
		}
		if units != U || count < int64(o.spreadMin[k]) || count > int64(o.spreadMax[k]) {
			return fmt.Errorf("%w: tenant %d: units %d/%d, nodes %d outside [%d, %d]", errViolation, k, units, U, count, o.spreadMin[k], o.spreadMax[k])
		}
		for node, cur := range o.curQuanta[k] {
			if !slices.Contains(o.cands[k], node) {
				constMove += ceilDiv(cur, o.sc.moveUnit)
			}
		}
	}
	for j := range p.nodes {
		if mem[j] > o.memQuanta[j] || (gu[j] > 0 && gu[j] > o.guCap[j]) {
			return fmt.Errorf("%w: node %d: memory %d of %d quanta, guarantees %d of %d", errViolation, j, mem[j], o.memQuanta[j], gu[j], o.guCap[j])
		}
	}
	if churn && o.churnUnits >= 0 && moves > max(0, o.churnUnits-constMove) {
		return fmt.Errorf("%w: movement %d above the churn cap", errViolation, moves)
	}
	return nil
}

// sizingModel is stage 1 of the decomposed method: one Boolean per tenant per level, exactly
// one per tenant, the chosen reservations within capacity quanta, maximizing
// W1*slo + W2*hits - (a lower bound of the movement). With the total memory as capacity
// (every node as one pool) it relaxes the joint model, so its bound bounds the whole problem.
type sizingModel struct {
	m *cpsat.Model
	x [][]cpsat.Var
}

func (o *optInstance) buildSizingModel(churn bool, capacity int64) *sizingModel {
	sm := &sizingModel{m: cpsat.NewModel(), x: make([][]cpsat.Var, len(o.p.tenants))}
	var objective, memory, moves []cpsat.Term
	for k := range o.p.tenants {
		l := &o.levels[k]
		for t := range l.len() {
			x := sm.m.NewBoolVar(fmt.Sprintf("x_%d_%d", k, t))
			sm.x[k] = append(sm.x[k], x)
			if v := l.value(o.sc, t); v != 0 {
				objective = append(objective, cpsat.Term{Var: x, Coef: v})
			}
			memory = append(memory, cpsat.Term{Var: x, Coef: l.quanta[t]})
			moves = append(moves, cpsat.Term{Var: x, Coef: l.moveLB[t]})
		}
		sm.m.AddExactlyOne(sm.x[k]...)
	}
	sm.m.AddLinear(memory, 0, capacity)
	// Tenants restricted to some nodes: whatever is confined to a set of nodes must fit in
	// it (a necessary condition of any placement, so the model still relaxes the joint one).
	for _, g := range o.allowedGroups() {
		var terms []cpsat.Term
		for _, k := range g.tenants {
			for t, x := range sm.x[k] {
				terms = append(terms, cpsat.Term{Var: x, Coef: o.levels[k].quanta[t]})
			}
		}
		sm.m.AddLinear(terms, 0, g.capacity)
	}
	if churn && o.churnUnits >= 0 {
		sm.m.AddLinear(moves, math.MinInt64, o.churnUnits)
	}
	sm.m.Maximize(objective)
	return sm
}

func (sm *sizingModel) hint(level []int) {
	for k, xs := range sm.x {
		for t, x := range xs {
			sm.m.Hint(x, boolToInt(t == level[k]))
		}
	}
}

func (sm *sizingModel) read(r *cpsat.Result) []int {
	out := make([]int, len(sm.x))
	for k, xs := range sm.x {
		for t, x := range xs {
			if r.Value(x) == 1 {
				out[k] = t
			}
		}
	}
	return out
}

// allowedGroup is a set of nodes some tenants are restricted to, with every tenant whose
// allowed nodes lie within it and the set's memory in quanta.
type allowedGroup struct {
	tenants  []int
	capacity int64
}

// allowedGroups returns one group per distinct allowed-node set smaller than the fleet.
func (o *optInstance) allowedGroups() []allowedGroup {
	p := o.p
	words := (len(p.nodes) + 63) / 64
	type set struct {
		bits []uint64
		key  string
	}
	sets := make([]set, len(p.tenants))
	distinct := map[string]int{}
	var order []int
	for k, t := range p.tenants {
		bits := make([]uint64, words)
		for _, j := range t.allowed {
			bits[j/64] |= 1 << (j % 64)
		}
		key := fmt.Sprint(bits)
		sets[k] = set{bits: bits, key: key}
		if len(t.allowed) < len(p.nodes) {
			if _, ok := distinct[key]; !ok {
				distinct[key] = k
				order = append(order, k)
			}
		}
	}
	subset := func(a, b []uint64) bool {
		for i := range a {
			if a[i]&^b[i] != 0 {
				return false
			}
		}
		return true
	}
	var groups []allowedGroup
	for _, rep := range order {
		g := allowedGroup{}
		for _, j := range p.tenants[rep].allowed {
			g.capacity += o.memQuanta[j]
		}
		for k := range p.tenants {
			if subset(sets[k].bits, sets[rep].bits) {
				g.tenants = append(g.tenants, k)
			}
		}
		groups = append(groups, g)
	}
	return groups
}

// lpBound is the optimum of the sizing model's LP relaxation with the pooled memory alone
// (every tenant starts at its lowest level and buys the segments of the upper concave hull of
// its (quanta, value) levels, steepest first, the last one fractionally): an upper bound of the
// whole problem that needs no solver, used when the solver's own bound is weaker.
func (o *optInstance) lpBound(capacity int64) float64 {
	type segment struct {
		quanta int64
		value  float64
	}
	var segs []segment
	var bound float64
	free := capacity
	for k := range o.p.tenants {
		l := &o.levels[k]
		bound += float64(l.value(o.sc, 0))
		free -= l.quanta[0]
		// Upper hull from level 0 over levels that gain value.
		hull := []int{0}
		for t := 1; t < l.len(); t++ {
			for len(hull) >= 2 {
				a, b := hull[len(hull)-2], hull[len(hull)-1]
				// Drop b when it lies on or below the chord from a to t.
				left := float64(l.value(o.sc, b)-l.value(o.sc, a)) * float64(l.quanta[t]-l.quanta[a])
				right := float64(l.value(o.sc, t)-l.value(o.sc, a)) * float64(l.quanta[b]-l.quanta[a])
				if left > right {
					break
				}
				hull = hull[:len(hull)-1]
			}
			hull = append(hull, t)
		}
		for i := 1; i < len(hull); i++ {
			a, b := hull[i-1], hull[i]
			if dv := l.value(o.sc, b) - l.value(o.sc, a); dv > 0 {
				segs = append(segs, segment{quanta: l.quanta[b] - l.quanta[a], value: float64(dv)})
			}
		}
	}
	slices.SortFunc(segs, func(a, b segment) int {
		return cmp.Compare(b.value*float64(max(1, a.quanta)), a.value*float64(max(1, b.quanta)))
	})
	for _, s := range segs {
		if s.quanta <= free {
			bound += s.value
			free -= s.quanta
			continue
		}
		if free > 0 {
			bound += s.value * float64(free) / float64(s.quanta)
		}
		break
	}
	return bound
}

// overload is the load above the utilization caps, in load units summed over nodes, of a
// solution: what the models penalize at W2 per unit.
func (o *optInstance) overload(s solution) int64 {
	p := o.p
	ops := make([]int64, len(p.nodes))
	bytes := make([]int64, len(p.nodes))
	for k := range p.tenants {
		for c, j := range o.cands[k] {
			ops[j] += o.opsCoef[k] * s.units[k][c]
			bytes[j] += o.bytesCoef[k] * s.units[k][c]
		}
	}
	var over int64
	for j := range p.nodes {
		if ops[j] > 0 {
			over += max(0, ops[j]-o.opsCap[j])
		}
		if bytes[j] > 0 {
			over += max(0, bytes[j]-o.bytesCap[j])
		}
	}
	return over
}

// overloadLowerBound is a lower bound of the overload of any solution: the load a tenant puts
// on its busiest node is at least its load over its spread maximum, and beyond the largest
// capacity of its allowed nodes that is overload whatever else the node carries (overloads of
// tenants sharing a node add up to at least the sum of their own excesses).
func (o *optInstance) overloadLowerBound() int64 {
	var lb int64
	for k, t := range o.p.tenants {
		var opsCap, bytesCap int64
		for _, j := range t.allowed {
			opsCap = max(opsCap, o.opsCap[j])
			bytesCap = max(bytesCap, o.bytesCap[j])
		}
		spread := int64(o.spreadMax[k])
		lb += max(0, ceilDiv(o.opsCoef[k]*o.units[k], spread)-opsCap) + max(0, ceilDiv(o.bytesCoef[k]*o.units[k], spread)-bytesCap)
	}
	return lb
}
