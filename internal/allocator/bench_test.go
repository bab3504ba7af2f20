package allocator

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/allocator/planning"
)

// benchSizes are the fleet sizes of the benchmarks: tenants x nodes.
var benchSizes = [][2]int{{100, 10}, {1000, 100}, {5000, 300}}

func benchSnapshot(tenants, nodes int) *planning.Snapshot {
	return randomSnapshot(rand.New(rand.NewPCG(uint64(tenants), uint64(nodes))), genConfig{
		tenants: tenants, nodes: nodes, oversubscription: 1.5, strictShare: 0.3, cliffShare: 0.2, maxSpread: 3, restricted: true,
	})
}

// BenchmarkOptimal plans each fleet with the optimal policy and reports the solve time, the
// objective relative to the greedy solution, the gap to the proven bound (in the units of the
// expected-hits term) and the expected hits relative to the greedy plan's.
func BenchmarkOptimal(b *testing.B) {
	needSolver(b)
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("%dx%d", size[0], size[1]), func(b *testing.B) {
			s := benchSnapshot(size[0], size[1])
			greedyStart := time.Now()
			greedy := mustPlan(b, s, Options{DisableSolver: true})
			greedyTime := time.Since(greedyStart)
			b.ResetTimer()
			var plan *planning.Plan
			var elapsed time.Duration
			for range b.N {
				start := time.Now()
				plan = mustPlan(b, s, Options{TimeLimit: DefaultTimeLimit})
				elapsed += time.Since(start)
			}
			b.StopTimer()
			r := plan.Solver
			b.ReportMetric(elapsed.Seconds()/float64(b.N), "solve-s")
			b.ReportMetric(r.Objective/r.GreedyObjective, "obj/greedy")
			b.ReportMetric(100*r.Gap, "gap-%")
			b.ReportMetric(plan.Summary.ExpectedHitsPerSecond/greedy.Summary.ExpectedHitsPerSecond, "hits/greedy")
			b.ReportMetric(float64(plan.Summary.StrictMet), "strict-met")
			b.ReportMetric(greedyTime.Seconds(), "greedy-s")
			b.ReportMetric(100*greedy.Solver.Gap, "greedy-gap-%")
			b.Logf("%dx%d: %s %s in %.2fs, gap %.3f%%, strict met %d/%d (greedy %d), hits %.0f (greedy %.0f in %.2fs, gap %.3f%%), notes %v",
				size[0], size[1], r.Method, r.Status, elapsed.Seconds()/float64(b.N), 100*r.Gap, plan.Summary.StrictMet,
				plan.Summary.StrictTenants, greedy.Summary.StrictMet, plan.Summary.ExpectedHitsPerSecond, greedy.Summary.ExpectedHitsPerSecond,
				greedyTime.Seconds(), 100*greedy.Solver.Gap, plan.Notes)
		})
	}
}

// BenchmarkPolicies times every policy on each fleet and reports its expected hits relative
// to the optimal policy's greedy solution and how many strict objectives it meets.
func BenchmarkPolicies(b *testing.B) {
	for _, size := range benchSizes {
		s := benchSnapshot(size[0], size[1])
		greedy := mustPlan(b, s, Options{DisableSolver: true})
		for _, policy := range PolicyNames() {
			if policy == PolicyOptimal {
				continue // BenchmarkOptimal
			}
			b.Run(fmt.Sprintf("%s/%dx%d", policy, size[0], size[1]), func(b *testing.B) {
				var plan *planning.Plan
				for range b.N {
					plan = mustPlan(b, s, Options{Policy: policy})
				}
				b.ReportMetric(plan.Summary.ExpectedHitsPerSecond/greedy.Summary.ExpectedHitsPerSecond, "hits/greedy")
				b.ReportMetric(float64(plan.Summary.StrictMet), "strict-met")
			})
		}
	}
}
