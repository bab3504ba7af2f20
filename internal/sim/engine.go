package sim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/cacheqos/cacheqos/internal/allocator"
	"github.com/cacheqos/cacheqos/internal/allocator/planning"
	"github.com/cacheqos/cacheqos/internal/control"
	"github.com/cacheqos/cacheqos/internal/curve"
	"github.com/cacheqos/cacheqos/internal/keyhash"
	"github.com/cacheqos/cacheqos/internal/mrc"
	"github.com/cacheqos/cacheqos/internal/rendezvous"
	"github.com/cacheqos/cacheqos/internal/tokenbucket"
	"github.com/cacheqos/cacheqos/internal/workload"
)

// RunResult is one policy's run of one scenario.
type RunResult struct {
	Scenario string
	Policy   string
	Tenants  []TenantRun
	// Intervals describes each interval: the plan applied at its start and the node loads.
	Intervals []IntervalRun
	// overall pools the latencies of every counted request.
	overall latencyHist
}

// TenantRun is one tenant's per-interval measurements (NaN or 0 while inactive).
type TenantRun struct {
	ID                string
	Requests, Hits    []int64
	Refused           []int64
	MeanLatency       []float64 // seconds
	PredictedHitRatio []float64 // what the plan in force predicted (NaN for shared)
	// PredictedLatency is the mean latency, queueing included, the plan in force predicted
	// (NaN for shared and while the tenant's latencies are not measured).
	PredictedLatency []float64
	MemoryBytes      []int64 // total memory in force
	// Isolated marks intervals in which the plan throttled the tenant as a LACS elephant.
	Isolated []bool
	// Counted marks the intervals that count in the results: active and past the warmup.
	Counted []bool
	latency latencyHist // latencies of counted requests
}

// IntervalRun describes one interval of a run.
type IntervalRun struct {
	// MovedBytes is the movement of the plan applied at the start of the interval: the sum
	// over tenants and nodes of |new memory - old memory| (the keys whose partition moved or
	// shrank are lost; the new space starts cold).
	MovedBytes int64
	// PlanSeconds is the wall time of that plan (not deterministic; kept out of comparisons).
	PlanSeconds float64
	// SolverStatus is the optimal policy's solver status ("" for the other policies).
	SolverStatus string
	// SaturatedNodes counts nodes whose utilization reached 1 during the interval.
	SaturatedNodes int
	// MaxUtilization is the highest node utilization (ops or bytes) during the interval.
	MaxUtilization float64
}

// Run simulates the scenario under one policy. The same scenario, policy and seed always give
// the same result, plan times aside. ctx cancels the run between intervals.
func Run(ctx context.Context, sc *Scenario, policy string, seed uint64) (*RunResult, error) {
	if err := sc.Validate(); err != nil {
		return nil, fmt.Errorf("scenario %s: %w", sc.Name, err)
	}
	if !slices.Contains(Policies(), policy) {
		return nil, fmt.Errorf("unknown policy %q (want one of %v)", policy, Policies())
	}
	e, err := newEngine(sc, policy, seed)
	if err != nil {
		return nil, err
	}
	if err := e.plan(ctx, 0); err != nil {
		return nil, err
	}
	for i := range sc.Intervals {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		e.simulate(i)
		e.measure(i)
		if i+1 < sc.Intervals {
			if err := e.plan(ctx, i+1); err != nil {
				return nil, err
			}
		}
	}
	return e.result, nil
}

type engine struct {
	sc        *Scenario
	policy    string
	seed      uint64
	nodeIndex map[string]int
	tenants   []*tenantState
	clock     *simClock
	model     *mrc.EngineModel // the scenario engine's byte accounting
	shared    []Cache          // per node: the shared policy's caches
	pools     []*nodePool      // per node: the best-effort pool, when pooling (pool.go)
	pending   []pendingRequest
	queueRNG  *rand.Rand
	result    *RunResult
	// loop is the operator's control loop, with its state for this run, and its settings.
	loop    *control.Loop
	loopCfg control.Config
	// planned lists the tenants the plan in force was made for.
	planned []string
}

