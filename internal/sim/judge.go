package sim

import (
	"fmt"
	"math"

	"github.com/cacheqos/cacheqos/internal/allocator"
	"github.com/cacheqos/cacheqos/internal/workload"
)

// What the control loop promises on every fleet the oracle accepts (issue 17's criteria),
// judged for one policy (optimal by default) against the others.
const (
	// AttainmentFloor is the least attainment of the strict objectives in every fleet.
	AttainmentFloor = 0.99
	// AttainmentTolerance is how far below any other policy's attainment it may be.
	AttainmentTolerance = 0.01
	// HitRatioFloor and LatencyCeiling bound the overall hit ratio and mean latency relative
	// to the best policy's, in fleets where the judged policy and the compared ones reach the
	// AttainmentFloor.
	HitRatioFloor  = 0.99
	LatencyCeiling = 1.01
	// SteadyMovementCeiling bounds the mean memory moved per steady interval, as a share of
	// the fleet's memory; an interval is steady when SettleIntervals or more intervals have
	// passed since the workload last changed (the plans of the change's interval and of the
	// SettleIntervals-1 after it are the settling).
	SteadyMovementCeiling = 0.02
	// SettleIntervals bounds how many intervals after a workload change the plans may keep
	// moving more than SteadyMovementCeiling of the fleet's memory per interval.
	SettleIntervals = 3
)

// Criteria, in report order.
const (
	CriterionAttainment = "attainment ≥ 0.99"
	CriterionVsOthers   = "attainment ≥ others − 0.01"
	CriterionHitRatio   = "hit ratio ≥ 0.99× best"
	CriterionLatency    = "mean latency ≤ 1.01× best"
	CriterionSteady     = "steady movement ≤ 2%"
	CriterionSettle     = "settled within 3 intervals"
)

// Criteria lists the criteria in report order.
func Criteria() []string {
	return []string{CriterionAttainment, CriterionVsOthers, CriterionHitRatio, CriterionLatency, CriterionSteady, CriterionSettle}
}

// FleetPolicy is one policy's measurements on one fleet and cache model.
type FleetPolicy struct {
	Policy string
	// Attainment is the mean over strict tenants of the fraction of counted intervals in which
	// they met their objective; AllMet the fraction of intervals in which all of them did.
	Attainment, AllMet    float64
	HitRatio, MeanLatency float64
	// SteadyMoved is the mean and MaxSteadyMoved the largest memory moved per steady interval,
	// as a share of the fleet's memory (NaN without steady intervals).
	SteadyMoved, MaxSteadyMoved float64
	// Settle is the longest settling over the judged changes, in intervals (-1: none judged);
	// Unsettled counts the changes after which it took longer than SettleIntervals.
	Settle, Unsettled int
	// Saturated counts node-intervals at utilization 1 or more (each request there waits a
	// time-out).
	Saturated int
}

// FleetJudgement is every policy's results on one fleet under one cache model, and the
// criteria the judged policy missed.
type FleetJudgement struct {
	Fleet    *Fleet
	Cache    string
	Judged   string
	Policies []FleetPolicy
	// Misses maps each missed criterion to what was measured.
	Misses map[string]string
	// Compared is true when the hit-ratio and latency criteria applied (the judged policy
	// reached the AttainmentFloor).
	Compared bool
	// Pooled is true when the run pooled best-effort tenants (Scenario.PoolBestEffort).
	Pooled bool
}

// Policy returns the measurements of policy, or nil.
func (j *FleetJudgement) Policy(policy string) *FleetPolicy {
	for i := range j.Policies {
		if j.Policies[i].Policy == policy {
			return &j.Policies[i]
		}
	}
	return nil
}

// DefaultJudged is the policy the criteria are for: the one a platform team runs by default.
const DefaultJudged = allocator.PolicyOptimal

// JudgeFleet measures every policy of res (a run of f's scenario with cache) and judges
// policy judged against the others.
func JudgeFleet(f *Fleet, cache string, res *ScenarioResult, judged string) *FleetJudgement {
	sc := res.Scenario
	changes := WorkloadChanges(sc)
	memory := totalMemory(sc)
	j := &FleetJudgement{Fleet: f, Cache: cache, Judged: judged, Misses: map[string]string{}}
	for _, run := range res.Runs {
		s := res.Summary(run.Policy)
		fp := FleetPolicy{Policy: run.Policy, Attainment: s.SLOAttainment, AllMet: s.AllMet, HitRatio: s.HitRatio, MeanLatency: s.MeanLatency, Saturated: s.SaturatedNodes}
		moved := make([]float64, sc.Intervals)
		for i, ir := range run.Intervals {
			moved[i] = float64(ir.MovedBytes) / memory
		}
		fp.SteadyMoved, fp.MaxSteadyMoved = steadyMovement(changes, moved)
		fp.Settle, fp.Unsettled = settling(changes, moved)
		j.Policies = append(j.Policies, fp)
	}
	j.judge()
	return j
}

