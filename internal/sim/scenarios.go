package sim

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/cacheqos/cacheqos/internal/allocator/planning"
	"github.com/cacheqos/cacheqos/internal/workload"
)

// Everything is scaled down so that the whole evaluation runs in minutes: nodes hold a few
// MiB, values are 100-1000 bytes, tenants send thousands of requests per second of simulated
// time and intervals last seconds. What matters (the shapes of the curves, who fits where,
// how loaded the nodes are) is kept; absolute sizes and rates are not the papers'.

const mib = 1 << 20

// Scenarios returns the built-in scenarios, in report order.
func Scenarios() []*Scenario {
	return []*Scenario{
		softQoS(), softQoSInfeasible(), maxperf4(), maxperf5(), lacsSweep(), lacsMacro(),
		soundararajanStrictBE(), soundararajanOverload(), cliffs(), dynamics(), large(),
		mixedFleet(), tightFlood(), cliffNearCapacity(), workingSetDoubles(), diurnal(),
	}
}

// ScenarioByName returns the built-in scenario called name.
func ScenarioByName(name string) (*Scenario, error) {
	var names []string
	for _, s := range Scenarios() {
		if s.Name == name {
			return s, nil
		}
		names = append(names, s.Name)
	}
	return nil, fmt.Errorf("no scenario %q (have %s)", name, strings.Join(names, ", "))
}

func spec(s string) workload.Spec {
	sp, err := workload.ParseSpec(s)
	if err != nil {
		panic(fmt.Sprintf("built-in workload %q: %v", s, err)) // a bug in this file, caught by the tests
	}
	return sp
}

// nodes returns n identical nodes.
func nodes(n int, memory int64, ops, bandwidth float64) []Node {
	out := make([]Node, n)
	for j := range out {
		out[j] = Node{Name: fmt.Sprintf("node-%02d", j+1), MemoryBytes: memory, OpsPerSecond: ops, BandwidthBytesPerSecond: bandwidth}
	}
	return out
}

func strict(id, work string, rate float64, o Objective) Tenant {
	return Tenant{ID: id, Workload: spec(work), Rate: rate, Class: planning.ClassStrict, Objective: o}
}

func bestEffort(id, work string, rate float64, o Objective) Tenant {
	return Tenant{ID: id, Workload: spec(work), Rate: rate, Class: planning.ClassBestEffort, Objective: o}
}

// plenty is a bandwidth no scenario's traffic comes near, for scenarios about memory only.
const plenty = 1e12

func softQoSTenants() []Tenant {
	return []Tenant{
		strict("shop/web", "zipf:keys=50000,skew=1,value=100-1000", 3000, Objective{HitRatio: 0.75}),
		strict("batch/loop", "loop:keys=6500,value=100-1000", 1500, Objective{HitRatio: 0.9}),
		strict("bi/analytics", "zipf:keys=100000,skew=0.7,value=100-1000", 3000, Objective{HitRatio: 0.2}),
	}
}

func softQoS() *Scenario {
	return &Scenario{
		Name:  "softqos",
		Title: "Soft-QoS: three applications on one cache, feasible hit-ratio targets",
		Description: "One 10 MiB cache node shared by a Zipf web shop (target hit ratio 0.75, needs about 3.7 MiB), " +
			"a batch job looping over 6,500 keys (target 0.9; a cliff: nothing below its 3.8 MiB loop, everything above) " +
			"and an analytics scan-heavy Zipf 0.7 tenant (target 0.2, about 1.5 MiB). The targets fit together with 1 MiB to spare; " +
			"an equal split (3.3 MiB each) misses the loop's cliff.",
		Nodes:     nodes(1, 10*mib, 100000, plenty),
		Tenants:   softQoSTenants(),
		Intervals: 16, Warmup: 3,
		Claim: &Claim{
			Paper:     "Soft-QoS",
			Statement: "Individual hit rates +67% and +53% over no partitioning and equal partitioning; overall hit rate +11% and +12.9%; QoS met all the time.",
			Measure:   measureSoftQoS,
		},
	}
}

