package cpsat

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
)

func TestValidateRejects(t *testing.T) {
	const big = int64(1) << 60
	cases := []struct {
		name  string
		build func(m *Model)
		kind  error
		msg   string // part of the error text that locates the problem
	}{{
		name: "unknown variable in linear term",
		build: func(m *Model) {
			x := m.NewIntVar(0, 3, "x")
			m.AddLinear([]Term{{x, 1}, {x + 5, 1}}, 0, 3)
		},
		kind: ErrUnknownVar, msg: "constraint #0 (linear): term 1: unknown variable: variable 5, the model has 1",
	}, {
		name: "negated literal in linear term",
		build: func(m *Model) {
			b := m.NewBoolVar("b")
			m.AddLinear([]Term{{Not(b), 1}}, 0, 1)
		},
		kind: ErrNegatedVar, msg: "literal -1 (Not(0))",
	}, {
		name:  "empty variable domain",
		build: func(m *Model) { m.NewBoolVar("ok"); m.NewIntVar(5, 2, "backwards") },
		kind:  ErrEmptyDomain, msg: `variable 1 "backwards": empty domain: [5, 2]`,
	}, {
		name: "empty linear bounds",
		build: func(m *Model) {
			x := m.NewIntVar(0, 3, "x")
			m.AddLinear([]Term{{x, 1}}, 3, 2)
		},
		kind: ErrEmptyDomain, msg: "bounds [3, 2]",
	}, {
		name:  "domain beyond the solver's range",
		build: func(m *Model) { m.NewIntVar(0, math.MaxInt64, "huge") },
		kind:  ErrDomainRange, msg: `variable 0 "huge"`,
	}, {
		name: "sum of domain sizes overflows",
		build: func(m *Model) {
			m.NewIntVar(-MaxDomainValue, MaxDomainValue, "a")
			m.NewIntVar(-MaxDomainValue, MaxDomainValue, "b")
		},
		kind: ErrDomainRange, msg: "sum of all domain sizes",
	}, {
		name: "term overflows",
		build: func(m *Model) {
			x := m.NewIntVar(0, 1<<40, "x")
			m.AddLinear([]Term{{x, 1 << 30}}, 0, 10)
		},
		kind: ErrOverflow, msg: "term 0",
	}, {
		name: "sum of terms overflows",
		build: func(m *Model) {
			x, y, z := m.NewIntVar(0, big, "x"), m.NewIntVar(0, big, "y"), m.NewIntVar(0, big, "z")
			m.AddLinear([]Term{{x, 3}, {y, 3}, {z, 3}}, 0, 10)
		},
		kind: ErrOverflow, msg: "term 2",
	}, {
		name: "activity range wider than int64",
		build: func(m *Model) {
			x := m.NewIntVar(-(1 << 60), 1<<60, "x")
			m.AddLinear([]Term{{x, 6}}, 0, 0)
		},
		kind: ErrOverflow, msg: "activity range",
	}, {
		name: "coefficient MinInt64",
		build: func(m *Model) {
			x := m.NewBoolVar("x")
			m.AddLinear([]Term{{x, math.MinInt64}}, math.MinInt64, 0)
		},
		kind: ErrOverflow, msg: "math.MinInt64",
	}, {
		name: "objective overflows",
		build: func(m *Model) {
			x := m.NewIntVar(0, big, "x")
			m.Maximize([]Term{{x, 1 << 10}})
		},
		kind: ErrOverflow, msg: "objective: term 0",
	}, {
		name: "objective on unknown variable",
		build: func(m *Model) {
			m.NewBoolVar("x")
			m.Minimize([]Term{{3, 1}})
		},
		kind: ErrUnknownVar, msg: "objective: term 0",
	}, {
		name: "two objectives",
		build: func(m *Model) {
			x := m.NewBoolVar("x")
			m.Minimize([]Term{{x, 1}})
			m.Maximize([]Term{{x, 1}})
		},
		kind: ErrObjective, msg: "called 2 times",
	}, {
		name: "integer variable as literal",
		build: func(m *Model) {
			b, x := m.NewBoolVar("b"), m.NewIntVar(0, 2, "x")
			m.AddExactlyOne(b, x)
		},
		kind: ErrNotBoolean, msg: `constraint #0 (exactly_one): literal on a non-Boolean variable: variable 1 "x" has domain [0, 2]`,
	}, {
		name: "negative domain as literal",
		build: func(m *Model) {
			x := m.NewIntVar(-1, 0, "x")
			m.AddAtMostOne(Not(x))
		},
		kind: ErrNotBoolean, msg: "at_most_one",
	}, {
		name: "integer enforcement literal",
		build: func(m *Model) {
			x := m.NewIntVar(0, 5, "x")
			m.AddLinearIf(x, []Term{{x, 1}}, 1, 2)
		},
		kind: ErrNotBoolean, msg: "enforcement literal",
	}, {
		name: "unknown negated literal",
		build: func(m *Model) {
			b := m.NewBoolVar("b")
			m.AddBoolOr(b, Not(9))
		},
		kind: ErrUnknownVar, msg: "literal -10 refers to variable 9",
	}, {
		name: "implication on unknown literal",
		build: func(m *Model) {
			b := m.NewBoolVar("b")
			m.AddImplication(math.MaxInt32, b)
		},
		kind: ErrUnknownVar, msg: "bool_and",
	}, {
		name: "most negative literal",
		build: func(m *Model) {
			m.NewBoolVar("b")
			m.AddBoolOr(math.MinInt32)
		},
		kind: ErrUnknownVar, msg: "bool_or",
	}, {
		name: "hint on unknown variable",
		build: func(m *Model) {
			m.NewBoolVar("b")
			m.Hint(1, 0)
		},
		kind: ErrUnknownVar, msg: "hint",
	}, {
		name: "hint on negated literal",
		build: func(m *Model) {
			b := m.NewBoolVar("b")
			m.Hint(Not(b), 0)
		},
		kind: ErrNegatedVar, msg: "hint",
	}, {
		name:  "name is not UTF-8",
		build: func(m *Model) { m.NewBoolVar("bad\xff") },
		kind:  ErrInvalidName, msg: "variable 0",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := NewModel()
			tc.build(m)
			err := m.Validate()
			if !errors.Is(err, ErrInvalidModel) || !errors.Is(err, tc.kind) {
				t.Fatalf("Validate() = %v, want ErrInvalidModel and %v", err, tc.kind)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("Validate() = %q, want it to contain %q", err, tc.msg)
			}
			// Solve rejects the model with the same error and no result,
			// so nothing reached the solver (a solver-side rejection comes
			// with a ModelInvalid result).
			r, solveErr := Solve(context.Background(), m, Params{})
			if r != nil || solveErr == nil || solveErr.Error() != err.Error() {
				t.Errorf("Solve() = %v, %v; want nil, %v", r, solveErr, err)
			}
		})
	}
}

