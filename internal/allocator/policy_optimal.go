package allocator

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/cacheqos/cacheqos/internal/allocator/planning"
	"github.com/cacheqos/cacheqos/internal/cpsat"
)

// jointModelLimit is the largest joint model (sum over tenants of levels x candidate nodes,
// its number of unit variables) solved in one piece; larger problems are decomposed into
// sizing and placement.
const jointModelLimit = 10000

// sizingTimeShare is the share of the remaining time (and of the work limit) the sizing stage
// of the decomposed method may use; the greedy sizing is usually within a few millionths of the LP bound, so
// most of the time goes to the placement.
const sizingTimeShare = 0.3

// targetHitsGap is the gap on the expected-hits tier at which the solver may stop early, and
// targetMovementGap the relative gap at which the placement stage (movement only) may.
const (
	targetHitsGap     = 0.0005
	targetMovementGap = 0.01
)

// stage is one solve of the optimal policy.
type stage int

const (
	stageJoint     stage = iota // sizes and placement in one model
	stageSizing                 // decomposed, first stage
	stagePlacement              // decomposed, second stage
)

// optCandidate is a complete answer of the optimal policy.
type optCandidate struct {
	levels []int
	parts  [][]part
	obj    int64
}

// runOptimal is the default policy; see the package documentation and docs/allocator.md.
func runOptimal(ctx context.Context, p *problem) (*allocation, error) {
	// Keep a little of the limit for turning the answer into a plan.
	limit := p.opts.timeLimit()
	deadline := p.start.Add(limit - min(limit/20, 250*time.Millisecond))
	o := newOptInstance(p)
	levels, reserved := o.greedyPlace(o.greedySizing())
	o.chooseCandidates(reserved)
	parts := o.trimToLevels(levels, reserved)
	a := newAllocation(len(p.tenants))
	// When a tenant did not fit even at its lowest level, the greedy plan is repaired as any
	// policy's plan is, so that the fallback and the solver's hint keep every constraint; the
	// repair's notes go to the plan if the greedy plan is the answer.
	repaired := newAllocation(len(p.tenants))
	repaired.parts = parts
	if err := p.enforceHard(ctx, repaired); err != nil {
		return nil, err
	}
	parts = repaired.parts
	greedy := optCandidate{levels: levels, parts: parts, obj: o.objective(levels, parts)}
	if !p.opts.levelsOnly {
		greedy = o.refine(greedy)
	}
	report := &planning.SolverReport{Status: "Greedy", GreedyObjective: float64(greedy.obj), Objective: float64(greedy.obj)}
	best, bestIsGreedy := greedy, true
	solverBound := math.Inf(1)
	certified := o.certified(greedy)
	switch {
	case p.opts.DisableSolver:
		report.Fallback = "solver disabled by options"
	case certified:
		// Nothing left for the solver on the first two tiers: the plan meets every strict
		// objective it can with its margin, and its expected hits are within the tolerance of
		// the bound over real sizes. Only movement (kept low by the placement's preference for
		// the nodes in force, and by the hysteresis below) could still improve.
		report.Status = cpsat.Optimal.String()
		report.Method = "greedy within the tolerance of the bound"
	case cpsat.Available() != nil:
		report.Fallback = "OR-Tools unavailable: " + cpsat.Available().Error()
	default:
		var res optResult
		var err error
		// The resize stage keeps a share of the time.
		solveDeadline := deadline
		if !p.opts.levelsOnly {
			solveDeadline = deadline.Add(-time.Duration(resizeTimeShare * float64(limit)))
		}
		if o.jointSize() <= jointModelLimit {
			res, err = o.solveJoint(ctx, solveDeadline, greedy)
		} else {
			res, err = o.solveDecomposed(ctx, solveDeadline, greedy)
		}
		a.planNotes = append(a.planNotes, res.notes...)
		report.Method = res.method
		if res.hasBound {
			solverBound = res.bound
		}
		switch {
		case err != nil:
			report.Fallback = err.Error()
		case greedy.obj-res.candidate.obj >= o.sc.w2 && o.withinChurn(greedy.parts):
			// The greedy wins on strict objectives or hits, not merely on movement rounding.
			report.Status = res.status
			report.Fallback = "the greedy solution scored higher than the solver's within the time limit"
		default:
			report.Status = res.status
			best, bestIsGreedy = res.candidate, false
		}
	}
	if current, ok := o.withinChurnCap(best); ok {
		a.planNotes = append(a.planNotes, "optimal: the best plan found moves more than the churn cap; the plan in force meets as many strict objectives and is the start instead")
		if report.Fallback != "" && !p.opts.DisableSolver && cpsat.Available() == nil {
			// The answer is the plan in force, not the greedy one; the solve's failure to
			// express a plan within the cap stays in the notes.
			a.planNotes = append(a.planNotes, "optimal: "+report.Fallback)
			report.Fallback, report.Status = "", cpsat.Feasible.String()
		}
		best, bestIsGreedy = current, false
	}
	// The resize runs after a failed solve too: the joint model's equal split units can make a
	// spread infeasible that real sizes allow (a tenant on every node beside one whose minimum
	// leaves a node a few MB), and the resize, from the repaired greedy plan, is not bound to
	// them.
	if !p.opts.levelsOnly && !certified && !p.opts.DisableSolver && cpsat.Available() == nil {
		best = o.refine(best)
		resized, note := o.resize(ctx, deadline, best)
		a.planNotes = append(a.planNotes, "optimal: "+note)
		if resized.obj > best.obj && report.Fallback != "" && !strings.Contains(report.Fallback, "scored higher") {
			// The answer is the resize's, not the greedy one; the solve's failure stays in the notes.
			a.planNotes = append(a.planNotes, "optimal: "+report.Fallback)
			report.Fallback, report.Status = "", cpsat.Feasible.String()
		}
		best, bestIsGreedy = resized, bestIsGreedy && resized.obj == best.obj
	}
	if kept, ok := o.keepCurrent(best); ok {
		if kept.obj >= best.obj {
			a.planNotes = append(a.planNotes, "optimal: the plan in force scores at least as well as the best plan found; kept")
		} else {
			a.planNotes = append(a.planNotes, "optimal: the plan in force is within the solver's tolerance of the best plan found; kept")
		}
		best, bestIsGreedy = kept, false
	}
	// The LP bound of the pooled sizing, less the overload no plan avoids, bounds every answer
	// (the final movement is at least the sizing's movement lower bound): it gives the greedy
	// fallback a gap too, and caps a solver bound that the search did not get to tighten.
	var capacity int64
	for _, q := range o.memQuanta {
		capacity += q
	}
	report.Bound = math.Min(o.lpBound(capacity)-float64(o.sc.w2*o.overloadLowerBound()), solverBound)
	report.Objective = float64(best.obj)
	report.Bound = math.Max(report.Bound, report.Objective)
	// The gap is measured against a bound over real sizes (not the levels' or quanta's): the
	// status says Optimal only when that gap is within the solver's tolerance.
	report.Gap = p.hitsGap(best.parts)
	if report.Status == cpsat.Optimal.String() && report.Gap > targetHitsGap {
		report.Status = cpsat.Feasible.String()
	}
	a.solver = report
	a.parts = best.parts
	if bestIsGreedy {
		a.planNotes = append(a.planNotes, repaired.planNotes...)
		for k := range a.notes {
			a.notes[k] = append(a.notes[k], repaired.notes[k]...)
		}
	}
	method := "CP-SAT"
	if report.Fallback != "" {
		method = "the greedy fallback"
	}
	for k := range p.tenants {
		l := &o.levels[k]
		if totalBytes(best.parts[k]) == l.bytes[best.levels[k]] {
			a.note(k, "optimal: %s chose level %d of %d candidate sizes (strict objectives by priority, then expected hits, then least movement)",
				method, best.levels[k]+1, l.len())
		} else {
			a.note(k, "optimal: %s sized it in quanta of %s (strict objectives by priority, then expected hits, then least movement)",
				method, bytesHuman(o.sc.quantum))
		}
	}
	return a, nil
}