func softQoSInfeasible() *Scenario {
	ts := softQoSTenants()
	ts = append(ts, strict("ml/features", "zipf:keys=20000,skew=0.8,value=100-1000", 2000, Objective{HitRatio: 0.9}))
	for k, p := range []int32{400, 300, 100, 200} {
		ts[k].Priority = p
	}
	return &Scenario{
		Name:  "softqos-infeasible",
		Title: "Soft-QoS: four applications, an infeasible mix of targets",
		Description: "The three applications above plus a feature store wanting hit ratio 0.9 (about 7.5 MiB on its own), " +
			"on the same 10 MiB node: the targets need about 16 MiB, so some must fail. Priorities (web 400, loop 300, " +
			"feature store 200, analytics 100) say which to keep.",
		Nodes:     nodes(1, 10*mib, 100000, plenty),
		Tenants:   ts,
		Intervals: 16, Warmup: 3,
		Claim: &Claim{
			Paper:     "Soft-QoS",
			Statement: "When the targets do not fit, the applications that do not fit are flagged and share what is left (best effort); a badly specified QoS degrades to equal partitioning.",
			Measure:   measureInfeasible,
		},
	}
}

func maxperfTenants(five bool) []Tenant {
	d := Objective{MaxDegradation: 1.05}
	ts := []Tenant{
		strict("app/zipf-hot", "zipf:keys=50000,skew=1,value=100-1000", 2000, d),
		strict("app/zipf-wide", "zipf:keys=100000,skew=0.7,value=100-1000", 4000, d),
		strict("app/loop", "loop:keys=5000,value=100-1000", 1000, d),
		strict("app/zipf-small", "zipf:keys=20000,skew=0.8,value=100-1000", 3000, d),
	}
	if five {
		ts = append(ts, strict("app/uniform", "uniform:keys=10000,value=100-1000", 2000, d))
	}
	return ts
}

func maxperf4() *Scenario {
	return &Scenario{
		Name:  "maxperf",
		Title: "Maxperf: four applications on four servers, at most 5% worse than the fair share",
		Description: "Four cache nodes of 4 MiB; four applications (hot Zipf, wide Zipf, a 2.9 MiB loop, small Zipf) " +
			"whose keys are spread over all nodes, each with Maxperf's default objective: mean latency at most 1.05× " +
			"what it would have with a fair share (1/4 of the 16 MiB). The baseline for the objective is the equal " +
			"policy's measured latency in the same interval.",
		Nodes:     nodes(4, 4*mib, 100000, plenty),
		Tenants:   maxperfTenants(false),
		Intervals: 16, Warmup: 3,
		Claim: &Claim{
			Paper:     "Maxperf",
			Statement: "All SLOs (at most 5% worse than fair share) met in every mix while the uncontrolled shared cache violates several; overall latency −19.6% vs uncontrolled (combo3).",
			Measure:   measureMaxperf(-0.196),
		},
	}
}

func maxperf5() *Scenario {
	return &Scenario{
		Name:  "maxperf-5apps",
		Title: "Maxperf: five applications on four servers",
		Description: "As above with a fifth application (uniform over 10,000 keys, about 5.7 MiB for all of them): " +
			"the fair share drops to 3.2 MiB.",
		Nodes:     nodes(4, 4*mib, 100000, plenty),
		Tenants:   maxperfTenants(true),
		Intervals: 16, Warmup: 3,
		Claim: &Claim{
			Paper:     "Maxperf",
			Statement: "With five applications all SLOs met; overall latency −19.75%, −26.02% and −22.32% vs uncontrolled in three mixes.",
			Measure:   measureMaxperf(-0.2203),
		},
	}
}

// lacsPhases are the elephant's rate ratios to the mouse in the sweep, one phase each.
var lacsPhases = []float64{1.0, 1.5, 2.0, 2.5, 3.0}

const (
	lacsMouseRate   = 2000
	lacsPhaseLength = 5 // intervals per phase
)

