// Package control is the decision layer between measurements and the allocator, shared by
// the operator's allocation loop and the simulator, so that the simulator evaluates the loop
// the operator runs and not the allocator alone.
//
// Every interval, Decide takes the planning snapshot (what was measured and what is in
// force), shapes what the allocator is fed, plans, and decides whether the new plan replaces
// the plan in force. It keeps per-tenant state across intervals:
//
//   - damping of curve corrections: the sampled curve's size axis is rescaled by a factor
//     averaged (geometrically) over the intervals in which the tenant's partitions stayed
//     put; an interval measured right after its memory moved is cold and does not count;
//   - protection of what works: a strict tenant that met its objective keeps, as its memory
//     minimum, the memory that met it, on the nodes that hold it, unless a higher-priority
//     objective needs it;
//   - feedback per strict tenant: the target the allocator sees is raised by the integrated
//     shortfall of observed against target plus the measurement's uncertainty;
//   - a movement budget: the allocator's movement cap, lowered to SteadyChurnPercent while
//     every strict objective is met, and a new plan is taken only when it meets more
//     objectives or when its expected gain pays for the cold start of the keys it moves.
//
// The shaping applies to the optimal policy; the other policies reproduce papers and are fed
// the measurements as they are, under the same stability rules. docs/control-loop.md
// describes the design and the measured effect of each mechanism.
package control

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/cacheqos/cacheqos/internal/allocator"
	"github.com/cacheqos/cacheqos/internal/allocator/planning"
)

// Allocation is what each tenant has: its partitions, by tenant ID.
type Allocation map[string][]planning.Partition

// Mechanisms switches the loop's mechanisms; DefaultMechanisms are those that measurably help.
type Mechanisms struct {
	// Damping averages curve corrections over settled intervals instead of taking the last
	// interval's observation as it is.
	Damping bool
	// Protect makes a strict tenant that met its objective keep the memory that met it.
	Protect bool
	// Feedback raises a strict hit-ratio target by the integrated shortfall and the
	// measurement's uncertainty.
	Feedback bool
	// ColdStartCost takes a new plan only when its expected gain exceeds the cold start of
	// the keys it moves.
	ColdStartCost bool
	// SteadyBudget lowers the movement budget to SteadyChurnPercent of the fleet's memory
	// while every strict objective was met in the interval measured last.
	SteadyBudget bool
}

// defaultMechanisms are the mechanisms the operator and the simulator run.
var defaultMechanisms = Mechanisms{Damping: true, Protect: true, Feedback: true, ColdStartCost: true, SteadyBudget: true}

// DefaultMechanisms returns the mechanisms the operator and the simulator run.
func DefaultMechanisms() Mechanisms { return defaultMechanisms }

// Config tunes a Loop.
type Config struct {
	// Allocator is passed to allocator.Plan; its MaxChurnBytes is the movement budget.
	Allocator allocator.Options
	// MinChangeBytes is the smallest memory change of a partition that is not noise.
	MinChangeBytes int64
	// Quantize turns a plan into the allocation that would be put in force (the operator
	// rounds to whole MiB); nil takes the plan's partitions as they are.
	Quantize func(*planning.Plan) Allocation
	// Mechanisms are the mechanisms that shape the optimal policy's input.
	Mechanisms Mechanisms
}

// Measurement is what the caller judged of one tenant over the interval just measured.
type Measurement struct {
	// Met reports that the tenant's objective was met (false also when not judged).
	Met bool
	// Reads counts the reads measured: the observed hit ratio's sample size.
	Reads int64
}

// Input is one interval's decision input.
type Input struct {
	// Snapshot is the allocator's input as measured; Decide does not modify it.
	Snapshot *planning.Snapshot
	// Current is the allocation in force (with limits), without tenants that left.
	Current Allocation
	// SpecsChanged forces the new plan: what the plan in force was made for changed.
	SpecsChanged bool
	// Measured holds the judgement of each measured tenant, by ID.
	Measured map[string]Measurement
}