// certified reports whether c needs no solve: every strict objective a level can meet is met
// with its margin, c's expected hits are within targetHitsGap of the bound over real sizes,
// and neither a churn cap nor a proof of optimality was asked for.
func (o *optInstance) certified(c optCandidate) bool {
	if o.p.opts.ProveOptimal || o.p.opts.MaxChurnBytes > 0 || o.p.opts.levelsOnly {
		return false
	}
	var most int64
	for k := range o.levels {
		most += slices.Max(o.levels[k].slo)
	}
	slo, _, _ := o.tiers(c.levels, c.parts)
	return slo >= most && o.p.hitsGap(c.parts) <= targetHitsGap
}

// refine is refineSizes when it improves c without breaking the churn cap c keeps.
func (o *optInstance) refine(c optCandidate) optCandidate {
	if refined := o.refineSizes(c); refined.obj > c.obj && (o.withinChurn(refined.parts) || !o.withinChurn(c.parts)) {
		return refined
	}
	return c
}

// jointSize is the number of unit variables (levels x candidate nodes) of the joint model.
func (o *optInstance) jointSize() int {
	n := 0
	for k := range o.p.tenants {
		n += o.levels[k].len() * o.candidateLimit(k)
	}
	return n
}

// keepCurrent is the optimal policy's hysteresis: when every tenant has memory now and the plan
// in force satisfies every constraint, it is kept unless the best plan found beats it by at
// least the solver's own tolerance on expected hits (or on a strict objective). The solver
// stops within that tolerance of the bound, so a plan a little better than the one in force may
// only reflect where a search stopped: moving for it would make small input changes reshuffle
// the fleet.
func (o *optInstance) keepCurrent(best optCandidate) (optCandidate, bool) {
	current, ok := o.currentCandidate()
	if !ok {
		return best, false
	}
	_, hits, _ := o.tiers(best.levels, best.parts)
	tolerance := float64(o.sc.w2) * math.Max(1, targetHitsGap*float64(hits))
	if float64(best.obj-current.obj) < tolerance {
		return current, true
	}
	return best, false
}