func lacsSweep() *Scenario {
	mouse := bestEffort("lacs/mouse", "zipf:keys=30000,skew=0.9,value=100-1000", lacsMouseRate, Objective{})
	elephant := bestEffort("lacs/elephant", "zipf:keys=30000,skew=0.9,value=100-1000", lacsMouseRate, Objective{})
	// As in the paper's micro-benchmark, both tenants' data is on both servers, so the
	// elephant's load lands where the mouse is served.
	mouse.MinNodes, elephant.MinNodes = 2, 2
	for i, r := range lacsPhases[1:] {
		elephant.RateFrom = append(elephant.RateFrom, RateChange{From: (i + 1) * lacsPhaseLength, Rate: r * lacsMouseRate})
	}
	return &Scenario{
		Name:  "lacs-sweep",
		Title: "LACS: a mouse and a growing elephant",
		Description: "Two nodes of 4 MiB serving 4,500 requests/s each; a mouse at 2,000 requests/s and an elephant with " +
			"the same Zipf 0.9 workload whose rate steps through 1.0, 1.5, 2.0, 2.5 and 3.0× the mouse's, five intervals " +
			"per step; both tenants are spread over both nodes, as in the paper. An elephant (LACS) is a tenant above 1/K " +
			"of the aggregate capacity (4,500 requests/s here, so from 2.5×); the isolation guarantee compares each tenant " +
			"with 1/K of the memory and of every node's capacity.",
		Nodes:           nodes(2, 4*mib, 4500, plenty),
		Tenants:         []Tenant{mouse, elephant},
		Intervals:       lacsPhaseLength * len(lacsPhases),
		IntervalSeconds: 5,
		Warmup:          2,
		Claim: &Claim{
			Paper:     "LACS",
			Statement: "Micro-benchmark: at a 1.5× rate ratio the elephant's cache is revoked (mouse hit ratio 40% → 80%); at 1.7× it is bandwidth-isolated and the mouse keeps ~40% better latency than isolated.",
			Measure:   measureLACSSweep,
		},
	}
}

func lacsMacro() *Scenario {
	var ts []Tenant
	works := []string{
		"zipf:keys=30000,skew=0.9,value=100-1000", "zipf:keys=50000,skew=1,value=100-1000",
		"zipf:keys=20000,skew=0.8,value=100-1000", "zipf:keys=100000,skew=0.7,value=100-1000",
		"zipf:keys=10000,skew=0.6,value=100-1000",
	}
	for k := range 30 {
		rate := 800.0 + float64(k%7)*200
		if k%10 == 0 {
			rate = 7000 // three elephants
		}
		ts = append(ts, bestEffort(fmt.Sprintf("macro/tenant-%02d", k+1), works[k%len(works)], rate, Objective{}))
		ts[k].MinNodes = 3 // every user's files are spread over several servers
	}
	return &Scenario{
		Name:  "lacs-macro",
		Title: "LACS: macro benchmark shape, 30 nodes and 30 tenants",
		Description: "Thirty nodes of 2 MiB serving 4,000 requests/s each and thirty tenants with mixed Zipf workloads: " +
			"27 mice at 800-2,000 requests/s and 3 elephants at 7,000 requests/s (above 1/K of the 120,000 requests/s " +
			"aggregate). No SLOs: the comparison is each tenant's latency.",
		Nodes:           nodes(30, 2*mib, 4000, plenty),
		Tenants:         ts,
		Intervals:       8,
		IntervalSeconds: 2,
		Warmup:          2,
		Claim: &Claim{
			Paper:     "LACS",
			Statement: "30 servers: except the throttled user, LACS gives the shortest delays for every user — up to 80.4% (25.3% average) better than max-min fair sharing with round-robin placement.",
			Measure:   measureLACSMacro,
		},
	}
}

