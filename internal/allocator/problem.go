package allocator

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/cacheqos/cacheqos/internal/allocator/planning"
	"github.com/cacheqos/cacheqos/internal/curve"
)

// ErrInfeasibleSnapshot wraps the errors of snapshots no allocation can satisfy whatever the
// policy (memory minimums above capacity, a spread wider than the allowed nodes).
var ErrInfeasibleSnapshot = errors.New("infeasible snapshot")

// problem is a snapshot normalized for the policies: node and tenant indices instead of
// names, curves built, defaults applied, effective bounds computed.
type problem struct {
	opts Options
	// start is when planning started; the optimal policy's time limit counts from it.
	start   time.Time
	nodes   []node
	tenants []tenant
	// totalMemory is the sum of node memory; fairShare is totalMemory / number of tenants.
	totalMemory int64
	fairShare   int64
	// needs holds what each tenant's objective asks for.
	needs []need
	// fairRef is each tenant's latency under the equal policy's plan, the reference of a
	// maxDegradation objective (nil when no tenant has one).
	fairRef []latencyParts
}

// latencyParts splits a predicted mean latency into service (hits and misses) and the
// queueing at the nodes (and buckets) on the tenant's path, in seconds.
type latencyParts struct {
	service, queue float64
	// size is the memory the reference plan gives the tenant.
	size int64
}

type node struct {
	name      string
	memory    int64
	bandwidth float64 // bytes/s
	ops       float64 // ops/s
	// bgOps and bgBytes are the measured load not explained by the tenants' rates.
	bgOps, bgBytes float64
}

type tenant struct {
	id        string
	strict    bool
	priority  int32
	objective *planning.Objective
	curve     *curve.Curve
	// curveSource says where the curve came from, for explanations.
	curveSource string
	// maxRecorded is Soft-QoS' max(HR): the best hit ratio the tenant has shown.
	maxRecorded float64
	observed    *float64
	// minBytes and maxBytes are effective: maxBytes never exceeds what the allowed nodes hold.
	minBytes, maxBytes int64
	allowed            []int // node indices, ascending
	spreadMin          int
	spreadMax          int
	reqRate, byteRate  float64
	// hitLatency and missLatency in seconds; hasLatency reports whether they were measured
	// (otherwise 0 and 1, which makes "latency" the miss ratio for relative objectives).
	hitLatency, missLatency float64
	hasLatency              bool
	guaranteed              float64 // bytes/s over all nodes
	bwLimit, opsLimit       float64 // 0: none
	current                 []part  // ascending node
	currentTotal            int64
	wasIsolated             bool
}

// part is a tenant's share of one node. weight is the routing weight relative to the tenant's
// other parts; when every part of a tenant has weight 0 the weights are the byte sizes, and
// when those are 0 too the parts share the traffic equally.
type part struct {
	node   int
	bytes  int64
	weight int64
}

// allocation is a policy's answer before evaluation.
type allocation struct {
	parts [][]part // per tenant, ascending node
	// isolated marks tenants whose bandwidth LACS cut to 1/K of every node.
	isolated []bool
	// throttled holds the limits of best-effort parts held back on overloaded nodes.
	throttled map[tenantNode]partCaps
	// notes holds per-tenant policy remarks for the explanation.
	notes [][]string
	// planNotes are policy-level remarks.
	planNotes []string
	solver    *planning.SolverReport
}

func newAllocation(n int) *allocation {
	return &allocation{parts: make([][]part, n), isolated: make([]bool, n), notes: make([][]string, n)}
}

func (a *allocation) note(k int, format string, args ...any) {
	a.notes[k] = append(a.notes[k], fmt.Sprintf(format, args...))
}

func totalBytes(ps []part) int64 {
	var s int64
	for _, p := range ps {
		s += p.bytes
	}
	return s
}

// fractions returns the share of the tenant's traffic each part receives.
func fractions(ps []part) []float64 {
	out := make([]float64, len(ps))
	var wsum, bsum float64
	for _, p := range ps {
		wsum += float64(p.weight)
		bsum += float64(p.bytes)
	}
	for i, p := range ps {
		switch {
		case wsum > 0:
			out[i] = float64(p.weight) / wsum
		case bsum > 0:
			out[i] = float64(p.bytes) / bsum
		default:
			out[i] = 1 / float64(len(ps))
		}
	}
	return out
}

