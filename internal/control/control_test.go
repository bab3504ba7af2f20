package control

import (
	"context"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cacheqos/cacheqos/internal/allocator"
	"github.com/cacheqos/cacheqos/internal/allocator/planning"
	"github.com/cacheqos/cacheqos/internal/cpsat"
	"github.com/cacheqos/cacheqos/internal/curve"
)

const mib = int64(1) << 20

// needSolver fails a test that needs OR-Tools when the library cannot be loaded: the loop's
// tests run the real allocator with the real solver, never silently without it.
func needSolver(t testing.TB) {
	t.Helper()
	if err := cpsat.Available(); err != nil {
		if os.Getenv(cpsat.LibraryEnv) != "" {
			t.Fatalf("OR-Tools is configured but unavailable: %v", err)
		}
		t.Fatalf("OR-Tools not found (set %s): %v", cpsat.LibraryEnv, err)
	}
}

// tenant is a strict tenant on node n1 with a hit-ratio target, a sampled curve given as
// (MiB, hit ratio) pairs, its current memory and the hit ratio observed there.
func tenant(id string, priority int32, target float64, curvePts [][2]float64, current int64, observed float64) planning.Tenant {
	t := planning.Tenant{
		ID: id, Class: planning.ClassStrict, Priority: priority,
		Objective: &planning.Objective{HitRatio: &target},
		Rates:     []planning.NodeRate{{Node: "n1", RequestsPerSecond: 1000}},
		Current:   planning.Current{Partitions: []planning.CurrentPartition{{Node: "n1", MemoryBytes: current}}},
	}
	for _, p := range curvePts {
		t.MissRatioCurve = append(t.MissRatioCurve, planning.MissRatioPoint{SizeBytes: int64(p[0] * float64(mib)), MissRatio: 1 - p[1]})
	}
	t.Observed.HitRatio = &observed
	return t
}

func snapshot(tenants ...planning.Tenant) *planning.Snapshot {
	return &planning.Snapshot{
		APIVersion: planning.APIVersion, Kind: planning.KindSnapshot,
		Nodes:   []planning.Node{{Name: "n1", MemoryBytes: 100 * mib, BandwidthBytesPerSecond: 1 << 40, OpsPerSecond: 1 << 40}},
		Tenants: tenants,
	}
}

func currentOf(s *planning.Snapshot) Allocation {
	out := Allocation{}
	for _, t := range s.Tenants {
		for _, p := range t.Current.Partitions {
			out[t.ID] = append(out[t.ID], planning.Partition{Node: p.Node, MemoryBytes: p.MemoryBytes, RoutingWeight: 1_000_000})
		}
	}
	return out
}

func config(m Mechanisms) Config {
	return Config{
		Allocator:      allocator.Options{Policy: allocator.PolicyOptimal, Workers: 1, Seed: 1},
		MinChangeBytes: mib,
		Mechanisms:     m,
	}
}

// A strict tenant that meets its objective keeps the memory that met it, unless a
// higher-priority objective needs it: then it is lowered and says for whom.
func TestProtection(t *testing.T) {
	needSolver(t)
	// lo meets 0.5 just so with 90 MiB, though its curve says 60 MiB would do. hi (steep)
	// would earn more hits with lo's memory.
	loCurve := [][2]float64{{30, 0.25}, {60, 0.5}, {100, 0.6}}
	cases := []struct {
		name       string
		hiPriority int32
		hiTarget   float64
		mech       Mechanisms
		wantLo     []Reason
		// wantLoAtLeast is the memory lo must keep (0: it must lose memory).
		wantLoAtLeast int64
	}{
		{"protected against efficiency", 100, 0.1, Mechanisms{Protect: true}, []Reason{ReasonProtected, ReasonKept}, 89 * mib},
		{"lowered for a higher priority", 500, 0.8, Mechanisms{Protect: true}, []Reason{ReasonLoweredForPriority}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			hiCurve := [][2]float64{{30, 0.6}, {60, 0.8}, {100, 0.9}}
			snap := snapshot(
				tenant("ns/hi", tc.hiPriority, tc.hiTarget, hiCurve, 10*mib, 0.2),
				tenant("ns/lo", 100, 0.5, loCurve, 90*mib, 0.52),
			)
			snap.Tenants[0].Rates[0].RequestsPerSecond = 5000
			in := Input{Snapshot: snap, Current: currentOf(snap), Measured: map[string]Measurement{"ns/lo": {Met: true, Reads: 10000}, "ns/hi": {Reads: 10000}}}
			d, err := New().Decide(context.Background(), config(tc.mech), in)
			if err != nil {
				t.Fatal(err)
			}
			lo := d.Tenants["ns/lo"]
			if !slices.Contains(tc.wantLo, lo.Reason) {
				t.Errorf("lo: %s (%s), want %s", lo.Reason, lo.Message, tc.wantLo)
			}
			got := allocated(d.Desired["ns/lo"])
			if tc.wantLoAtLeast > 0 && got < tc.wantLoAtLeast {
				t.Errorf("lo has %d MiB, want at least %d", got/mib, tc.wantLoAtLeast/mib)
			}
			// Protected at what it holds less the noise floor (MinChangeBytes).
			if tc.wantLoAtLeast > 0 && d.Fed.Tenants[1].Memory.MinBytes != 89*mib {
				t.Errorf("lo was fed a minimum of %d bytes, want 89 MiB", d.Fed.Tenants[1].Memory.MinBytes)
			}
			if tc.wantLoAtLeast == 0 && got >= 90*mib {
				t.Errorf("lo kept %d MiB; hi's objective needed it", got/mib)
			}
			if lo.Reason == ReasonLoweredForPriority && !strings.Contains(lo.Message, "ns/hi") {
				t.Errorf("lo's explanation names no tenant that needed its memory: %s", lo.Message)
			}
		})
	}
}