func soundararajanStrictBE() *Scenario {
	return &Scenario{
		Name:  "soundararajan",
		Title: "Soundararajan: a strict tenant and a best-effort tenant",
		Description: "One 8 MiB node; a strict TPC-W-like tenant with a mean-latency objective of 3 ms (hit ratio about " +
			"0.72 with 0.2 ms hits and 10 ms misses, some 5 MiB) and a best-effort RUBiS-like tenant with no objective: the strict " +
			"objective first, then the best-effort tenant's latency.",
		Nodes: nodes(1, 8*mib, 100000, plenty),
		Tenants: []Tenant{
			strict("shop/tpcw", "zipf:keys=50000,skew=0.9,value=100-1000", 3000, Objective{Latency: 3 * time.Millisecond}),
			bestEffort("auction/rubis", "zipf:keys=30000,skew=0.9,value=100-1000", 3000, Objective{}),
		},
		Intervals: 14, Warmup: 3,
		Claim: &Claim{
			Paper:     "Soundararajan et al.",
			Statement: "Strict TPC-W with best-effort RUBiS: the strict SLO is met and RUBiS gets 1,193 µs vs 1,844 µs with the simpler PROFILE approach (−35%).",
			Measure:   measureStrictBE,
		},
	}
}

func soundararajanOverload() *Scenario {
	return &Scenario{
		Name:  "soundararajan-overload",
		Title: "Soundararajan: two strict tenants in overload",
		Description: "One 6 MiB node and two strict tenants with mean-latency objectives of 3 ms that cannot both be met " +
			"(together they need about 11 MiB); priorities are equal, so the best plan minimizes the total penalty, " +
			"possibly with an asymmetric split.",
		Nodes: nodes(1, 6*mib, 100000, plenty),
		Tenants: []Tenant{
			strict("db/orders", "zipf:keys=50000,skew=1,value=100-1000", 3000, Objective{Latency: 3 * time.Millisecond}),
			strict("db/catalog", "zipf:keys=30000,skew=0.9,value=100-1000", 3000, Objective{Latency: 3 * time.Millisecond}),
		},
		Intervals: 14, Warmup: 3,
		Claim: &Claim{
			Paper:     "Soundararajan et al.",
			Statement: "Two strict tenants in overload: 743 µs (equal to the IDEAL exhaustive search) vs 833 µs for a 50/50 split (−10.8%).",
			Measure:   measureOverload,
		},
	}
}

func cliffs() *Scenario {
	return &Scenario{
		Name:  "cliffs",
		Title: "Cliffs: loops next to concave curves",
		Description: "Two nodes of 4 MiB; two tenants looping over 3,000 and 4,500 keys (all-or-nothing curves at about " +
			"1.7 and 2.6 MiB) next to two concave Zipf tenants, all with hit-ratio targets. Greedy marginal allocation " +
			"sees no gain from a partial loop and can starve it; a solver over discrete sizes sees the cliff.",
		Nodes: nodes(2, 4*mib, 100000, plenty),
		Tenants: []Tenant{
			strict("etl/loop-a", "loop:keys=3000,value=100-1000", 1500, Objective{HitRatio: 0.9}),
			strict("etl/loop-b", "loop:keys=4500,value=100-1000", 1500, Objective{HitRatio: 0.9}),
			strict("web/zipf-a", "zipf:keys=50000,skew=1,value=100-1000", 2000, Objective{HitRatio: 0.6}),
			bestEffort("web/zipf-b", "zipf:keys=30000,skew=0.9,value=100-1000", 2000, Objective{HitRatio: 0.5}),
		},
		Intervals: 14, Warmup: 3,
		Claim: &Claim{
			Paper:     "MQ (and the design's premise)",
			Statement: "Cliffs (non-concave curves) defeat greedy marginal allocation; choosing discrete sizes with a solver (or the convex hull) does better.",
			Measure:   measureCliffs,
		},
	}
}