type tenantState struct {
	spec     *Tenant
	index    int
	gen      workload.Generator
	arrivals *rand.Rand
	route    *rendezvous.Table
	// routeNode maps the route table's node positions to node indices.
	routeNode []int
	parts     []*partition // by node index; nil where the tenant has no partition
	stats     []nodeStats  // by node index, for the interval being simulated
	unrouted  int64        // requests with no node to go to (served by the backend)
	measured  bool         // stats hold a simulated interval
	plan      *planning.TenantPlan
	pooled    bool // the plan in force serves the tenant from its nodes' pools (pool.go)
	history   []planning.HitRatioPoint
	// sums for the interval: service and throttling time of every request
	beforeQueue float64
	result      *TenantRun
}

type partition struct {
	cache Cache
	// pooled: cache is the node's best-effort pool (pool.go), shared with other tenants.
	pooled bool
	// recorder records the partition's reads and writes in its curve, as the sidecar's.
	recorder *mrc.Recorder
	limiter  *tokenbucket.Limiter
	memory   int64
}

func (ts *tenantState) memory() int64 {
	var total int64
	for _, p := range ts.parts {
		if p != nil {
			total += p.memory
		}
	}
	return total
}

func newEngine(sc *Scenario, policy string, seed uint64) (*engine, error) {
	e := &engine{
		sc: sc, policy: policy, seed: seed,
		nodeIndex: make(map[string]int, len(sc.Nodes)),
		clock:     &simClock{},
		queueRNG:  rand.New(rand.NewPCG(seed, keyhash.Salt("cacheqos/sim/queue"))),
		result:    &RunResult{Scenario: sc.Name, Policy: policy, Intervals: make([]IntervalRun, sc.Intervals), overall: newLatencyHist()},
	}
	for j, n := range sc.Nodes {
		e.nodeIndex[n.Name] = j
	}
	model, err := sc.engineModel()
	if err != nil {
		return nil, err
	}
	e.model = model
	e.result.Tenants = make([]TenantRun, len(sc.Tenants))
	for k := range sc.Tenants {
		t := &sc.Tenants[k]
		gen, err := t.requests(seed)
		if err != nil {
			return nil, fmt.Errorf("tenant %s: %w", t.ID, err)
		}
		ts := &tenantState{
			spec: t, index: k, gen: gen,
			arrivals: rand.New(rand.NewPCG(seed, keyhash.Salt("arrivals/"+t.ID))),
			parts:    make([]*partition, len(sc.Nodes)),
			stats:    make([]nodeStats, len(sc.Nodes)),
			result:   &e.result.Tenants[k],
		}
		*ts.result = TenantRun{
			ID: t.ID, Requests: make([]int64, sc.Intervals), Hits: make([]int64, sc.Intervals),
			Refused: make([]int64, sc.Intervals), MeanLatency: nanSlice(sc.Intervals),
			PredictedHitRatio: nanSlice(sc.Intervals), PredictedLatency: nanSlice(sc.Intervals), MemoryBytes: make([]int64, sc.Intervals),
			Counted: make([]bool, sc.Intervals), Isolated: make([]bool, sc.Intervals), latency: newLatencyHist(),
		}
		e.tenants = append(e.tenants, ts)
	}
	if policy != PolicyShared {
		e.loop, e.loopCfg = control.New(), loopConfig(sc, policy)
	}
	if policy == PolicyShared {
		nodes := make([]rendezvous.Node, len(sc.Nodes))
		for j, n := range sc.Nodes {
			c, err := NewCache(sc.Cache, cacheCapacity(model, n.MemoryBytes), keyhash.Mix(seed+uint64(j)))
			if err != nil {
				return nil, err
			}
			e.shared = append(e.shared, c)
			nodes[j] = rendezvous.Node{ID: n.Name, Weight: float64(n.MemoryBytes)}
		}
		route, err := rendezvous.New(nodes)
		if err != nil {
			return nil, err
		}
		for _, ts := range e.tenants {
			ts.route = route
			ts.routeNode = make([]int, len(nodes))
			for j := range nodes {
				ts.routeNode[j] = j
			}
		}
	}
	return e, nil
}