// currentCandidate is the plan in force as a candidate, when every tenant has memory now, on
// candidate nodes, and the plan keeps every constraint. Its sizes need not be levels: the
// stages over real sizes size in quanta, and the score counts bytes, not levels (the level
// recorded is the largest at most the size, for the notes only).
func (o *optInstance) currentCandidate() (optCandidate, bool) {
	levels := make([]int, len(o.p.tenants))
	parts := make([][]part, len(o.p.tenants))
	for k, t := range o.p.tenants {
		if t.currentTotal == 0 {
			return optCandidate{}, false
		}
		levels[k] = max(0, sort.Search(o.levels[k].len(), func(i int) bool { return o.levels[k].bytes[i] > t.currentTotal })-1)
		for _, c := range t.current {
			if !slices.Contains(o.cands[k], c.node) {
				return optCandidate{}, false
			}
			if c.bytes > 0 {
				parts[k] = append(parts[k], part{node: c.node, bytes: c.bytes})
			}
		}
		if n := len(parts[k]); n < o.spreadMin[k] || n > o.spreadMax[k] {
			return optCandidate{}, false
		}
	}
	if len(o.p.hardViolations(parts)) > 0 || !o.fitsInBytes(parts) {
		return optCandidate{}, false
	}
	return optCandidate{levels: levels, parts: parts, obj: o.objective(levels, parts)}, true
}

// withinChurnCap returns c, or the plan in force when c moves more than the churn cap and the
// plan in force (which moves nothing) meets as many strict objectives. The models can only
// express the sizes of their levels and split units, so under a small cap they may find no
// plan near one the stages over real sizes put in force; the plan in force is then the
// answer the cap asks for, and the stages may still improve it within the cap.
func (o *optInstance) withinChurnCap(c optCandidate) (optCandidate, bool) {
	if o.withinChurn(c.parts) {
		return c, false
	}
	current, ok := o.currentCandidate()
	if !ok {
		return c, false
	}
	currentSLO, _, _ := o.tiers(current.levels, current.parts)
	slo, _, _ := o.tiers(c.levels, c.parts)
	if currentSLO < slo {
		return c, false
	}
	return current, true
}

// fitsInBytes reports whether parts stay within every node's memory and keep the bandwidth
// guarantees within every node's bandwidth.
func (o *optInstance) fitsInBytes(parts [][]part) bool {
	used := make([]int64, len(o.p.nodes))
	guaranteed := make([]float64, len(o.p.nodes))
	for k, ps := range parts {
		fr := fractions(ps)
		for i, pt := range ps {
			used[pt.node] += pt.bytes
			guaranteed[pt.node] += o.p.tenants[k].guaranteed * fr[i]
		}
	}
	for j, n := range o.p.nodes {
		if used[j] > n.memory || guaranteed[j] > n.bandwidth {
			return false
		}
	}
	return true
}

