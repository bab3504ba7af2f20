package sim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/cacheqos/cacheqos/internal/allocator/planning"
	"github.com/cacheqos/cacheqos/internal/keyhash"
	"github.com/cacheqos/cacheqos/internal/workload"
)

// The fleet generator draws random clusters the way platform teams describe theirs: 1-8
// nodes, 3-30 tenants with Zipf, loop, scan, uniform and phase workloads, strict hit-ratio,
// latency and degradation objectives next to best-effort tenants, tight or loose memory,
// arrivals and departures, and in some fleets one best-effort tenant that floods the nodes.
// Every choice derives from the fleet's seed, so a seed replays its fleet.

// FuzzOptions shape the fleets: how long they run.
type FuzzOptions struct {
	Intervals       int
	IntervalSeconds float64
	Warmup          int
}

// DefaultFuzzOptions keeps a fleet's run to seconds per policy.
func DefaultFuzzOptions() FuzzOptions {
	return FuzzOptions{Intervals: 12, IntervalSeconds: 5, Warmup: 3}
}

// Validate reports options a fleet cannot be drawn with.
func (o FuzzOptions) Validate() error {
	if o.Intervals < minFuzzIntervals || o.Warmup < 1 || o.Warmup > o.Intervals/2 || !(o.IntervalSeconds > 0) {
		return fmt.Errorf("fuzz options: %d intervals of %vs with a warmup of %d; want at least %d intervals of positive length and a warmup of 1 to half of them",
			o.Intervals, o.IntervalSeconds, o.Warmup, minFuzzIntervals)
	}
	return nil
}

// minFuzzIntervals leaves room for a warmup, a flood or an arrival, and steady intervals.
const minFuzzIntervals = 8

// Bounds of a drawn fleet.
const (
	fuzzMaxNodes   = 8
	fuzzMinTenants = 3
	fuzzMaxTenants = 30
	// fuzzFloodShare is the share of fleets with a flooding tenant, fuzzTightShare the share
	// with tight memory.
	fuzzFloodShare = 0.35
	fuzzTightShare = 0.5
	// fuzzMaxMoving bounds the tenants that arrive, and those that leave, in one fleet.
	fuzzMaxMoving = 2
	// meanObjectBytes is a drawn workload's mean object (550-byte values and a short key).
	meanObjectBytes = 575
	// A tenant's rate is drawn from [fuzzMinRate, fuzzMaxRate] requests per second (log
	// uniform): a few thousand requests per interval, so that an interval's hit ratio is
	// measured to about ±0.01.
	fuzzMinRate, fuzzMaxRate = 300, 3000
	// fuzzMinOps is the smallest node request capacity drawn.
	fuzzMinOps = 5000
	// memoryGrain rounds node memory.
	memoryGrain = 64 << 10
)

// Fleet is one drawn fleet and the oracle's verdict on it.
type Fleet struct {
	Seed     uint64
	Scenario *Scenario
	// Tight is true when memory was drawn tight (1.1-1.35× the strict needs), false when loose.
	Tight bool
	// Flood names the flooding tenant ("" for none).
	Flood   string
	Verdict *OracleVerdict
}

// FleetName names the fleet drawn from seed.
func FleetName(seed uint64) string { return fmt.Sprintf("fleet-%016x", seed) }

// fleetDraw is the state of one draw.
type fleetDraw struct {
	rng  *rand.Rand
	sc   *Scenario
	opts FuzzOptions
}

func (d *fleetDraw) uniform(lo, hi float64) float64 { return lo + d.rng.Float64()*(hi-lo) }

// logUniform draws from [lo, hi] uniformly in log scale.
func (d *fleetDraw) logUniform(lo, hi float64) float64 {
	return math.Exp(d.uniform(math.Log(lo), math.Log(hi)))
}

func (d *fleetDraw) chance(p float64) bool { return d.rng.Float64() < p }