// requests returns the tenant's request stream for a run with seed. Every policy sees the
// same requests (the stream depends on the seed and the tenant only), and so does the
// feasibility oracle.
func (t *Tenant) requests(seed uint64) (workload.Generator, error) {
	spec := t.Workload
	// Tenants' keys never collide, in the shared cache too.
	spec.KeyPrefix = t.ID + "/" + spec.KeyPrefix
	return workload.New(spec, keyhash.Mix(seed^keyhash.Salt("workload/"+t.ID)))
}

func nanSlice(n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = math.NaN()
	}
	return s
}

// simulate runs interval i's requests in arrival order.
func (e *engine) simulate(i int) {
	seconds := e.sc.intervalSeconds()
	start, end := float64(i)*seconds, float64(i+1)*seconds
	var arrivals arrivalHeap
	for _, ts := range e.tenants {
		clear(ts.stats)
		ts.unrouted, ts.beforeQueue, ts.measured = 0, 0, false
		if ts.spec.activeAt(i) {
			ts.measured = true
			arrivals.push(arrival{at: start + ts.arrivals.ExpFloat64()/ts.spec.rateAt(i), tenant: ts.index})
		}
	}
	e.pending = e.pending[:0]
	for len(arrivals) > 0 {
		a := arrivals.pop()
		if a.at >= end {
			continue
		}
		ts := e.tenants[a.tenant]
		e.clock.set(a.at)
		e.request(ts)
		arrivals.push(arrival{at: a.at + ts.arrivals.ExpFloat64()/ts.spec.rateAt(i), tenant: a.tenant})
	}
}

// request serves one request of tenant ts.
func (e *engine) request(ts *tenantState) {
	a := ts.gen.Next()
	size := int64(len(a.Key)) + a.Size // on the wire, what bandwidth and token buckets count
	stored := objectBytes(e.model, a)  // in the engine, what memory limits count
	h := keyhash.Sum64String(a.Key)
	miss := e.sc.missLatency()
	pos, ok := -1, false
	if ts.route != nil {
		pos, ok = ts.route.PickHash(h)
	}
	if !ok {
		ts.unrouted++
		ts.beforeQueue += miss
		e.pending = append(e.pending, pendingRequest{tenant: int32(ts.index), node: -1, before: float32(miss)})
		return
	}
	j := ts.routeNode[pos]
	st := &ts.stats[j]
	st.requests++
	var hit bool
	wait := 0.0
	if e.shared != nil {
		hit = e.shared[j].Access(a.Key, stored)
	} else {
		p := ts.parts[j]
		if p.limiter != nil {
			d, admitted := p.limiter.TryReserve(size)
			if !admitted {
				st.refused++
				ts.beforeQueue += miss
				e.pending = append(e.pending, pendingRequest{tenant: int32(ts.index), node: -1, before: float32(miss)})
				return
			}
			wait = d.Seconds()
		}
		hit = p.access(a, h, stored)
	}
	st.bytes += size
	before := wait + miss
	if hit {
		st.hits++
		before = wait + e.sc.hitLatency()
	} else {
		st.misses++
	}
	ts.beforeQueue += before
	e.pending = append(e.pending, pendingRequest{tenant: int32(ts.index), node: int32(j), before: float32(before)})
}