// A tenant lowered by a plan whose layer dropped its protection for its own objective (the
// highest unmet one) is lowered, not lowered for a higher priority naming itself; a tenant
// whose protection was dropped for another's objective names that one.
func TestLoweredForPriorityNamesAnother(t *testing.T) {
	pts := [][2]float64{{30, 0.25}, {60, 0.5}, {100, 0.6}}
	snap := snapshot(tenant("ns/a", 500, 0.6, pts, 60*mib, 0.5), tenant("ns/b", 100, 0.5, pts, 40*mib, 0.45))
	l := New()
	l.cfg = config(Mechanisms{Protect: true})
	in := Input{Snapshot: snap, Current: currentOf(snap)}
	c := &candidate{dropped: map[string]string{"ns/a": "ns/a", "ns/b": "ns/a"}}
	d := &Decision{Taken: true, Desired: Allocation{
		"ns/a": {{Node: "n1", MemoryBytes: 50 * mib}},
		"ns/b": {{Node: "n1", MemoryBytes: 30 * mib}},
	}}
	got := l.explain(in, c, d)
	if a := got["ns/a"]; a.Reason != ReasonLowered || strings.Contains(a.Message, "ns/a") {
		t.Errorf("ns/a: %s (%s), want %s naming no tenant", a.Reason, a.Message, ReasonLowered)
	}
	if b := got["ns/b"]; b.Reason != ReasonLoweredForPriority || !strings.Contains(b.Message, "ns/a") {
		t.Errorf("ns/b: %s (%s), want %s naming ns/a", b.Reason, b.Message, ReasonLoweredForPriority)
	}
}

// An observation made right after the tenant's memory moved is cold and corrects nothing;
// settled observations move the correction factor halfway (geometrically) each interval.
func TestDamping(t *testing.T) {
	pts := [][2]float64{{10, 0.2}, {40, 0.6}, {80, 0.8}}
	fit := fitted(&planning.Tenant{MissRatioCurve: tenant("ns/a", 0, 0.5, pts, 0, 0).MissRatioCurve})
	// Observed 0.4 at 40 MiB: the curve reaches 0.4 at 25 MiB, a factor of 25/40.
	f, ok := fit.CorrectionFactor(curve.Point{SizeBytes: 40 * mib, HitRatio: 0.4})
	if !ok || math.Abs(f-25.0/40) > 1e-3 {
		t.Fatalf("CorrectionFactor = %v, %v; want 0.625", f, ok)
	}
	l := New()
	l.cfg = config(Mechanisms{Damping: true})
	want := []float64{0, math.Sqrt(f), f * math.Sqrt(1/f) * math.Pow(f, 0.25)}
	for i, w := range want {
		snap := snapshot(tenant("ns/a", 100, 0.5, pts, 40*mib, 0.4))
		in := Input{Snapshot: snap}
		l.observe(in)
		sh := l.shape(in)
		st := l.tenants["ns/a"]
		if math.Abs(st.factor-w) > 1e-9 {
			t.Errorf("interval %d: factor %v, want %v", i, st.factor, w)
		}
		fed := &sh.damped.Tenants[0]
		c := fitted(fed)
		if got := c.At(40 * mib); math.Abs(got-*fed.Observed.HitRatio) > 1e-9 {
			t.Errorf("interval %d: the fed observation %v is not what the fed curve predicts (%v): the allocator would correct again", i, *fed.Observed.HitRatio, got)
		}
		if i == 0 && math.Abs(c.At(40*mib)-0.6) > 1e-9 {
			t.Errorf("a cold observation corrected the curve: %v at 40 MiB, want 0.6", c.At(40*mib))
		}
		if *snap.Tenants[0].Observed.HitRatio != 0.4 {
			t.Fatal("shape modified its input snapshot")
		}
	}
}

// Feedback raises a strict target by the shortfall observed at a settled size that the plan in
// force predicted to meet it, never beyond what the curve reaches, and halves the raise once
// the objective is met. A shortfall at a size the plan did not promise the target is not the
// curve's error and raises nothing.
func TestFeedback(t *testing.T) {
	pts := [][2]float64{{10, 0.2}, {40, 0.6}, {80, 0.8}}
	l := New()
	l.cfg = config(Mechanisms{Feedback: true})
	steps := []struct {
		observed  float64
		met       bool
		promised  bool
		wantBoost float64
	}{
		{0.45, false, true, 0},      // cold: not counted
		{0.45, false, true, 0.05},   // short by 0.05
		{0.48, false, true, 0.05},   // short again, capped at maxBoost
		{0.56, true, true, 0.025},   // met: halved
		{0.30, false, false, 0.025}, // short, but the plan in force did not promise the target
	}
	for i, s := range steps {
		if st := l.tenants["ns/a"]; st != nil {
			st.promised = s.promised
		}
		snap := snapshot(tenant("ns/a", 100, 0.5, pts, 40*mib, s.observed))
		in := Input{Snapshot: snap, Measured: map[string]Measurement{"ns/a": {Met: s.met, Reads: 1 << 30}}}
		l.observe(in)
		sh := l.shape(in)
		st := l.tenants["ns/a"]
		if math.Abs(st.boost-s.wantBoost) > 1e-9 {
			t.Errorf("step %d: boost %v, want %v", i, st.boost, s.wantBoost)
		}
		fedTarget := *sh.raised.Tenants[0].Objective.HitRatio
		if want := 0.5 + st.boost + st.uncertainty(1<<30); math.Abs(fedTarget-math.Min(want, 0.79)) > 1e-9 {
			t.Errorf("step %d: fed target %v, want %v", i, fedTarget, want)
		}
	}
}