// DrawFleet draws the fleet of seed and asks the oracle whether its strict objectives are
// feasible with a margin; the caller keeps it or draws another seed.
func DrawFleet(seed uint64, opts FuzzOptions) (*Fleet, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	d := &fleetDraw{
		rng:  rand.New(rand.NewPCG(seed, keyhash.Salt("cacheqos/sim/fuzz"))),
		opts: opts,
		sc: &Scenario{
			Name: FleetName(seed), Title: "fuzz fleet",
			Intervals: opts.Intervals, IntervalSeconds: opts.IntervalSeconds, Warmup: opts.Warmup,
			// A drawn tenant sends a few thousand requests per interval: sampling all of them
			// still gives its curve fewer samples than the sidecar's default rate gets from a
			// real tenant's interval.
			MRCSampleRate: 1,
		},
	}
	f := &Fleet{Seed: seed}
	nodeCount := 1 + d.rng.IntN(fuzzMaxNodes)
	tenantCount := fuzzMinTenants + d.rng.IntN(fuzzMaxTenants-fuzzMinTenants+1)
	flood := d.chance(fuzzFloodShare)
	if flood {
		tenantCount-- // the flooding tenant is one of them
	}
	d.drawTenants(tenantCount)
	if flood {
		f.Flood = d.addFlood()
	}
	d.drawSpreads(nodeCount)
	ops := d.opsPerNode(nodeCount)
	d.sc.Nodes = nodes(nodeCount, 1, ops, plenty)
	profiles, err := d.drawObjectives(seed)
	if err != nil {
		return nil, err
	}
	f.Tight = d.chance(fuzzTightShare)
	d.sizeMemory(profiles, f.Tight)
	f.Scenario = d.sc
	if err := d.sc.Validate(); err != nil {
		return nil, fmt.Errorf("fleet %d: drew an invalid scenario: %w", seed, err)
	}
	f.Verdict = feasibility(d.sc, profiles)
	return f, nil
}

// Workload kinds and how often they are drawn.
var fuzzKinds = []struct {
	kind   string
	weight float64
}{{workload.ShapeZipf, 0.45}, {workload.ShapeLoop, 0.15}, {workload.ShapeUniform, 0.15}, {workload.ShapeScan, 0.1}, {workload.ShapePhase, 0.15}}

func (d *fleetDraw) drawKind() string {
	x := d.rng.Float64()
	for _, k := range fuzzKinds {
		if x < k.weight {
			return k.kind
		}
		x -= k.weight
	}
	return workload.ShapeZipf
}

var fuzzValues = workload.SizeDist{Min: 100, Max: 1000}

func (d *fleetDraw) zipfSpec(minKeys, maxKeys float64, skewLo, skewHi float64, prefix string) workload.Spec {
	return workload.Spec{
		Shape: workload.ShapeZipf, Keys: int(d.logUniform(minKeys, maxKeys)),
		Skew:      math.Round(d.uniform(skewLo, skewHi)*20) / 20,
		ValueSize: fuzzValues, KeyPrefix: prefix,
	}
}

// drawWorkload draws a workload of kind for a tenant sending rate requests per second.
func (d *fleetDraw) drawWorkload(kind string, rate float64) workload.Spec {
	switch kind {
	case workload.ShapeLoop:
		return workload.Spec{Shape: kind, Keys: 100 * (10 + d.rng.IntN(71)), ValueSize: fuzzValues}
	case workload.ShapeUniform:
		return workload.Spec{Shape: kind, Keys: int(d.logUniform(2000, 20000)), ValueSize: fuzzValues}
	case workload.ShapeScan:
		return workload.Spec{Shape: kind, Keys: 1_000_000, ValueSize: fuzzValues}
	case workload.ShapePhase:
		// The hot set moves to fresh keys every 4 to 7 intervals of the tenant's traffic.
		perInterval := rate * d.opts.IntervalSeconds
		phase := func(prefix string) workload.Phase {
			return workload.Phase{Accesses: int(float64(4+d.rng.IntN(4)) * perInterval), Spec: d.zipfSpec(10000, 50000, 0.8, 1.0, prefix)}
		}
		return workload.Spec{Shape: kind, Phases: []workload.Phase{phase("a/"), phase("b/")}}
	}
	return d.zipfSpec(5000, 150000, 0.6, 1.1, "")
}

// drawTenants draws the regular tenants: workloads, rates, classes and lifetimes.
func (d *fleetDraw) drawTenants(count int) {
	strictCount := 0
	for k := range count {
		kind := d.drawKind()
		rate := math.Round(d.logUniform(fuzzMinRate, fuzzMaxRate))
		t := Tenant{
			ID:       fmt.Sprintf("team-%02d/%s", k+1, kind),
			Workload: d.drawWorkload(kind, rate), Rate: rate,
			Class: planning.ClassBestEffort, Priority: int32(50 + d.rng.IntN(201)),
		}
		if kind != workload.ShapeScan && d.chance(0.5) {
			t.Class = planning.ClassStrict
			strictCount++
		}
		d.sc.Tenants = append(d.sc.Tenants, t)
	}
	if strictCount == 0 {
		// Every fleet has a strict tenant to judge.
		t := &d.sc.Tenants[0]
		t.Class = planning.ClassStrict
		if t.Workload.Shape == workload.ShapeScan {
			t.ID = "team-01/" + workload.ShapeZipf
			t.Workload = d.drawWorkload(workload.ShapeZipf, t.Rate)
		}
	}
	d.drawLifetimes()
}