// measure turns interval i's counts into results: node loads and M/M/1 queueing delays,
// per-tenant hit ratios and latencies.
func (e *engine) measure(i int) {
	seconds := e.sc.intervalSeconds()
	delays := make([]float64, len(e.sc.Nodes))
	ir := &e.result.Intervals[i]
	for j, n := range e.sc.Nodes {
		var ops, bytes float64
		for _, ts := range e.tenants {
			ops += float64(ts.stats[j].served()) / seconds
			bytes += float64(ts.stats[j].bytes) / seconds
		}
		rho := math.Max(ops/n.OpsPerSecond, bytes/n.BandwidthBytesPerSecond)
		ir.MaxUtilization = math.Max(ir.MaxUtilization, rho)
		d, stable := curve.QueueDelayAtUtilization(n.OpsPerSecond, rho)
		if !stable {
			d = SaturatedDelay.Seconds()
			ir.SaturatedNodes++
		}
		delays[j] = d
	}
	for _, ts := range e.tenants {
		if !ts.measured {
			continue
		}
		r := ts.result
		r.Counted[i] = i >= ts.spec.Arrive+e.sc.Warmup
		var queued float64
		for j, st := range ts.stats {
			r.Requests[i] += st.requests
			r.Hits[i] += st.hits
			r.Refused[i] += st.refused
			queued += float64(st.served()) * delays[j]
		}
		r.Requests[i] += ts.unrouted
		if r.Requests[i] > 0 {
			r.MeanLatency[i] = (ts.beforeQueue + queued) / float64(r.Requests[i])
		}
		r.MemoryBytes[i] = ts.memory()
		if ts.plan != nil {
			r.PredictedHitRatio[i] = ts.plan.Predicted.HitRatio
			if l := ts.plan.Predicted.LatencySeconds; l != nil {
				r.PredictedLatency[i] = *l
			}
			r.Isolated[i] = ts.plan.Isolated
		}
		ts.recordHistory()
	}
	for _, p := range e.pending {
		lat := float64(p.before)
		if p.node >= 0 {
			lat += e.queueRNG.ExpFloat64() * delays[p.node]
		}
		if r := e.tenants[p.tenant].result; r.Counted[i] {
			r.latency.add(lat)
			e.result.overall.add(lat)
		}
	}
}

// plan computes and applies the plan for interval next.
func (e *engine) plan(ctx context.Context, next int) error {
	if e.policy == PolicyShared {
		return nil
	}
	snap := e.snapshot(next)
	for _, ts := range e.tenants {
		for _, p := range ts.parts {
			if p != nil {
				// The sidecar halves the weight of the past once per interval.
				if err := p.recorder.Tracker().Decay(0.5); err != nil {
					return err
				}
			}
		}
	}
	ir := &e.result.Intervals[next]
	if len(snap.Tenants) == 0 {
		e.planned = nil
		return e.apply(&planning.Plan{})
	}
	in := control.Input{Snapshot: snap, Current: control.Allocation{}, Measured: map[string]control.Measurement{}}
	ids := make([]string, 0, len(snap.Tenants))
	for _, t := range snap.Tenants {
		ids = append(ids, t.ID)
	}
	in.SpecsChanged = !slices.Equal(ids, e.planned)
	for k := range snap.Tenants {
		ts := e.tenantByID(snap.Tenants[k].ID)
		if ts.plan != nil {
			in.Current[ts.spec.ID] = slices.Clone(ts.plan.Partitions)
		}
		if ts.measured {
			in.Measured[ts.spec.ID] = e.judge(ts, &snap.Tenants[k], next-1)
		}
	}
	start := time.Now()
	d, err := e.loop.Decide(ctx, e.loopCfg, in)
	ir.PlanSeconds = time.Since(start).Seconds()
	if err != nil {
		return fmt.Errorf("scenario %s, policy %s, interval %d: %w", e.sc.Name, e.policy, next, err)
	}
	e.planned = ids
	if d.Plan != nil && d.Plan.Solver != nil {
		ir.SolverStatus = d.Plan.Solver.Status
	}
	if !d.Taken {
		e.keep(d)
		if e.sc.PoolBestEffort {
			return e.applyPooled(ir, e.inForce())
		}
		return nil
	}
	if e.sc.PoolBestEffort {
		return e.applyPooled(ir, d.Plan)
	}
	ir.MovedBytes = d.Plan.Summary.MovementBytes
	return e.apply(d.Plan)
}

