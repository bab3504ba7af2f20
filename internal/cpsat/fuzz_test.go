package cpsat

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"
)

// FuzzModel builds small random models, including broken ones, from the fuzz
// input. Each must either be rejected by Validate (and then by Solve, without
// reaching the solver) or be solved without error; the solver must never call
// a validated model invalid, and on models small enough to enumerate, its
// status and objective must match brute force.
func FuzzModel(f *testing.F) {
	needSolver(f)
	// Seeds follow the byte layout of modelFromBytes: variable count, then
	// (lo, hi, name) choices per variable, constraint count, constraints,
	// objective count, objectives, presolve.
	for _, seed := range [][]byte{
		{},
		// x, y in [0,3], b Boolean; 2x + y + 5b in [0,4]; b => x >= 1;
		// maximize x + 2y - 3b.
		{3, 0, 3, 1, 0, 3, 1, 0, 0, 0,
			2, 0, 3, 0, 1, 2, 1, 1, 0, 2, 1, 5, 0, 4, 1, 2, 1, 1, 0, 1, 1, 5, 3,
			1, 0, 3, 0, 1, 0, 1, 1, 2, 2, 1, 3, 1},
		// Four Booleans with exactly-one, at-most-one, or, implication and a
		// hint; minimize 2a + 5d.
		{4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
			5, 2, 3, 0, 1, 1, 1, 2, 0, 3, 2, 2, 1, 3, 1, 4, 2, 0, 0, 3, 1, 5, 1, 1, 3, 0, 6, 2, 1, 1,
			1, 1, 2, 0, 1, 2, 3, 1, 5, 0},
		// x + y == math.MaxInt64 over [0,3]: valid and infeasible.
		{2, 0, 3, 0, 0, 3, 0, 1, 0, 2, 0, 1, 0, 1, 1, 0, 6, 6, 0, 0},
		{1, 0, 0, 0, 1, 4, 1, 2, 1, 0},                   // literal on an unknown variable
		{2, 6, 5, 0, 0, 0, 0, 1, 0, 1, 0, 1, 6, 0, 6, 0}, // term overflow
		{1, 7, 6, 0, 0}, // domain beyond the supported range
		{1, 4, 7, 0, 0}, // empty domain
		{1, 0, 0, 0, 0, 2, 0, 1, 0, 1, 0, 1, 1, 0, 1, 0}, // two objectives
		{1, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 1, 0},          // negated literal in a linear term
		{1, 0, 0, 0, 1, 6, 0, 1, 4, 0},                   // hint outside the domain (clamped)
		{1, 0, 3, 0, 1, 4, 1, 0, 1, 0},                   // integer variable as a literal
		{1, 0, 0, 2},                                     // name not UTF-8
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, presolve := modelFromBytes(data)
		err := m.Validate()
		if err != nil {
			if !errors.Is(err, ErrInvalidModel) {
				t.Fatalf("Validate() = %v, not an ErrInvalidModel", err)
			}
			if r, solveErr := Solve(context.Background(), m, Params{}); r != nil || solveErr == nil || solveErr.Error() != err.Error() {
				t.Fatalf("Solve() = %v, %v; Validate() = %v", r, solveErr, err)
			}
			return
		}
		r, err := Solve(context.Background(), m, Params{Workers: 1, TimeLimit: 5 * time.Second, Presolve: presolve})
		if err != nil {
			t.Fatalf("validated model: %v", err)
		}
		feasible, best, enumerated := bruteForce(m)
		if !enumerated {
			return
		}
		switch {
		case r.Status == Infeasible && feasible:
			t.Fatalf("solver says infeasible, brute force found objective %d", best)
		case r.Status == Optimal && !feasible:
			t.Fatalf("solver found objective %v, brute force says infeasible", r.Objective)
		case r.Status == Optimal && r.Objective != float64(best):
			t.Fatalf("solver optimum %v, brute force %d", r.Objective, best)
		case r.Status != Optimal && r.Status != Infeasible:
			t.Fatalf("status %v on a tiny model", r.Status)
		}
	})
}

// fuzzBytes hands out the fuzz input one byte at a time, then zeros.
type fuzzBytes []byte

func (b *fuzzBytes) next() byte {
	if len(*b) == 0 {
		return 0
	}
	c := (*b)[0]
	*b = (*b)[1:]
	return c
}

// pick returns one of the choices, selected by the next byte.
func pick[T any](b *fuzzBytes, choices ...T) T {
	return choices[int(b.next())%len(choices)]
}

// modelFromBytes decodes a model of up to 6 variables and 6 constraints.
// Values come from small sets that mix ordinary numbers with the edge cases
// validation must catch; variable references may be out of range or negated.
func modelFromBytes(data []byte) (m *Model, presolve bool) {
	b := fuzzBytes(data)
	m = NewModel()
	numVars := int(b.next() % 7)
	for range numVars {
		lo := pick[int64](&b, 0, 0, 0, -2, 1, -MaxDomainValue, 1<<40, math.MinInt64)
		hi := pick[int64](&b, 1, 1, 2, 3, 0, MaxDomainValue, math.MaxInt64, -3)
		m.NewIntVar(lo, hi, pick(&b, "", "x", "bad\xff"))
	}
	ref := func() Var {
		v := Var(int(b.next()) % (numVars + 2))
		if b.next()%4 == 0 {
			return Not(v)
		}
		return v
	}
	refs := func() []Var {
		out := make([]Var, b.next()%4)
		for i := range out {
			out[i] = ref()
		}
		return out
	}
	terms := func() []Term {
		out := make([]Term, b.next()%4)
		for i := range out {
			out[i] = Term{ref(), pick[int64](&b, 1, -1, 2, -3, 0, 5, 1<<40, math.MinInt64, math.MaxInt64)}
		}
		return out
	}
	bound := func() int64 { return pick[int64](&b, 0, 1, 2, -1, 4, math.MinInt64, math.MaxInt64) }
	for range b.next() % 7 {
		switch b.next() % 7 {
		case 0:
			m.AddLinear(terms(), bound(), bound())
		case 1:
			m.AddLinearIf(ref(), terms(), bound(), bound())
		case 2:
			m.AddExactlyOne(refs()...)
		case 3:
			m.AddAtMostOne(refs()...)
		case 4:
			m.AddBoolOr(refs()...)
		case 5:
			m.AddImplication(ref(), ref())
		case 6:
			m.Hint(ref(), bound())
		}
	}
	for range b.next() % 3 {
		if b.next()%2 == 0 {
			m.Maximize(terms())
		} else {
			m.Minimize(terms())
		}
	}
	return m, b.next()%2 == 1
}