func dynamics() *Scenario {
	// The hot set moves to fresh keys every four intervals of this tenant's traffic.
	const phaseAccesses = 4 * 1500 * 5
	hot := func(prefix string) workload.Phase {
		return workload.Phase{Accesses: phaseAccesses, Spec: workload.Spec{
			Shape: workload.ShapeZipf, Keys: 20000, Skew: 0.9, ValueSize: workload.SizeDist{Min: 100, Max: 1000}, KeyPrefix: prefix,
		}}
	}
	shifting := Tenant{
		ID: "news/shifting", Rate: 1500, Class: planning.ClassStrict, Objective: Objective{HitRatio: 0.6},
		Workload: workload.Spec{Shape: workload.ShapePhase, Phases: []workload.Phase{hot("a/"), hot("b/")}},
	}
	arriving := strict("team/newcomer", "zipf:keys=30000,skew=0.9,value=100-1000", 2000, Objective{HitRatio: 0.6})
	arriving.Arrive, arriving.Leave = 6, 15
	return &Scenario{
		Name:  "dynamics",
		Title: "Dynamics: phase changes, a scan, tenants arriving and leaving, Redis-like LRU",
		Description: "Two nodes of 6 MiB with Redis' sampled LRU (5 samples, pool of 16) instead of exact LRU. A tenant " +
			"whose hot set moves to new keys every four intervals, a best-effort scanner that never reuses a key, a steady " +
			"Zipf tenant, and a newcomer that arrives at interval 6 and leaves at interval 15. Intervals of 5 s.",
		Nodes: nodes(2, 6*mib, 100000, plenty),
		Tenants: []Tenant{
			shifting,
			bestEffort("batch/scanner", "scan:keys=100000,value=100-1000", 2500, Objective{}),
			strict("shop/steady", "zipf:keys=50000,skew=1,value=100-1000", 2000, Objective{HitRatio: 0.7}),
			arriving,
		},
		Intervals: 20, IntervalSeconds: 5, Warmup: 2,
		Cache: CacheSampledLRU,
	}
}

func large() *Scenario {
	works := []string{
		"zipf:keys=3000,skew=0.9,value=100-1000", "zipf:keys=4000,skew=1,value=100-1000",
		"zipf:keys=2000,skew=0.8,value=100-1000", "loop:keys=400,value=100-1000",
		"zipf:keys=5000,skew=0.7,value=100-1000", "uniform:keys=800,value=100-1000",
	}
	var ts []Tenant
	for k := range 200 {
		w := works[k%len(works)]
		rate := 600.0 + float64((k*37)%8)*100
		id := fmt.Sprintf("team-%03d/cache", k+1)
		switch k % 3 {
		case 0:
			ts = append(ts, strict(id, w, rate, Objective{HitRatio: 0.6}))
		case 1:
			ts = append(ts, strict(id, w, rate, Objective{Latency: 5 * time.Millisecond}))
		default:
			ts = append(ts, bestEffort(id, w, rate, Objective{}))
		}
		ts[k].Priority = int32(50 + (k*13)%200)
	}
	return &Scenario{
		Name:  "large",
		Title: "Large: 200 tenants on 20 nodes",
		Description: "Twenty nodes of 6 MiB and 200 tenants (600-1,300 requests/s, working sets of 0.2-2.8 MiB): a " +
			"third with a 0.6 hit-ratio target, a third with a 5 ms mean-latency target, a third best effort, priorities " +
			"50-249. Fewer, shorter intervals; the trackers sample every key (rate 1) because each tenant sends few " +
			"requests per interval.",
		Nodes:           nodes(20, 6*mib, 100000, plenty),
		Tenants:         ts,
		Intervals:       7,
		IntervalSeconds: 2,
		Warmup:          3,
		MRCSampleRate:   1,
		Claim: &Claim{
			Paper:     "LACS",
			Statement: "Solve time under 2 s for 30 users × 5,000 files (CVXPY).",
			Measure:   measureLarge,
		},
	}
}

// The scenarios below describe fleets the way a platform team would, rather than a paper's
// experiment: the control loop has to keep objectives that a plain split keeps too.

