package allocator

import (
	"fmt"
	"math"
	"strings"

	"github.com/cacheqos/cacheqos/internal/allocator/planning"
	"github.com/cacheqos/cacheqos/internal/curve"
)

// assessment is the shared model's forecast for an allocation.
type assessment struct {
	// per node
	opsLoad, bytesLoad []float64
	utilization        []float64
	queueDelay         []float64 // +Inf when saturated
	// per tenant
	hit       []float64
	latency   []float64 // mean latency in seconds, +Inf when a queue on the path is unstable
	fractions [][]float64
	caps      [][]partCaps
}

// partCaps are the token-bucket rates of one part (0: none).
type partCaps struct {
	bytesPerSec, opsPerSec, guaranteed float64
}

// capsOf returns the limits of tenant k's parts: its own bandwidth and ops limits and
// guarantee split by routing fraction; for a tenant LACS isolated, at most 1/K of each node's
// bandwidth and ops; and the limits of a best-effort tenant held back on an overloaded node.
func (p *problem) capsOf(k int, a *allocation, fr []float64) []partCaps {
	t := &p.tenants[k]
	ps := a.parts[k]
	out := make([]partCaps, len(ps))
	for i, pt := range ps {
		c := partCaps{bytesPerSec: t.bwLimit * fr[i], opsPerSec: t.opsLimit * fr[i], guaranteed: t.guaranteed * fr[i]}
		if th, ok := a.throttled[tenantNode{k, pt.node}]; ok {
			c.bytesPerSec = minPositive(c.bytesPerSec, th.bytesPerSec)
			c.opsPerSec = minPositive(c.opsPerSec, th.opsPerSec)
		}
		if a.isolated[k] {
			n := &p.nodes[pt.node]
			k := float64(len(p.tenants))
			c.bytesPerSec = minPositive(c.bytesPerSec, n.bandwidth/k)
			c.opsPerSec = minPositive(c.opsPerSec, n.ops/k)
		}
		out[i] = c
	}
	return out
}

// minPositive is the smaller of two limits where 0 means no limit.
func minPositive(a, b float64) float64 {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	}
	return math.Min(a, b)
}

// servedOps is how many requests per second of demand pass a part's token buckets: buckets
// hold requests rather than drop them, so in steady state the node sees at most the cap.
func (t *tenant) servedOps(demand float64, c partCaps) float64 {
	served := demand
	if c.opsPerSec > 0 {
		served = math.Min(served, c.opsPerSec)
	}
	if c.bytesPerSec > 0 && t.byteRate > 0 {
		served = math.Min(served, c.bytesPerSec*t.reqRate/t.byteRate)
	}
	return served
}

func (p *problem) assess(a *allocation) *assessment {
	n, m := len(p.nodes), len(p.tenants)
	as := &assessment{
		opsLoad: make([]float64, n), bytesLoad: make([]float64, n), utilization: make([]float64, n),
		queueDelay: make([]float64, n), hit: make([]float64, m), latency: make([]float64, m),
		fractions: make([][]float64, m), caps: make([][]partCaps, m),
	}
	for j := range p.nodes {
		as.opsLoad[j], as.bytesLoad[j] = p.nodes[j].bgOps, p.nodes[j].bgBytes
	}
	for k := range p.tenants {
		t := &p.tenants[k]
		ps := a.parts[k]
		fr := fractions(ps)
		as.fractions[k] = fr
		as.caps[k] = p.capsOf(k, a, fr)
		for i, pt := range ps {
			served := t.servedOps(t.reqRate*fr[i], as.caps[k][i])
			as.opsLoad[pt.node] += served
			if t.reqRate > 0 {
				as.bytesLoad[pt.node] += served * t.byteRate / t.reqRate
			}
		}
	}
	for j, nd := range p.nodes {
		as.utilization[j] = math.Max(as.opsLoad[j]/nd.ops, as.bytesLoad[j]/nd.bandwidth)
		as.queueDelay[j], _ = curve.QueueDelayAtUtilization(nd.ops, as.utilization[j])
	}
	for k := range p.tenants {
		t := &p.tenants[k]
		ps := a.parts[k]
		as.hit[k] = t.curve.At(totalBytes(ps))
		lat := curve.MeanLatency(as.hit[k], t.hitLatency, t.missLatency)
		for i, pt := range ps {
			fr := as.fractions[k][i]
			if fr == 0 {
				continue
			}
			lat += fr * as.queueDelay[pt.node]
			// A capped tenant also waits in its own bucket, itself an M/M/1 queue served at the cap.
			if c := as.caps[k][i]; c.opsPerSec > 0 || c.bytesPerSec > 0 {
				d, _ := curve.QueueDelay(t.servedOps(math.Inf(1), c), t.reqRate*fr)
				lat += fr * d
			}
		}
		if len(ps) == 0 {
			lat = math.Inf(1)
		}
		as.latency[k] = lat
	}
	return as
}

