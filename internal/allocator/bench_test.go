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

// benchTimeLimit is the optimal policy's time limit per fleet: the default up to 1000 x 100,
// 30 s at 5000 x 300.
func benchTimeLimit(tenants int) time.Duration {
	if tenants >= 5000 {
		return 30 * time.Second
	}
	return DefaultTimeLimit
}

// BenchmarkOptimal plans each fleet with the optimal policy, with its greedy solution alone and
// with the previous formulation (levels and split units only, no stage over real sizes), in
// one run, and reports each one's time, its gap to the upper bound over real sizes (the pooled
// concave-hull LP) and its expected hits relative to the optimal plan's.
func BenchmarkOptimal(b *testing.B) {
	needSolver(b)
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("%dx%d", size[0], size[1]), func(b *testing.B) {
			s := benchSnapshot(size[0], size[1])
			limit := benchTimeLimit(size[0])
			timed := func(opts Options) (*planning.Plan, time.Duration) {
				start := time.Now()
				plan := mustPlan(b, s, opts)
				return plan, time.Since(start)
			}
			greedy, greedyTime := timed(Options{DisableSolver: true})
			previous, previousTime := timed(Options{TimeLimit: limit, levelsOnly: true})
			b.ResetTimer()
			var plan *planning.Plan
			var elapsed time.Duration
			for range b.N {
				start := time.Now()
				plan = mustPlan(b, s, Options{TimeLimit: limit})
				elapsed += time.Since(start)
			}
			b.StopTimer()
			r := plan.Solver
			hits := plan.Summary.ExpectedHitsPerSecond
			b.ReportMetric(elapsed.Seconds()/float64(b.N), "solve-s")
			b.ReportMetric(100*r.Gap, "gap-%")
			b.ReportMetric(float64(plan.Summary.StrictMet), "strict-met")
			b.ReportMetric(greedyTime.Seconds(), "greedy-s")
			b.ReportMetric(100*greedy.Solver.Gap, "greedy-gap-%")
			b.ReportMetric(greedy.Summary.ExpectedHitsPerSecond/hits, "greedy-hits/optimal")
			b.ReportMetric(previousTime.Seconds(), "previous-s")
			b.ReportMetric(100*previous.Solver.Gap, "previous-gap-%")
			b.ReportMetric(previous.Summary.ExpectedHitsPerSecond/hits, "previous-hits/optimal")
			b.Logf("%dx%d, limit %v: optimal %s %s in %.2fs, gap %.3f%%, strict met %d/%d, %.0f hits/s; "+
				"greedy alone %.2fs, gap %.3f%%, strict met %d; previous formulation %s in %.2fs, gap %.3f%%, strict met %d; notes %v",
				size[0], size[1], limit, r.Method, r.Status, elapsed.Seconds()/float64(b.N), 100*r.Gap, plan.Summary.StrictMet, plan.Summary.StrictTenants, hits,
				greedyTime.Seconds(), 100*greedy.Solver.Gap, greedy.Summary.StrictMet,
				previous.Solver.Status, previousTime.Seconds(), 100*previous.Solver.Gap, previous.Summary.StrictMet, plan.Notes)
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
