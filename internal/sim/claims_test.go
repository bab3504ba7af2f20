package sim

import (
	"math"
	"slices"
	"strings"
	"testing"
)

// fakeResult fills every policy's run of sc with the same plausible numbers, varied by policy
// index, so each claim's measure can be exercised without simulating.
func fakeResult(sc *Scenario) *ScenarioResult {
	r := &ScenarioResult{Scenario: sc, Seed: 1}
	for p, policy := range Policies() {
		run := &RunResult{Scenario: sc.Name, Policy: policy, Intervals: make([]IntervalRun, sc.Intervals), overall: newLatencyHist()}
		for k, t := range sc.Tenants {
			tr := TenantRun{
				ID: t.ID, Requests: make([]int64, sc.Intervals), Hits: make([]int64, sc.Intervals), Refused: make([]int64, sc.Intervals),
				MeanLatency: nanSlice(sc.Intervals), PredictedHitRatio: nanSlice(sc.Intervals), MemoryBytes: make([]int64, sc.Intervals),
				Counted: make([]bool, sc.Intervals), Isolated: make([]bool, sc.Intervals), latency: newLatencyHist(),
			}
			for i := range sc.Intervals {
				if !t.activeAt(i) {
					continue
				}
				tr.Counted[i] = i >= t.Arrive+sc.Warmup
				tr.Requests[i] = 1000
				tr.Hits[i] = int64(300 + 50*p + 10*k)
				tr.MeanLatency[i] = 0.003 + 0.0001*float64(p+k)
				tr.PredictedHitRatio[i] = 0.4
				tr.MemoryBytes[i] = int64(k) * mib
				tr.Isolated[i] = policy == "lacs" && k == 1 && i > sc.Intervals/2
				tr.latency.add(tr.MeanLatency[i])
			}
			run.Tenants = append(run.Tenants, tr)
		}
		r.Runs = append(r.Runs, run)
	}
	r.Summarize()
	return r
}

func TestEveryClaimMeasures(t *testing.T) {
	for _, sc := range Scenarios() {
		if sc.Claim == nil {
			continue
		}
		t.Run(sc.Name, func(t *testing.T) {
			res := sc.Claim.Measure(fakeResult(sc))
			if !slices.Contains([]string{verdictBetter, verdictEqual, verdictWorse}, res.Verdict) {
				t.Errorf("verdict %q", res.Verdict)
			}
			if res.Ours == "" || res.Why == "" || strings.Contains(res.Ours+res.Why, "NaN") || strings.Contains(res.Ours+res.Why, "%!") {
				t.Errorf("claim result %+v", res)
			}
		})
	}
}

func TestSummaryJudgesObjectives(t *testing.T) {
	sc := smallScenario()
	r := fakeResult(sc)
	eq := r.Summary("equal")
	// Hit ratio 0.3+ against a 0.6 target: never met.
	if a := eq.Tenants[0].Attainment; a != 0 {
		t.Errorf("hit-ratio objective attainment %v, want 0", a)
	}
	// The equal policy is its own degradation baseline: always met.
	if a := eq.Tenants[1].Attainment; a != 1 {
		t.Errorf("degradation objective attainment under equal %v, want 1", a)
	}
	// Mean latency about 3 ms against a 6 ms target: always met.
	if a := eq.Tenants[2].Attainment; a != 1 {
		t.Errorf("latency objective attainment %v, want 1", a)
	}
	if math.IsNaN(eq.SLOAttainment) || eq.AllMet != 0 {
		t.Errorf("summary attainment %v, all met %v", eq.SLOAttainment, eq.AllMet)
	}
}