// drawLifetimes makes up to fuzzMaxMoving tenants arrive late and as many leave early; each
// still has counted intervals.
func (d *fleetDraw) drawLifetimes() {
	n, ts := d.opts.Intervals, d.sc.Tenants
	for range d.rng.IntN(fuzzMaxMoving + 1) {
		t := &ts[d.rng.IntN(len(ts))]
		t.Arrive = 1 + d.rng.IntN(n/2)
	}
	for range d.rng.IntN(fuzzMaxMoving + 1) {
		t := &ts[d.rng.IntN(len(ts))]
		earliest := t.Arrive + d.opts.Warmup + 2
		if earliest < n {
			t.Leave = earliest + d.rng.IntN(n-earliest)
		}
	}
}

// addFlood adds a best-effort tenant that sends as much as an average tenant and, from an
// interval early in the run, 4-8 times as much or half to one and a half times all the
// others together, whichever is more.
func (d *fleetDraw) addFlood() string {
	var others float64
	for _, t := range d.sc.Tenants {
		others += t.Rate
	}
	mean := others / float64(len(d.sc.Tenants))
	flood := Tenant{
		ID: "flood/bulk", Workload: d.zipfSpec(100000, 300000, 0.7, 0.9, ""),
		Rate: math.Round(mean), Class: planning.ClassBestEffort, Priority: 50,
	}
	rate := math.Max(d.uniform(4, 8)*mean, d.uniform(0.5, 1.5)*others)
	flood.RateFrom = []RateChange{{From: 3 + d.rng.IntN(4), Rate: math.Round(rate)}}
	d.sc.Tenants = append(d.sc.Tenants, flood)
	return flood.ID
}

// drawSpreads limits some tenants to a few nodes and spreads some over several.
func (d *fleetDraw) drawSpreads(nodeCount int) {
	if nodeCount < 2 {
		return
	}
	for k := range d.sc.Tenants {
		t := &d.sc.Tenants[k]
		if d.chance(0.2) {
			t.MaxNodes = int32(1 + d.rng.IntN(nodeCount-1))
		}
		if d.chance(0.1) {
			t.MinNodes = int32(2 + d.rng.IntN(nodeCount-1))
			if t.MaxNodes > 0 {
				t.MinNodes = min(t.MinNodes, t.MaxNodes)
			}
		}
	}
}

// opsPerNode sizes the nodes' request capacity so that the busiest interval, flood included,
// loads them 30-60% on average (less where that would take fewer than fuzzMinOps).
func (d *fleetDraw) opsPerNode(nodeCount int) float64 {
	var peak float64
	for i := range d.opts.Intervals {
		var rate float64
		for k := range d.sc.Tenants {
			if t := &d.sc.Tenants[k]; t.activeAt(i) {
				rate += t.rateAt(i)
			}
		}
		peak = math.Max(peak, rate)
	}
	ops := peak / float64(nodeCount) / d.uniform(0.3, 0.6)
	// A node serves at least fuzzMinOps requests per second, so that a light fleet's
	// queueing delay stays well under a miss (its nodes are then less loaded).
	return 100 * math.Ceil(math.Max(ops, fuzzMinOps)/100)
}

// Degradation factors a strict tenant may be given.
var fuzzDegradations = []float64{1.05, 1.1, 1.2, 1.5}

// drawObjectives gives each strict tenant an objective its exact curve can meet: a hit ratio
// (or the mean latency it gives) between half and 90% of the highest its requests allow in
// every counted interval (0.9 for a loop, past its cliff), or a degradation factor. A tenant
// that could not reach a hit ratio of 0.1 becomes best effort. It returns the strict tenants'
// exact profiles.
func (d *fleetDraw) drawObjectives(seed uint64) ([]*demandProfile, error) {
	sc := d.sc
	profiles := make([]*demandProfile, len(sc.Tenants))
	var maxDelay float64
	for i := range sc.Intervals {
		q, err := oracleQueueDelay(sc, i)
		if err != nil {
			return nil, err
		}
		maxDelay = math.Max(maxDelay, q)
	}
	tHit, tMiss := sc.hitLatency(), sc.missLatency()
	for k := range sc.Tenants {
		t := &sc.Tenants[k]
		if t.Class != planning.ClassStrict {
			continue
		}
		p, err := exactProfile(sc, t, seed)
		if err != nil {
			return nil, fmt.Errorf("tenant %s: %w", t.ID, err)
		}
		reach := 1.0
		for j := t.firstCounted(sc); j < sc.Intervals && t.activeAt(j); j++ {
			reach = math.Min(reach, p.reachable(j))
		}
		h := math.Floor(100*reach*d.uniform(0.5, 0.9)) / 100
		if t.Workload.Shape == workload.ShapeLoop {
			h = 0.9
		}
		kind := d.rng.Float64()
		switch {
		case h < 0.1 || h > reach-OracleHitRatioMargin:
			t.Class = planning.ClassBestEffort
			continue
		case kind < 0.5:
			t.Objective = Objective{HitRatio: h}
		case kind < 0.75:
			latency := h*tHit + (1-h)*tMiss + maxDelay
			t.Objective = Objective{Latency: time.Duration(math.Ceil(latency*1e4)) * 100 * time.Microsecond}
		default:
			t.Objective = Objective{MaxDegradation: fuzzDegradations[d.rng.IntN(len(fuzzDegradations))]}
		}
		profiles[k] = p
	}
	return profiles, nil
}

