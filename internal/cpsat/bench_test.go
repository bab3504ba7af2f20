package cpsat

import (
	"context"
	"testing"
	"time"
)

// BenchmarkMultipleChoiceKnapsack solves a 200-item x 16-level
// multiple-choice knapsack (3200 Booleans, the shape of a per-tenant memory
// allocation) under a 2 s limit: presolve off without and with a greedy hint,
// and presolve on without hint. It reports the solver's wall time, the
// relative gap to its bound and the objective relative to the greedy one.
func BenchmarkMultipleChoiceKnapsack(b *testing.B) {
	needSolver(b)
	p := newMCKP(200, 16, 42)
	greedy := p.greedy()
	var greedyValue int64
	for i, l := range greedy {
		greedyValue += p.value[i][l]
	}
	for _, bc := range []struct {
		name     string
		hint     bool
		presolve bool
	}{{"no-hint", false, false}, {"greedy-hint", true, false}, {"presolve", false, true}} {
		b.Run(bc.name, func(b *testing.B) {
			m, choice := p.model()
			if bc.hint {
				for i, l := range greedy {
					for level, v := range choice[i] {
						m.Hint(v, int64(boolToInt(level == l)))
					}
				}
			}
			var last *Result
			for b.Loop() {
				r, err := Solve(context.Background(), m, Params{TimeLimit: 2 * time.Second, Presolve: bc.presolve})
				if err != nil {
					b.Fatal(err)
				}
				last = r
			}
			b.ReportMetric(last.WallTime.Seconds(), "solver-s")
			b.ReportMetric(last.Gap(), "gap")
			if last.HasSolution() {
				b.ReportMetric(last.Objective/float64(greedyValue), "obj/greedy")
			}
			b.Logf("%s: status %v, objective %.0f, bound %.0f, greedy %d, gap %.5f, wall %v, workers %d",
				bc.name, last.Status, last.Objective, last.BestBound, greedyValue, last.Gap(), last.WallTime, DefaultWorkers())
		})
	}
}