func mixedFleet() *Scenario {
	visitor := bestEffort("team/visitor", "zipf:keys=30000,skew=0.9,value=100-1000", 2000, Objective{})
	visitor.Arrive, visitor.Leave = 6, 13
	return &Scenario{
		Name:  "mixed-fleet",
		Title: "Mixed fleet: strict targets that fit comfortably next to best-effort tenants",
		Description: "Four nodes of 12 MiB. Four strict tenants: two Zipf tenants with hit-ratio targets (0.72 and 0.65, " +
			"about 2.6 MiB each), a loop over 7,000 keys with a hit-ratio target of 0.9 (a cliff at about 3.8 MiB) and a " +
			"Zipf tenant with a 4 ms mean-latency target. Four best-effort tenants: a scan, a large Zipf, a uniform one and a " +
			"visitor that arrives at interval 6 and leaves at interval 13. An equal share (6 MiB, 4.8 MiB while the visitor " +
			"is there) is past every target, so a plain split meets them all: the loop has to keep that.",
		Nodes: nodes(4, 12*mib, 100000, plenty),
		Tenants: []Tenant{
			strict("shop/web", "zipf:keys=50000,skew=1,value=100-1000", 3000, Objective{HitRatio: 0.72}),
			strict("shop/catalog", "zipf:keys=30000,skew=0.9,value=100-1000", 2000, Objective{HitRatio: 0.65}),
			strict("etl/loop", "loop:keys=7000,value=100-1000", 1500, Objective{HitRatio: 0.9}),
			strict("api/session", "zipf:keys=20000,skew=0.8,value=100-1000", 2000, Objective{Latency: 4 * time.Millisecond}),
			bestEffort("batch/scan", "scan:keys=100000,value=100-1000", 2000, Objective{}),
			bestEffort("bi/large", "zipf:keys=200000,skew=0.8,value=100-1000", 2000, Objective{}),
			bestEffort("misc/uniform", "uniform:keys=20000,value=100-1000", 1000, Objective{}),
			visitor,
		},
		Intervals: 16, Warmup: 3,
	}
}

// floodFrom is the interval from which tightFlood's best-effort tenant floods.
const floodFrom = 6

func tightFlood() *Scenario {
	flood := bestEffort("bulk/flood", "zipf:keys=100000,skew=0.8,value=100-1000", 2000, Objective{})
	flood.RateFrom = []RateChange{{From: floodFrom, Rate: 12000}}
	return &Scenario{
		Name:  "tight-flood",
		Title: "Tight nodes with a best-effort flood",
		Description: "Two nodes of 8 MiB serving 40,000 requests/s each. Three strict tenants: a Zipf tenant with a 0.68 " +
			"hit-ratio target (about 1.9 MiB), a loop over 6,400 keys with a 0.9 target whose cliff (about 3.5 MiB) is just " +
			"under an equal share (4 MiB), and a Zipf tenant whose latency may be at most 1.1× its fair-share latency. A " +
			"best-effort tenant sends as much as each of them until interval 6, then six times as much: its curve keeps " +
			"rising, so a plan that follows expected hits is tempted to take memory from the strict tenants.",
		Nodes: nodes(2, 8*mib, 40000, plenty),
		Tenants: []Tenant{
			strict("shop/web", "zipf:keys=50000,skew=1,value=100-1000", 2000, Objective{HitRatio: 0.68}),
			strict("batch/loop", "loop:keys=6400,value=100-1000", 1500, Objective{HitRatio: 0.9}),
			strict("api/fair", "zipf:keys=30000,skew=0.9,value=100-1000", 2000, Objective{MaxDegradation: 1.1}),
			flood,
		},
		Intervals: 16, Warmup: 3,
	}
}

func cliffNearCapacity() *Scenario {
	return &Scenario{
		Name:  "cliff-capacity",
		Title: "A cliff tenant near capacity",
		Description: "Two nodes of 4 MiB. A strict loop over 12,000 keys (a cliff at about 6.5 MiB, 81% of the cluster, so " +
			"it must span both nodes) with a 0.9 hit-ratio target, a strict Zipf tenant with a 0.45 target (about 0.8 MiB) " +
			"and a best-effort Zipf tenant. The strict targets fit with about 0.7 MiB to spare; a plan that leaves the loop a " +
			"few keys short of its cliff on either node loses most of its hits.",
		Nodes: nodes(2, 4*mib, 100000, plenty),
		Tenants: []Tenant{
			strict("etl/loop", "loop:keys=12000,value=100-1000", 1500, Objective{HitRatio: 0.9}),
			strict("shop/web", "zipf:keys=30000,skew=0.9,value=100-1000", 2000, Objective{HitRatio: 0.45}),
			bestEffort("bi/reports", "zipf:keys=100000,skew=0.8,value=100-1000", 2000, Objective{}),
		},
		Intervals: 14, Warmup: 3,
	}
}