// Decision is what Decide decided.
type Decision struct {
	// Plan is the new plan when it was taken; when the plan in force was kept, the plan in
	// force as the allocator assesses it, or nil when it was not assessed (policies other
	// than optimal).
	Plan *planning.Plan
	// Proposed is the new plan, taken or not.
	Proposed *planning.Plan
	// Desired is the allocation to put in force.
	Desired Allocation
	// Taken reports that Desired is the new plan's allocation.
	Taken bool
	// Kept says why the plan in force was kept ("" when the new plan was taken).
	Kept string
	// Fallback says why the plan came from the greedy fallback ("" when it did not).
	Fallback string
	// Tenants says, by tenant ID, why its memory is what it is.
	Tenants map[string]TenantDecision
	// Fed is the snapshot the allocator was fed (shaped by the mechanisms).
	Fed *planning.Snapshot
}

// Loop decides plans for one cluster, remembering per-tenant state across intervals. Not safe
// for concurrent use.
type Loop struct {
	// cfg is the configuration of the decision under way.
	cfg     Config
	tenants map[string]*tenantState
}

// New returns a loop with no history.
func New() *Loop {
	return &Loop{tenants: map[string]*tenantState{}}
}

// shaping reports whether the mechanisms shape the allocator's input under the loop's policy.
func (l *Loop) shaping() bool {
	return l.cfg.Allocator.Policy == "" || l.cfg.Allocator.Policy == allocator.PolicyOptimal
}

// Decide plans the next interval under cfg (a cluster's settings may change between
// intervals; the tenants' state carries over): it updates the tenants' state from the measurements, shapes
// the snapshot, plans (relaxing protections and raised targets when they cost a strict
// objective), and keeps the plan in force unless the new plan is worth its movement.
// It returns an error when no plan can be made at all.
func (l *Loop) Decide(ctx context.Context, cfg Config, in Input) (*Decision, error) {
	l.cfg = cfg
	l.observe(in)
	chosen, err := l.plan(ctx, l.shape(in))
	if err != nil {
		return nil, err
	}
	d := &Decision{Plan: chosen.plan, Proposed: chosen.plan, Fallback: chosen.fallback, Fed: chosen.snap, Taken: true}
	d.Desired = l.quantize(chosen.plan)
	if !in.SpecsChanged {
		if current, reason := l.keepCurrent(in, chosen); reason != "" {
			d.Taken, d.Kept, d.Desired, d.Plan = false, reason, in.Current, current
		}
	}
	d.Tenants = l.explain(in, chosen, d)
	l.remember(in.Snapshot, d.Plan)
	return d, nil
}

// remember records, for each strict hit-ratio tenant, whether the plan put in force (or kept)
// predicts its own target; a kept plan that could not be evaluated leaves the record as is.
func (l *Loop) remember(s *planning.Snapshot, inForce *planning.Plan) {
	if inForce == nil {
		return
	}
	for i := range s.Tenants {
		t := &s.Tenants[i]
		if st := l.tenants[t.ID]; st != nil && t.Class == planning.ClassStrict && t.Objective != nil {
			st.promised = l.meetsOwnTarget(t, inForce)
		}
	}
}

func (l *Loop) quantize(p *planning.Plan) Allocation {
	if l.cfg.Quantize != nil {
		return l.cfg.Quantize(p)
	}
	out := Allocation{}
	for _, tp := range p.Tenants {
		out[tp.ID] = slices.Clone(tp.Partitions)
	}
	return out
}

// candidate is one planned variant of the fed snapshot.
type candidate struct {
	snap     *planning.Snapshot
	plan     *planning.Plan
	fallback string
	// protected holds the protections the snapshot applied; dropped those relaxed for a
	// higher-priority objective, with the tenant whose objective needed the memory.
	protected map[string]protection
	dropped   map[string]string
	score     int64
	// uncapped reports that the plan was made without the movement budget.
	uncapped bool
}