func newProblem(s *planning.Snapshot, opts Options) (*problem, error) {
	p := &problem{opts: opts, start: time.Now()}
	index := make(map[string]int, len(s.Nodes))
	for i, n := range s.Nodes {
		index[n.Name] = i
		p.nodes = append(p.nodes, node{
			name: n.Name, memory: n.MemoryBytes,
			bandwidth: float64(n.BandwidthBytesPerSecond), ops: float64(n.OpsPerSecond),
			bgOps: n.Load.OpsPerSecond, bgBytes: n.Load.BytesPerSecond,
		})
		p.totalMemory += n.MemoryBytes
	}
	var errs []error
	for i := range s.Tenants {
		t, err := p.newTenant(&s.Tenants[i], index)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: tenants[%d] (%s): %w", ErrInfeasibleSnapshot, i, s.Tenants[i].ID, err))
		}
		p.tenants = append(p.tenants, t)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	var mins int64
	for _, t := range p.tenants {
		mins += t.minBytes
	}
	if mins > p.totalMemory {
		return nil, fmt.Errorf("%w: memory minimums total %s but the nodes hold %s", ErrInfeasibleSnapshot, bytesHuman(mins), bytesHuman(p.totalMemory))
	}
	for k := range s.Tenants {
		for _, r := range s.Tenants[k].Rates {
			n := &p.nodes[index[r.Node]]
			n.bgOps -= r.RequestsPerSecond
			n.bgBytes -= r.BytesPerSecond
		}
	}
	for j := range p.nodes {
		p.nodes[j].bgOps = math.Max(0, p.nodes[j].bgOps)
		p.nodes[j].bgBytes = math.Max(0, p.nodes[j].bgBytes)
	}
	if len(p.tenants) > 0 {
		p.fairShare = p.totalMemory / int64(len(p.tenants))
	}
	p.fairRef = p.fairShareReference()
	p.needs = make([]need, len(p.tenants))
	for k := range p.tenants {
		p.needs[k] = p.needOf(k)
	}
	return p, nil
}

func (p *problem) newTenant(st *planning.Tenant, index map[string]int) (tenant, error) {
	t := tenant{
		id: st.ID, strict: st.Class == planning.ClassStrict, priority: st.Priority,
		objective: st.Objective, observed: st.Observed.HitRatio,
		guaranteed: float64(st.Bandwidth.GuaranteedBytesPerSecond),
		bwLimit:    float64(st.Bandwidth.LimitBytesPerSecond), opsLimit: float64(st.OpsLimitPerSecond),
		wasIsolated: st.Current.Isolated,
		hitLatency:  st.Observed.HitLatencySeconds, missLatency: st.Observed.MissLatencySeconds,
	}
	t.hasLatency = t.hitLatency > 0 || t.missLatency > 0
	if !t.hasLatency {
		t.hitLatency, t.missLatency = 0, 1
	}
	if len(st.AllowedNodes) == 0 {
		for j := range p.nodes {
			t.allowed = append(t.allowed, j)
		}
	} else {
		for _, n := range st.AllowedNodes {
			t.allowed = append(t.allowed, index[n])
		}
		slices.Sort(t.allowed)
	}
	var connected int64
	for _, j := range t.allowed {
		connected += p.nodes[j].memory
	}
	t.minBytes = st.Memory.MinBytes
	t.maxBytes = connected
	if st.Memory.MaxBytes > 0 {
		t.maxBytes = min(t.maxBytes, st.Memory.MaxBytes)
	}
	if t.minBytes > t.maxBytes {
		return t, fmt.Errorf("memory.minBytes %s exceeds the %s its allowed nodes hold", bytesHuman(t.minBytes), bytesHuman(connected))
	}
	t.spreadMin = max(1, int(st.Spread.MinNodes))
	t.spreadMax = len(t.allowed)
	if st.Spread.MaxNodes > 0 {
		t.spreadMax = min(t.spreadMax, int(st.Spread.MaxNodes))
	}
	if t.spreadMin > t.spreadMax {
		return t, fmt.Errorf("spread.minNodes %d but only %d allowed nodes", t.spreadMin, t.spreadMax)
	}
	// A tenant on at most spreadMax nodes can never hold more than its spreadMax largest
	// allowed nodes.
	if t.spreadMax < len(t.allowed) {
		mems := make([]int64, 0, len(t.allowed))
		for _, j := range t.allowed {
			mems = append(mems, p.nodes[j].memory)
		}
		slices.Sort(mems)
		var reachable int64
		for _, m := range mems[len(mems)-t.spreadMax:] {
			reachable += m
		}
		t.maxBytes = min(t.maxBytes, reachable)
		if t.minBytes > t.maxBytes {
			return t, fmt.Errorf("memory.minBytes %s exceeds the %s its %d largest allowed nodes hold", bytesHuman(t.minBytes), bytesHuman(reachable), t.spreadMax)
		}
	}
	for _, r := range st.Rates {
		t.reqRate += r.RequestsPerSecond
		t.byteRate += r.BytesPerSecond
	}
	for _, c := range st.Current.Partitions {
		t.current = append(t.current, part{node: index[c.Node], bytes: c.MemoryBytes})
		t.currentTotal += c.MemoryBytes
	}
	slices.SortFunc(t.current, func(a, b part) int { return a.node - b.node })
	return t, t.buildCurve(st)
}

