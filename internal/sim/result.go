package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/cacheqos/cacheqos/internal/allocator"
)

// ScenarioResult holds every policy's run of one scenario.
type ScenarioResult struct {
	Scenario *Scenario
	Seed     uint64
	Runs     []*RunResult // in the order of the policies run
	// Summaries are computed from Runs (see Summarize).
	Summaries []PolicySummary
}

// Run returns the run of policy, or nil.
func (r *ScenarioResult) Run(policy string) *RunResult {
	for _, run := range r.Runs {
		if run.Policy == policy {
			return run
		}
	}
	return nil
}

// Summary returns the summary of policy, or nil.
func (r *ScenarioResult) Summary(policy string) *PolicySummary {
	for i := range r.Summaries {
		if r.Summaries[i].Policy == policy {
			return &r.Summaries[i]
		}
	}
	return nil
}

// RunScenario runs sc under each policy (all of Policies() when policies is empty), up to
// parallel runs at a time, and summarizes them. Runs are independent, so the result does not
// depend on parallel.
func RunScenario(ctx context.Context, sc *Scenario, policies []string, seed uint64, parallel int) (*ScenarioResult, error) {
	if len(policies) == 0 {
		policies = Policies()
	}
	res := &ScenarioResult{Scenario: sc, Seed: seed, Runs: make([]*RunResult, len(policies))}
	err := forEach(len(policies), parallel, func(i int) (err error) {
		res.Runs[i], err = Run(ctx, sc, policies[i], seed)
		return err
	})
	if err != nil {
		return nil, err
	}
	res.Summarize()
	return res, nil
}