// loopConfig is how the operator would run the control loop for the scenario under policy:
// its movement budget is the operator's default share of the fleet's memory, and memory
// changes under 1% of the smallest node are noise.
func loopConfig(sc *Scenario, policy string) control.Config {
	var fleet, smallest int64 = 0, math.MaxInt64
	for _, n := range sc.Nodes {
		fleet += n.MemoryBytes
		smallest = min(smallest, n.MemoryBytes)
	}
	return control.Config{
		Allocator: allocator.Options{
			Policy: policy, Workers: 1, Seed: 1, TimeLimit: sc.optimalTimeLimit(), WorkLimit: sc.optimalWorkLimit(),
			MaxChurnBytes: control.MaxChurnBytes(fleet, control.DefaultMaxChurnPercent),
		},
		MinChangeBytes: smallest / 100,
		Mechanisms:     control.DefaultMechanisms(),
	}
}

func (e *engine) tenantByID(id string) *tenantState {
	for _, ts := range e.tenants {
		if ts.spec.ID == id {
			return ts
		}
	}
	return nil
}

// judge is what the operator's judgement of tenant ts's objective over interval i would be:
// a hit ratio or mean latency against its target; a degradation against the service latency
// the tenant's sampled curve gives at a fair share of the fleet's memory.
func (e *engine) judge(ts *tenantState, t *planning.Tenant, i int) control.Measurement {
	r := ts.result
	m := control.Measurement{Reads: r.Requests[i] - r.Refused[i]}
	o := ts.spec.Objective
	switch {
	case o.HitRatio > 0:
		m.Met = r.Requests[i] > 0 && float64(r.Hits[i])/float64(r.Requests[i]) >= o.HitRatio
	case o.Latency > 0:
		m.Met = r.MeanLatency[i] <= o.Latency.Seconds()
	case o.MaxDegradation > 0 && len(t.MissRatioCurve) > 0 && r.Requests[i] > 0:
		var fleet int64
		for _, n := range e.sc.Nodes {
			fleet += n.MemoryBytes
		}
		fair := fleet / int64(max(1, len(e.planned)))
		h := 0.0
		for _, p := range t.MissRatioCurve {
			if p.SizeBytes <= fair {
				h = max(h, 1-p.MissRatio)
			}
		}
		service := func(hit float64) float64 { return curve.MeanLatency(hit, e.sc.hitLatency(), e.sc.missLatency()) }
		m.Met = service(float64(r.Hits[i])/float64(r.Requests[i])) <= o.MaxDegradation*service(h)
	}
	return m
}

// keep leaves the plan in force as it is, with the predictions of the plan the decision
// evaluated it by: the plan in force as the allocator evaluates it, else the new plan, which
// differs from it only by noise.
func (e *engine) keep(d *control.Decision) {
	evaluated := d.Plan
	if evaluated == nil {
		evaluated = d.Proposed
	}
	for _, ts := range e.tenants {
		if ts.plan == nil {
			continue
		}
		i := slices.IndexFunc(evaluated.Tenants, func(tp planning.TenantPlan) bool { return tp.ID == ts.spec.ID })
		if i < 0 {
			continue
		}
		kept := *ts.plan
		kept.Predicted, kept.Verdict = evaluated.Tenants[i].Predicted, evaluated.Tenants[i].Verdict
		ts.plan = &kept
	}
}