// judge fills Misses for the judged policy.
func (j *FleetJudgement) judge() {
	me := j.Policy(j.Judged)
	if me == nil {
		return
	}
	miss := func(criterion, format string, args ...any) { j.Misses[criterion] = fmt.Sprintf(format, args...) }
	if me.Attainment < AttainmentFloor {
		miss(CriterionAttainment, "%.2f", me.Attainment)
	}
	best := me
	for i := range j.Policies {
		if p := &j.Policies[i]; p.Attainment > best.Attainment {
			best = p
		}
	}
	if best.Attainment > me.Attainment+AttainmentTolerance {
		miss(CriterionVsOthers, "%.2f < %s %.2f", me.Attainment, best.Policy, best.Attainment)
	}
	if me.Attainment >= AttainmentFloor {
		j.Compared = true
		best := j.bestAtFloor()
		if me.HitRatio < HitRatioFloor*best.hitRatio {
			miss(CriterionHitRatio, "%.3f vs %s %.3f", me.HitRatio, best.hitRatioBy, best.hitRatio)
		}
		if me.MeanLatency > LatencyCeiling*best.latency {
			miss(CriterionLatency, "%s vs %s %s", fmtSeconds(me.MeanLatency), best.latencyBy, fmtSeconds(best.latency))
		}
	}
	if me.SteadyMoved > SteadyMovementCeiling {
		miss(CriterionSteady, "%.1f%% per steady interval", 100*me.SteadyMoved)
	}
	if me.Unsettled > 0 {
		miss(CriterionSettle, "%d change(s), up to %d intervals", me.Unsettled, me.Settle)
	}
}

// bestOf is the best overall hit ratio and mean latency among some policies, and whose.
type bestOf struct {
	hitRatio, latency     float64
	hitRatioBy, latencyBy string
}

// bestAtFloor is the best hit ratio and latency among the policies that reached the
// AttainmentFloor.
func (j *FleetJudgement) bestAtFloor() bestOf {
	b := bestOf{hitRatio: math.Inf(-1), latency: math.Inf(1)}
	for _, p := range j.Policies {
		if p.Attainment < AttainmentFloor {
			continue
		}
		if p.HitRatio > b.hitRatio {
			b.hitRatio, b.hitRatioBy = p.HitRatio, p.Policy
		}
		if p.MeanLatency < b.latency {
			b.latency, b.latencyBy = p.MeanLatency, p.Policy
		}
	}
	return b
}

// WorkloadChanges marks the intervals in which sc's workload changes: the first interval, a
// tenant's arrival or departure, a rate change, and a phase workload's switch to its next
// phase (placed by the tenant's expected request counts).
func WorkloadChanges(sc *Scenario) []bool {
	changed := make([]bool, sc.Intervals)
	changed[0] = true
	mark := func(i int) {
		if i >= 0 && i < sc.Intervals {
			changed[i] = true
		}
	}
	for k := range sc.Tenants {
		t := &sc.Tenants[k]
		mark(t.Arrive)
		if t.Leave > 0 {
			mark(t.Leave)
		}
		for _, c := range t.RateFrom {
			mark(c.From)
		}
		if t.Workload.Shape != workload.ShapePhase {
			continue
		}
		// The phases repeat in turn; a switch falls in the interval whose requests cross it.
		phase, left, sent := 0, t.Workload.Phases[0].Accesses, 0
		for i := range sc.Intervals {
			sent = expectedRequests(sc, t, i)
			for sent > 0 {
				if sent <= left {
					left -= sent
					break
				}
				sent -= left
				phase = (phase + 1) % len(t.Workload.Phases)
				left = t.Workload.Phases[phase].Accesses
				mark(i)
			}
		}
	}
	return changed
}

// steadyMovement is the mean and largest movement over the steady intervals (NaN when none).
func steadyMovement(changed []bool, moved []float64) (mean, largest float64) {
	var sum float64
	n := 0
	last := 0
	for i := range moved {
		if changed[i] {
			last = i
		}
		if i-last >= SettleIntervals {
			sum += moved[i]
			largest = math.Max(largest, moved[i])
			n++
		}
	}
	if n == 0 {
		return math.NaN(), math.NaN()
	}
	return sum / float64(n), largest
}