// withinChurn reports whether parts move at most MaxChurnBytes (always, without a cap).
func (o *optInstance) withinChurn(parts [][]part) bool {
	if o.p.opts.MaxChurnBytes <= 0 {
		return true
	}
	var moved int64
	for k, t := range o.p.tenants {
		moved += movement(t.current, parts[k])
	}
	return moved <= o.p.opts.MaxChurnBytes
}

type optResult struct {
	candidate optCandidate
	// solution is the solver's answer in model terms (joint method).
	solution solution
	status   string
	method   string
	// bound is the solver's proven bound on the objective, when hasBound.
	bound    float64
	hasBound bool
	notes    []string
}

// timeForModel reports whether a model with about perCandidate variables per (tenant,
// candidate node) can still be built and solved usefully before the deadline: at least twice
// its estimated overhead plus 100 ms must be left.
func (o *optInstance) timeForModel(deadline time.Time, perCandidate int) bool {
	items := 0
	for k := range o.p.tenants {
		items += len(o.cands[k]) * perCandidate * 2 // variables and about as many constraints
	}
	return time.Until(deadline) > 2*time.Duration(items)*solverOverheadPerItem+100*time.Millisecond
}

// solverOverheadPerItem estimates the time a solve spends outside the solver's own clock
// (validation, encoding, loading, decoding) per variable and constraint, measured at about
// 2 µs on the development machine; it is taken off the time limit so that plans arrive in time.
const solverOverheadPerItem = 2 * time.Microsecond

func (o *optInstance) params(deadline time.Time, st stage, greedy optCandidate, m *cpsat.Model) cpsat.Params {
	overhead := time.Duration(m.NumVars()+m.NumConstraints()) * solverOverheadPerItem
	left := time.Until(deadline) - overhead
	work := o.p.opts.WorkLimit
	switch st {
	case stageSizing:
		left = time.Duration(float64(left) * sizingTimeShare)
		work *= sizingTimeShare
	case stagePlacement:
		work *= 1 - sizingTimeShare
	}
	_, hits, _ := o.tiers(greedy.levels, greedy.parts)
	gap := 0.0
	switch {
	case o.p.opts.ProveOptimal:
	case st == stagePlacement:
		// With the sizes fixed only the movement (and overload) is left to optimize.
		gap = targetMovementGap
	case greedy.obj > 0:
		gap = math.Min(0.01, targetHitsGap*float64(o.sc.w2)*float64(hits)/float64(greedy.obj))
	}
	return cpsat.Params{
		TimeLimit: max(left, 10*time.Millisecond), WorkLimit: work, Workers: o.p.opts.Workers, Seed: o.p.opts.Seed, RelativeGap: gap,
		// Presolve pays off on small models only; on large ones it takes seconds before the
		// first solution while the greedy hint is already close to the bound.
		Presolve: o.jointSize() < 1000,
	}
}

// errMemoryStopped is why a solve is not run: an earlier one of the same plan stopped at the
// memory limit, and the next model would be loaded only to be stopped again.
var errMemoryStopped = errors.New("not run: an earlier solve of this plan stopped at the memory limit")

// solve runs one of the policy's solves under Options.MemoryLimit.
func (o *optInstance) solve(ctx context.Context, m *cpsat.Model, params cpsat.Params) (*cpsat.Result, error) {
	if o.memoryStopped {
		return nil, errMemoryStopped
	}
	params.MemoryLimit = o.p.opts.MemoryLimit
	res, err := cpsat.Solve(ctx, m, params)
	if err == nil && res.MemoryLimitReached {
		o.memoryStopped = true
	}
	return res, err
}

// stopped says why a solve stopped before its limits: the memory limit or a cancellation.
func (o *optInstance) stopped(res *cpsat.Result) string {
	if res.MemoryLimitReached {
		return fmt.Sprintf("the solve stopped at the memory limit (the process above %s)", bytesHuman(o.p.opts.MemoryLimit))
	}
	return "the solve was cancelled"
}

