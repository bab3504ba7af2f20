package sim

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/allocator"
	"github.com/cacheqos/cacheqos/internal/workload"
)

// shortFuzz keeps the fleets of the tests short.
func shortFuzz() FuzzOptions {
	o := DefaultFuzzOptions()
	o.Intervals = 8
	return o
}

func TestDrawFleetIsDeterministic(t *testing.T) {
	dump := func(seed uint64) (string, *OracleVerdict) {
		f, err := DrawFleet(seed, shortFuzz())
		if err != nil {
			t.Fatal(err)
		}
		data, err := MarshalScenario(f.Scenario)
		if err != nil {
			t.Fatal(err)
		}
		return string(data), f.Verdict
	}
	a, va := dump(7)
	b, vb := dump(7)
	if a != b || !reflect.DeepEqual(va, vb) {
		t.Fatal("the same seed drew two different fleets")
	}
	if c, _ := dump(8); c == a {
		t.Fatal("seeds 7 and 8 drew the same fleet")
	}
	first, _, err := DrawFleets(3, 2, shortFuzz())
	if err != nil {
		t.Fatal(err)
	}
	again, _, err := DrawFleets(3, 2, shortFuzz())
	if err != nil {
		t.Fatal(err)
	}
	for i := range first {
		if first[i].Seed != again[i].Seed {
			t.Fatalf("fleet %d: seed %#x, then %#x", i, first[i].Seed, again[i].Seed)
		}
	}
}

// TestDrawnFleetsAreValid checks every drawn fleet against the generator's promises: a valid
// scenario within the bounds, at least one strict objective, a flooding tenant that floods,
// and a scenario file that replays it exactly.
func TestDrawnFleetsAreValid(t *testing.T) {
	kinds := map[string]bool{}
	objectives := map[string]bool{}
	floods, tight, feasible := 0, 0, 0
	for seed := uint64(100); seed < 116; seed++ {
		f, err := DrawFleet(seed, shortFuzz())
		if err != nil {
			t.Fatal(err)
		}
		sc := f.Scenario
		if err := sc.Validate(); err != nil {
			t.Errorf("fleet %#x: %v", seed, err)
		}
		if n := len(sc.Nodes); n < 1 || n > fuzzMaxNodes {
			t.Errorf("fleet %#x: %d nodes", seed, n)
		}
		if n := len(sc.Tenants); n < fuzzMinTenants || n > fuzzMaxTenants {
			t.Errorf("fleet %#x: %d tenants", seed, n)
		}
		if f.strictCount() == 0 {
			t.Errorf("fleet %#x: no strict objective", seed)
		}
		for _, tn := range sc.Tenants {
			kinds[tn.Workload.Shape] = true
			switch o := tn.Objective; {
			case o.HitRatio > 0:
				objectives["hit ratio"] = true
			case o.Latency > 0:
				objectives["latency"] = true
			case o.MaxDegradation > 0:
				objectives["degradation"] = true
			}
			if tn.ID == f.Flood && !(len(tn.RateFrom) == 1 && tn.RateFrom[0].Rate >= 4*tn.Rate) {
				t.Errorf("fleet %#x: flooding tenant %+v does not flood", seed, tn)
			}
		}
		if f.Flood != "" {
			floods++
		}
		if f.Tight {
			tight++
		}
		if f.Verdict.Feasible {
			feasible++
		}
		data, err := MarshalScenario(sc)
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseScenario(data, "")
		if err != nil {
			t.Fatalf("fleet %#x: its scenario file does not parse: %v", seed, err)
		}
		if !reflect.DeepEqual(back, sc) {
			t.Errorf("fleet %#x: the scenario file replays another scenario", seed)
		}
	}
	for _, k := range []string{workload.ShapeZipf, workload.ShapeLoop, workload.ShapeUniform, workload.ShapeScan, workload.ShapePhase} {
		if !kinds[k] {
			t.Errorf("no %s workload in 16 fleets", k)
		}
	}
	if len(objectives) != 3 || floods == 0 || tight == 0 || tight == 16 || feasible == 0 {
		t.Errorf("16 fleets: objectives %v, %d with a flood, %d tight, %d feasible", objectives, floods, tight, feasible)
	}
}

