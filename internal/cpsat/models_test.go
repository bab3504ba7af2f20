package cpsat

import (
	"math/rand/v2"
)

// Model builders and a brute-force oracle shared by tests, fuzz and benchmarks.

// knapsack builds "choose items, total weight <= capacity, maximize value".
func knapsack(weights, values []int64, capacity int64) (*Model, []Var) {
	m := NewModel()
	items := make([]Var, len(weights))
	wt := make([]Term, len(weights))
	vt := make([]Term, len(weights))
	for i := range weights {
		items[i] = m.NewBoolVar("")
		wt[i] = Term{items[i], weights[i]}
		vt[i] = Term{items[i], values[i]}
	}
	m.AddLinear(wt, 0, capacity)
	m.Maximize(vt)
	return m, items
}

// assignment builds "each worker does exactly one task, each task gets
// exactly one worker, minimize total cost"; x[w][t] is the choice variable.
func assignment(cost [][]int64) (*Model, [][]Var) {
	m := NewModel()
	n := len(cost)
	x := make([][]Var, n)
	var obj []Term
	for w := range n {
		x[w] = make([]Var, n)
		for t := range n {
			x[w][t] = m.NewBoolVar("")
			obj = append(obj, Term{x[w][t], cost[w][t]})
		}
		m.AddExactlyOne(x[w]...)
	}
	for t := range n {
		col := make([]Var, n)
		for w := range n {
			col[w] = x[w][t]
		}
		m.AddExactlyOne(col...)
	}
	m.Minimize(obj)
	return m, x
}

// mckp is a multiple-choice knapsack: every item takes exactly one of its
// levels (level 0 = nothing), weights grow linearly with the level and
// values with diminishing returns, like memory given to a cache tenant.
type mckp struct {
	weight, value [][]int64 // [item][level]
	capacity      int64
}

func newMCKP(items, levels int, seed uint64) mckp {
	r := rand.New(rand.NewPCG(seed, 1))
	p := mckp{weight: make([][]int64, items), value: make([][]int64, items)}
	var maxWeight int64
	for i := range items {
		unit := int64(1 + r.IntN(64))
		gain := int64(100 + r.IntN(900))
		p.weight[i] = make([]int64, levels)
		p.value[i] = make([]int64, levels)
		var v int64
		for l := range levels {
			p.weight[i][l] = int64(l) * unit
			if l > 0 {
				v += gain / int64(l) * int64(1+r.IntN(3))
			}
			p.value[i][l] = v
		}
		maxWeight += p.weight[i][levels-1]
	}
	p.capacity = maxWeight * 2 / 5
	return p
}

func (p mckp) model() (*Model, [][]Var) {
	m := NewModel()
	choice := make([][]Var, len(p.weight))
	var wt, vt []Term
	for i := range p.weight {
		choice[i] = make([]Var, len(p.weight[i]))
		for l := range p.weight[i] {
			choice[i][l] = m.NewBoolVar("")
			wt = append(wt, Term{choice[i][l], p.weight[i][l]})
			vt = append(vt, Term{choice[i][l], p.value[i][l]})
		}
		m.AddExactlyOne(choice[i]...)
	}
	m.AddLinear(wt, 0, p.capacity)
	m.Maximize(vt)
	return m, choice
}

// greedy upgrades, one level step at a time, the item with the best value
// gained per unit of weight that still fits; it returns the level per item.
func (p mckp) greedy() []int {
	level := make([]int, len(p.weight))
	var used int64
	for {
		best, bestRatio := -1, 0.0
		for i := range p.weight {
			l := level[i]
			if l+1 >= len(p.weight[i]) {
				continue
			}
			dw := p.weight[i][l+1] - p.weight[i][l]
			dv := p.value[i][l+1] - p.value[i][l]
			if used+dw > p.capacity || dv <= 0 {
				continue
			}
			if ratio := float64(dv) / float64(max(dw, 1)); best < 0 || ratio > bestRatio {
				best, bestRatio = i, ratio
			}
		}
		if best < 0 {
			return level
		}
		used += p.weight[best][level[best]+1] - p.weight[best][level[best]]
		level[best]++
	}
}

// marketSplit builds a feasibility problem known to be very hard for branch
// and bound (Cornuéjols and Dawande): binary x with rows equalities
// sum(a_ij x_j) = floor(sum_j a_ij / 2), a_ij uniform in [0, 99].
func marketSplit(rows int, seed uint64) *Model {
	r := rand.New(rand.NewPCG(seed, 7))
	n := 10 * (rows - 1)
	m := NewModel()
	xs := make([]Var, n)
	for j := range xs {
		xs[j] = m.NewBoolVar("")
	}
	for range rows {
		terms := make([]Term, n)
		var sum int64
		for j := range xs {
			a := int64(r.IntN(100))
			terms[j] = Term{xs[j], a}
			sum += a
		}
		m.AddLinear(terms, sum/2, sum/2)
	}
	return m
}

// multiKnapsack is a random multi-dimensional 0-1 knapsack: solutions are easy, proving the
// optimum takes long, so a small work limit stops the search with a solution in hand.
func multiKnapsack(items, rows int, seed uint64) *Model {
	r := rand.New(rand.NewPCG(seed, 11))
	m := NewModel()
	xs := make([]Var, items)
	value := make([]Term, items)
	for j := range xs {
		xs[j] = m.NewBoolVar("")
		value[j] = Term{xs[j], int64(50 + r.IntN(50))}
	}
	for range rows {
		weights := make([]Term, items)
		var sum int64
		for j := range xs {
			w := int64(20 + r.IntN(80))
			weights[j] = Term{xs[j], w}
			sum += w
		}
		m.AddLinear(weights, 0, sum/2)
	}
	m.Maximize(value)
	return m
}

// bruteForceLimit bounds the assignments bruteForce enumerates.
const bruteForceLimit = 1 << 17

// bruteForce enumerates every assignment of a tiny, valid model. It returns
// whether one satisfies the model and the best objective (0 without one).
// ok is false when the search space exceeds bruteForceLimit.
func bruteForce(m *Model) (feasible bool, best int64, ok bool) {
	space := int64(1)
	for _, v := range m.vars {
		space *= v.hi - v.lo + 1
		if v.hi-v.lo+1 > bruteForceLimit || space > bruteForceLimit {
			return false, 0, false
		}
	}
	values := make([]int64, len(m.vars))
	for i, v := range m.vars {
		values[i] = v.lo
	}
	for {
		if m.checkSolution(values) == nil {
			obj := activity(m.objective, values)
			better := obj < best
			if m.maximize {
				better = obj > best
			}
			if !feasible || better {
				best = obj
			}
			feasible = true
		}
		// Next assignment in mixed radix order.
		i := 0
		for ; i < len(values); i++ {
			if values[i] < m.vars[i].hi {
				values[i]++
				break
			}
			values[i] = m.vars[i].lo
		}
		if i == len(values) {
			return feasible, best, true
		}
	}
}