// forEach calls do(i) for every i below n, up to parallel calls at a time, and joins their
// errors.
func forEach(n, parallel int, do func(i int) error) error {
	errs := make([]error, n)
	sem := make(chan struct{}, max(parallel, 1))
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = do(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// PolicySummary is one policy's results over the counted intervals of a scenario.
type PolicySummary struct {
	Policy string
	// SLOAttainment is the mean over tenants with an objective of the fraction of their
	// counted intervals in which they met it (NaN without objectives).
	SLOAttainment float64
	// AllMet is the fraction of intervals in which every counted tenant with an objective met it.
	AllMet   float64
	HitRatio float64 // over every counted request
	// MeanLatency and P99Latency are over every counted request, in seconds.
	MeanLatency, P99Latency float64
	// MovedBytesPerInterval is the mean plan movement over the intervals after the first.
	MovedBytesPerInterval float64
	// PlanSeconds is the mean and MaxPlanSeconds the largest plan wall time (not deterministic).
	PlanSeconds, MaxPlanSeconds float64
	// SolverTimeouts counts plans that ran into the wall-clock limit (a plan time near it):
	// such plans may differ between runs, so this count is a timing too. A search stopped by
	// the work limit instead returns the same plan every time and is not counted.
	SolverTimeouts  int
	SaturatedNodes  int // node-intervals at utilization >= 1
	PredictionError float64
	Tenants         []TenantSummary
}

// TenantSummary is one tenant's results under a policy.
type TenantSummary struct {
	ID        string
	Objective Objective
	// Attainment is the fraction of counted intervals the objective was met (NaN without one).
	Attainment              float64
	HitRatio                float64
	MeanLatency, P99Latency float64
	MeanMemoryBytes         float64
	Requests, Refused       int64
}

// Summarize computes Summaries from Runs. A MaxDegradation objective compares each interval's
// mean latency with the equal policy's in the same interval (Maxperf's fair-share baseline),
// so it is judged only when the equal policy was run.
func (r *ScenarioResult) Summarize() {
	baseline := r.Run(allocator.PolicyEqual)
	r.Summaries = r.Summaries[:0]
	for _, run := range r.Runs {
		r.Summaries = append(r.Summaries, summarize(r.Scenario, run, baseline))
	}
}

// met reports whether tenant k's objective was met in interval i; ok is false when it cannot
// be judged (no objective, no baseline).
func met(sc *Scenario, run, baseline *RunResult, k, i int) (ok, yes bool) {
	t := &sc.Tenants[k]
	tr := &run.Tenants[k]
	o := t.Objective
	switch {
	case o.HitRatio > 0:
		if tr.Requests[i] == 0 {
			return false, false
		}
		return true, float64(tr.Hits[i])/float64(tr.Requests[i]) >= o.HitRatio-1e-9
	case o.Latency > 0:
		return true, tr.MeanLatency[i] <= o.Latency.Seconds()
	case o.MaxDegradation > 0:
		if baseline == nil || math.IsNaN(baseline.Tenants[k].MeanLatency[i]) {
			return false, false
		}
		return true, tr.MeanLatency[i] <= o.MaxDegradation*baseline.Tenants[k].MeanLatency[i]*(1+1e-9)
	}
	return false, false
}

func summarize(sc *Scenario, run, baseline *RunResult) PolicySummary {
	s := PolicySummary{Policy: run.Policy}
	var hits, requests int64
	var latencySum float64
	var attainSum float64
	var attainN int
	var predErrSum float64
	var predErrN int
	intervalsAllMet, intervalsJudged := 0, 0
	allMet := make([]bool, sc.Intervals)
	judged := make([]bool, sc.Intervals)
	for i := range allMet {
		allMet[i] = true
	}
	for k := range run.Tenants {
		tr := &run.Tenants[k]
		ts := TenantSummary{ID: tr.ID, Objective: sc.Tenants[k].Objective, Attainment: math.NaN()}
		var th, treq, tref int64
		var tlat, tmem float64
		var counted, metN, judgedN int
		for i := range tr.Counted {
			if !tr.Counted[i] {
				continue
			}
			counted++
			th += tr.Hits[i]
			treq += tr.Requests[i]
			tref += tr.Refused[i]
			tlat += tr.MeanLatency[i] * float64(tr.Requests[i])
			tmem += float64(tr.MemoryBytes[i])
			if !math.IsNaN(tr.PredictedHitRatio[i]) && tr.Requests[i] > 0 {
				predErrSum += math.Abs(tr.PredictedHitRatio[i] - float64(tr.Hits[i])/float64(tr.Requests[i]))
				predErrN++
			}
			if ok, yes := met(sc, run, baseline, k, i); ok {
				judgedN++
				judged[i] = true
				if yes {
					metN++
				} else {
					allMet[i] = false
				}
			}
		}
		ts.Requests, ts.Refused = treq, tref
		if treq > 0 {
			ts.HitRatio = float64(th) / float64(treq)
			ts.MeanLatency = tlat / float64(treq)
		}
		if counted > 0 {
			ts.MeanMemoryBytes = tmem / float64(counted)
		}
		ts.P99Latency = tr.latency.quantile(0.99)
		if judgedN > 0 {
			ts.Attainment = float64(metN) / float64(judgedN)
			attainSum += ts.Attainment
			attainN++
		}
		hits += th
		requests += treq
		latencySum += tlat
		s.Tenants = append(s.Tenants, ts)
	}
	for i := range judged {
		if judged[i] {
			intervalsJudged++
			if allMet[i] {
				intervalsAllMet++
			}
		}
	}
	s.SLOAttainment, s.AllMet, s.PredictionError = math.NaN(), math.NaN(), math.NaN()
	if attainN > 0 {
		s.SLOAttainment = attainSum / float64(attainN)
	}
	if intervalsJudged > 0 {
		s.AllMet = float64(intervalsAllMet) / float64(intervalsJudged)
	}
	if predErrN > 0 {
		s.PredictionError = predErrSum / float64(predErrN)
	}
	if requests > 0 {
		s.HitRatio = float64(hits) / float64(requests)
		s.MeanLatency = latencySum / float64(requests)
	}
	s.P99Latency = run.overall.quantile(0.99)
	var moved int64
	var plans int
	for i, ir := range run.Intervals {
		if i > 0 {
			moved += ir.MovedBytes
		}
		s.SaturatedNodes += ir.SaturatedNodes
		// A solve that ran into its wall-clock limit may return a different plan next time.
		if ir.PlanSeconds >= 0.9*sc.optimalTimeLimit().Seconds() {
			s.SolverTimeouts++
		}
		if run.Policy != PolicyShared {
			s.PlanSeconds += ir.PlanSeconds
			s.MaxPlanSeconds = math.Max(s.MaxPlanSeconds, ir.PlanSeconds)
			plans++
		}
	}
	if len(run.Intervals) > 1 {
		s.MovedBytesPerInterval = float64(moved) / float64(len(run.Intervals)-1)
	}
	if plans > 0 {
		s.PlanSeconds /= float64(plans)
	}
	return s
}

// String is a one-line summary for logs.
func (s PolicySummary) String() string {
	return fmt.Sprintf("%-8s slo %.2f hit %.3f mean %.2fms p99 %.2fms moved %.0f plan %.3fs",
		s.Policy, s.SLOAttainment, s.HitRatio, s.MeanLatency*1e3, s.P99Latency*1e3, s.MovedBytesPerInterval, s.PlanSeconds)
}