// oracleFleet is a small fleet for the oracle's table.
func oracleFleet(nodes int, memory int64, ops float64, tenants ...Tenant) *Scenario {
	return &Scenario{Name: "oracle", Nodes: nodesOf(nodes, memory, ops), Tenants: tenants, Intervals: 6, IntervalSeconds: 2, Warmup: 2}
}

func nodesOf(n int, memory int64, ops float64) []Node { return nodes(n, memory, ops, plenty) }

func TestOracleVerdicts(t *testing.T) {
	zipf := func(id string, o Objective) Tenant {
		return strict(id, "zipf:keys=20000,skew=0.9,value=100-1000", 2000, o)
	}
	loop := strict("etl/loop", "loop:keys=3000,value=100-1000", 2000, Objective{HitRatio: 0.9})
	loopOneNode := loop
	loopOneNode.MaxNodes = 1
	be := bestEffort("bi/scan", "scan:keys=100000,value=100-1000", 3000, Objective{})
	tests := []struct {
		name     string
		sc       *Scenario
		feasible bool
		reason   string
	}{
		{"a zipf target with room to spare", oracleFleet(1, 8*mib, 100000, zipf("shop/web", Objective{HitRatio: 0.6}), be), true, ""},
		{"the same target in too little memory", oracleFleet(1, 512<<10, 100000, zipf("shop/web", Objective{HitRatio: 0.6}), be), false, "needs"},
		{"a target above the re-referenced share", oracleFleet(1, 64*mib, 100000, zipf("shop/web", Objective{HitRatio: 0.99})), false, "re-references"},
		{"a loop past its cliff on two nodes", oracleFleet(2, 3*mib/2, 100000, loop), true, ""},
		{"the loop held to one node", oracleFleet(2, 3*mib/2, 100000, loopOneNode), false, "at most 1 nodes"},
		{"a latency target on idle nodes", oracleFleet(1, 8*mib, 100000, zipf("api/session", Objective{Latency: 5 * time.Millisecond})), true, ""},
		{"a latency target on saturated nodes", oracleFleet(1, 8*mib, 3000, zipf("api/session", Objective{Latency: 5 * time.Millisecond}), be), false, "utilization"},
		{"a degradation target next to a scan", oracleFleet(1, 2*mib, 100000, zipf("api/fair", Objective{MaxDegradation: 1.1}), be), true, ""},
		{"built-in cliffs", scenarioMust(t, "cliffs"), true, ""},
		{"built-in softqos: the analytics target is on a flat stretch of its curve, +0.02 costs too much", scenarioMust(t, "softqos"), false, "bi/analytics needs"},
		{"built-in softqos-infeasible: the feature store's 0.9 target", scenarioMust(t, "softqos-infeasible"), false, "re-references"},
		{"built-in mixed-fleet", scenarioMust(t, "mixed-fleet"), true, ""},
		{"built-in tight-flood", scenarioMust(t, "tight-flood"), true, ""},
		{"built-in cliff-capacity", scenarioMust(t, "cliff-capacity"), true, ""},
		{"built-in working-set-doubles", scenarioMust(t, "working-set-doubles"), true, ""},
		{"built-in diurnal", scenarioMust(t, "diurnal"), true, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := Feasibility(tc.sc, 1)
			if err != nil {
				t.Fatal(err)
			}
			if v.Feasible != tc.feasible || !strings.Contains(v.Reason, tc.reason) {
				t.Errorf("feasible %v (%q), want %v with a reason containing %q", v.Feasible, v.Reason, tc.feasible, tc.reason)
			}
		})
	}
}

func scenarioMust(t *testing.T, name string) *Scenario {
	t.Helper()
	sc, err := ScenarioByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func TestPlaceNeedsLevelsFreeMemory(t *testing.T) {
	sc := oracleFleet(3, 1000, 100000,
		strict("a/one", "uniform:keys=10", 1, Objective{HitRatio: 0.5}),
		strict("a/two", "uniform:keys=10", 1, Objective{HitRatio: 0.5}),
		strict("a/three", "uniform:keys=10", 1, Objective{HitRatio: 0.5}))
	sc.Tenants[0].MaxNodes = 1
	tests := []struct {
		name  string
		needs []int64
		want  [][]int64
		fails bool
	}{
		{"one node's worth, then two even halves", []int64{900, 600, 0}, [][]int64{{900, 0, 0}, {0, 300, 300}, nil}, false},
		{"levelled over every node", []int64{0, 1500, 600}, [][]int64{nil, {500, 500, 500}, {200, 200, 200}}, false},
		{"a node's worth plus one byte on one node", []int64{1001, 0, 0}, nil, true},
		{"more than every node", []int64{0, 2000, 1001}, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := placeNeeds(sc, tc.needs, func(int) bool { return true })
			if (err != nil) != tc.fails {
				t.Fatalf("error %v, want failure %v", err, tc.fails)
			}
			if !tc.fails && !reflect.DeepEqual(got, tc.want) {
				t.Errorf("placed %v, want %v", got, tc.want)
			}
		})
	}
}