// solveModel solves a placement model, rebuilding it without the churn cap when that cap
// makes it infeasible, and checks the answer against the constraints of the model solved
// (with the churn cap only when that model has it).
func (o *optInstance) solveModel(ctx context.Context, pm *placementModel, hint solution, params cpsat.Params) (solution, *cpsat.Result, []string, error) {
	var notes []string
	for {
		pm.hint(hint)
		res, err := o.solve(ctx, pm.m, params)
		if err != nil {
			return solution{}, nil, notes, fmt.Errorf("solver error: %w", err)
		}
		if res.Status == cpsat.Infeasible && pm.churn {
			notes = append(notes, fmt.Sprintf("optimal: no plan moves at most %s; planned without the churn cap", bytesHuman(o.p.opts.MaxChurnBytes)))
			pm = o.buildPlacementModel(pm.levels, false)
			continue
		}
		if !res.HasSolution() {
			if res.Stopped {
				return solution{}, res, notes, fmt.Errorf("solver found no solution (status %v): %s", res.Status, o.stopped(res))
			}
			return solution{}, res, notes, fmt.Errorf("solver found no solution (status %v) within %v", res.Status, params.TimeLimit)
		}
		if res.Stopped {
			notes = append(notes, "optimal: "+o.stopped(res)+"; using the best solution found so far")
		}
		s := pm.read(res)
		if err := o.check(s, pm.churn); err != nil {
			return solution{}, res, notes, fmt.Errorf("solver answer rejected: %w", err)
		}
		res.BestBound -= float64(pm.constMove)
		return s, res, notes, nil
	}
}

// solveJoint solves sizes and placement in one model warm-started from the greedy solution.
func (o *optInstance) solveJoint(ctx context.Context, deadline time.Time, greedy optCandidate) (optResult, error) {
	r := optResult{method: "joint"}
	pm := o.buildPlacementModel(nil, o.churnUnits >= 0)
	s, res, notes, err := o.solveModel(ctx, pm, o.bestHint(o.toSolution(greedy.levels, greedy.parts)), o.params(deadline, stageJoint, greedy, pm.m))
	r.notes = notes
	if err != nil {
		return r, err
	}
	parts := o.partsOf(s)
	r.solution = s
	r.candidate = optCandidate{levels: s.level, parts: parts, obj: o.objective(s.level, parts)}
	r.status = res.Status.String()
	r.bound, r.hasBound = res.BestBound, true
	return r, nil
}

// sizingHint is the better of the greedy levels and the levels closest to the plan in force
// (when they fit the capacity), by the sizing objective.
func (o *optInstance) sizingHint(greedy []int, capacity int64) []int {
	current := o.currentSolution(solution{level: greedy, units: make([][]int64, len(greedy))}).level
	value := func(levels []int) (v, quanta int64) {
		for k, t := range levels {
			v += o.levels[k].value(o.sc, t)
			quanta += o.levels[k].quanta[t]
		}
		return v, quanta
	}
	gv, _ := value(greedy)
	if cv, cq := value(current); cq <= capacity && cv >= gv {
		return current
	}
	return greedy
}

// solveDecomposed sizes every tenant with the pooled sizing model (memory of every node as
// one pool, plus one capacity per set of nodes some tenants are restricted to: a relaxation,
// so its bound bounds the whole problem), places the sizes greedily (making room or dropping
// levels where they do not pack, see greedyPlace), then improves the placement with the
// placement model.
func (o *optInstance) solveDecomposed(ctx context.Context, deadline time.Time, greedy optCandidate) (optResult, error) {
	r := optResult{method: "decomposed", candidate: greedy}
	var capacity int64
	for _, q := range o.memQuanta {
		capacity += q
	}
	churn := o.churnUnits >= 0
	var levels []int
	var sizingStatus cpsat.Status
	for {
		sm := o.buildSizingModel(churn, capacity)
		sm.hint(o.sizingHint(greedy.levels, capacity))
		res, err := o.solve(ctx, sm.m, o.params(deadline, stageSizing, greedy, sm.m))
		if err != nil {
			return r, fmt.Errorf("solver error (sizing): %w", err)
		}
		if res.Status == cpsat.Infeasible && churn {
			r.notes = append(r.notes, fmt.Sprintf("optimal: no sizing moves at most %s; sized without the churn cap", bytesHuman(o.p.opts.MaxChurnBytes)))
			churn = false
			continue
		}
		if !res.HasSolution() {
			if res.Stopped {
				return r, fmt.Errorf("solver found no sizing (status %v): %s", res.Status, o.stopped(res))
			}
			return r, fmt.Errorf("solver found no sizing (status %v)", res.Status)
		}
		if res.Stopped {
			r.notes = append(r.notes, "optimal: sizing: "+o.stopped(res)+"; using the best sizing found so far")
		}
		levels, sizingStatus = sm.read(res), res.Status
		r.bound, r.hasBound = res.BestBound, true
		break
	}
	r.status = sizingStatus.String()
	placedLevels, reserved := o.greedyPlace(levels)
	parts := o.trimToLevels(placedLevels, reserved)
	placed := optCandidate{levels: placedLevels, parts: parts, obj: o.objective(placedLevels, parts)}
	o.chooseCandidates(reserved)
	var notes []string
	r.candidate, notes = o.placementStage(ctx, deadline, greedy, placed, churn, sizingStatus)
	r.notes = append(r.notes, notes...)
	return r, nil
}

