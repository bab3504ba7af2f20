package sim

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/cacheqos/cacheqos/internal/allocator"
	"github.com/cacheqos/cacheqos/internal/allocator/planning"
	"github.com/cacheqos/cacheqos/internal/workload"
)

// Our side of each paper's claim: the comparable numbers, a verdict and the reason, computed
// from the results so that the report says what this run measured.

const (
	verdictBetter = "better"
	verdictEqual  = "equal"
	verdictWorse  = "worse"
)

func pct(x float64) string { return fmt.Sprintf("%+.1f%%", 100*x) }

// lower describes a relative latency change as "x% lower" or "x% higher".
func lower(change float64) string {
	if change <= 0 {
		return fmt.Sprintf("%.1f%% lower", -100*change)
	}
	return fmt.Sprintf("%.1f%% higher", 100*change)
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a/b - 1
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// totalMemory is the memory of every node of the scenario.
func totalMemory(sc *Scenario) float64 {
	var m int64
	for _, n := range sc.Nodes {
		m += n.MemoryBytes
	}
	return float64(m)
}

// churn describes a policy's movement per interval relative to the cluster's memory.
func churn(r *ScenarioResult, policy string) string {
	return fmt.Sprintf("%s moves %.0f%% of the cluster's memory per interval", policy, 100*r.Summary(policy).MovedBytesPerInterval/totalMemory(r.Scenario))
}

// bestIndividualGain describes the largest hit-ratio gain of any tenant under policy over
// the baseline policy: relative, or "0 → h" for a tenant the baseline gave no hits at all.
func bestIndividualGain(r *ScenarioResult, policy, baseline string) string {
	p, b := r.Summary(policy), r.Summary(baseline)
	best, text := math.Inf(-1), "none"
	for k := range p.Tenants {
		ours, theirs := p.Tenants[k].HitRatio, b.Tenants[k].HitRatio
		switch {
		case theirs == 0 && ours > 0:
			return fmt.Sprintf("0 → %.2f (%s)", ours, p.Tenants[k].ID)
		case theirs > 0 && ratio(ours, theirs) > best:
			best = ratio(ours, theirs)
			text = fmt.Sprintf("%s (%s)", pct(best), p.Tenants[k].ID)
		}
	}
	return text
}

// metCount counts the tenants meeting their objective in at least 90% of counted intervals.
func metCount(s *PolicySummary) (met, with int) {
	for _, t := range s.Tenants {
		if !math.IsNaN(t.Attainment) {
			with++
			if t.Attainment >= 0.9 {
				met++
			}
		}
	}
	return met, with
}

// marginNote explains why the optimal policy still misses targets it plans to meet.
const marginNote = "The optimal policy sizes a kept objective with a small safety margin over its predicted minimum when memory allows " +
	"(hit ratio +0.01 or 3% more memory, whichever needs more), but the measured hit ratio still moves around the prediction " +
	"from one interval to the next (sampled curves from the last interval's traffic, keys not spread over nodes exactly in " +
	"proportion to memory), so a target sized close to it is missed in some intervals."

func measureSoftQoS(r *ScenarioResult) ClaimResult {
	var b strings.Builder
	for _, policy := range []string{allocator.PolicySoftQoS, allocator.PolicyOptimal} {
		s := r.Summary(policy)
		fmt.Fprintf(&b, "%s: attainment %.0f%%, every target met in %.0f%% of intervals; best individual gain %s vs shared, %s vs equal; overall hit ratio %s vs shared, %s vs equal. ",
			policy, 100*s.SLOAttainment, 100*s.AllMet, bestIndividualGain(r, policy, PolicyShared), bestIndividualGain(r, policy, allocator.PolicyEqual),
			pct(ratio(s.HitRatio, r.Summary(PolicyShared).HitRatio)), pct(ratio(s.HitRatio, r.Summary(allocator.PolicyEqual).HitRatio)))
	}
	opt, soft := r.Summary(allocator.PolicyOptimal), r.Summary(allocator.PolicySoftQoS)
	res := ClaimResult{Ours: b.String()}
	switch {
	case opt.AllMet >= 0.99 && soft.AllMet >= 0.99:
		res.Verdict = verdictEqual
		res.Why = "As in the paper the targets are met in every counted interval, with large gains over both baselines (the sizes of the gains depend on the workloads: the paper's are traces, ours synthetic)."
	case math.Max(opt.AllMet, soft.AllMet) >= 0.99:
		res.Verdict = verdictEqual
		res.Why = "One of our policies meets every target in every counted interval, as the paper reports; the gains over both baselines are larger than the paper's because the loop tenant gets nothing from an LRU smaller than its loop."
	default:
		res.Verdict = verdictWorse
		res.Why = "The gains over both baselines are larger than the paper's (the loop tenant gets nothing below its cliff, and both baselines keep it there), but the targets are not met all the time. " + marginNote
	}
	return res
}

func measureInfeasible(r *ScenarioResult) ClaimResult {
	var b strings.Builder
	for _, policy := range r.policies() {
		met, with := metCount(r.Summary(policy))
		fmt.Fprintf(&b, "%s %d/%d, attainment %.0f%%; ", policy, met, with, 100*r.Summary(policy).SLOAttainment)
	}
	opt, soft := r.Summary(allocator.PolicyOptimal), r.Summary(allocator.PolicySoftQoS)
	res := ClaimResult{Ours: "Tenants meeting their target in at least 90% of intervals, and mean attainment: " + strings.TrimSuffix(b.String(), "; ") + "."}
	switch {
	case opt.SLOAttainment > soft.SLOAttainment+0.02:
		res.Verdict = verdictBetter
		res.Why = "Soft-QoS grants minimums in ascending size order and flags whoever does not fit, whatever their priority; the optimal policy keeps the targets that fit together, highest priority first. Neither holds a kept target in 90% of the intervals. " + marginNote
	case opt.SLOAttainment >= soft.SLOAttainment-0.02:
		res.Verdict = verdictEqual
		res.Why = "Both keep the targets that fit and serve the rest best effort, as the paper describes, and do better than equal partitioning. " + marginNote
	default:
		res.Verdict = verdictWorse
		res.Why = "Soft-QoS keeps more targets than our optimal policy here. " + marginNote
	}
	return res
}

func measureMaxperf(paperLatency float64) func(r *ScenarioResult) ClaimResult {
	return func(r *ScenarioResult) ClaimResult {
		shared := r.Summary(PolicyShared)
		var b strings.Builder
		for _, policy := range []string{allocator.PolicyMaxperf, allocator.PolicyOptimal} {
			s := r.Summary(policy)
			fmt.Fprintf(&b, "%s: SLO attainment %.0f%%, every SLO met in %.0f%% of intervals, overall latency %s vs shared. ",
				policy, 100*s.SLOAttainment, 100*s.AllMet, pct(ratio(s.MeanLatency, shared.MeanLatency)))
		}
		fmt.Fprintf(&b, "shared: SLO attainment %.0f%%.", 100*shared.SLOAttainment)
		mp, opt := r.Summary(allocator.PolicyMaxperf), r.Summary(allocator.PolicyOptimal)
		best := math.Min(ratio(mp.MeanLatency, shared.MeanLatency), ratio(opt.MeanLatency, shared.MeanLatency))
		res := ClaimResult{Ours: b.String()}
		note := "The equal policy meets every degradation objective by definition (it is the fair-share baseline). "
		switch {
		case math.Max(mp.AllMet, opt.AllMet) >= 0.99 && best <= paperLatency:
			res.Verdict = verdictBetter
			res.Why = note + "Every SLO holds and the latency gain over the shared cache is at least the paper's."
		case math.Max(mp.AllMet, opt.AllMet) >= 0.99:
			res.Verdict = verdictEqual
			res.Why = note + "Every SLO holds as in the paper; the latency gain over the shared cache is smaller than the paper's."
		default:
			res.Verdict = verdictWorse
			res.Why = note + fmt.Sprintf("Like the paper, the shared cache violates several SLOs and partitioning lowers the overall latency, but no policy keeps every tenant within 5%% of its fair-share latency in every interval: a 5%% band is narrower than the measurement noise of a tenant sized exactly at its predicted minimum, and plans move memory (%s; %s) whose keys start cold.",
				churn(r, allocator.PolicyMaxperf), churn(r, allocator.PolicyOptimal))
		}
		return res
	}
}

// phaseMean averages tenant k's per-interval values over phase p of the LACS sweep (skipping
// the phase's first interval, in which the rate changed), weighted by requests.
func phaseMean(run *RunResult, k, p int, value func(tr *TenantRun, i int) float64) float64 {
	tr := &run.Tenants[k]
	var sum, weight float64
	for i := p*lacsPhaseLength + 1; i < (p+1)*lacsPhaseLength; i++ {
		if !tr.Counted[i] {
			continue
		}
		sum += value(tr, i) * float64(tr.Requests[i])
		weight += float64(tr.Requests[i])
	}
	return sum / weight
}

func hitRatioAt(tr *TenantRun, i int) float64 { return float64(tr.Hits[i]) / float64(tr.Requests[i]) }
func latencyAt(tr *TenantRun, i int) float64  { return tr.MeanLatency[i] }
func memoryAt(tr *TenantRun, i int) float64   { return float64(tr.MemoryBytes[i]) }
func isolatedAt(tr *TenantRun, i int) float64 {
	if tr.Isolated[i] {
		return 1
	}
	return 0
}

func measureLACSSweep(r *ScenarioResult) ClaimResult {
	lacs, eq := r.Run(allocator.PolicyLACS), r.Run(allocator.PolicyEqual)
	var b strings.Builder
	revokedAt, throttledAt := math.NaN(), math.NaN()
	var revokedGain, throttledGain float64
	for p, ratioValue := range lacsPhases {
		elephantMem := phaseMean(lacs, 1, p, memoryAt)
		throttled := phaseMean(lacs, 1, p, isolatedAt) > 0.5
		mouseHit, mouseHitEq := phaseMean(lacs, 0, p, hitRatioAt), phaseMean(eq, 0, p, hitRatioAt)
		mouseLat, mouseLatEq := phaseMean(lacs, 0, p, latencyAt), phaseMean(eq, 0, p, latencyAt)
		state := "elephant memory " + planning.FormatBytes(int64(elephantMem))
		if throttled {
			state += ", throttled"
		}
		fmt.Fprintf(&b, "%.1f×: %s, mouse hit ratio %.2f (equal %.2f), mouse latency %s (equal %s, elephant %s). ",
			ratioValue, state, mouseHit, mouseHitEq, planning.FormatSeconds(mouseLat), planning.FormatSeconds(mouseLatEq),
			planning.FormatSeconds(phaseMean(lacs, 1, p, latencyAt)))
		if math.IsNaN(revokedAt) && elephantMem < 0.05*float64(r.Scenario.Nodes[0].MemoryBytes) {
			revokedAt, revokedGain = ratioValue, ratio(mouseHit, mouseHitEq)
		}
		if math.IsNaN(throttledAt) && throttled {
			throttledAt, throttledGain = ratioValue, ratio(mouseLat, mouseLatEq)
		}
	}
	res := ClaimResult{Ours: "Under lacs, per phase: " + b.String()}
	switch {
	case math.IsNaN(revokedAt) && math.IsNaN(throttledAt):
		res.Verdict = verdictWorse
		res.Why = "The elephant was never revoked nor throttled: the isolation guarantee held at every ratio."
	default:
		res.Verdict = verdictEqual
		var steps []string
		if !math.IsNaN(revokedAt) {
			steps = append(steps, fmt.Sprintf("the elephant's cache is revoked from %.1f× (mouse hit ratio %s vs equal)", revokedAt, pct(revokedGain)))
		}
		if !math.IsNaN(throttledAt) {
			steps = append(steps, fmt.Sprintf("it is bandwidth-throttled from %.1f× (mouse latency %s than under equal, at the elephant's expense)", throttledAt, lower(throttledGain)))
		}
		res.Why = "The paper's two steps happen in the same order: " + strings.Join(steps, "; ") + ". They start at higher ratios than the paper's 1.5× and 1.7× because they depend on the 1/K threshold against this cluster's capacity."
	}
	return res
}

func measureLACSMacro(r *ScenarioResult) ClaimResult {
	lacs, eq, opt := r.Summary(allocator.PolicyLACS), r.Summary(allocator.PolicyEqual), r.Summary(allocator.PolicyOptimal)
	run := r.Run(allocator.PolicyLACS)
	var gains, optGains []float64
	shortest, users := 0, 0
	for k, t := range lacs.Tenants {
		if slices.Contains(run.Tenants[k].Isolated, true) {
			continue
		}
		users++
		gains = append(gains, ratio(t.MeanLatency, eq.Tenants[k].MeanLatency))
		optGains = append(optGains, ratio(opt.Tenants[k].MeanLatency, eq.Tenants[k].MeanLatency))
		best := true
		for _, s := range r.Summaries {
			if s.Policy != allocator.PolicyLACS && s.Tenants[k].MeanLatency < t.MeanLatency*(1-1e-9) {
				best = false
			}
		}
		if best {
			shortest++
		}
	}
	res := ClaimResult{Ours: fmt.Sprintf("lacs vs equal, per non-throttled tenant: latency up to %s, %s on average; lacs has the shortest latency of all policies for %d of %d such tenants. optimal vs equal: up to %s, %s on average. Overall mean latency: lacs %s, equal %s (%d node-intervals saturated), shared %s, optimal %s.",
		lower(slices.Min(gains)), lower(mean(gains)), shortest, users, lower(slices.Min(optGains)), lower(mean(optGains)),
		planning.FormatSeconds(lacs.MeanLatency), planning.FormatSeconds(eq.MeanLatency), eq.SaturatedNodes,
		planning.FormatSeconds(r.Summary(PolicyShared).MeanLatency), planning.FormatSeconds(opt.MeanLatency))}
	switch {
	case shortest == users && -slices.Min(gains) >= 0.804 && -mean(gains) >= 0.253:
		res.Verdict = verdictBetter
		res.Why = "LACS gives every user the shortest latency, with larger gains than the paper's."
	case shortest == users:
		res.Verdict = verdictEqual
		res.Why = "LACS gives every user the shortest latency, as in the paper."
	default:
		res.Verdict = verdictWorse
		res.Why = fmt.Sprintf("Like the paper, LACS removes the overload that equal sharing creates where elephants land (the largest per-tenant gains), but it is not the best for every user: its placement ignores movement (%s, so keys keep starting cold; hit ratio %.3f vs %.3f under equal), and the shared cache, which spreads every tenant over all nodes, avoids both overload and churn.",
			churn(r, allocator.PolicyLACS), lacs.HitRatio, eq.HitRatio)
	}
	return res
}

func measureStrictBE(r *ScenarioResult) ClaimResult {
	opt, soft := r.Summary(allocator.PolicyOptimal), r.Summary(allocator.PolicySoftQoS)
	strictT, beOpt, beSoft := opt.Tenants[0], opt.Tenants[1], soft.Tenants[1]
	gain := ratio(beOpt.MeanLatency, beSoft.MeanLatency)
	var b strings.Builder
	for _, s := range r.Summaries {
		fmt.Fprintf(&b, "%s %.0f%%; ", s.Policy, 100*s.Tenants[0].Attainment)
	}
	res := ClaimResult{Ours: fmt.Sprintf("Strict objective attainment: %s. optimal: best-effort mean latency %s vs %s under softqos, the seed policy that also meets the strict objective (%s).",
		strings.TrimSuffix(b.String(), "; "), planning.FormatSeconds(beOpt.MeanLatency), planning.FormatSeconds(beSoft.MeanLatency), lower(gain))}
	switch {
	case strictT.Attainment >= 0.99 && gain <= -0.35:
		res.Verdict = verdictBetter
		res.Why = "The strict objective holds and the best-effort tenant gains at least as much as in the paper."
	case strictT.Attainment >= 0.99 && gain <= 0:
		res.Verdict = verdictEqual
		res.Why = "The strict objective holds, and the best-effort tenant gets what the strict one does not need; its gain over the simpler policy is smaller than the paper's over PROFILE because softqos already sizes the strict tenant from the same curve."
	case strictT.Attainment >= 0.99:
		res.Verdict = verdictWorse
		res.Why = "The strict objective holds in every interval, but the best-effort tenant is slower than under softqos: the optimal policy gives the strict tenant a safety margin over its predicted minimum, memory the best-effort tenant would otherwise use, and here softqos' unguarded minimum held in every interval too."
	default:
		res.Verdict = verdictWorse
		res.Why = "The strict objective is met in most intervals, and the policies that split memory evenly never meet it, but it is not met every time. " + marginNote
	}
	return res
}

func measureOverload(r *ScenarioResult) ClaimResult {
	opt, eq := r.Summary(allocator.PolicyOptimal), r.Summary(allocator.PolicyEqual)
	gain := ratio(opt.MeanLatency, eq.MeanLatency)
	var b strings.Builder
	for _, t := range opt.Tenants {
		fmt.Fprintf(&b, "%s %s, attainment %.0f%%; ", t.ID, planning.FormatBytes(int64(t.MeanMemoryBytes)), 100*t.Attainment)
	}
	res := ClaimResult{Ours: fmt.Sprintf("optimal: mean latency %s vs %s for the equal split (%s); memory and attainment %s. Equal split attainment %.0f%%.",
		planning.FormatSeconds(opt.MeanLatency), planning.FormatSeconds(eq.MeanLatency), lower(gain), strings.TrimSuffix(b.String(), "; "), 100*eq.SLOAttainment)}
	switch {
	case gain <= -0.108:
		res.Verdict = verdictBetter
		res.Why = "An asymmetric split that meets one objective beats splitting evenly, by more than the paper's 10.8%."
	case gain < -0.01:
		res.Verdict = verdictEqual
		res.Why = "An asymmetric split beats splitting evenly, as in the paper, by a different margin because the curves differ."
	default:
		res.Verdict = verdictWorse
		res.Why = "The optimal policy splits asymmetrically, as the paper's does, to keep one objective; but it maximizes expected hits after the strict objectives, not the mean latency, and the kept tenant's hit ratio moves around its prediction, so it keeps that objective only part of the time while the even split happens to keep one tenant just above its target. " +
			"The paper's IDEAL minimized the total latency penalty directly."
	}
	return res
}

func measureCliffs(r *ScenarioResult) ClaimResult {
	var b strings.Builder
	for _, policy := range r.policies() {
		s := r.Summary(policy)
		fmt.Fprintf(&b, "%s %.0f%% / %.3f; ", policy, 100*s.SLOAttainment, s.HitRatio)
	}
	opt := r.Summary(allocator.PolicyOptimal)
	bestSeed, bestSeedName := math.Inf(-1), ""
	for _, p := range []string{allocator.PolicySoftQoS, allocator.PolicyMaxperf, allocator.PolicyLACS} {
		if a := r.Summary(p).SLOAttainment; a > bestSeed {
			bestSeed, bestSeedName = a, p
		}
	}
	var starved []string
	for k, t := range opt.Tenants {
		if r.Scenario.Tenants[k].Workload.Shape == workload.ShapeLoop && t.HitRatio < 0.1 {
			starved = append(starved, fmt.Sprintf("%s gets %s", t.ID, planning.FormatBytes(int64(t.MeanMemoryBytes))))
		}
	}
	res := ClaimResult{Ours: "SLO attainment / overall hit ratio: " + strings.TrimSuffix(b.String(), "; ") + "."}
	switch {
	case opt.SLOAttainment > bestSeed+0.01:
		res.Verdict = verdictBetter
		res.Why = "The solver chooses sizes past each loop's cliff; the seed policies' proportional or marginal splits leave some loops just below it, where they hit nothing."
	case opt.SLOAttainment >= bestSeed-0.01:
		res.Verdict = verdictEqual
		res.Why = "A seed policy does as well here: its minimum-size step already puts each loop past its cliff when the targets fit."
	case len(starved) > 0:
		res.Verdict = verdictWorse
		res.Why = fmt.Sprintf("%s meets more targets. Under optimal %s, far below its loop: a loop tenant below its cliff hits nothing, and the plan does not give it the memory to climb the cliff its sampled curve shows.",
			bestSeedName, strings.Join(starved, ", "))
	default:
		res.Verdict = verdictWorse
		res.Why = bestSeedName + " meets more targets: a loop sized exactly at its predicted cliff misses everything on a node whose share of the loop's keys is slightly above its share of the memory. " + marginNote
	}
	return res
}

func measureLarge(r *ScenarioResult) ClaimResult {
	var b strings.Builder
	worst := 0.0
	for _, s := range r.Summaries {
		if s.Policy == PolicyShared {
			continue
		}
		fmt.Fprintf(&b, "%s %s; ", s.Policy, planning.FormatSeconds(s.MaxPlanSeconds))
		worst = math.Max(worst, s.MaxPlanSeconds)
	}
	res := ClaimResult{Ours: fmt.Sprintf("Longest plan for %d tenants × %d nodes: %s (wall times, which vary from run to run).",
		len(r.Scenario.Tenants), len(r.Scenario.Nodes), strings.TrimSuffix(b.String(), "; "))}
	switch {
	case worst < 2:
		res.Verdict = verdictBetter
		res.Why = "Every policy plans a larger cluster than the paper's in under 2 s."
	default:
		res.Verdict = verdictWorse
		res.Why = "The seed policies plan in milliseconds, but the optimal policy searches until its work limit at this size (CP-SAT improving on its greedy warm start), which takes seconds, beyond the paper's 2 s."
	}
	return res
}

// policies lists the policies run, in order.
func (r *ScenarioResult) policies() []string {
	out := make([]string, len(r.Runs))
	for i, run := range r.Runs {
		out[i] = run.Policy
	}
	return out
}
