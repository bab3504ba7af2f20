package sim

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/allocator"
	"github.com/cacheqos/cacheqos/internal/allocator/planning"
	"github.com/cacheqos/cacheqos/internal/curve"
	"github.com/cacheqos/cacheqos/internal/mrc"
)

func oneTenant(nodeCount int, memory int64, work, cache string) *Scenario {
	return &Scenario{
		Name:      "single",
		Nodes:     nodes(nodeCount, memory, 1e6, plenty),
		Tenants:   []Tenant{bestEffort("t/one", work, 5000, Objective{})},
		Intervals: 6, IntervalSeconds: 4, Warmup: 2, Cache: cache,
	}
}

func onMemcached(sc *Scenario) *Scenario {
	sc.Engine = EngineMemcached
	return sc
}

// TestCurvePredictsSimulatedCache checks the loop the allocator relies on: the curve the
// operator would build from the sidecars' sampled trackers (merged over nodes) predicts, at the
// memory the tenant has, the hit ratio the simulated cache really gets.
func TestCurvePredictsSimulatedCache(t *testing.T) {
	tests := []struct {
		name      string
		scenario  *Scenario
		tolerance float64
	}{
		{"zipf, one node", oneTenant(1, 3*mib, "zipf:keys=30000,skew=0.9,value=100-1000", CacheLRU), 0.03},
		{"zipf, three nodes", oneTenant(3, mib, "zipf:keys=30000,skew=0.9,value=100-1000", CacheLRU), 0.04},
		{"uniform, two nodes", oneTenant(2, 2*mib, "uniform:keys=12000,value=100-1000", CacheLRU), 0.04},
		{"loop above its cliff", oneTenant(2, 2*mib, "loop:keys=4000,value=100-1000", CacheLRU), 0.03},
		{"zipf, sampled LRU", oneTenant(2, 2*mib, "zipf:keys=30000,skew=0.9,value=100-1000", CacheSampledLRU), 0.05},
		{"zipf, memcached", onMemcached(oneTenant(2, 2*mib, "zipf:keys=30000,skew=0.9,value=100-1000", CacheLRU)), 0.04},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, err := newEngine(tc.scenario, allocator.PolicyEqual, 3)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if err := e.plan(ctx, 0); err != nil {
				t.Fatal(err)
			}
			for i := range tc.scenario.Intervals {
				e.simulate(i)
				e.measure(i)
				snap := e.snapshot(i + 1)
				pt := snap.Tenants[0]
				if i >= tc.scenario.Warmup {
					pts := make([]curve.Point, len(pt.MissRatioCurve))
					for j, p := range pt.MissRatioCurve {
						pts[j] = curve.Point{SizeBytes: p.SizeBytes, HitRatio: 1 - p.MissRatio}
					}
					c, err := curve.Fit(pts)
					if err != nil {
						t.Fatal(err)
					}
					size := e.tenants[0].memory()
					predicted, observed := c.At(size), *pt.Observed.HitRatio
					if math.Abs(predicted-observed) > tc.tolerance {
						t.Errorf("interval %d: curve predicts %.3f at %s, the cache got %.3f", i, predicted, planning.FormatBytes(size), observed)
					}
				}
				if i+1 < tc.scenario.Intervals {
					if err := e.plan(ctx, i+1); err != nil {
						t.Fatal(err)
					}
				}
			}
		})
	}
}

func TestMergeCurvesScalesByShare(t *testing.T) {
	sizes := []int64{100, 200, 400, 800}
	node := mrc.Curve{Sizes: sizes, HitRatio: []float64{0.1, 0.2, 0.4, 0.8}}
	merged := mergeCurves([]nodeCurve{{requestsPerSecond: 50, curve: node}, {requestsPerSecond: 50, curve: node}}, 2)
	// Half the keys on each node: a total size S is S/2 on each, so the total curve at 2s is
	// the node curve at s.
	want := []planning.MissRatioPoint{{SizeBytes: 200, MissRatio: 0.9}, {SizeBytes: 400, MissRatio: 0.8}, {SizeBytes: 800, MissRatio: 0.6}, {SizeBytes: 1600, MissRatio: 0.2}}
	if len(merged) != len(want) {
		t.Fatalf("merged %v, want %v", merged, want)
	}
	for i := range want {
		if merged[i].SizeBytes != want[i].SizeBytes || math.Abs(merged[i].MissRatio-want[i].MissRatio) > 1e-9 {
			t.Fatalf("merged %v, want %v", merged, want)
		}
	}
	if got := mergeCurves(nil, 2); got != nil {
		t.Errorf("no curves merged to %v", got)
	}
}