// buildCurve sets the tenant's hit-ratio curve: the sampled miss-ratio curve corrected by the
// hit ratio observed at the current size when there is one, else a monotone fit of the
// observed history, else nothing known (a curve that is 0 everywhere).
func (t *tenant) buildCurve(st *planning.Tenant) error {
	table := curve.NewTable(curve.DefaultTableCapacity)
	for _, h := range st.History {
		table.Record(curve.Point{SizeBytes: h.SizeBytes, HitRatio: h.HitRatio})
	}
	if t.observed != nil && t.currentTotal > 0 {
		table.Record(curve.Point{SizeBytes: t.currentTotal, HitRatio: *t.observed})
	}
	t.maxRecorded = table.MaxRecorded()
	switch {
	case len(st.MissRatioCurve) > 0:
		pts := make([]curve.Point, len(st.MissRatioCurve))
		for i, m := range st.MissRatioCurve {
			pts[i] = curve.Point{SizeBytes: m.SizeBytes, HitRatio: 1 - m.MissRatio}
		}
		c, err := curve.Fit(pts)
		if err != nil {
			return fmt.Errorf("missRatioCurve: %w", err)
		}
		t.curveSource = "miss-ratio curve"
		if t.observed != nil && t.currentTotal > 0 {
			c = c.Corrected(curve.Point{SizeBytes: t.currentTotal, HitRatio: *t.observed})
			t.curveSource = fmt.Sprintf("miss-ratio curve corrected to the observed %.3f at %s", *t.observed, bytesHuman(t.currentTotal))
		}
		t.curve = c
		if table.Len() == 0 {
			t.maxRecorded, _ = c.Max()
		}
	case table.Len() > 0:
		c, err := curve.Fit(table.Points())
		if err != nil {
			return fmt.Errorf("history: %w", err)
		}
		t.curve = c
		t.curveSource = fmt.Sprintf("monotone fit of %d observed points", table.Len())
	case t.observed != nil:
		t.curve = curve.Flat(*t.observed)
		t.curveSource = "observed hit ratio only (no size)"
	default:
		t.curve = curve.Flat(0)
		t.curveSource = "no curve data yet"
	}
	return nil
}

// latencyAt is the tenant's mean service latency (no queueing) at size bytes.
func (p *problem) latencyAt(k int, size int64) float64 {
	t := &p.tenants[k]
	return curve.MeanLatency(t.curve.At(size), t.hitLatency, t.missLatency)
}

// need is what a tenant's objective asks for.
type need struct {
	hasObjective bool
	hitRatio     float64 // the hit ratio that meets the objective
	bytes        int64   // the smallest size reaching it (>= minBytes), if reachable
	reachable    bool    // the curve reaches hitRatio within maxBytes
	// queueBudget is the queueing delay (seconds) the objective leaves room for on the
	// tenant's nodes: for a latency objective plannedQueueDelay, for a maxDegradation
	// objective its factor times the queueing it has under the equal policy's plan (0: no
	// budget of its own).
	queueBudget float64
	// safeBytes is the size with the optimal policy's safety margin over bytes (see
	// safetyHitRatioMargin), at most maxBytes; bytes when there is no room for one.
	safeBytes int64
	// why explains an unreachable objective.
	why string
}

