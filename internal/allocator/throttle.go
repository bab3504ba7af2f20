package allocator

import (
	"cmp"
	"math"
	"slices"
)

// Priority-aware throttling. The optimal policy keeps each node's load under the utilization
// cap where the placement can, but a demand beyond what the nodes serve (a best-effort flood)
// only costs the model a penalty, and the sidecar serves whatever arrives: the strict tenants
// on that node then queue behind the flood. So on every node whose predicted utilization is
// above the cap and that carries a strict tenant, best-effort tenants get ops and bandwidth
// limits, lowest priority first and the busiest first among equals, until the node is back at
// the cap. None is held below an even share of the node (1/K of its ops and bandwidth, K the
// tenants on it, as LACS isolates an elephant): best effort is held back before any strict
// tenant, but not starved. Strict tenants are never throttled here. A node of best-effort
// tenants only is held back only when saturated: below that, the few milliseconds of queueing
// it costs everyone there are far less than the waits of a tenant held under its demand, up to
// the bucket's maximum wait per request.

// tenantNode names one tenant's part on one node.
type tenantNode struct{ tenant, node int }

// throttleBestEffort sets a.throttled for the best-effort parts on overloaded nodes.
func (p *problem) throttleBestEffort(a *allocation) {
	as := p.assess(a)
	limit := p.opts.maxUtilization()
	for j, nd := range p.nodes {
		overOps, overBytes := as.opsLoad[j]-limit*nd.ops, as.bytesLoad[j]-limit*nd.bandwidth
		if overOps <= 0 && overBytes <= 0 || as.utilization[j] < 1 && !p.carriesStrict(a, j) {
			continue
		}
		type load struct {
			k          int
			ops, bytes float64
		}
		var onNode []load
		tenants := 0
		for k := range p.tenants {
			for i, pt := range a.parts[k] {
				if pt.node != j {
					continue
				}
				tenants++
				t := &p.tenants[k]
				if t.strict || t.reqRate <= 0 {
					continue
				}
				served := t.servedOps(t.reqRate*as.fractions[k][i], as.caps[k][i])
				onNode = append(onNode, load{k, served, served * t.byteRate / t.reqRate})
			}
		}
		slices.SortStableFunc(onNode, func(x, y load) int {
			return cmp.Or(cmp.Compare(p.tenants[x.k].priority, p.tenants[y.k].priority), cmp.Compare(y.ops, x.ops))
		})
		shareOps, shareBytes := nd.ops/float64(tenants), nd.bandwidth/float64(tenants)
		for _, l := range onNode {
			if overOps <= 0 && overBytes <= 0 {
				break
			}
			// The share of its load the part gives up: what the node needs back, at most down
			// to an even share of whichever resource it uses more of.
			cut := 0.0
			if l.ops > 0 {
				cut = math.Max(cut, overOps/l.ops)
			}
			if l.bytes > 0 {
				cut = math.Max(cut, overBytes/l.bytes)
			}
			keep := 1.0
			if l.ops > 0 {
				keep = math.Min(keep, shareOps/l.ops)
			}
			if l.bytes > 0 {
				keep = math.Min(keep, shareBytes/l.bytes)
			}
			cut = math.Min(cut, 1-keep)
			if cut <= 0 {
				continue
			}
			if a.throttled == nil {
				a.throttled = map[tenantNode]partCaps{}
			}
			a.throttled[tenantNode{l.k, j}] = partCaps{opsPerSec: l.ops * (1 - cut), bytesPerSec: l.bytes * (1 - cut)}
			overOps -= cut * l.ops
			overBytes -= cut * l.bytes
			a.note(l.k, "held to %.0f ops/s on %s (%.0f%% of its demand there): the node's load is above its %.0f%% utilization cap, and best-effort tenants are held back before strict ones",
				l.ops*(1-cut), nd.name, 100*(1-cut), 100*limit)
		}
	}
}

// carriesStrict reports whether any strict tenant has a part on node j.
func (p *problem) carriesStrict(a *allocation, j int) bool {
	for k := range p.tenants {
		if p.tenants[k].strict && slices.ContainsFunc(a.parts[k], func(pt part) bool { return pt.node == j }) {
			return true
		}
	}
	return false
}

// guardBestEffort caps every best-effort part not already held back, on a node that carries a
// strict tenant, at what it is planned to send plus half the node's headroom under the
// utilization cap (at least a quarter more than it sends, and at least an even share of the
// node). Half, because a bucket lets a tenant past its rate by its burst and its maximum wait,
// and two tenants may surge at once. Planned load fits under the caps, so the plan's
// predictions do not change; but a best-effort tenant that starts flooding between two plans
// fills at most the headroom instead of saturating the node under the strict tenants until the
// next plan holds it back. Nodes without a strict tenant are not guarded: there a growing
// tenant would wait in its bucket to protect nobody.
func (p *problem) guardBestEffort(a *allocation) {
	as := p.assess(a)
	limit := p.opts.maxUtilization()
	for j, nd := range p.nodes {
		if !p.carriesStrict(a, j) {
			continue
		}
		headOps, headBytes := max(0, limit*nd.ops-as.opsLoad[j]), max(0, limit*nd.bandwidth-as.bytesLoad[j])
		tenants := 0
		for k := range p.tenants {
			if slices.ContainsFunc(a.parts[k], func(pt part) bool { return pt.node == j }) {
				tenants++
			}
		}
		shareOps, shareBytes := nd.ops/float64(tenants), nd.bandwidth/float64(tenants)
		for k := range p.tenants {
			t := &p.tenants[k]
			if t.strict {
				continue
			}
			for i, pt := range a.parts[k] {
				if _, held := a.throttled[tenantNode{k, j}]; pt.node != j || held {
					continue
				}
				ops := t.servedOps(t.reqRate*as.fractions[k][i], as.caps[k][i])
				bytes := 0.0
				if t.reqRate > 0 {
					bytes = ops * t.byteRate / t.reqRate
				}
				if a.throttled == nil {
					a.throttled = map[tenantNode]partCaps{}
				}
				guard := partCaps{
					opsPerSec:   guardStep(max(shareOps, ops+max(headOps/2, ops/4))),
					bytesPerSec: guardStep(max(shareBytes, bytes+max(headBytes/2, bytes/4))),
				}
				a.throttled[tenantNode{k, j}] = guard
				a.note(k, "guarded at %.0f ops/s on %s (it is expected to send %.0f): the node carries a strict tenant, and a best-effort tenant sending more than the plan saw fills at most half the node's headroom until the next plan",
					guard.opsPerSec, nd.name, ops)
			}
		}
	}
}

// guardStep rounds a guard's rate up to the next of the rates 2^(i/4): a guard follows its
// tenant's traffic and the node's headroom, which move a little every interval, and a plan
// whose limits changed is written again to every sidecar of the node. On the steps a limit
// changes only when the traffic moves by a fifth or so, and stays at most a fifth above the
// rate computed.
func guardStep(rate float64) float64 {
	if rate <= 0 {
		return rate
	}
	return math.Exp2(math.Ceil(4*math.Log2(rate)-1e-9) / 4)
}