// TestTokenBucketsCapThrottledTenants checks that a partition with limits serves at most its
// rate (the proxy's buckets with burst and maximum wait), and refuses what would wait longer.
func TestTokenBucketsCapThrottledTenants(t *testing.T) {
	sc := oneTenant(1, 4*mib, "zipf:keys=1000,skew=0.9,value=100", CacheLRU)
	sc.Intervals = 3
	e, err := newEngine(sc, allocator.PolicyEqual, 1)
	if err != nil {
		t.Fatal(err)
	}
	const opsLimit = 1000 // the tenant sends 5,000 requests per second
	plan := &planning.Plan{Tenants: []planning.TenantPlan{{ID: "t/one", Partitions: []planning.Partition{
		{Node: "node-01", MemoryBytes: 4 * mib, RoutingWeight: 1_000_000, OpsLimitPerSecond: opsLimit},
	}}}}
	if err := e.apply(plan); err != nil {
		t.Fatal(err)
	}
	// The first interval also fills the bucket's queue (up to the maximum wait); from then on
	// the tenant is served at the limit.
	for i := range sc.Intervals {
		e.simulate(i)
		e.measure(i)
	}
	st := e.tenants[0].stats[0]
	served := float64(st.served()) / sc.IntervalSeconds
	if served > opsLimit*1.05 || served < opsLimit*0.9 {
		t.Errorf("served %.0f requests/s under a %d ops/s limit", served, opsLimit)
	}
	if st.refused == 0 {
		t.Error("no request refused although demand is five times the limit")
	}
	// Held requests wait up to the maximum; the tenant's mean latency shows it.
	if mean := e.result.Tenants[0].MeanLatency[2]; mean < 0.1 {
		t.Errorf("mean latency %v s: held requests did not wait", mean)
	}
}

// smallScenario is a quick scenario exercising every mechanism: two nodes, objectives of each
// kind, a cliff, a tenant arriving and leaving.
func smallScenario() *Scenario {
	late := strict("late/comer", "zipf:keys=8000,skew=0.9,value=100-1000", 800, Objective{HitRatio: 0.5})
	late.Arrive, late.Leave = 2, 5
	return &Scenario{
		Name: "small", Title: "small", Description: "test",
		Nodes: nodes(2, mib, 3000, 5e6),
		Tenants: []Tenant{
			strict("a/zipf", "zipf:keys=10000,skew=1,value=100-1000", 1000, Objective{HitRatio: 0.6}),
			strict("b/loop", "loop:keys=1500,value=100-1000", 600, Objective{MaxDegradation: 1.05}),
			bestEffort("c/wide", "zipf:keys=20000,skew=0.7,value=100-1000", 1500, Objective{Latency: 6 * time.Millisecond}),
			late,
		},
		Intervals: 6, IntervalSeconds: 2, Warmup: 1,
		Claim: &Claim{Paper: "test", Statement: "a claim", Measure: measureCliffs},
	}
}

func renderAll(t *testing.T, r *ScenarioResult, dir string) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteReport(&buf, []*ScenarioResult{r}, ReportOptions{PlotDir: "plots"}); err != nil {
		t.Fatal(err)
	}
	if err := WritePlots(dir, []*ScenarioResult{r}); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.png"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no plots written (%v)", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&buf, "%s %x\n", filepath.Base(f), data)
	}
	return buf.Bytes()
}

// TestRunsAreDeterministic runs every policy twice (once with two runs in parallel) and
// compares the report without plan times, and the plots, byte for byte.
func TestRunsAreDeterministic(t *testing.T) {
	ctx := context.Background()
	first, err := RunScenario(ctx, smallScenario(), nil, 42, 2)
	if err != nil {
		t.Fatal(err)
	}
	second, err := RunScenario(ctx, smallScenario(), nil, 42, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*ScenarioResult{first, second} {
		if s := r.Summary(allocator.PolicyOptimal); s.SolverTimeouts > 0 {
			// A solve stopped by its wall-clock limit (a starved machine) may return another
			// plan next time; everything else must still match.
			t.Logf("the solver hit its time limit %d times; comparing the other policies", s.SolverTimeouts)
			first.Runs, second.Runs = withoutPolicy(first.Runs, allocator.PolicyOptimal), withoutPolicy(second.Runs, allocator.PolicyOptimal)
			first.Summarize()
			second.Summarize()
			break
		}
	}
	a, b := renderAll(t, first, t.TempDir()), renderAll(t, second, t.TempDir())
	if !bytes.Equal(a, b) {
		t.Fatalf("same seed, different reports:\n%s\n----\n%s", firstDiff(a, b), firstDiff(b, a))
	}
	other, err := RunScenario(ctx, smallScenario(), []string{PolicyShared}, 43, 1)
	if err != nil {
		t.Fatal(err)
	}
	if other.Summaries[0].HitRatio == first.Summaries[0].HitRatio {
		t.Error("a different seed gave the same shared hit ratio")
	}
	report := string(a)
	for _, want := range []string{"## Headline", "## The papers' claims next to ours", "| small |", "(omitted)", "![small hit ratio over time under optimal](plots/small-hit-optimal.png)"} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

func withoutPolicy(runs []*RunResult, policy string) []*RunResult {
	var out []*RunResult
	for _, r := range runs {
		if r.Policy != policy {
			out = append(out, r)
		}
	}
	return out
}

func firstDiff(a, b []byte) string {
	la, lb := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := range la {
		if i >= len(lb) || la[i] != lb[i] {
			return la[i]
		}
	}
	return ""
}

func TestRunChecksItsInputs(t *testing.T) {
	if _, err := Run(context.Background(), smallScenario(), "fifo", 1); err == nil || !strings.Contains(err.Error(), `unknown policy "fifo"`) {
		t.Errorf("unknown policy: error %v", err)
	}
	sc := smallScenario()
	sc.Intervals = 0
	if _, err := Run(context.Background(), sc, PolicyShared, 1); err == nil || !strings.Contains(err.Error(), "Intervals: 0") {
		t.Errorf("bad scenario: error %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, smallScenario(), allocator.PolicyEqual, 1); err == nil {
		t.Error("a cancelled context ran to the end")
	}
}