// placementStage is the decomposed method's last stage: it improves placed, the greedy
// placement of the sized levels, with the placement model, unless placed is already an
// optimum of that model at a cold start (the solve would only return a placement of the same
// objective, as it does from this hint) or no time is left. It returns the stage's answer and
// notes.
func (o *optInstance) placementStage(ctx context.Context, deadline time.Time, greedy, placed optCandidate, churn bool, sizingStatus cpsat.Status) (optCandidate, []string) {
	if hint := o.toSolution(placed.levels, placed.parts); o.placementAtBound(hint, churn) {
		return o.adoptPlacement(placed, hint), []string{fmt.Sprintf("optimal: sizing %v, placement %v (the greedy placement reaches the stage's bound at a cold start; not solved)", sizingStatus, cpsat.Optimal)}
	}
	if !o.timeForModel(deadline, 3) {
		return placed, []string{fmt.Sprintf("optimal: sizing %v; no time left for the placement model (greedy placement kept)", sizingStatus)}
	}
	return o.solvePlacement(ctx, deadline, greedy, placed, churn, sizingStatus)
}

// solvePlacement is the placement stage's solve: the placement model over placed's levels,
// warm-started from placed. It returns the better of placed and the solver's answer, and the
// stage's notes.
func (o *optInstance) solvePlacement(ctx context.Context, deadline time.Time, greedy, placed optCandidate, churn bool, sizingStatus cpsat.Status) (optCandidate, []string) {
	pm := o.buildPlacementModel(placed.levels, churn)
	s, res, notes, err := o.solveModel(ctx, pm, o.toSolution(placed.levels, placed.parts), o.params(deadline, stagePlacement, greedy, pm.m))
	if err != nil {
		return placed, append(notes, fmt.Sprintf("optimal: sizing %v; placement model: %v (greedy placement kept)", sizingStatus, err))
	}
	return o.adoptPlacement(placed, s), append(notes, fmt.Sprintf("optimal: sizing %v, placement %v", sizingStatus, res.Status))
}

// adoptPlacement is the placement stage's answer s in bytes when it scores at least as well
// as the greedy placement placed, else placed.
func (o *optInstance) adoptPlacement(placed optCandidate, s solution) optCandidate {
	parts := o.partsOf(s)
	if obj := o.objective(s.level, parts); obj >= placed.obj {
		return optCandidate{levels: s.level, parts: parts, obj: obj}
	}
	return placed
}

// placementAtBound reports whether s, a placement of fixed levels, is an optimum of the
// placement model at a cold start (no tenant holds memory now), so that solving the model
// cannot improve it: s keeps every constraint of the model and its objective reaches
// placementBound.
func (o *optInstance) placementAtBound(s solution, churn bool) bool {
	return o.coldStart() && o.check(s, churn) == nil && o.modelObjective(s) >= o.placementBound(s.level)
}

// coldStart reports whether no tenant holds memory now.
func (o *optInstance) coldStart() bool {
	for _, t := range o.p.tenants {
		if t.currentTotal > 0 {
			return false
		}
	}
	return true
}

// placementBound bounds the placement model's objective over the fixed levels at a cold
// start: the levels' first two tiers, less the overload no placement avoids, less the least
// movement. With nothing in force a tenant's movement is the memory it gets, and the
// ceilings per node add up to at least the ceiling of its level's quanta.
func (o *optInstance) placementBound(levels []int) int64 {
	bound := -o.sc.w2 * o.overloadLowerBound()
	for k, t := range levels {
		l := &o.levels[k]
		bound += o.sc.w1*l.slo[t] + o.sc.w2*l.hits[t] - ceilDiv(l.quanta[t], o.sc.moveUnit)
	}
	return bound
}