// plannedQueueDelay is the queueing budget of a latency objective: the M/M/1 delay of the
// slowest allowed node at the utilization halfway between the fleet's and the utilization cap.
// The optimal policy plans the tenant's nodes under that utilization (loadCaps), so the budget
// holds on any node of its plan; halfway leaves the placement room to balance load while
// assuming less queueing than the cap's worst case, which on a fleet far below the cap would
// demand more hit ratio than the objective needs, or call it out of reach.
func (p *problem) plannedQueueDelay(k int) float64 {
	limit := p.opts.maxUtilization()
	u := (min(p.fleetUtilization(), limit) + limit) / 2
	worst := 0.0
	for _, j := range p.tenants[k].allowed {
		d, _ := curve.QueueDelayAtUtilization(p.nodes[j].ops, u)
		worst = math.Max(worst, d)
	}
	return worst
}

// fleetUtilization is the fleet's utilization were its whole demand, background included,
// spread over the nodes in proportion to their capacity: the larger of ops and bandwidth.
func (p *problem) fleetUtilization() float64 {
	demandOps, demandBytes, capOps, capBytes := p.fleetLoad()
	return math.Max(demandOps/capOps, demandBytes/capBytes)
}

// fleetLoad sums the fleet's demand, background included, and its capacity.
func (p *problem) fleetLoad() (demandOps, demandBytes, capOps, capBytes float64) {
	for _, nd := range p.nodes {
		demandOps += nd.bgOps
		demandBytes += nd.bgBytes
		capOps += nd.ops
		capBytes += nd.bandwidth
	}
	for k := range p.tenants {
		demandOps += p.tenants[k].reqRate
		demandBytes += p.tenants[k].byteRate
	}
	return demandOps, demandBytes, capOps, capBytes
}

// fairShareReference is each tenant's predicted latency under the equal policy's plan made
// without a plan in force and without memory minimums (every tenant at 1/N of the memory, or
// its maximum, placed by the shared placer): what a maxDegradation objective is relative to.
// Its queueing is part of it, as it is of the latency the equal policy's tenants measure (the
// simulator judges the objective against that). The minimums are left out because the
// control loop raises them to protect what works (a tenant protected above 1/N would push
// the others' references below their fair share). Nil when no tenant has such an objective.
func (p *problem) fairShareReference() []latencyParts {
	if !slices.ContainsFunc(p.tenants, func(t tenant) bool { return t.objective != nil && t.objective.MaxDegradation != nil }) {
		return nil
	}
	fresh := *p
	fresh.tenants = slices.Clone(p.tenants)
	for k := range fresh.tenants {
		fresh.tenants[k].current, fresh.tenants[k].currentTotal = nil, 0
		fresh.tenants[k].minBytes = 0
	}
	a := newAllocation(len(p.tenants))
	fresh.placeAll(a, fresh.fairSizes())
	as := fresh.assess(a)
	ref := make([]latencyParts, len(p.tenants))
	for k := range ref {
		t := &p.tenants[k]
		service := curve.MeanLatency(as.hit[k], t.hitLatency, t.missLatency)
		ref[k] = latencyParts{service: service, queue: as.latency[k] - service, size: totalBytes(a.parts[k])}
	}
	return ref
}

// loadCaps is the utilization the optimal policy plans each node under: MaxUtilization,
// lowered on the allowed nodes of every strict tenant with a queueing budget to where the
// node's M/M/1 delay, (1/ops)/(1 − ρ), equals the budget.
func (p *problem) loadCaps() []float64 {
	caps := make([]float64, len(p.nodes))
	for j := range caps {
		caps[j] = p.opts.maxUtilization()
	}
	for k := range p.tenants {
		budget := p.needs[k].queueBudget
		if !p.tenants[k].strict || budget <= 0 {
			continue
		}
		for _, j := range p.tenants[k].allowed {
			caps[j] = min(caps[j], max(0, 1-1/(p.nodes[j].ops*budget)))
		}
	}
	return caps
}