// objectiveMet reports whether tenant k's objective holds under the assessment.
func (p *problem) objectiveMet(k int, as *assessment) bool {
	t := &p.tenants[k]
	o := t.objective
	switch {
	case o == nil:
		return false
	case o.HitRatio != nil:
		return as.hit[k] >= *o.HitRatio-1e-9
	case o.LatencySeconds != nil:
		return as.latency[k] <= *o.LatencySeconds*(1+1e-9)
	default:
		ref := p.fairRef[k]
		return as.latency[k] <= *o.MaxDegradation*(ref.service+ref.queue)*(1+1e-9)
	}
}

// evaluate turns an allocation into a plan: predictions, limits, routing weights, verdicts and
// explanations, node loads and the summary.
func (p *problem) evaluate(a *allocation) *planning.Plan {
	as := p.assess(a)
	plan := &planning.Plan{APIVersion: planning.APIVersion, Kind: planning.KindPlan, Solver: a.solver, Notes: a.planNotes}
	plan.Nodes = make([]planning.NodePlan, len(p.nodes))
	for j, nd := range p.nodes {
		np := planning.NodePlan{
			Name: nd.name, MemoryCapacityBytes: nd.memory,
			PredictedOpsPerSecond: as.opsLoad[j], PredictedBytesPerSecond: as.bytesLoad[j],
			Utilization: as.utilization[j], Saturated: math.IsInf(as.queueDelay[j], 1),
		}
		if !np.Saturated {
			d := as.queueDelay[j]
			np.QueueDelaySeconds = &d
		} else {
			plan.Summary.SaturatedNodes++
		}
		plan.Nodes[j] = np
	}
	var totalRate float64
	plan.Tenants = make([]planning.TenantPlan, len(p.tenants))
	for k := range p.tenants {
		t := &p.tenants[k]
		tp := p.tenantPlan(k, a, as)
		for i, pt := range a.parts[k] {
			plan.Nodes[pt.node].MemoryBytes += pt.bytes
			plan.Nodes[pt.node].GuaranteedBytesPerSecond += tp.Partitions[i].GuaranteedBytesPerSecond
		}
		plan.Tenants[k] = tp
		s := &plan.Summary
		s.Tenants++
		s.MemoryBytes += tp.MemoryBytes
		s.ExpectedHitsPerSecond += tp.Predicted.HitsPerSecond
		totalRate += t.reqRate
		s.MovementBytes += movement(t.current, a.parts[k])
		if tp.Verdict == planning.VerdictMeetsSLO {
			s.ObjectivesMet++
		}
		if t.strict {
			s.StrictTenants++
			if tp.Verdict == planning.VerdictMeetsSLO {
				s.StrictMet++
			}
		}
	}
	if totalRate > 0 {
		plan.Summary.ExpectedHitRatio = plan.Summary.ExpectedHitsPerSecond / totalRate
	}
	return plan
}