// settling measures, for each workload change followed by at least SettleIntervals
// intervals without another, how many intervals pass before the movement stays at most
// SteadyMovementCeiling until the next change: the longest such time, and how many changes
// took longer than SettleIntervals. A change followed by another within SettleIntervals
// cannot be judged.
func settling(changed []bool, moved []float64) (longest, unsettled int) {
	longest = -1
	for c := range changed {
		if !changed[c] {
			continue
		}
		end := c + 1
		for end < len(changed) && !changed[end] {
			end++
		}
		if end-c <= SettleIntervals {
			continue
		}
		s := end - c
		for s > 0 && moved[c+s-1] <= SteadyMovementCeiling {
			s--
		}
		longest = max(longest, s)
		if s > SettleIntervals {
			unsettled++
		}
	}
	return longest, unsettled
}

// FuzzSummary aggregates the judgements of one cache model (or of all, with Cache "").
type FuzzSummary struct {
	Cache string
	Runs  int
	// PerPolicy holds, per policy, the mean and the least attainment, how many fleet runs
	// reached the AttainmentFloor, and the mean steady movement.
	PerPolicy []PolicyAggregate
	// Missed counts, per criterion, the fleet runs in which the judged policy missed it;
	// Judged counts those in which the criterion applied.
	Missed, Judged map[string]int
	// AllMet counts the fleet runs in which the judged policy met every criterion.
	AllMet int
}

// PolicyAggregate is one policy over many fleet runs.
type PolicyAggregate struct {
	Policy                          string
	MeanAttainment, MinAttainment   float64
	AtFloor                         int
	MeanSteadyMoved, MaxSteadyMoved float64
	MaxSettle                       int
	// Saturated is the node-intervals at utilization 1 or more, over every fleet run.
	Saturated int
}

// SummarizeFuzz aggregates judgements (only those of cache, unless cache is "").
func SummarizeFuzz(js []*FleetJudgement, cache string) FuzzSummary {
	s := FuzzSummary{Cache: cache, Missed: map[string]int{}, Judged: map[string]int{}}
	var selected []*FleetJudgement
	for _, j := range js {
		if cache == "" || j.Cache == cache {
			selected = append(selected, j)
		}
	}
	s.Runs = len(selected)
	if len(selected) == 0 {
		return s
	}
	for _, p := range selected[0].Policies {
		agg := PolicyAggregate{Policy: p.Policy, MinAttainment: math.Inf(1), MaxSettle: -1}
		var attSum, movedSum float64
		movedN := 0
		for _, j := range selected {
			fp := j.Policy(p.Policy)
			attSum += fp.Attainment
			agg.MinAttainment = math.Min(agg.MinAttainment, fp.Attainment)
			if fp.Attainment >= AttainmentFloor {
				agg.AtFloor++
			}
			if !math.IsNaN(fp.SteadyMoved) {
				movedSum += fp.SteadyMoved
				movedN++
				agg.MaxSteadyMoved = math.Max(agg.MaxSteadyMoved, fp.MaxSteadyMoved)
			}
			agg.MaxSettle = max(agg.MaxSettle, fp.Settle)
			agg.Saturated += fp.Saturated
		}
		agg.MeanAttainment = attSum / float64(len(selected))
		agg.MeanSteadyMoved = math.NaN()
		if movedN > 0 {
			agg.MeanSteadyMoved = movedSum / float64(movedN)
		}
		s.PerPolicy = append(s.PerPolicy, agg)
	}
	for _, j := range selected {
		me := j.Policy(j.Judged)
		for _, c := range Criteria() {
			applies := true
			switch c {
			case CriterionHitRatio, CriterionLatency:
				applies = j.Compared
			case CriterionSteady:
				applies = me != nil && !math.IsNaN(me.SteadyMoved)
			case CriterionSettle:
				applies = me != nil && me.Settle >= 0
			}
			if applies {
				s.Judged[c]++
			}
			if _, missed := j.Misses[c]; missed {
				s.Missed[c]++
			}
		}
		if len(j.Misses) == 0 {
			s.AllMet++
		}
	}
	return s
}

// MissedFleets lists, per criterion, the fleet runs in which the judged policy missed it, in
// run order.
func MissedFleets(js []*FleetJudgement) map[string][]*FleetJudgement {
	out := map[string][]*FleetJudgement{}
	for _, j := range js {
		for _, c := range Criteria() {
			if _, missed := j.Misses[c]; missed {
				out[c] = append(out[c], j)
			}
		}
	}
	return out
}