// A plan that differs from the plan in force by noise is not taken: the allocation in force
// stays and nothing moves.
func TestKeepsPlanInForce(t *testing.T) {
	needSolver(t)
	a := tenant("ns/a", 100, 0.5, [][2]float64{{30, 0.5}, {60, 0.7}, {100, 0.75}}, 0, 0)
	b := tenant("ns/b", 100, 0.3, [][2]float64{{20, 0.3}, {50, 0.6}, {100, 0.7}}, 0, 0)
	a.Observed.HitRatio, b.Observed.HitRatio = nil, nil
	l := New()
	cfg := config(DefaultMechanisms())
	first, err := l.Decide(context.Background(), cfg, Input{Snapshot: snapshot(a, b), Current: Allocation{}, SpecsChanged: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, rate := range []float64{1030, 970, 1010} {
		next := snapshot(a, b)
		for k := range next.Tenants {
			t := &next.Tenants[k]
			t.Rates[0].RequestsPerSecond = rate
			t.Current.Partitions = []planning.CurrentPartition{{Node: "n1", MemoryBytes: allocated(first.Desired[t.ID])}}
		}
		d, err := l.Decide(context.Background(), cfg, Input{Snapshot: next, Current: first.Desired})
		if err != nil {
			t.Fatal(err)
		}
		for id, parts := range d.Desired {
			if got, want := allocated(parts), allocated(first.Desired[id]); got != want {
				t.Errorf("interval %d: %s moved from %d to %d bytes on noise (taken %v, kept %q)", i, id, want, got, d.Taken, d.Kept)
			}
		}
	}
}

func TestColdStartCost(t *testing.T) {
	current := &planning.Plan{Tenants: []planning.TenantPlan{
		{ID: "a", MemoryBytes: 100, Partitions: []planning.Partition{{Node: "n1", MemoryBytes: 50}, {Node: "n2", MemoryBytes: 50}}, Predicted: planning.Prediction{HitsPerSecond: 1000}},
		{ID: "b", MemoryBytes: 100, Partitions: []planning.Partition{{Node: "n1", MemoryBytes: 100}}, Predicted: planning.Prediction{HitsPerSecond: 500}},
	}}
	proposed := &planning.Plan{Tenants: []planning.TenantPlan{
		// a moves 25 bytes from n1 to n2: a quarter of its keys start cold.
		{ID: "a", MemoryBytes: 100, Partitions: []planning.Partition{{Node: "n1", MemoryBytes: 25}, {Node: "n2", MemoryBytes: 75}}},
		// b grows: nothing it has is lost.
		{ID: "b", MemoryBytes: 150, Partitions: []planning.Partition{{Node: "n1", MemoryBytes: 150}}},
	}}
	if got := coldStartCost(current, proposed); math.Abs(got-250) > 1e-9 {
		t.Errorf("coldStartCost = %v, want 250", got)
	}
}

func TestMaterialChange(t *testing.T) {
	base := Allocation{"a": {{Node: "n1", MemoryBytes: 100 * mib}}}
	cases := []struct {
		name     string
		proposed Allocation
		want     bool
	}{
		{"same", Allocation{"a": {{Node: "n1", MemoryBytes: 100 * mib}}}, false},
		{"within 10%", Allocation{"a": {{Node: "n1", MemoryBytes: 109 * mib}}}, false},
		{"beyond 10%", Allocation{"a": {{Node: "n1", MemoryBytes: 111 * mib}}}, true},
		{"other node", Allocation{"a": {{Node: "n2", MemoryBytes: 100 * mib}}}, true},
		{"limit added", Allocation{"a": {{Node: "n1", MemoryBytes: 100 * mib, OpsLimitPerSecond: 10}}}, true},
		{"new tenant", Allocation{"a": {{Node: "n1", MemoryBytes: 100 * mib}}, "b": {{Node: "n1", MemoryBytes: mib}}}, true},
	}
	for _, tc := range cases {
		if got := materialChange(base, tc.proposed, mib) != ""; got != tc.want {
			t.Errorf("%s: material %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Feedback tightens a degradation target after each settled miss and relaxes it once met.
func TestFeedbackTightensDegradation(t *testing.T) {
	l := New()
	l.cfg = config(Mechanisms{Feedback: true})
	steps := []struct {
		met  bool
		want float64 // the fed maxDegradation
	}{
		{false, 1.5},              // cold: not counted
		{false, 1.5 * 0.97},       // a settled miss
		{false, 1.5 * 0.95},       // another, capped at maxTighten
		{true, 1.5 * (1 - 0.025)}, // met: the tightening halves
	}
	for i, s := range steps {
		tn := tenant("ns/a", 100, 0.5, [][2]float64{{10, 0.2}, {40, 0.6}}, 40*mib, 0.5)
		d := 1.5
		tn.Objective = &planning.Objective{MaxDegradation: &d}
		in := Input{Snapshot: snapshot(tn), Measured: map[string]Measurement{"ns/a": {Met: s.met, Reads: 1000}}}
		l.observe(in)
		sh := l.shape(in)
		if got := *sh.raised.Tenants[0].Objective.MaxDegradation; math.Abs(got-s.want) > 1e-9 {
			t.Errorf("step %d: fed maxDegradation %v, want %v", i, got, s.want)
		}
		if *in.Snapshot.Tenants[0].Objective.MaxDegradation != 1.5 {
			t.Fatal("shape modified its input snapshot")
		}
	}
}

// The movement budget charges the keys a plan empties, not memory no one holds: a plan that
// hands out free memory stays within a budget smaller than what it hands out.
func TestBudgetLeavesFreeMemoryOut(t *testing.T) {
	needSolver(t)
	a := tenant("ns/a", 100, 0.7, [][2]float64{{30, 0.5}, {60, 0.75}, {100, 0.8}}, 10*mib, 0.3)
	b := tenant("ns/b", 100, 0.5, [][2]float64{{20, 0.3}, {40, 0.6}, {100, 0.7}}, 0, 0)
	b.Observed.HitRatio = nil
	// Best effort: no strict objective, so the budget is never lifted for one.
	for _, t := range []*planning.Tenant{&a, &b} {
		t.Class, t.Objective = planning.ClassBestEffort, nil
	}
	snap := snapshot(a, b)
	if got := unallocated(snap); got != 90*mib {
		t.Fatalf("unallocated = %d MiB, want 90", got/mib)
	}
	cfg := config(DefaultMechanisms())
	cfg.Allocator.MaxChurnBytes = 2 * mib
	d, err := New().Decide(context.Background(), cfg, Input{Snapshot: snap, Current: currentOf(snap), SpecsChanged: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"ns/a", "ns/b"} {
		if tp := d.Tenants[id]; tp.ToBytes < 40*mib {
			t.Errorf("%s gets %d MiB of the free memory: %s", id, tp.ToBytes/mib, tp.Message)
		}
	}
}

// A tenant whose memory moved to a node it did not hold memory on, or whose routing weights
// sent more than reroutedShare of its keys to other nodes, is fed the curve measured before
// the move: the partition that receives them has not seen those keys (a new one's sampler
// started empty) and reports their long reuse distances as misses until it has seen them (a
// loop's, after one whole pass, which can take intervals). The new curve is fed once it shows
// as much reuse, or relearnIntervals after the move whatever it shows.
func TestMovedTenantKeepsItsCurve(t *testing.T) {
	l := New()
	l.cfg = config(Mechanisms{})
	settled := [][2]float64{{2, 0}, {4, 0.95}, {8, 0.97}}
	cold := [][2]float64{{2, 0}, {4, 0}, {8, 0.1}}
	caughtUp := [][2]float64{{2, 0}, {4, 0.93}, {8, 0.96}}
	steps := []struct {
		mibOn     map[string]int64 // the tenant's memory by node during the interval measured
		curve     [][2]float64
		wantCurve [][2]float64
	}{
		{map[string]int64{"n1": 4}, settled, settled},
		{map[string]int64{"n1": 4}, settled, settled},
		{map[string]int64{"n2": 4}, cold, settled}, // moved: the new partition's curve is not fed
		{map[string]int64{"n2": 4}, cold, settled}, // still less reuse than before the move
		{map[string]int64{"n2": 4}, cold, settled},
		{map[string]int64{"n2": 4}, cold, cold}, // relearnIntervals after the move: its own measurement is
		{map[string]int64{"n1": 4}, cold, cold}, // moved again, but what it held shows no more reuse
		{map[string]int64{"n1": 4}, caughtUp, caughtUp},
		{map[string]int64{"n2": 4}, cold, caughtUp},              // moved
		{map[string]int64{"n2": 4}, caughtUp, caughtUp},          // as much reuse as before the move
		{map[string]int64{"n1": 1, "n2": 3}, caughtUp, caughtUp}, // a quarter of its keys on a new node
		{map[string]int64{"n1": 1, "n2": 3}, caughtUp, caughtUp},
		{map[string]int64{"n1": 3, "n2": 1}, cold, caughtUp}, // half its keys re-routed to n1, on the same nodes
		{map[string]int64{"n1": 3, "n2": 1}, cold, caughtUp},
		{map[string]int64{"n1": 3, "n2": 1}, settled, settled},
		{map[string]int64{"n1": 5, "n2": 2}, caughtUp, caughtUp}, // grown: 4% of its keys re-routed
	}
	for i, s := range steps {
		ten := tenant("ns/loop", 100, 0.9, s.curve, 0, 0.5)
		ten.Current.Partitions = nil
		for _, node := range []string{"n1", "n2"} {
			if m := s.mibOn[node]; m > 0 {
				ten.Current.Partitions = append(ten.Current.Partitions, planning.CurrentPartition{Node: node, MemoryBytes: m * mib})
			}
		}
		snap := snapshot(ten)
		snap.Nodes = append(snap.Nodes, planning.Node{Name: "n2", MemoryBytes: 100 * mib, BandwidthBytesPerSecond: 1 << 40, OpsPerSecond: 1 << 40})
		in := Input{Snapshot: snap, Measured: map[string]Measurement{}}
		l.observe(in)
		fed := l.shape(in).damped.Tenants[0].MissRatioCurve
		want := tenant("ns/loop", 100, 0.9, s.wantCurve, 0, 0).MissRatioCurve
		if !slices.Equal(fed, want) {
			t.Errorf("step %d (%v MiB by node): fed curve %v, want %v", i, s.mibOn, fed, want)
		}
	}
}

// The movement budget holds back efficiency, never a strict objective: when the objective that
// protections and the budget together leave unmet needs both relaxed, the plan that relaxes both
// is taken.
func TestBudgetYieldsToAStrictObjective(t *testing.T) {
	needSolver(t)
	concave := [][2]float64{{10, 0.3}, {30, 0.5}, {100, 0.6}}
	a := tenant("ns/a", 100, 0.5, concave, 50*mib, 0.52)
	b := tenant("ns/b", 100, 0.5, concave, 50*mib, 0.52)
	loop := tenant("ns/loop", 100, 0.9, [][2]float64{{25, 0}, {30, 0.99}, {100, 0.99}}, 0, 0)
	loop.Current, loop.Observed.HitRatio = planning.Current{}, nil
	snap := snapshot(a, b, loop)
	cfg := config(DefaultMechanisms())
	cfg.Allocator.MaxChurnBytes = 10 * mib
	in := Input{Snapshot: snap, Current: currentOf(snap), Measured: map[string]Measurement{
		"ns/a": {Met: true, Reads: 1 << 20}, "ns/b": {Met: true, Reads: 1 << 20},
	}}
	d, err := New().Decide(context.Background(), cfg, in)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Taken || d.Tenants["ns/loop"].ToBytes < 30*mib {
		t.Fatalf("taken %v (%s); the loop gets %d MiB (%s), want at least its 30 MiB cliff", d.Taken, d.Kept, d.Tenants["ns/loop"].ToBytes/mib, d.Tenants["ns/loop"].Message)
	}
	for _, id := range []string{"ns/a", "ns/b"} {
		if got := d.Tenants[id].ToBytes; got < 30*mib {
			t.Errorf("%s lowered to %d MiB, below the 30 MiB its target needs", id, got/mib)
		}
	}
}

// A strict tenant whose curve is not learned yet holds a fair share of the cluster, and says
// so, until it has learnSamples settled observations, or up to maxLearnSamples while its
// curve shows no reuse at all (a loop slower than an interval); after that its curve decides.
func TestLearningTenantHoldsAFairShare(t *testing.T) {
	needSolver(t)
	flat := [][2]float64{{10, 0}, {100, 0}}
	reuse := [][2]float64{{10, 0.5}, {20, 0.95}, {100, 0.96}}
	cases := []struct {
		name     string
		samples  int
		curve    [][2]float64
		learning bool
	}{
		{"new", 0, flat, true},
		{"settled once", 1, reuse, true},
		{"settled, no reuse seen yet", learnSamples, flat, true},
		{"settled, reuse seen", learnSamples, reuse, false},
		{"no reuse for too long", maxLearnSamples, flat, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			strict := tenant("ns/strict", 100, 0.9, tc.curve, 1*mib, 0)
			// The other tenant earns more hits from every byte than the strict one's curve
			// promises: without the fair share, the allocator gives it nearly everything.
			other := tenant("ns/other", 100, 0, [][2]float64{{25, 0.5}, {50, 0.8}, {100, 0.99}}, 99*mib, 0.99)
			other.Class, other.Objective = planning.ClassBestEffort, nil
			other.Rates[0].RequestsPerSecond = 5000
			snap := snapshot(strict, other)
			l := New()
			l.tenants["ns/strict"] = &tenantState{samples: tc.samples}
			in := Input{Snapshot: snap, Current: currentOf(snap), Measured: map[string]Measurement{"ns/strict": {Reads: 10000}, "ns/other": {Reads: 10000}}}
			d, err := l.Decide(context.Background(), config(Mechanisms{Protect: true}), in)
			if err != nil {
				t.Fatal(err)
			}
			got, td := allocated(d.Desired["ns/strict"]), d.Tenants["ns/strict"]
			if tc.learning {
				if got < 49*mib || td.Reason != ReasonLearning {
					t.Errorf("strict has %d MiB (%s: %s), want a fair share of at least 49 MiB, Learning", got/mib, td.Reason, td.Message)
				}
				return
			}
			if got >= 49*mib || td.Reason == ReasonLearning {
				t.Errorf("strict has %d MiB (%s: %s), want its curve to decide (less than a fair share)", got/mib, td.Reason, td.Message)
			}
		})
	}
}

// A strict tenant given memory for its objective is first measured while that memory fills
// (a loop hits only after a whole pass). Missing its objective then, with a curve that shows
// less reuse than the one it was raised on, it keeps the memory until a settled interval is
// measured (warm, and its hit ratio no longer rising clearly); a settled miss, or one at memory
// the plan never promised would meet the objective, is acted on.
func TestRaisedTenantAwaitsAWarmMeasurement(t *testing.T) {
	needSolver(t)
	coldCurve := [][2]float64{{10, 0}, {30, 0.3}, {100, 0.35}}
	cases := []struct {
		name    string
		heldMiB int64 // what the tenant held the interval before the one measured
		// before and now are the hit ratios measured the interval before and in the one
		// measured last.
		before, now float64
		promised    bool
		wantKeep    bool
	}{
		{"measured right after the raise", 2, 0, 0, true, true},
		{"measured warm", 30, 0, 0, true, false},
		{"never promised", 2, 0, 0, false, false},
		// A uniform tenant's partition fills over several intervals: warm, but its hit ratio
		// still rises clearly, so the measurement is not yet what the memory gives.
		{"warm and still filling", 30, 0.15, 0.25, true, true},
		{"warm, rising within the noise", 30, 0.24, 0.25, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			loop := tenant("ns/loop", 100, 0.9, coldCurve, 30*mib, tc.now)
			// The other tenant earns more hits from every byte than the loop's cold curve.
			other := tenant("ns/other", 100, 0, [][2]float64{{25, 0.5}, {50, 0.8}, {100, 0.99}}, 70*mib, 0.8)
			other.Class, other.Objective = planning.ClassBestEffort, nil
			other.Rates[0].RequestsPerSecond = 5000
			snap := snapshot(loop, other)
			l := New()
			l.tenants["ns/loop"] = &tenantState{seen: true, samples: maxLearnSamples, promised: tc.promised, observed: tc.before,
				placed: []planning.CurrentPartition{{Node: "n1", MemoryBytes: tc.heldMiB * mib}}}
			in := Input{Snapshot: snap, Current: currentOf(snap), Measured: map[string]Measurement{"ns/loop": {Reads: 10000}, "ns/other": {Reads: 10000}}}
			d, err := l.Decide(context.Background(), config(DefaultMechanisms()), in)
			if err != nil {
				t.Fatal(err)
			}
			got, td := allocated(d.Desired["ns/loop"]), d.Tenants["ns/loop"]
			if tc.wantKeep {
				if got < 29*mib || td.Reason != ReasonKept && td.Reason != ReasonProtected {
					t.Errorf("loop has %d MiB (%s: %s), want at least 29 MiB, Kept or Protected", got/mib, td.Reason, td.Message)
				}
				if d.Fed.Tenants[0].Memory.MinBytes != 29*mib {
					t.Errorf("loop was fed a minimum of %d bytes, want what it holds less the noise floor, 29 MiB", d.Fed.Tenants[0].Memory.MinBytes)
				}
				return
			}
			if got >= 29*mib {
				t.Errorf("loop kept %d MiB (%s: %s); its miss should have been acted on", got/mib, td.Reason, td.Message)
			}
		})
	}
}

// A strict tenant that missed its objective on warm partitions counts as missed by the plan in
// force, whatever its curve predicts there: a curve a little above what the engine gives must
// not keep a plan that misses by a hair for good. The new plan that gives it more is taken.
func TestWarmMissIsNotCountedAsMet(t *testing.T) {
	needSolver(t)
	// web's curve says 0.462 at the 20 MiB it holds; it measured 0.446 there. Damped, the
	// correction takes the curve only halfway down, still above the target.
	web := tenant("ns/web", 100, 0.45, [][2]float64{{10, 0.3}, {20, 0.462}, {40, 0.6}, {80, 0.7}}, 20*mib, 0.446)
	other := tenant("ns/other", 100, 0, [][2]float64{{20, 0.5}, {80, 0.8}}, 80*mib, 0.8)
	other.Class, other.Objective = planning.ClassBestEffort, nil
	other.Rates[0].RequestsPerSecond = 20000
	for _, warm := range []bool{true, false} {
		snap := snapshot(web, other)
		l := New()
		held := 20 * mib
		if !warm {
			held = 10 * mib
		}
		l.tenants["ns/web"] = &tenantState{seen: true, samples: maxLearnSamples, observed: 0.446, placed: []planning.CurrentPartition{{Node: "n1", MemoryBytes: held}}}
		l.tenants["ns/other"] = &tenantState{seen: true, samples: maxLearnSamples, observed: 0.8, placed: []planning.CurrentPartition{{Node: "n1", MemoryBytes: 80 * mib}}}
		in := Input{Snapshot: snap, Current: currentOf(snap), Measured: map[string]Measurement{"ns/web": {Reads: 10000}, "ns/other": {Reads: 10000}}}
		d, err := l.Decide(context.Background(), config(DefaultMechanisms()), in)
		if err != nil {
			t.Fatal(err)
		}
		td := d.Tenants["ns/web"]
		if raised := d.Taken && td.ToBytes > 20*mib+l.cfg.MinChangeBytes; raised != warm {
			t.Errorf("warm %v: web %s (%s), taken %v (%s); want it raised only when its miss was measured warm", warm, td.Reason, td.Message, d.Taken, d.Kept)
		}
	}
}

// A tenant the plan in force gave memory for its objective is judged on that memory only once
// it is measured settled. Until then it keeps the memory, even while its curve is still
// learned and the memory is more than a fair share, and it is fed the curve that promised
// it: the curves of partitions that just grew are read while they fill, and one that looks
// hopeless would hand its memory to another objective before it was ever measured full.
func TestPromiseAwaitedWithItsCurve(t *testing.T) {
	needSolver(t)
	promising := [][2]float64{{10, 0}, {50, 0.5}, {58, 0.91}, {100, 0.95}}
	filling := [][2]float64{{10, 0}, {30, 0.3}, {100, 0.35}}
	cases := []struct {
		name     string
		samples  int
		heldMiB  int64 // what loop held the interval before the one measured
		wantKeep bool
	}{
		{"raised, measured cold", maxLearnSamples, 2, true},
		{"raised while learning, measured cold", 0, 2, true},
		{"measured settled", maxLearnSamples, 60, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			loop := tenant("ns/loop", 100, 0.9, filling, 60*mib, 0.2)
			// other's objective is met only with most of loop's memory.
			other := tenant("ns/other", 100, 0.8, [][2]float64{{25, 0.5}, {40, 0.6}, {75, 0.81}, {100, 0.9}}, 40*mib, 0.6)
			snap := snapshot(loop, other)
			l := New()
			l.tenants["ns/loop"] = &tenantState{seen: true, samples: tc.samples, promised: true, observed: 0.2, curve: curvePoints(promising), sinceMove: relearnIntervals,
				placed: []planning.CurrentPartition{{Node: "n1", MemoryBytes: tc.heldMiB * mib}}}
			l.tenants["ns/other"] = &tenantState{seen: true, samples: maxLearnSamples, observed: 0.6,
				placed: []planning.CurrentPartition{{Node: "n1", MemoryBytes: 40 * mib}}}
			in := Input{Snapshot: snap, Current: currentOf(snap), Measured: map[string]Measurement{"ns/loop": {Reads: 10000}, "ns/other": {Reads: 10000}}}
			d, err := l.Decide(context.Background(), config(DefaultMechanisms()), in)
			if err != nil {
				t.Fatal(err)
			}
			got, td := allocated(d.Desired["ns/loop"]), d.Tenants["ns/loop"]
			if kept := got >= 59*mib; kept != tc.wantKeep {
				t.Errorf("loop has %d MiB (%s: %s); want kept %v", got/mib, td.Reason, td.Message, tc.wantKeep)
			}
			if min := d.Fed.Tenants[0].Memory.MinBytes; tc.wantKeep && min != 59*mib {
				t.Errorf("loop was fed a minimum of %d bytes, want what it holds less the noise floor, 59 MiB", min)
			}
		})
	}
}

func curvePoints(pts [][2]float64) []planning.MissRatioPoint {
	out := make([]planning.MissRatioPoint, len(pts))
	for i, p := range pts {
		out[i] = planning.MissRatioPoint{SizeBytes: int64(p[0] * float64(mib)), MissRatio: 1 - p[1]}
	}
	return out
}

// While every strict objective is met, a plan moves at most SteadyChurnPercent of the fleet's
// memory, however many expected hits moving more would earn: it only trades warm keys for
// them. A strict objective missed lifts that budget back to the cluster's.
func TestSteadyBudget(t *testing.T) {
	needSolver(t)
	for _, tc := range []struct {
		name      string
		strictMet bool
		observed  float64
		steady    bool
	}{
		{"every strict objective met", true, 0.6, true},
		{"a strict objective missed", false, 0.45, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			strict := tenant("ns/strict", 100, 0.5, [][2]float64{{10, 0.3}, {20, 0.6}, {100, 0.7}}, 30*mib, tc.observed)
			flat := tenant("ns/flat", 0, 0, [][2]float64{{1, 0.1}, {100, 0.1}}, 60*mib, 0.1)
			steep := tenant("ns/steep", 0, 0, [][2]float64{{10, 0.1}, {50, 0.95}, {100, 0.95}}, 10*mib, 0.1)
			for _, be := range []*planning.Tenant{&flat, &steep} {
				be.Class, be.Objective = planning.ClassBestEffort, nil
			}
			snap := snapshot(strict, flat, steep)
			cfg := config(DefaultMechanisms())
			cfg.Allocator.MaxChurnBytes = MaxChurnBytes(100*mib, DefaultMaxChurnPercent)
			in := Input{Snapshot: snap, Current: currentOf(snap), Measured: map[string]Measurement{
				"ns/strict": {Met: tc.strictMet, Reads: 1 << 20}, "ns/flat": {Reads: 1 << 20}, "ns/steep": {Reads: 1 << 20},
			}}
			d, err := New().Decide(context.Background(), cfg, in)
			if err != nil {
				t.Fatal(err)
			}
			var moved int64
			for _, td := range d.Tenants {
				moved += abs(td.ToBytes - td.FromBytes)
			}
			budget := MaxChurnBytes(100*mib, SteadyChurnPercent)
			if tc.steady && moved > budget {
				t.Errorf("moved %.1f MiB with every strict objective met, want at most %.1f MiB", float64(moved)/float64(mib), float64(budget)/float64(mib))
			}
			if !tc.steady && moved <= budget {
				t.Errorf("moved %.1f MiB with a strict objective missed, want more than the steady budget of %.1f MiB (steep: %s)", float64(moved)/float64(mib), float64(budget)/float64(mib), d.Tenants["ns/steep"].Message)
			}
		})
	}
}

// A plan in force that holds a tenant on fewer nodes than its spread (a drain left it on one of
// two) is replaced even while every objective is met and the steady budget holds plans back:
// the spread is what the tenant's keys fail over to when a node is lost.
func TestBrokenPlacementIsReplaced(t *testing.T) {
	needSolver(t)
	web := tenant("ns/web", 100, 0.5, [][2]float64{{1, 0.5}, {2, 0.9}, {4, 1}, {32, 1}}, 19*mib, 0.9)
	web.Memory = planning.Memory{MinBytes: 16 * mib, MaxBytes: 32 * mib}
	web.Spread.MinNodes = 2
	snap := snapshot(web)
	snap.Nodes = append(snap.Nodes, planning.Node{Name: "n2", MemoryBytes: 100 * mib, BandwidthBytesPerSecond: 1 << 40, OpsPerSecond: 1 << 40})
	cfg := config(DefaultMechanisms())
	cfg.Allocator.MaxChurnBytes = MaxChurnBytes(200*mib, DefaultMaxChurnPercent)
	in := Input{Snapshot: snap, Current: currentOf(snap), Measured: map[string]Measurement{"ns/web": {Met: true, Reads: 1 << 20}}}
	d, err := New().Decide(context.Background(), cfg, in)
	if err != nil {
		t.Fatal(err)
	}
	var holding []string
	for _, p := range d.Desired["ns/web"] {
		if p.MemoryBytes > 0 {
			holding = append(holding, p.Node)
		}
	}
	if !d.Taken || len(holding) != 2 {
		t.Errorf("ns/web holds memory on %v (plan taken: %v, %s), want on both nodes", holding, d.Taken, d.Kept)
	}
}

// A tenant that does better than its sampled curve at the size it holds is protected at what
// the curve scaled by that ratio needs, not only at what the curve rescaled along its size
// axis needs: the rescaling fits one point, and below it (a curve counting first reads as
// misses is low by a share, not by a size) it promises hits the tenant does not get.
func TestProtectionBelowTheObservedSize(t *testing.T) {
	pts := [][2]float64{{10, 0.2}, {20, 0.35}, {40, 0.45}, {80, 0.5}}
	const target, observed = 0.42, 0.48
	raw := fitted(&planning.Tenant{MissRatioCurve: tenant("ns/a", 0, target, pts, 0, 0).MissRatioCurve})
	scaled := scaledNeed(raw, 40*mib, observed, target+topMargin)
	l := New()
	l.cfg = config(Mechanisms{Damping: true, Protect: true})
	var sh shaped
	for range 3 {
		snap := snapshot(tenant("ns/a", 100, target, pts, 40*mib, observed))
		in := Input{Snapshot: snap, Current: currentOf(snap), Measured: map[string]Measurement{"ns/a": {Met: true, Reads: 100000}}}
		l.observe(in)
		sh = l.shape(in)
	}
	if f := l.tenants["ns/a"].factor; f <= 1 {
		t.Fatalf("correction factor %v: the test needs a curve rescaled for a tenant doing better than it", f)
	}
	rescaled, ok := fitted(&sh.damped.Tenants[0]).MinSize(target + topMargin)
	if !ok || rescaled >= scaled {
		t.Fatalf("the rescaled curve needs %d bytes, the scaled one %d: the test needs the rescaled one to promise more below 40 MiB", rescaled, scaled)
	}
	want := int64(float64(scaled) * (1 + protectCushion))
	if got := sh.protections["ns/a"].bytes; got != want {
		t.Errorf("protected at %.1f MiB, want %.1f MiB (the scaled curve's need plus the cushion; the rescaled curve's is %.1f MiB)", float64(got)/float64(mib), float64(want)/float64(mib), float64(rescaled)/float64(mib))
	}
	// Scaled by 0.48/0.45 the curve reaches 0.43 where it reached 0.403: between 20 and 40 MiB.
	if scaled <= 20*mib || scaled >= 40*mib {
		t.Errorf("scaled need %.1f MiB, want between 20 and 40", float64(scaled)/float64(mib))
	}
}

func TestScaledNeed(t *testing.T) {
	c := fitted(&planning.Tenant{MissRatioCurve: tenant("ns/a", 0, 0, [][2]float64{{10, 0.2}, {20, 0.4}, {40, 0.5}}, 0, 0).MissRatioCurve})
	cases := []struct {
		name             string
		observed, target float64
		want             int64
	}{
		{"as the curve predicts", 0.5, 0.4, 20 * mib},
		{"better than the curve lowers the need", 0.625, 0.4, 16 * mib},
		{"worse than the curve raises it", 0.25, 0.2, 20 * mib},
		{"out of reach keeps what is held", 0.3, 0.4, 40 * mib},
		{"nothing observed keeps what is held", 0, 0.4, 40 * mib},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := scaledNeed(c, 40*mib, tc.observed, tc.target)
			if d := got - tc.want; d > mib/100 || d < -mib/100 {
				t.Errorf("scaledNeed = %.2f MiB, want %.2f", float64(got)/float64(mib), float64(tc.want)/float64(mib))
			}
		})
	}
}

// A tenant far above its target releases at most maxRelease of its memory per interval: each
// step is measured before the next.
func TestProtectionReleasesAStepAtATime(t *testing.T) {
	pts := [][2]float64{{10, 0.5}, {20, 0.6}, {40, 0.7}}
	l := New()
	l.cfg = config(Mechanisms{Damping: true, Protect: true})
	held := 40 * mib
	for i := range 3 {
		snap := snapshot(tenant("ns/a", 100, 0.4, pts, held, 0.7))
		in := Input{Snapshot: snap, Current: currentOf(snap), Measured: map[string]Measurement{"ns/a": {Met: true, Reads: 100000}}}
		l.observe(in)
		got := l.shape(in).protections["ns/a"].bytes
		if want := int64(float64(held) * (1 - maxRelease)); got != want {
			t.Fatalf("interval %d: protected at %.1f of %.1f MiB, want %.1f (its curve needs about 8 MiB)", i, float64(got)/float64(mib), float64(held)/float64(mib), float64(want)/float64(mib))
		}
		held = got
	}
}
