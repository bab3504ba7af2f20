// Package allocator computes cacheqos plans: how much memory each tenant gets on each cache
// node, its bandwidth and ops limits, and how its keys are routed, from a planning snapshot.
//
// Plan runs one of five policies on a planning.Snapshot and evaluates the result with one
// shared model (hit-ratio curves, mean latency with M/M/1 node queueing, token-bucket caps),
// so every policy's plan carries comparable predictions, verdicts and explanations:
//
//   - equal: max-min fair share of the aggregate memory (the baseline of Maxperf and Soft-QoS).
//   - softqos: Soft-QoS (ascending minimums, flagging, spare split by max-minus-current hit
//     ratio, equal split among the flagged).
//   - maxperf: Maxperf (objectives relative to the fair share, spare split by projected latency
//     gain, placement by the max-min spreading LP, solved exactly by max-flow).
//   - lacs: LACS (isolation guarantee against a 1/K share, elephants first lose their cache and
//     then get bandwidth-throttled one at a time, best-fit placement with a memory check).
//   - optimal (default): CP-SAT over discrete size levels per tenant and split units per
//     candidate node, lexicographic objective (strict objectives met weighted by priority, then
//     expected hits or latency, then least movement), warm-started and backed by a greedy
//     solution; decomposed into sizing then placement when one model would be too large; the
//     answer is then re-sized over real sizes (the true curves, in fine quanta).
//
// Every policy's plan keeps the hard constraints (memory bounds, allowed nodes, spreads, node
// memory): a plan that breaks one is repaired, and minimums that cannot be packed make Plan
// fail with an UnpackableError.
//
// docs/allocator.md describes the models, the formulas and the measured performance.
package allocator

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/cacheqos/cacheqos/internal/allocator/planning"
)

// The policy names.
const (
	PolicyEqual   = "equal"
	PolicySoftQoS = "softqos"
	PolicyMaxperf = "maxperf"
	PolicyLACS    = "lacs"
	PolicyOptimal = "optimal"
)

// The efficiency objectives of the optimal policy (second in priority, after strict SLOs).
const (
	// ObjectiveHits maximizes the expected hits per second over every tenant.
	ObjectiveHits = "hits"
	// ObjectiveLatency minimizes the total time spent per second over every tenant: a hit of a
	// tenant is worth its miss latency minus its hit latency.
	ObjectiveLatency = "latency"
)

// Defaults for Options.
const (
	DefaultTimeLimit      = 5 * time.Second
	DefaultMaxUtilization = 0.9
	DefaultSizeLevels     = 16
)

// Options tunes Plan. The zero value plans with the optimal policy and the defaults.
type Options struct {
	// Policy is one of Policies(); empty means PolicyOptimal.
	Policy string
	// TimeLimit bounds the optimal policy's solver time (DefaultTimeLimit when zero).
	TimeLimit time.Duration
	// Workers is the number of CP-SAT workers (0: the solver package's default). With one
	// worker the optimal policy is reproducible when its search ends before TimeLimit: proven,
	// within its gap target, or stopped by WorkLimit.
	Workers int
	// WorkLimit bounds the optimal policy's search in CP-SAT's deterministic time (a count of
	// work, unlike TimeLimit independent of the machine's speed and load), shared between the
	// stages of a decomposed solve as the time is; 0 means no bound but TimeLimit.
	WorkLimit float64
	// Seed seeds the solver.
	Seed int32
	// MemoryLimit stops each of the optimal policy's solves once the process's resident
	// memory exceeds it, in bytes (0: no limit; see cpsat.Params.MemoryLimit). A stopped
	// stage keeps the best solution it found, or the greedy answer, and the plan's notes say
	// so. The solve packing the memory minimums, run only when the greedy packing fails, is
	// not limited.
	MemoryLimit int64
	// MaxChurnBytes caps the movement (the L1 distance between the current and the new
	// per-node memory) of the optimal policy; 0 means no cap. When the cap cannot be met the
	// plan is made without it and says so.
	MaxChurnBytes int64
	// Objective is ObjectiveHits (default) or ObjectiveLatency.
	Objective string
	// MaxUtilization caps each node's predicted ops and bandwidth utilization in the optimal
	// placement and sets the queueing delay assumed for latency objectives
	// (DefaultMaxUtilization when zero).
	MaxUtilization float64
	// SizeLevels is how many candidate total sizes the optimal policy considers per tenant
	// (DefaultSizeLevels when zero; at least 2).
	SizeLevels int
	// DisableSolver makes the optimal policy use its greedy solution, as it does when OR-Tools
	// is not available.
	DisableSolver bool
	// ProveOptimal makes the optimal policy search until optimality is proven (or the time
	// limit). By default it stops once the expected-hits term is within 0.05% of the bound.
	ProveOptimal bool
	// levelsOnly skips the optimal policy's stages over real sizes (refinement and resize),
	// leaving the plan of its levels and split units: the previous formulation, which the
	// benchmarks measure side by side.
	levelsOnly bool
}