// solve runs the allocator, falling back to the greedy plan when the solver (or the policy)
// fails for another reason than an infeasible snapshot.
func (l *Loop) solve(ctx context.Context, snap *planning.Snapshot, uncapped, steady bool) (*planning.Plan, string, error) {
	opts := l.cfg.Allocator
	if steady && !uncapped {
		opts.MaxChurnBytes = min(opts.MaxChurnBytes, MaxChurnBytes(fleetMemory(snap), SteadyChurnPercent))
	}
	if uncapped {
		opts.MaxChurnBytes = 0
	} else if opts.MaxChurnBytes > 0 {
		// The budget limits the keys a plan empties; memory no one holds has none, so
		// giving it out (the allocator counts that as movement too) is not charged.
		opts.MaxChurnBytes += unallocated(snap)
	}
	plan, err := allocator.Plan(ctx, snap, opts)
	if err != nil && !errors.Is(err, allocator.ErrInfeasibleSnapshot) && ctx.Err() == nil {
		opts.DisableSolver = true
		greedy, greedyErr := allocator.Plan(ctx, snap, opts)
		if greedyErr == nil {
			return greedy, "the solver failed: " + err.Error(), nil
		}
	}
	if err != nil {
		return nil, "", err
	}
	fallback := ""
	if plan.Solver != nil {
		fallback = plan.Solver.Fallback
	}
	return plan, fallback, nil
}

// plan solves the shaped snapshot and, while the plan leaves a strict objective unmet,
// relaxes in layers: first the protections of tenants of that objective's priority or lower,
// then every protection, then the raised targets. Each layer is planned within the movement
// budget and, when that leaves a strict objective unmet, without it: the budget holds back
// efficiency, never a strict objective. The plan meeting the most priority-weighted strict
// objectives (judged against the tenants' own targets) wins; ties go to the least relaxed.
func (l *Loop) plan(ctx context.Context, sh shaped) (*candidate, error) {
	var best *candidate
	var firstErr error
	full := maxScore(sh.damped)
	budgeted := l.cfg.Allocator.MaxChurnBytes > 0 && l.shaping()
	try := func(snap *planning.Snapshot, protected map[string]protection, dropped map[string]string) {
		for _, uncapped := range []bool{false, true} {
			if best != nil && best.score >= full || uncapped && !budgeted {
				return
			}
			p, fallback, err := l.solve(ctx, snap, uncapped, sh.steady)
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			c := &candidate{snap: snap, plan: p, fallback: fallback, protected: protected, dropped: withUnfit(dropped, sh.unfit), score: l.score(snap, p), uncapped: uncapped}
			if best == nil || c.score > best.score {
				best = c
			}
		}
	}
	try(withProtections(sh.raised, sh.protections), sh.protections, nil)
	// Learning tenants keep their fair share in every layer: their curves cannot yet say
	// what dropping it would cost, so a plan without it would only look better.
	learners := map[string]protection{}
	for id, p := range sh.protections {
		if p.learning {
			learners[id] = p
		}
	}
	if best != nil && best.score < full {
		if unmet, prio := l.highestUnmet(best.snap, best.plan); unmet != "" {
			kept, dropped := map[string]protection{}, map[string]string{}
			for id, p := range sh.protections {
				if p.priority <= prio && !p.learning {
					dropped[id] = unmet
				} else {
					kept[id] = p
				}
			}
			if len(dropped) > 0 {
				try(withProtections(sh.raised, kept), kept, dropped)
			}
		}
	}
	dropped := map[string]string{}
	for id, p := range sh.protections {
		if !p.learning {
			dropped[id] = ""
		}
	}
	if len(dropped) > 0 {
		try(withProtections(sh.raised, learners), learners, dropped)
	}
	if sh.anyRaised {
		try(withProtections(sh.damped, learners), learners, dropped)
	}
	if best == nil && len(learners) > 0 {
		// Fair shares that cannot be packed next to the tenants' own minimums are dropped
		// last: a plan without them beats no plan.
		for id := range learners {
			dropped[id] = ""
		}
		try(sh.damped, nil, dropped)
	}
	return best, bestErr(best, firstErr)
}

// withUnfit adds to the protections a layer dropped those that did not fit at all.
func withUnfit(dropped, unfit map[string]string) map[string]string {
	if len(unfit) == 0 {
		return dropped
	}
	out := maps.Clone(unfit)
	maps.Copy(out, dropped)
	return out
}

// bestErr is the error plan returns: the first solve's error when no candidate was planned.
func bestErr(best *candidate, firstErr error) error {
	if best == nil {
		return firstErr
	}
	return nil
}

// fleetMemory is the memory of the snapshot's nodes.
func fleetMemory(s *planning.Snapshot) int64 {
	var total int64
	for _, n := range s.Nodes {
		total += n.MemoryBytes
	}
	return total
}