// Models exactly at the edge of what the solver accepts must validate, and
// the solver must accept them too.
func TestValidateAcceptsEdges(t *testing.T) {
	cases := map[string]func(m *Model){
		"widest domain": func(m *Model) {
			x := m.NewIntVar(-MaxDomainValue, MaxDomainValue, "widest")
			m.AddLinear([]Term{{x, 1}}, math.MinInt64, math.MaxInt64)
			m.Minimize([]Term{{x, -1}})
			m.Hint(x, -MaxDomainValue)
		},
		"largest activity": func(m *Model) {
			x, b := m.NewIntVar(0, MaxDomainValue-1<<40, "x"), m.NewBoolVar("b")
			m.AddLinear([]Term{{x, 1}, {b, 0}, {b, 1 << 40}}, 0, math.MaxInt64)
			m.AddLinearIf(Not(b), []Term{{x, -1}}, -5, 5)
			m.Hint(x, MaxDomainValue-1<<40)
			m.Hint(b, 1)
		},
		"empty constraints and objective": func(m *Model) {
			m.AddLinear(nil, 0, 0)
			m.AddBoolOr()
			m.AddExactlyOne()
			m.Maximize(nil)
		},
	}
	needSolver(t)
	for name, build := range cases {
		m := NewModel()
		build(m)
		if err := m.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		// The solver agrees that the model is valid.
		if r, err := Solve(context.Background(), m, oneWorker); err != nil || r.Status == ModelInvalid {
			t.Errorf("%s: solver says %v, %v", name, r, err)
		}
	}
}

func TestModelCounts(t *testing.T) {
	m := NewModel()
	a, b := m.NewBoolVar("a"), m.NewIntVar(-3, 3, "b")
	m.AddImplication(a, Not(a))
	m.AddLinear([]Term{{b, 1}}, 0, 1)
	if m.NumVars() != 2 || m.NumConstraints() != 2 || a != 0 || b != 1 {
		t.Errorf("NumVars %d NumConstraints %d vars %d %d", m.NumVars(), m.NumConstraints(), a, b)
	}
}

func TestEncodingDropsZeroTermsAndNegatesMaximize(t *testing.T) {
	m := NewModel()
	x, y := m.NewIntVar(0, 4, "x"), m.NewBoolVar("y")
	terms := []Term{{x, 3}, {y, 0}, {x, -1}}
	m.AddLinearIf(Not(y), terms, 1, 2)
	m.Maximize(terms)
	terms[0].Coef = 100 // the model keeps its own copy
	req, err := m.build()
	if err != nil {
		t.Fatal(err)
	}
	lin := req.GetConstraints()[0]
	if got := lin.GetLinear(); len(got.GetVars()) != 2 || got.GetCoeffs()[0] != 3 || got.GetCoeffs()[1] != -1 ||
		lin.GetEnforcementLiteral()[0] != -2 {
		t.Errorf("linear encoded as %v", lin)
	}
	obj := req.GetObjective()
	if obj.GetScalingFactor() != -1 || obj.GetCoeffs()[0] != -3 || obj.GetCoeffs()[1] != 1 {
		t.Errorf("objective encoded as %v", obj)
	}
}

func TestCheckedArithmetic(t *testing.T) {
	const maxI, minI = math.MaxInt64, math.MinInt64
	for _, tc := range []struct {
		a, b        int64
		add, mul    bool // whether a+b and a*b fit
		description string
	}{
		{1, 2, true, true, "small"},
		{maxI, 1, false, true, "max+1"},
		{minI, -1, false, false, "min*-1"},
		{-1, minI, false, false, "-1*min"},
		{minI, 1, true, true, "min+1"},
		{1 << 31, 1 << 31, true, true, "2^62"},
		{1 << 31, 1 << 32, true, false, "2^63"},
		{-(1 << 31), 1 << 32, true, true, "-2^63"},
		{1 << 32, 1 << 32, true, false, "2^64"},
	} {
		if _, ok := addInt64(tc.a, tc.b); ok != tc.add {
			t.Errorf("%s: add ok=%v", tc.description, ok)
		}
		if _, ok := mulInt64(tc.a, tc.b); ok != tc.mul {
			t.Errorf("%s: mul ok=%v", tc.description, ok)
		}
	}
}