func (o Options) timeLimit() time.Duration {
	if o.TimeLimit > 0 {
		return o.TimeLimit
	}
	return DefaultTimeLimit
}

func (o Options) maxUtilization() float64 {
	if o.MaxUtilization > 0 {
		return o.MaxUtilization
	}
	return DefaultMaxUtilization
}

func (o Options) sizeLevels() int {
	if o.SizeLevels > 0 {
		return max(2, o.SizeLevels)
	}
	return DefaultSizeLevels
}

func (o Options) validate() error {
	if o.Policy != "" && !slices.ContainsFunc(policies, func(p policy) bool { return p.name == o.Policy }) {
		return fmt.Errorf("unknown policy %q (want one of %v)", o.Policy, PolicyNames())
	}
	if o.Objective != "" && o.Objective != ObjectiveHits && o.Objective != ObjectiveLatency {
		return fmt.Errorf("unknown objective %q (want %q or %q)", o.Objective, ObjectiveHits, ObjectiveLatency)
	}
	if o.MaxUtilization < 0 || o.MaxUtilization >= 1 {
		return fmt.Errorf("MaxUtilization %v must be in (0, 1)", o.MaxUtilization)
	}
	if o.MemoryLimit < 0 {
		return fmt.Errorf("MemoryLimit %d must be a byte count >= 0", o.MemoryLimit)
	}
	if o.TimeLimit < 0 || o.Workers < 0 || o.MaxChurnBytes < 0 || o.SizeLevels < 0 {
		return fmt.Errorf("negative option in %+v", o)
	}
	if math.IsNaN(o.WorkLimit) || math.IsInf(o.WorkLimit, 0) || o.WorkLimit < 0 {
		return fmt.Errorf("WorkLimit %v must be a finite number >= 0", o.WorkLimit)
	}
	return nil
}

// PolicyInfo describes a policy.
type PolicyInfo struct {
	Name        string
	Description string
}

type policy struct {
	name, description string
	run               func(ctx context.Context, p *problem) (*allocation, error)
}

var policies = []policy{
	{PolicyOptimal, "CP-SAT: strict objectives by priority, then expected hits, then least movement (default)", runOptimal},
	{PolicyEqual, "max-min fair share of the aggregate memory", runEqual},
	{PolicySoftQoS, "Soft-QoS: ascending minimums, flagging, spare by max-minus-current hit ratio", runSoftQoS},
	{PolicyMaxperf, "Maxperf: objectives relative to fair share, spare by projected gain, max-min placement", runMaxperf},
	{PolicyLACS, "LACS: isolation guarantee, elephants lose cache then get bandwidth-throttled", runLACS},
}

// Policies lists the policies Plan accepts, the default first.
func Policies() []PolicyInfo {
	out := make([]PolicyInfo, len(policies))
	for i, p := range policies {
		out[i] = PolicyInfo{Name: p.name, Description: p.description}
	}
	return out
}