// sizeMemory sets the nodes' memory from the strict tenants' needs: the largest sum over the
// intervals of the oracle's needs for hit-ratio and latency objectives, plus a fair share for
// each degradation objective, times 1.1-1.35 (tight) or 1.6-3 (loose).
func (d *fleetDraw) sizeMemory(profiles []*demandProfile, tight bool) {
	sc := d.sc
	factor := d.uniform(1.6, 3)
	if tight {
		factor = d.uniform(1.1, 1.35)
	}
	var absolute float64
	degradations := 0
	needs := make([]int64, len(sc.Tenants))
	for k := range sc.Tenants {
		if profiles[k] == nil {
			continue
		}
		if sc.Tenants[k].Objective.MaxDegradation > 0 {
			degradations++
			continue
		}
		// An error here makes the oracle reject the fleet, and say why.
		needs[k], _ = staticNeed(sc, profiles[k], k)
	}
	for i := range sc.Intervals {
		var sum float64
		for k, need := range needs {
			if sc.Tenants[k].activeAt(i) {
				sum += float64(need)
			}
		}
		absolute = math.Max(absolute, sum)
	}
	// Each degradation objective is counted as a fair share M/T of the total M:
	// M = factor × (absolute + degradations × M / T).
	share := math.Max(0.3, 1-factor*float64(degradations)/float64(len(sc.Tenants)))
	total := factor * absolute / share
	if absolute == 0 {
		total = d.uniform(0.2, 0.8) * workingSetBytes(sc)
	}
	perNode := int64(math.Ceil(total/float64(len(sc.Nodes))/memoryGrain)) * memoryGrain
	perNode = max(perNode, 4*memoryGrain)
	for j := range sc.Nodes {
		sc.Nodes[j].MemoryBytes = perNode
	}
}

// workingSetBytes estimates the bytes of every key the fleet's tenants reuse.
func workingSetBytes(sc *Scenario) float64 {
	var total float64
	var add func(s workload.Spec)
	add = func(s workload.Spec) {
		switch s.Shape {
		case workload.ShapeScan, workload.ShapeTrace:
		case workload.ShapePhase:
			for _, p := range s.Phases {
				add(p.Spec)
			}
		default:
			total += float64(s.Keys) * meanObjectBytes
		}
	}
	for _, t := range sc.Tenants {
		add(t.Workload)
	}
	return total
}

// errTooManyRejected stops a fuzz run whose fleets the oracle keeps rejecting.
var errTooManyRejected = errors.New("the oracle rejected too many fleets in a row")

// Rejection is a fleet the oracle rejected.
type Rejection struct {
	Seed   uint64
	Reason string
}

// DrawFleets draws fleets from the seeds that master derives until n pass the oracle; it
// returns them in order with the rejected ones.
func DrawFleets(master uint64, n int, opts FuzzOptions) ([]*Fleet, []Rejection, error) {
	seeds := rand.New(rand.NewPCG(master, keyhash.Salt("cacheqos/sim/fuzz/seeds")))
	var fleets []*Fleet
	var rejected []Rejection
	for streak := 0; len(fleets) < n; {
		f, err := DrawFleet(seeds.Uint64(), opts)
		if err != nil {
			return nil, nil, err
		}
		if f.Verdict.Feasible {
			fleets = append(fleets, f)
			streak = 0
			continue
		}
		rejected = append(rejected, Rejection{Seed: f.Seed, Reason: f.Verdict.Reason})
		if streak++; streak > 50 {
			return nil, nil, fmt.Errorf("%w (%d); the last: %s", errTooManyRejected, streak, f.Verdict.Reason)
		}
	}
	return fleets, rejected, nil
}