// apply puts a plan in force: partitions resized, created or dropped (a dropped partition's
// data is lost), token buckets set, keys routed by the new weights.
func (e *engine) apply(plan *planning.Plan) error {
	if err := e.applyPools(plan); err != nil {
		return err
	}
	planned := make(map[string]*planning.TenantPlan, len(plan.Tenants))
	for i := range plan.Tenants {
		planned[plan.Tenants[i].ID] = &plan.Tenants[i]
	}
	for _, ts := range e.tenants {
		tp := planned[ts.spec.ID]
		ts.plan = tp
		keep := make([]bool, len(e.sc.Nodes))
		var nodes []rendezvous.Node
		ts.routeNode = ts.routeNode[:0]
		if tp != nil {
			parts := tp.Partitions
			if ts.pooled {
				parts = e.pooledPartitions(ts, tp)
			}
			for _, p := range parts {
				j := e.nodeIndex[p.Node]
				keep[j] = true
				if err := e.applyPartition(ts, j, p); err != nil {
					return fmt.Errorf("tenant %s on %s: %w", ts.spec.ID, p.Node, err)
				}
				nodes = append(nodes, rendezvous.Node{ID: p.Node, Weight: float64(p.RoutingWeight)})
				ts.routeNode = append(ts.routeNode, j)
			}
		}
		for j := range ts.parts {
			if !keep[j] {
				ts.parts[j] = nil
			}
		}
		ts.route = nil
		if len(nodes) > 0 {
			route, err := rendezvous.New(nodes)
			if err != nil {
				return fmt.Errorf("tenant %s: %w", ts.spec.ID, err)
			}
			ts.route = route
		}
	}
	return nil
}

func (e *engine) applyPartition(ts *tenantState, j int, p planning.Partition) error {
	part := ts.parts[j]
	switch {
	case part == nil || part.pooled != ts.pooled:
		// New, or moving between a pool and a partition of its own: its keys start cold.
		var c Cache
		if ts.pooled {
			c = e.pools[j].cache
		} else {
			var err error
			if c, err = NewCache(e.sc.Cache, cacheCapacity(e.model, p.MemoryBytes), keyhash.Mix(e.seed^keyhash.Salt(ts.spec.ID+"@"+p.Node))); err != nil {
				return err
			}
		}
		if part == nil {
			rec, err := e.sc.newRecorder(e.model)
			if err != nil {
				return err
			}
			part = &partition{recorder: rec}
			ts.parts[j] = part
		}
		part.cache, part.pooled = c, ts.pooled
	case ts.pooled:
		// The pool may have been created anew this interval (applyPools).
		part.cache = e.pools[j].cache
	default:
		if err := part.cache.SetCapacity(cacheCapacity(e.model, p.MemoryBytes)); err != nil {
			return err
		}
	}
	part.memory = p.MemoryBytes
	if p.BandwidthLimitBytesPerSecond <= 0 && p.OpsLimitPerSecond <= 0 {
		part.limiter = nil
		return nil
	}
	// The proxy's bucket depths: the rate over a burst window, at least one largest value.
	window := burstWindow.Seconds()
	bw, ops := float64(p.BandwidthLimitBytesPerSecond), float64(p.OpsLimitPerSecond)
	bytesLimit := tokenbucket.Limit{Rate: bw, Burst: max(int64(bw*window), maxValueBytes)}
	opsLimit := tokenbucket.Limit{Rate: ops, Burst: max(int64(ops*window), 1)}
	if part.limiter == nil {
		l, err := tokenbucket.NewLimiter(bytesLimit, opsLimit, tokenbucket.Options{MaxWait: ThrottleMaxWait, Clock: e.clock})
		if err != nil {
			return err
		}
		part.limiter = l
		return nil
	}
	return part.limiter.SetLimits(bytesLimit, opsLimit)
}

// simClock is simulated time for the token buckets: it reads the current request's arrival.
type simClock struct{ now time.Time }

// epoch is the simulated time 0 (any fixed instant).
var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func (c *simClock) set(seconds float64) {
	c.now = epoch.Add(time.Duration(seconds * float64(time.Second)))
}

// Now implements tokenbucket.Clock.
func (c *simClock) Now() time.Time { return c.now }

// NewTimer implements tokenbucket.Clock. The simulator reserves tokens and never waits, so
// timers are never used; one that has already fired keeps any caller from blocking.
func (c *simClock) NewTimer(time.Duration) tokenbucket.Timer { return firedTimer{c: firedChan(c.now)} }

func firedChan(t time.Time) chan time.Time {
	ch := make(chan time.Time, 1)
	ch <- t
	return ch
}

type firedTimer struct{ c chan time.Time }

func (t firedTimer) C() <-chan time.Time { return t.c }
func (t firedTimer) Stop() bool          { return false }