func TestWorkloadChanges(t *testing.T) {
	base := func(ts ...Tenant) *Scenario {
		return &Scenario{Name: "changes", Nodes: nodesOf(1, mib, 1000), Tenants: ts, Intervals: 8, IntervalSeconds: 1, Warmup: 1}
	}
	steady := strict("a/steady", "zipf:keys=100,skew=1", 100, Objective{HitRatio: 0.5})
	late := steady
	late.ID, late.Arrive, late.Leave = "a/late", 2, 6
	flood := steady
	flood.ID, flood.RateFrom = "a/flood", []RateChange{{From: 4, Rate: 1000}}
	// 250 requests per phase at 100 per interval: switches in intervals 2, 5 and 7.
	phases, err := workload.ParseSpec("phase:250@zipf:keys=100,skew=1;250@zipf:keys=100,skew=1,prefix=b/")
	if err != nil {
		t.Fatal(err)
	}
	phase := steady
	phase.ID, phase.Workload = "a/phase", phases
	tests := []struct {
		name string
		sc   *Scenario
		want []int
	}{
		{"nothing changes after the start", base(steady), []int{0}},
		{"an arrival and a departure", base(steady, late), []int{0, 2, 6}},
		{"a rate change", base(steady, flood), []int{0, 4}},
		{"phase switches", base(phase), []int{0, 2, 5, 7}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []int
			for i, c := range WorkloadChanges(tc.sc) {
				if c {
					got = append(got, i)
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("changes in %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSteadyMovementAndSettling(t *testing.T) {
	tests := []struct {
		name              string
		changes           []int
		moved             []float64
		mean, largest     float64
		settle, unsettled int
	}{
		{"calm after the start", []int{0}, []float64{1, 0.1, 0.01, 0, 0.01, 0.02}, 0.01, 0.02, 2, 0},
		{"keeps moving", []int{0}, []float64{1, 0.1, 0.1, 0.05, 0.05, 0.05}, 0.05, 0.05, 6, 1},
		{"a change too close to judge", []int{0, 4, 6}, []float64{1, 0, 0, 0, 0.5, 0.5, 0.5, 0}, 0, 0, 1, 0},
		{"no steady interval", []int{0, 2}, []float64{1, 0, 0.5, 0.5}, math.NaN(), math.NaN(), -1, 0},
		{"settles in three after a change", []int{0, 4}, []float64{1, 0, 0, 0, 0.5, 0.3, 0.1, 0, 0, 0}, 0, 0, 3, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			changed := make([]bool, len(tc.moved))
			for _, c := range tc.changes {
				changed[c] = true
			}
			mean, largest := steadyMovement(changed, tc.moved)
			if !sameFloat(mean, tc.mean) || !sameFloat(largest, tc.largest) {
				t.Errorf("steady movement %v / %v, want %v / %v", mean, largest, tc.mean, tc.largest)
			}
			settle, unsettled := settling(changed, tc.moved)
			if settle != tc.settle || unsettled != tc.unsettled {
				t.Errorf("settling %d (%d unsettled), want %d (%d)", settle, unsettled, tc.settle, tc.unsettled)
			}
		})
	}
}

func sameFloat(a, b float64) bool {
	return math.IsNaN(a) && math.IsNaN(b) || math.Abs(a-b) < 1e-9
}

func TestJudgeNamesMissedCriteria(t *testing.T) {
	policy := func(name string, attainment, hit, latency, steady float64, settle, unsettled int) FleetPolicy {
		return FleetPolicy{Policy: name, Attainment: attainment, HitRatio: hit, MeanLatency: latency, SteadyMoved: steady, Settle: settle, Unsettled: unsettled}
	}
	tests := []struct {
		name     string
		policies []FleetPolicy
		want     []string
	}{
		{"best everywhere", []FleetPolicy{
			policy("equal", 1, 0.5, 0.005, 0, 0, 0), policy("optimal", 1, 0.6, 0.004, 0.01, 2, 0)}, nil},
		{"below the floor and below equal", []FleetPolicy{
			policy("equal", 1, 0.5, 0.005, 0, 0, 0), policy("optimal", 0.95, 0.6, 0.004, 0.01, 2, 0)},
			[]string{CriterionAttainment, CriterionVsOthers}},
		{"meets everything but a worse hit ratio and latency than equal", []FleetPolicy{
			policy("equal", 1, 0.6, 0.004, 0, 0, 0), policy("optimal", 1, 0.5, 0.005, 0.01, 2, 0)},
			[]string{CriterionHitRatio, CriterionLatency}},
		{"a better hit ratio bought by missing objectives does not count", []FleetPolicy{
			policy("shared", 0.5, 0.9, 0.001, 0, 0, 0), policy("optimal", 1, 0.5, 0.005, 0.01, 2, 0)}, nil},
		{"thrashes", []FleetPolicy{
			policy("equal", 1, 0.5, 0.005, 0, 0, 0), policy("optimal", 1, 0.5, 0.005, 0.2, 5, 2)},
			[]string{CriterionSteady, CriterionSettle}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := &FleetJudgement{Judged: allocator.PolicyOptimal, Policies: tc.policies, Misses: map[string]string{}}
			j.judge()
			var got []string
			for _, c := range Criteria() {
				if _, ok := j.Misses[c]; ok {
					got = append(got, c)
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("missed %v, want %v (%v)", got, tc.want, j.Misses)
			}
		})
	}
}

// TestShortFuzzRun runs a small fleet end to end under both cache models and checks the
// report names every fleet run with the command that replays it.
func TestShortFuzzRun(t *testing.T) {
	opts := shortFuzz()
	var fleets []*Fleet
	for seed := uint64(1); len(fleets) < 1; seed++ {
		f, err := DrawFleet(seed, opts)
		if err != nil {
			t.Fatal(err)
		}
		if f.Verdict.Feasible && len(f.Scenario.Tenants) <= 8 && len(f.Scenario.Nodes) <= 4 {
			fleets = append(fleets, f)
		}
	}
	var lines []string
	run := FuzzRun{
		Policies: []string{PolicyShared}, Caches: CacheModels(), Judged: allocator.PolicyEqual, Parallel: 2,
		Progress: func(j *FleetJudgement) { lines = append(lines, j.Line()) },
	}
	runs, err := RunFleets(context.Background(), fleets, run)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 || len(lines) != 2 {
		t.Fatalf("%d judgements and %d progress lines, want 2 of each", len(runs), len(lines))
	}
	for i, j := range runs {
		if j.Fleet != fleets[i/2] || j.Cache != CacheModels()[i%2] {
			t.Errorf("judgement %d is of %s with %s, out of order", i, j.Fleet.Scenario.Name, j.Cache)
		}
		var names []string
		for _, p := range j.Policies {
			names = append(names, p.Policy)
		}
		if !reflect.DeepEqual(names, []string{PolicyShared, allocator.PolicyEqual}) {
			t.Errorf("policies %v, want shared and equal", names)
		}
		if eq := j.Policy(allocator.PolicyEqual); eq.SteadyMoved > 0 && !math.IsNaN(eq.SteadyMoved) {
			t.Errorf("equal moved %.3f of the fleet per steady interval; it only moves on arrivals and departures", eq.SteadyMoved)
		}
	}
	var b bytes.Buffer
	if err := WriteFuzzReport(&b, &FuzzReport{MasterSeed: 1, Options: opts, Fleets: fleets, Caches: run.Caches, Judged: run.Judged, Runs: runs}); err != nil {
		t.Fatal(err)
	}
	for _, f := range fleets {
		if !strings.Contains(b.String(), fmt.Sprintf("`%#x`", f.Seed)) {
			t.Errorf("the report does not name fleet %#x:\n%s", f.Seed, b.String())
		}
	}
	if !strings.Contains(b.String(), "every criterion met") {
		t.Errorf("the report has no criteria table:\n%s", b.String())
	}
}
