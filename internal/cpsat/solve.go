package cpsat

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/cacheqos/cacheqos/internal/cpsat/cpsatpb"
)

// DefaultTimeLimit applies when Params.TimeLimit is zero. A solve is never
// unbounded: a controller must always get an answer.
const DefaultTimeLimit = 10 * time.Second

// maxDefaultWorkers caps the default worker count: beyond it, extra CP-SAT
// workers mostly compete for memory bandwidth with the rest of the process.
const maxDefaultWorkers = 8

// Params tunes one solve. The zero value is usable: a DefaultTimeLimit budget,
// DefaultWorkers() workers, seed 0, solve to optimality, presolve off, search
// until proven optimal or out of time.
type Params struct {
	// TimeLimit bounds the wall-clock time of the solve, presolve included.
	// Zero means DefaultTimeLimit.
	TimeLimit time.Duration
	// WorkLimit bounds the solve in the solver's deterministic time, a count
	// of work done (about seconds on a fast machine) that does not depend on
	// the machine's speed or load; zero means no such bound. With one worker,
	// a solve stopped by it returns the same solution every time, which a
	// solve stopped by TimeLimit does not.
	WorkLimit float64
	// Workers is the number of parallel search workers; zero means
	// DefaultWorkers(). One worker gives reproducible results for a seed.
	Workers int
	// Seed seeds the solver's randomized heuristics.
	Seed int32
	// RelativeGap stops the search once
	// |objective - bound| / max(1, |objective|) <= RelativeGap; zero asks for
	// a proof of optimality.
	RelativeGap float64
	// Presolve enables CP-SAT's model presolve. It is off in the zero value
	// because on large assignment models presolve alone can take seconds
	// before the first solution, while a good hint with presolve off gets
	// within a fraction of a percent of the bound in the same time; turn it on
	// for small, hard models where the reductions pay off.
	Presolve bool
	// StopAfterFirstSolution returns as soon as any feasible solution exists.
	StopAfterFirstSolution bool
	// MemoryLimit stops the search once the process's resident memory exceeds it, in bytes
	// (zero: no limit). It counts the whole process, as a container's memory limit does, and
	// is read every few milliseconds, so the process can overshoot it by what the solver
	// allocates in that time. A stopped solve returns its best solution so far, like a
	// cancelled one, with Result.MemoryLimitReached set.
	MemoryLimit int64
}

// DefaultWorkers is the worker count used when Params.Workers is zero:
// GOMAXPROCS, capped at 8.
func DefaultWorkers() int { return min(runtime.GOMAXPROCS(0), maxDefaultWorkers) }

func (p Params) encode() (*cpsatpb.SatParameters, error) {
	switch {
	case p.TimeLimit < 0:
		return nil, fmt.Errorf("%w: negative TimeLimit %v", ErrInvalidParams, p.TimeLimit)
	case p.Workers < 0 || p.Workers > math.MaxInt32:
		return nil, fmt.Errorf("%w: Workers %d", ErrInvalidParams, p.Workers)
	case math.IsNaN(p.RelativeGap) || math.IsInf(p.RelativeGap, 0) || p.RelativeGap < 0:
		return nil, fmt.Errorf("%w: RelativeGap %v must be a finite number >= 0", ErrInvalidParams, p.RelativeGap)
	case math.IsNaN(p.WorkLimit) || math.IsInf(p.WorkLimit, 0) || p.WorkLimit < 0:
		return nil, fmt.Errorf("%w: WorkLimit %v must be a finite number >= 0", ErrInvalidParams, p.WorkLimit)
	case p.MemoryLimit < 0:
		return nil, fmt.Errorf("%w: negative MemoryLimit %d", ErrInvalidParams, p.MemoryLimit)
	}
	limit := p.TimeLimit
	if limit == 0 {
		limit = DefaultTimeLimit
	}
	workers := p.Workers
	if workers == 0 {
		workers = DefaultWorkers()
	}
	enc := &cpsatpb.SatParameters{
		MaxTimeInSeconds:       proto.Float64(limit.Seconds()),
		NumWorkers:             proto.Int32(int32(workers)),
		RandomSeed:             proto.Int32(p.Seed),
		RelativeGapLimit:       proto.Float64(p.RelativeGap),
		CpModelPresolve:        proto.Bool(p.Presolve),
		StopAfterFirstSolution: proto.Bool(p.StopAfterFirstSolution),
		// The solver logs to stdout by default; a library must stay silent.
		LogSearchProgress: proto.Bool(false),
		LogToStdout:       proto.Bool(false),
	}
	if p.WorkLimit > 0 {
		enc.MaxDeterministicTime = proto.Float64(p.WorkLimit)
	}
	return enc, nil
}