// PolicyNames lists the policy names, the default first.
func PolicyNames() []string {
	out := make([]string, len(policies))
	for i, p := range policies {
		out[i] = p.name
	}
	return out
}

// Plan computes a plan for the snapshot with the policy in opts. It validates the snapshot
// (see planning.Snapshot.Validate) and returns an error wrapping ErrInfeasibleSnapshot when no
// allocation can satisfy it (memory minimums above capacity, spread wider than the allowed
// nodes, minimums that cannot be packed together: an *UnpackableError). Every plan it returns
// keeps every tenant's memory bounds, allowed nodes and spread, and every node's memory. A context already done returns its error; cancelling it during the optimal policy's
// solve stops the search and returns the best plan found so far, the greedy one at worst.
func Plan(ctx context.Context, s *planning.Snapshot, opts Options) (*planning.Plan, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	name := opts.Policy
	if name == "" {
		name = PolicyOptimal
	}
	start := time.Now()
	p, err := newProblem(s, opts)
	if err != nil {
		return nil, err
	}
	var run func(context.Context, *problem) (*allocation, error)
	for _, pol := range policies {
		if pol.name == name {
			run = pol.run
		}
	}
	alloc, err := run(ctx, p)
	if err != nil {
		return nil, err
	}
	if err := p.enforceHard(ctx, alloc); err != nil {
		return nil, err
	}
	if name == PolicyOptimal {
		p.throttleBestEffort(alloc)
		p.guardBestEffort(alloc)
	}
	plan := p.evaluate(alloc)
	plan.Cluster = s.Cluster
	plan.Policy = name
	if plan.Solver != nil {
		plan.Solver.WallTimeSeconds = time.Since(start).Seconds()
	}
	return plan, nil
}

// PlacementBroken names the first tenant whose allocation in force, the snapshot's current
// partitions, breaks its placement (a node it may not use, fewer or more nodes than its
// spread) and says how ("" when none does). Only nodes holding memory count: a tenant spread
// over two nodes so that one takes the other's keys when it is lost, but holding memory on one,
// has nowhere to fail over to. Tenants without memory in force are new, and not judged.
func PlacementBroken(s *planning.Snapshot, opts Options) (string, error) {
	p, err := newProblem(s, opts)
	if err != nil {
		return "", err
	}
	for k := range p.tenants {
		held := slices.DeleteFunc(slices.Clone(p.tenants[k].current), func(pt part) bool { return pt.bytes <= 0 })
		if len(held) == 0 {
			continue
		}
		if v := p.placementViolations(k, held); len(v) > 0 {
			return v[0], nil
		}
	}
	return "", nil
}

// Evaluate assesses the allocation in force, the snapshot's current partitions, as Plan
// assesses a policy's answer (predictions, limits, verdicts and the summary), so that a plan in
// force can be compared with a new one under the same measurements. Nothing moves, so the
// summary's movement is 0. The allocation is assessed as it is, even where it breaks a
// constraint the snapshot now states.
func Evaluate(s *planning.Snapshot, opts Options) (*planning.Plan, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	p, err := newProblem(s, opts)
	if err != nil {
		return nil, err
	}
	alloc := newAllocation(len(p.tenants))
	for k := range p.tenants {
		alloc.parts[k] = slices.Clone(p.tenants[k].current)
		for i := range alloc.parts[k] {
			alloc.parts[k][i].weight = max(1, alloc.parts[k][i].bytes)
		}
		alloc.isolated[k] = s.Tenants[k].Current.Isolated
	}
	name := cmp.Or(opts.Policy, PolicyOptimal)
	if name == PolicyOptimal {
		p.throttleBestEffort(alloc)
		p.guardBestEffort(alloc)
	}
	plan := p.evaluate(alloc)
	plan.Cluster = s.Cluster
	plan.Policy = name
	return plan, nil
}