// unallocated is the memory of the snapshot's nodes that no tenant holds now.
func unallocated(s *planning.Snapshot) int64 {
	free := fleetMemory(s)
	for i := range s.Tenants {
		free -= totalOf(s.Tenants[i].Current.Partitions)
	}
	return max(0, free)
}

// maxScore is the score of a plan meeting every strict objective.
func maxScore(s *planning.Snapshot) int64 {
	var total int64
	for i := range s.Tenants {
		if t := &s.Tenants[i]; t.Class == planning.ClassStrict && t.Objective != nil {
			total += 1 + int64(t.Priority)
		}
	}
	return total
}

// score sums 1+priority over the strict tenants the plan is predicted to satisfy, judged
// against their own targets, not the raised ones.
func (l *Loop) score(s *planning.Snapshot, p *planning.Plan) int64 {
	return l.scoreWith(s, p, false)
}

// observedScore is score for the plan in force, where a strict tenant measured under it
// counts as the measurement judged it whatever its curve predicts: met if it met its
// objective, missed if it missed it on warm partitions. (A curve a little above what the
// engine gives would otherwise keep a plan that misses by a hair for good: the new plan that
// gives the tenant more is never scored higher.)
func (l *Loop) observedScore(s *planning.Snapshot, inForce *planning.Plan) int64 {
	return l.scoreWith(s, inForce, true)
}

func (l *Loop) scoreWith(s *planning.Snapshot, p *planning.Plan, observed bool) int64 {
	var total int64
	for i := range s.Tenants {
		t := &s.Tenants[i]
		if t.Class != planning.ClassStrict || t.Objective == nil {
			continue
		}
		met := l.meetsOwnTarget(t, p)
		if st := l.tenants[t.ID]; observed && (st.met || st.missedWarm) {
			met = st.met
		}
		if met {
			total += 1 + int64(t.Priority)
		}
	}
	return total
}

// meetsOwnTarget reports whether plan p is predicted to meet tenant t's objective as its spec
// states it.
func (l *Loop) meetsOwnTarget(t *planning.Tenant, p *planning.Plan) bool {
	i := slices.IndexFunc(p.Tenants, func(tp planning.TenantPlan) bool { return tp.ID == t.ID })
	if i < 0 {
		return false
	}
	tp := &p.Tenants[i]
	if st := l.tenants[t.ID]; st != nil && st.target > 0 {
		return tp.Predicted.HitRatio >= st.target-1e-9
	}
	return tp.Verdict == planning.VerdictMeetsSLO
}

// highestUnmet is the highest-priority strict tenant plan p leaves unmet, and its priority.
func (l *Loop) highestUnmet(s *planning.Snapshot, p *planning.Plan) (string, int32) {
	id, prio := "", int32(-1)
	for i := range s.Tenants {
		t := &s.Tenants[i]
		if t.Class == planning.ClassStrict && t.Objective != nil && !l.meetsOwnTarget(t, p) && t.Priority > prio {
			id, prio = t.ID, t.Priority
		}
	}
	return id, prio
}

// keepCurrentReason formats why the plan in force stays.
func keepCurrentReason(c, p planning.Summary, why string) string {
	return fmt.Sprintf("kept the plan in force: it meets %d objectives and expects %.1f hits/s; the new plan would meet %d and expect %.1f (%s)",
		c.ObjectivesMet, c.ExpectedHitsPerSecond, p.ObjectivesMet, p.ExpectedHitsPerSecond, why)
}

// DefaultMaxChurnPercent is the default movement budget: the share of the fleet's memory a
// plan may move per interval (the CacheCluster's spec.allocation.maxChurnPercent default).
const DefaultMaxChurnPercent = 25

// SteadyChurnPercent is the movement budget while every strict objective was met in the
// interval measured last: a plan then only trades warm keys for expected hits, so it may move
// little.
const SteadyChurnPercent = 1

// MaxChurnBytes turns a budget of percent of fleetBytes moved, counted once (the sum of
// |new - old| halved), into the allocator's movement cap (the sum of |new - old|).
func MaxChurnBytes(fleetBytes int64, percent int64) int64 {
	if percent <= 0 {
		percent = DefaultMaxChurnPercent
	}
	return 2 * (fleetBytes / 100 * percent)
}