// movement is the L1 distance between two per-node memory vectors given as ascending parts.
func movement(from, to []part) int64 {
	var d int64
	i, j := 0, 0
	for i < len(from) || j < len(to) {
		switch {
		case j == len(to) || (i < len(from) && from[i].node < to[j].node):
			d += from[i].bytes
			i++
		case i == len(from) || to[j].node < from[i].node:
			d += to[j].bytes
			j++
		default:
			d += abs64(from[i].bytes - to[j].bytes)
			i++
			j++
		}
	}
	return d
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

func (p *problem) tenantPlan(k int, a *allocation, as *assessment) planning.TenantPlan {
	t := &p.tenants[k]
	ps := a.parts[k]
	tp := planning.TenantPlan{ID: t.id, MemoryBytes: totalBytes(ps), Isolated: a.isolated[k], Partitions: make([]planning.Partition, len(ps))}
	for i, pt := range ps {
		c := as.caps[k][i]
		tp.Partitions[i] = planning.Partition{
			Node: p.nodes[pt.node].name, MemoryBytes: pt.bytes,
			RoutingWeight:                ppm(as.fractions[k][i]),
			BandwidthLimitBytesPerSecond: ceilRate(c.bytesPerSec), OpsLimitPerSecond: ceilRate(c.opsPerSec),
			GuaranteedBytesPerSecond: ceilRate(c.guaranteed),
		}
	}
	saturated := math.IsInf(as.latency[k], 1)
	tp.Predicted = planning.Prediction{HitRatio: as.hit[k], HitsPerSecond: as.hit[k] * t.reqRate, Saturated: saturated}
	if t.hasLatency && !saturated {
		l := as.latency[k]
		tp.Predicted.LatencySeconds = &l
	}
	met := p.objectiveMet(k, as)
	switch {
	case met:
		tp.Verdict = planning.VerdictMeetsSLO
	case t.strict:
		tp.Verdict = planning.VerdictInfeasible
		tp.Reason = p.reason(k, a, as)
	default:
		tp.Verdict = planning.VerdictBestEffort
		if t.objective != nil {
			tp.Reason = p.reason(k, a, as)
		}
	}
	tp.Explanation = p.explain(k, a, as)
	return tp
}

// ppm is a routing fraction in parts per million, at least 1 for any positive fraction.
func ppm(f float64) int32 {
	if f <= 0 {
		return 0
	}
	return int32(max(1, math.Round(f*1e6)))
}

func ceilRate(x float64) int64 {
	if x <= 0 {
		return 0
	}
	return int64(math.Min(math.Ceil(x), planning.MaxRate))
}

// reason says why tenant k's objective is not met.
func (p *problem) reason(k int, a *allocation, as *assessment) string {
	t := &p.tenants[k]
	n := p.needs[k]
	if !n.reachable {
		return "unreachable: " + n.why
	}
	got := totalBytes(a.parts[k])
	if math.IsInf(as.latency[k], 1) {
		if a.isolated[k] {
			return "its demand exceeds the bandwidth share it is throttled to"
		}
		return "a queue on its path is saturated"
	}
	if got >= n.bytes {
		return fmt.Sprintf("it has the %s it needs but queueing on its nodes adds %s", bytesHuman(n.bytes),
			secondsHuman(as.latency[k]-curve.MeanLatency(as.hit[k], t.hitLatency, t.missLatency)))
	}
	competitors := "other tenants"
	if t.strict {
		for j := range p.tenants {
			if u := &p.tenants[j]; u.strict && u.priority > t.priority && totalBytes(a.parts[j]) > 0 {
				competitors = "strict tenants of higher priority first"
				break
			}
		}
	}
	return fmt.Sprintf("got %s of the %s it needs: not enough memory for every objective, it went to %s",
		bytesHuman(got), bytesHuman(n.bytes), competitors)
}

// explain says in a sentence or two why tenant k got what it got.
func (p *problem) explain(k int, a *allocation, as *assessment) string {
	t := &p.tenants[k]
	n := p.needs[k]
	var b strings.Builder
	b.WriteString("Curve: " + t.curveSource + ". ")
	if n.hasObjective {
		if n.reachable {
			fmt.Fprintf(&b, "Needs %s for %s. ", bytesHuman(n.bytes), p.describeObjective(k, n))
		} else {
			fmt.Fprintf(&b, "Objective %s is out of reach: %s. ", p.describeObjective(k, n), n.why)
		}
	}
	for _, note := range a.notes[k] {
		b.WriteString(note + ". ")
	}
	got := totalBytes(a.parts[k])
	fmt.Fprintf(&b, "Gets %s on %d node(s) (memory %s..%s): predicted hit ratio %.3f", bytesHuman(got), len(a.parts[k]),
		bytesHuman(t.minBytes), bytesHuman(t.maxBytes), as.hit[k])
	if t.hasLatency && !math.IsInf(as.latency[k], 1) {
		fmt.Fprintf(&b, ", mean latency %s", secondsHuman(as.latency[k]))
	}
	b.WriteString(".")
	return b.String()
}

func (p *problem) describeObjective(k int, n need) string {
	o := p.tenants[k].objective
	switch {
	case o.HitRatio != nil:
		return fmt.Sprintf("hit ratio %.3f", *o.HitRatio)
	case o.LatencySeconds != nil:
		return fmt.Sprintf("mean latency %s (hit ratio %.3f)", secondsHuman(*o.LatencySeconds), n.hitRatio)
	}
	return fmt.Sprintf("at most %.2fx its fair-share latency (hit ratio %.3f)", *o.MaxDegradation, n.hitRatio)
}

// bytesHuman prints a byte count with a binary unit.
func bytesHuman(b int64) string { return planning.FormatBytes(b) }

// secondsHuman prints a duration given in seconds.
func secondsHuman(s float64) string { return planning.FormatSeconds(s) }
