// Package cpsat is a small Go binding to the OR-Tools CP-SAT solver.
//
// A Model holds integer and Boolean variables, linear and Boolean constraints,
// one linear objective and an optional solution hint. Solve validates the model
// in Go, serializes it with the wire-compatible messages of package cpsatpb and
// hands it to the solver's C API.
//
// The shared library is opened at run time with dlopen (see LibraryEnv), never
// linked: programs using this package build and start without OR-Tools, and
// Available reports why the solver cannot be used so callers can fall back to
// a heuristic.
//
// The solver aborts the whole process on some malformed input, so every model
// is checked before any C call: variable references, domains, Boolean
// literals, int64 overflow of every linear expression, hinted variables and UTF-8 names
// (Validate). After the solve, the returned solution is checked against the
// model again, which would expose a wire-format mismatch.
package cpsat

import (
	"fmt"
	"math"
	"unicode/utf8"

	"github.com/cacheqos/cacheqos/internal/cpsat/cpsatpb"
)

// Var is the index of a variable in a Model. For a Boolean (0/1) variable, a
// negative value denotes its negation as a literal: see Not.
type Var int32

// Not returns the literal that is true exactly when the Boolean variable v is
// 0 (the solver's encoding, -v-1). Not(Not(v)) == v. Negated literals are
// accepted wherever the API takes literals (AddBoolOr, AddExactlyOne,
// AddAtMostOne, AddImplication, the enforcement of AddLinearIf) and by
// Result.Value, but not in linear terms, objectives or hints.
func Not(v Var) Var { return -v - 1 }

// Term is Coef * Var inside a linear expression.
type Term struct {
	Var  Var
	Coef int64
}

// Model is a CP-SAT model under construction. Adding never fails: mistakes
// (unknown variables, empty domains, overflow...) are reported by Validate and
// by Solve. A Model is not safe for concurrent mutation; once built, it may be
// solved from several goroutines at once.
type Model struct {
	vars        []variable
	constraints []constraint
	objective   []Term
	maximize    bool
	objectives  int // how many times Minimize/Maximize was called
	hintVars    []Var
	hintValues  []int64
	hintIndex   map[Var]int // position in hintVars, so a later Hint overrides
}

type variable struct {
	lo, hi int64
	name   string
}

type constraintKind uint8

const (
	kindLinear constraintKind = iota
	kindBoolOr
	kindBoolAnd
	kindAtMostOne
	kindExactlyOne
)