// needOf translates tenant k's objective into a hit ratio and the memory that reaches it.
func (p *problem) needOf(k int) need {
	t := &p.tenants[k]
	if t.objective == nil {
		return need{bytes: t.minBytes, reachable: true}
	}
	n := need{hasObjective: true}
	o := t.objective
	switch {
	case o.HitRatio != nil:
		n.hitRatio = *o.HitRatio
	case o.LatencySeconds != nil:
		q := p.plannedQueueDelay(k)
		h, ok := curve.HitRatioForLatency(*o.LatencySeconds, t.hitLatency, t.missLatency, q)
		if !ok {
			n.why = fmt.Sprintf("latency %s is out of reach even if every request hits (hit %s + queueing up to %s)",
				secondsHuman(*o.LatencySeconds), secondsHuman(t.hitLatency), secondsHuman(q))
			return n
		}
		n.hitRatio = h
		n.queueBudget = q
	default:
		// The reference latency, service and queueing, is split between the two in the same
		// proportion: the service latency may grow by the factor (a hit ratio) and so may the
		// queueing (a load cap on the tenant's nodes, see loadCaps).
		ref := p.fairRef[k]
		h, ok := curve.HitRatioForLatency(*o.MaxDegradation*ref.service, t.hitLatency, t.missLatency, 0)
		if !ok {
			n.why = "the degradation objective is out of reach"
			return n
		}
		// The curve predicts the hit ratio at other sizes than the ones observed with an
		// error; a band narrower than that error is planned at the fair share's own hit ratio.
		n.hitRatio = min(h+degradationUncertainty, t.curve.At(ref.size))
		n.queueBudget = *o.MaxDegradation * ref.queue
	}
	size, ok := t.curve.MinSize(n.hitRatio)
	if !ok {
		top, at := t.curve.Max()
		n.why = fmt.Sprintf("its curve tops out at hit ratio %.3f (at %s), below the %.3f needed", top, bytesHuman(at), n.hitRatio)
		return n
	}
	n.bytes = max(size, t.minBytes)
	if n.bytes > t.maxBytes {
		n.why = fmt.Sprintf("it needs %s but may have at most %s", bytesHuman(n.bytes), bytesHuman(t.maxBytes))
		return n
	}
	n.reachable = true
	// The margin covers the curve's error around the size it predicts meets the objective,
	// not the memory minimum: a minimum is exact (the control loop sets it to the memory in
	// force to protect a tenant that meets its objective; 3% on top of it would grow that
	// tenant by 3% every interval).
	safe := int64(math.Ceil(float64(size) * (1 + safetySizeMargin)))
	if s, ok := t.curve.MinSize(n.hitRatio + safetyHitRatioMargin); ok {
		safe = max(safe, s)
	}
	n.safeBytes = max(n.bytes, min(safe, t.maxBytes))
	return n
}

// The optimal policy's safety margins. A tenant sized exactly where its curve reaches the
// target lands just above or just below it from one interval to the next: the curve is a
// prediction (sampled, and measured on last interval's traffic) and keys are not spread over
// nodes exactly in proportion to memory. So once every strict objective it can keep is kept,
// the policy gives each of them, ahead of any expected hits, the larger of the size whose
// predicted hit ratio is safetyHitRatioMargin above the target (for concave curves) and
// safetySizeMargin more memory (for cliffs, where more hit ratio needs no more memory).
const (
	safetyHitRatioMargin = 0.01
	safetySizeMargin     = 0.03
)

// degradationUncertainty is the hit ratio a maxDegradation objective's size is planned
// above the one its curve says meets it, up to the fair share's own.
const degradationUncertainty = 0.02

// hitValueWeight is what one unit of hit ratio of tenant k is worth in the objective: hits
// per second by default, seconds saved per second when minimizing latency.
func (p *problem) hitValueWeight(k int) float64 {
	t := &p.tenants[k]
	if p.opts.Objective == ObjectiveLatency {
		return t.reqRate * math.Max(0, t.missLatency-t.hitLatency)
	}
	return t.reqRate
}