// Status is the outcome of a solve.
type Status int

// The values equal the solver's own status codes.
const (
	// Unknown: no solution and no proof of infeasibility within the limits.
	Unknown Status = iota
	// ModelInvalid: the solver rejected the model (Solve also returns an error).
	ModelInvalid
	// Feasible: a solution was found but not proven optimal.
	Feasible
	// Infeasible: the model provably has no solution.
	Infeasible
	// Optimal: the solution is proven optimal (up to RelativeGap and the
	// solver's absolute gap of 1e-4); for a model without objective, any
	// solution.
	Optimal
)

func (s Status) String() string {
	switch s {
	case Unknown:
		return "Unknown"
	case ModelInvalid:
		return "ModelInvalid"
	case Feasible:
		return "Feasible"
	case Infeasible:
		return "Infeasible"
	case Optimal:
		return "Optimal"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// Result is what a solve found.
type Result struct {
	Status Status
	// Objective is the objective value of the returned solution; BestBound is
	// the best proven bound on the optimum (an upper bound when maximizing).
	// Both are 0 for a model without objective and meaningless without a
	// solution.
	Objective, BestBound float64
	// WallTime is the solver's own measure of the solve time.
	WallTime time.Duration
	// Work is the deterministic time the solve took (see Params.WorkLimit).
	Work float64
	// NumConflicts and NumBranches are search statistics.
	NumConflicts, NumBranches int64
	// Stopped reports that the context was cancelled or the memory limit reached
	// during the solve, so the result is the best found up to that point.
	Stopped bool
	// MemoryLimitReached reports that Params.MemoryLimit stopped the solve.
	MemoryLimitReached bool

	values []int64
}

// HasSolution reports whether the result carries variable values (status
// Feasible or Optimal).
func (r *Result) HasSolution() bool { return r.values != nil }

// Value returns the value of variable v in the solution; for a negated literal
// Not(b) it returns 1 - Value(b). It panics, like an out-of-range index, when
// the result has no solution or v is not a variable of the solved model.
func (r *Result) Value(v Var) int64 {
	if r.values == nil {
		panic(fmt.Sprintf("cpsat: Value(%d) on a result without solution (status %v)", v, r.Status))
	}
	if v < 0 {
		return 1 - r.Value(Not(v))
	}
	if int(v) >= len(r.values) {
		panic(fmt.Sprintf("cpsat: Value(%d) out of range: the model has %d variables", v, len(r.values)))
	}
	return r.values[v]
}

// BoolValue reports whether literal v is true in the solution; see Value.
func (r *Result) BoolValue(v Var) bool { return r.Value(v) != 0 }

// Gap returns the relative gap |Objective - BestBound| / max(1, |Objective|):
// 0 when proven optimal, +Inf without a solution.
func (r *Result) Gap() float64 {
	if !r.HasSolution() {
		return math.Inf(1)
	}
	return math.Abs(r.Objective-r.BestBound) / math.Max(1, math.Abs(r.Objective))
}

// Solve validates m (see Model.Validate) and runs CP-SAT on it. Cancelling ctx,
// or the process passing Params.MemoryLimit, during the solve stops the search;
// Solve then returns the best solution found so far with Result.Stopped set and
// a nil error. A context that is
// already done returns its error without solving. Errors wrap
// ErrInvalidModel, ErrInvalidParams or ErrUnavailable.
func Solve(ctx context.Context, m *Model, p Params) (*Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	req, err := m.build()
	if err != nil {
		return nil, err
	}
	params, err := p.encode()
	if err != nil {
		return nil, err
	}
	lib, err := library()
	if err != nil {
		return nil, err
	}
	reqBytes, err := proto.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("cpsat: encoding model: %w", err)
	}
	if len(reqBytes) > math.MaxInt32 {
		return nil, fmt.Errorf("%w: %w: %d bytes", ErrInvalidModel, ErrTooLarge, len(reqBytes))
	}
	paramBytes, err := proto.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("cpsat: encoding parameters: %w", err)
	}

	solveCtx := ctx
	if p.MemoryLimit > 0 {
		watched, stop, err := watchMemory(ctx, p.MemoryLimit)
		if err != nil {
			return nil, err
		}
		defer stop()
		solveCtx = watched
	}
	respBytes, stopped := lib.solve(solveCtx, reqBytes, paramBytes)

	var resp cpsatpb.CpSolverResponse
	if err := proto.Unmarshal(respBytes, &resp); err != nil {
		return nil, fmt.Errorf("cpsat: decoding solver response: %w", err)
	}
	res := &Result{
		Status:       Status(resp.GetStatus()),
		Objective:    resp.GetObjectiveValue(),
		BestBound:    resp.GetBestObjectiveBound(),
		WallTime:     time.Duration(resp.GetWallTime() * float64(time.Second)),
		Work:         resp.GetDeterministicTime(),
		NumConflicts: resp.GetNumConflicts(),
		NumBranches:  resp.GetNumBranches(),
		Stopped:      stopped,
		// The caller's own cancellation takes precedence in the cause.
		MemoryLimitReached: stopped && errors.Is(context.Cause(solveCtx), errMemoryLimit),
	}
	switch res.Status {
	case ModelInvalid:
		return res, fmt.Errorf("%w: rejected by the solver: %s", ErrInvalidModel, resp.GetSolutionInfo())
	case Feasible, Optimal:
		if err := m.acceptSolution(res, resp.GetSolution()); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// acceptSolution checks the solver's solution against the model before
// handing it out: a violation can only come from a wire-format mismatch or a
// solver bug, and must not reach an allocation.
func (m *Model) acceptSolution(res *Result, values []int64) error {
	if len(values) != len(m.vars) {
		return fmt.Errorf("cpsat: solver returned %d values for %d variables", len(values), len(m.vars))
	}
	if err := m.checkSolution(values); err != nil {
		return fmt.Errorf("cpsat: solver solution violates the model: %w", err)
	}
	if m.objectives > 0 {
		objective := float64(activity(m.objective, values))
		if math.Abs(objective-res.Objective) > 1e-6*math.Max(1, math.Abs(objective)) {
			return fmt.Errorf("cpsat: solver reports objective %v, the solution evaluates to %v", res.Objective, objective)
		}
		res.Objective = objective
	}
	if values == nil {
		values = []int64{} // a model without variables still has a solution
	}
	res.values = values
	return nil
}

// checkSolution returns the first variable domain or constraint values violate.
// values has one entry per variable of the (validated) model.
func (m *Model) checkSolution(values []int64) error {
	for i, v := range m.vars {
		if values[i] < v.lo || values[i] > v.hi {
			return fmt.Errorf("variable %d %q = %d outside [%d, %d]", i, v.name, values[i], v.lo, v.hi)
		}
	}
	litTrue := func(l Var) bool {
		if l < 0 {
			return values[Not(l)] == 0
		}
		return values[l] != 0
	}
	for i := range m.constraints {
		c := &m.constraints[i]
		enforced := true
		for _, l := range c.enforce {
			enforced = enforced && litTrue(l)
		}
		if !enforced {
			continue
		}
		trueLits := 0
		for _, l := range c.lits {
			if litTrue(l) {
				trueLits++
			}
		}
		var ok bool
		switch c.kind {
		case kindLinear:
			sum := activity(c.terms, values)
			ok = c.lo <= sum && sum <= c.hi
		case kindBoolOr:
			ok = trueLits > 0
		case kindBoolAnd:
			ok = trueLits == len(c.lits)
		case kindAtMostOne:
			ok = trueLits <= 1
		case kindExactlyOne:
			ok = trueLits == 1
		}
		if !ok {
			return fmt.Errorf("constraint #%d (%s) does not hold", i, c.kind)
		}
	}
	return nil
}

// activity evaluates sum(terms) on values whose entries lie in their domains;
// validation guarantees it cannot overflow.
func activity(terms []Term, values []int64) int64 {
	var sum int64
	for _, t := range terms {
		sum += t.Coef * values[t.Var]
	}
	return sum
}