// doublingAfter is how many requests workingSetDoubles' growing tenant sends before its
// working set doubles: eight intervals of its traffic.
const doublingAfter = 8 * 2000 * DefaultIntervalSeconds

func workingSetDoubles() *Scenario {
	// The second phase keeps the first phase's keys (same names) and adds as many again; it
	// lasts past the end of the run.
	grow := fmt.Sprintf("phase:%d@uniform:keys=4000,value=100-1000;1000000000@uniform:keys=8000,value=100-1000", doublingAfter)
	return &Scenario{
		Name:  "working-set-doubles",
		Title: "A strict tenant whose working set doubles mid-run",
		Description: "Two nodes of 5 MiB. A strict tenant reads 4,000 keys uniformly with a 0.8 hit-ratio target (about " +
			"1.8 MiB) and from about interval 8 reads 8,000 (about 3.6 MiB); a strict Zipf tenant with a 0.65 target (about " +
			"1.4 MiB) and a best-effort Zipf tenant share the rest. An equal split (3.3 MiB) is enough before the change " +
			"and not after it.",
		Nodes: nodes(2, 5*mib, 100000, plenty),
		Tenants: []Tenant{
			strict("app/growing", grow, 2000, Objective{HitRatio: 0.8}),
			strict("shop/web", "zipf:keys=50000,skew=1,value=100-1000", 2000, Objective{HitRatio: 0.65}),
			bestEffort("bi/reports", "zipf:keys=100000,skew=0.8,value=100-1000", 2000, Objective{}),
		},
		Intervals: 16, Warmup: 3,
	}
}

// diurnalDay is the number of intervals in diurnal's simulated day.
const diurnalDay = 12

// diurnalRates makes t's rate follow a day: base × (1 + swing × sin(2π(i + shift)/day)),
// changed at every interval.
func diurnalRates(t Tenant, intervals int, swing float64, shift int) Tenant {
	base := t.Rate
	rateAt := func(i int) float64 {
		return math.Round(base * (1 + swing*math.Sin(2*math.Pi*float64(i+shift)/diurnalDay)))
	}
	t.Rate = rateAt(0)
	for i := 1; i < intervals; i++ {
		t.RateFrom = append(t.RateFrom, RateChange{From: i, Rate: rateAt(i)})
	}
	return t
}

func diurnal() *Scenario {
	const intervals = 2 * diurnalDay
	return &Scenario{
		Name:  "diurnal",
		Title: "A diurnal load curve",
		Description: "Two nodes of 6 MiB serving 8,000 requests/s each, over two simulated days of twelve 5 s intervals. " +
			"Every tenant's rate follows a sine around its mean: the strict tenants (a Zipf tenant with a 0.65 hit-ratio " +
			"target and one with a 4 ms mean-latency target) peak in the day, the best-effort ones (an analytics Zipf and a " +
			"uniform batch) at night, so the nodes are busiest (about 55% utilization) and the mix shifts every interval.",
		Nodes: nodes(2, 6*mib, 8000, plenty),
		Tenants: []Tenant{
			diurnalRates(strict("shop/web", "zipf:keys=50000,skew=1,value=100-1000", 2500, Objective{HitRatio: 0.65}), intervals, 0.6, 0),
			diurnalRates(strict("api/session", "zipf:keys=20000,skew=0.8,value=100-1000", 2000, Objective{Latency: 4 * time.Millisecond}), intervals, 0.6, 1),
			diurnalRates(bestEffort("bi/reports", "zipf:keys=100000,skew=0.8,value=100-1000", 2000, Objective{}), intervals, 0.6, diurnalDay/2),
			diurnalRates(bestEffort("batch/uniform", "uniform:keys=10000,value=100-1000", 1500, Objective{}), intervals, 0.6, diurnalDay/2+1),
		},
		Intervals: intervals, IntervalSeconds: 5, Warmup: 2,
	}
}