func (k constraintKind) String() string {
	switch k {
	case kindLinear:
		return "linear"
	case kindBoolOr:
		return "bool_or"
	case kindBoolAnd:
		return "bool_and"
	case kindAtMostOne:
		return "at_most_one"
	case kindExactlyOne:
		return "exactly_one"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

type constraint struct {
	kind    constraintKind
	enforce []Var  // literals that must all be true for the constraint to apply
	lits    []Var  // Boolean kinds
	terms   []Term // kindLinear
	lo, hi  int64  // kindLinear: lo <= sum(terms) <= hi
}

// NewModel returns an empty model.
func NewModel() *Model { return &Model{} }

// NewIntVar adds an integer variable with domain [lo, hi]. Bounds must satisfy
// lo <= hi and |bound| <= MaxDomainValue (checked by Validate).
func (m *Model) NewIntVar(lo, hi int64, name string) Var {
	m.vars = append(m.vars, variable{lo: lo, hi: hi, name: name})
	return Var(len(m.vars) - 1)
}

// NewBoolVar adds a 0/1 variable.
func (m *Model) NewBoolVar(name string) Var { return m.NewIntVar(0, 1, name) }

// AddLinear requires lo <= sum(terms) <= hi. Use math.MinInt64 or
// math.MaxInt64 for a one-sided constraint. Terms are copied; a variable may
// appear more than once and zero coefficients are dropped.
func (m *Model) AddLinear(terms []Term, lo, hi int64) {
	m.constraints = append(m.constraints, constraint{kind: kindLinear, terms: copyTerms(terms), lo: lo, hi: hi})
}

// AddLinearIf requires lo <= sum(terms) <= hi only when the literal enforce is
// true (enforce may be a negated literal).
func (m *Model) AddLinearIf(enforce Var, terms []Term, lo, hi int64) {
	m.constraints = append(m.constraints, constraint{
		kind: kindLinear, enforce: []Var{enforce}, terms: copyTerms(terms), lo: lo, hi: hi,
	})
}

// AddExactlyOne requires exactly one of the literals to be true (an empty list
// makes the model infeasible).
func (m *Model) AddExactlyOne(lits ...Var) { m.addBool(kindExactlyOne, nil, lits) }

// AddAtMostOne requires at most one of the literals to be true.
func (m *Model) AddAtMostOne(lits ...Var) { m.addBool(kindAtMostOne, nil, lits) }

// AddBoolOr requires at least one of the literals to be true.
func (m *Model) AddBoolOr(lits ...Var) { m.addBool(kindBoolOr, nil, lits) }

// AddImplication requires a => b for literals a and b.
func (m *Model) AddImplication(a, b Var) { m.addBool(kindBoolAnd, []Var{a}, []Var{b}) }

func (m *Model) addBool(kind constraintKind, enforce, lits []Var) {
	m.constraints = append(m.constraints, constraint{kind: kind, enforce: enforce, lits: append([]Var(nil), lits...)})
}

// Maximize sets the objective to maximize sum(terms). A model has at most one
// objective: calling Maximize or Minimize twice makes Validate fail.
func (m *Model) Maximize(terms []Term) { m.setObjective(terms, true) }

// Minimize sets the objective to minimize sum(terms); see Maximize.
func (m *Model) Minimize(terms []Term) { m.setObjective(terms, false) }

func (m *Model) setObjective(terms []Term, maximize bool) {
	m.objective = copyTerms(terms)
	m.maximize = maximize
	m.objectives++
}

// Hint suggests value for variable v; the search tries hinted values first. A
// later Hint for the same variable replaces the earlier one. A value outside
// v's domain is clamped into it: a hint is only a suggestion, and the solver
// would reject the whole model for one value out of range.
func (m *Model) Hint(v Var, value int64) {
	if v >= 0 && int(v) < len(m.vars) {
		value = min(max(value, m.vars[v].lo), m.vars[v].hi)
	}
	if i, ok := m.hintIndex[v]; ok {
		m.hintValues[i] = value
		return
	}
	if m.hintIndex == nil {
		m.hintIndex = make(map[Var]int)
	}
	m.hintIndex[v] = len(m.hintVars)
	m.hintVars = append(m.hintVars, v)
	m.hintValues = append(m.hintValues, value)
}

// NumVars returns the number of variables.
func (m *Model) NumVars() int { return len(m.vars) }

// NumConstraints returns the number of constraints added so far.
func (m *Model) NumConstraints() int { return len(m.constraints) }

// Validate reports the first problem that would make the solver reject or
// crash on the model, exactly the check Solve performs before calling the
// solver. Errors wrap ErrInvalidModel and one of the specific Err* kinds.
func (m *Model) Validate() error {
	_, err := m.build()
	return err
}

func copyTerms(terms []Term) []Term { return append([]Term(nil), terms...) }

// build validates the model and encodes it in the solver's request message.
func (m *Model) build() (*cpsatpb.CpModelProto, error) {
	if err := m.checkVariables(); err != nil {
		return nil, err
	}
	req := &cpsatpb.CpModelProto{
		Variables:   make([]*cpsatpb.IntegerVariableProto, len(m.vars)),
		Constraints: make([]*cpsatpb.ConstraintProto, len(m.constraints)),
	}
	for i, v := range m.vars {
		req.Variables[i] = &cpsatpb.IntegerVariableProto{Name: v.name, Domain: []int64{v.lo, v.hi}}
	}
	for i := range m.constraints {
		ct, err := m.encodeConstraint(&m.constraints[i])
		if err != nil {
			return nil, fmt.Errorf("%w: constraint #%d (%s): %w", ErrInvalidModel, i, m.constraints[i].kind, err)
		}
		req.Constraints[i] = ct
	}
	if m.objectives > 0 {
		obj, err := m.encodeObjective()
		if err != nil {
			return nil, fmt.Errorf("%w: objective: %w", ErrInvalidModel, err)
		}
		req.Objective = obj
	}
	if len(m.hintVars) > 0 {
		if err := m.checkHints(); err != nil {
			return nil, fmt.Errorf("%w: hint: %w", ErrInvalidModel, err)
		}
		req.SolutionHint = &cpsatpb.PartialVariableAssignment{Vars: varsToInt32(m.hintVars), Values: m.hintValues}
	}
	return req, nil
}

func (m *Model) checkVariables() error {
	// The solver computes, among others, the activity of any linear
	// combination in 128 bits by summing the magnitudes of all domains; it
	// rejects models where that sum does not fit in an int64.
	var magnitude int64
	for i, v := range m.vars {
		where := fmt.Sprintf("variable %d %q", i, v.name)
		switch {
		case !utf8.ValidString(v.name):
			return fmt.Errorf("%w: %s: %w", ErrInvalidModel, where, ErrInvalidName)
		case v.lo > v.hi:
			return fmt.Errorf("%w: %s: %w: [%d, %d]", ErrInvalidModel, where, ErrEmptyDomain, v.lo, v.hi)
		case v.lo < -MaxDomainValue || v.hi > MaxDomainValue:
			return fmt.Errorf("%w: %s: %w: [%d, %d] exceeds ±%d", ErrInvalidModel, where, ErrDomainRange, v.lo, v.hi, int64(MaxDomainValue))
		}
		size := max(-v.lo, v.hi, v.hi-v.lo) // no overflow within ±MaxDomainValue
		var ok bool
		if magnitude, ok = addInt64(magnitude, size); !ok || magnitude == math.MaxInt64 {
			return fmt.Errorf("%w: %s: %w: the sum of all domain sizes exceeds int64", ErrInvalidModel, where, ErrDomainRange)
		}
	}
	return nil
}

func (m *Model) encodeConstraint(c *constraint) (*cpsatpb.ConstraintProto, error) {
	for _, l := range c.enforce {
		if err := m.checkLiteral(l); err != nil {
			return nil, fmt.Errorf("enforcement literal: %w", err)
		}
	}
	ct := &cpsatpb.ConstraintProto{EnforcementLiteral: varsToInt32(c.enforce)}
	if c.kind == kindLinear {
		if c.lo > c.hi {
			return nil, fmt.Errorf("%w: bounds [%d, %d]", ErrEmptyDomain, c.lo, c.hi)
		}
		vars, coeffs, err := m.encodeTerms(c.terms)
		if err != nil {
			return nil, err
		}
		ct.Constraint = &cpsatpb.ConstraintProto_Linear{Linear: &cpsatpb.LinearConstraintProto{
			Vars: vars, Coeffs: coeffs, Domain: []int64{c.lo, c.hi},
		}}
		return ct, nil
	}
	for _, l := range c.lits {
		if err := m.checkLiteral(l); err != nil {
			return nil, err
		}
	}
	arg := &cpsatpb.BoolArgumentProto{Literals: varsToInt32(c.lits)}
	switch c.kind {
	case kindBoolOr:
		ct.Constraint = &cpsatpb.ConstraintProto_BoolOr{BoolOr: arg}
	case kindBoolAnd:
		ct.Constraint = &cpsatpb.ConstraintProto_BoolAnd{BoolAnd: arg}
	case kindAtMostOne:
		ct.Constraint = &cpsatpb.ConstraintProto_AtMostOne{AtMostOne: arg}
	case kindExactlyOne:
		ct.Constraint = &cpsatpb.ConstraintProto_ExactlyOne{ExactlyOne: arg}
	}
	return ct, nil
}

func (m *Model) encodeObjective() (*cpsatpb.CpObjectiveProto, error) {
	if m.objectives > 1 {
		return nil, fmt.Errorf("%w: Minimize/Maximize called %d times", ErrObjective, m.objectives)
	}
	vars, coeffs, err := m.encodeTerms(m.objective)
	if err != nil {
		return nil, err
	}
	obj := &cpsatpb.CpObjectiveProto{Vars: vars, Coeffs: coeffs}
	if m.maximize {
		// The solver only minimizes: minimize -sum and report it times -1.
		// Negation is safe because encodeTerms rejects math.MinInt64.
		for i := range coeffs {
			coeffs[i] = -coeffs[i]
		}
		obj.ScalingFactor = -1
	}
	return obj, nil
}

// encodeTerms checks a linear expression and returns it without zero terms.
// It rejects any expression whose minimum or maximum activity over the
// variable bounds could leave [-MaxDomainValue, MaxDomainValue], with the same
// accounting as the solver's own checker (negative and positive parts summed
// separately), so a model accepted here is never rejected there.
func (m *Model) encodeTerms(terms []Term) (vars []int32, coeffs []int64, err error) {
	vars = make([]int32, 0, len(terms))
	coeffs = make([]int64, 0, len(terms))
	var sumMin, sumMax int64
	for i, t := range terms {
		if err := m.checkIntVar(t.Var); err != nil {
			return nil, nil, fmt.Errorf("term %d: %w", i, err)
		}
		if t.Coef == 0 {
			continue
		}
		if t.Coef == math.MinInt64 {
			return nil, nil, fmt.Errorf("term %d: %w: coefficient math.MinInt64 cannot be negated", i, ErrOverflow)
		}
		v := m.vars[t.Var]
		atLo, ok1 := mulInt64(v.lo, t.Coef)
		atHi, ok2 := mulInt64(v.hi, t.Coef)
		var ok3, ok4 bool
		sumMin, ok3 = addInt64(sumMin, min(0, atLo, atHi))
		sumMax, ok4 = addInt64(sumMax, max(0, atLo, atHi))
		if !ok1 || !ok2 || !ok3 || !ok4 || atInt64Limit(atLo, atHi, sumMin, sumMax) {
			return nil, nil, fmt.Errorf("term %d: %w: %d * variable %d in [%d, %d]", i, ErrOverflow, t.Coef, t.Var, v.lo, v.hi)
		}
		vars = append(vars, int32(t.Var))
		coeffs = append(coeffs, t.Coef)
	}
	// The solver keeps room to negate the activity and to subtract bounds.
	if sumMin < -MaxDomainValue || sumMax > MaxDomainValue {
		return nil, nil, fmt.Errorf("%w: activity range [%d, %d] exceeds ±%d", ErrOverflow, sumMin, sumMax, int64(MaxDomainValue))
	}
	return vars, coeffs, nil
}

func (m *Model) checkHints() error {
	for _, v := range m.hintVars {
		if err := m.checkIntVar(v); err != nil {
			return err
		}
	}
	return nil
}

// checkIntVar accepts a (non-negated) variable of the model.
func (m *Model) checkIntVar(v Var) error {
	if v < 0 {
		return fmt.Errorf("%w: literal %d (Not(%d)) used as an integer variable", ErrNegatedVar, v, Not(v))
	}
	if int(v) >= len(m.vars) {
		return fmt.Errorf("%w: variable %d, the model has %d", ErrUnknownVar, v, len(m.vars))
	}
	return nil
}

// checkLiteral accepts a Boolean variable of the model or its negation.
func (m *Model) checkLiteral(l Var) error {
	v := l
	if l < 0 {
		v = Not(l)
	}
	if int(v) >= len(m.vars) {
		return fmt.Errorf("%w: literal %d refers to variable %d, the model has %d", ErrUnknownVar, l, v, len(m.vars))
	}
	if d := m.vars[v]; d.lo < 0 || d.hi > 1 {
		return fmt.Errorf("%w: variable %d %q has domain [%d, %d]", ErrNotBoolean, v, d.name, d.lo, d.hi)
	}
	return nil
}

func varsToInt32(vs []Var) []int32 {
	if len(vs) == 0 {
		return nil
	}
	out := make([]int32, len(vs))
	for i, v := range vs {
		out[i] = int32(v)
	}
	return out
}
