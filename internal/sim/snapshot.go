package sim

import (
	"slices"

	"github.com/cacheqos/cacheqos/internal/allocator/planning"
	"github.com/cacheqos/cacheqos/internal/curve"
	"github.com/cacheqos/cacheqos/internal/mrc"
)

// defaultPriority is the TenantSLO default priority the operator fills in.
const defaultPriority = 100

// maxHistory bounds each tenant's (size, hit ratio) history, as the operator does.
const maxHistory = 32

// nodeCurve is one node's sampled curve of a tenant and the tenant's request rate there.
type nodeCurve struct {
	requestsPerSecond float64
	curve             mrc.Curve
}

// mergeCurves combines a tenant's per-node curves into one curve over its total size, the
// way the operator does from the sidecars' metrics (curve.Merge).
func mergeCurves(nodes []nodeCurve, nodeCount int) []planning.MissRatioPoint {
	curves := make([]curve.NodeCurve, len(nodes))
	for i, n := range nodes {
		pts := make([]curve.Point, len(n.curve.Sizes))
		for j, size := range n.curve.Sizes {
			pts[j] = curve.Point{SizeBytes: size, HitRatio: n.curve.HitRatio[j]}
		}
		curves[i] = curve.NodeCurve{Points: pts, RequestsPerSecond: n.requestsPerSecond}
	}
	return planning.MissRatios(curve.Merge(curves, float64(planning.MaxNodeMemoryBytes)*float64(nodeCount), planning.MaxCurvePoints))
}

// snapshot builds the allocator's input for interval next as the operator builds it from
// Prometheus: the nodes with their measured load, and every tenant active in interval next
// with its objective, limits, per-node rates, observed hit ratio and latencies, merged
// miss-ratio curve, history and current partitions. Tenants measured in the interval just
// simulated carry measurements; a newly arrived tenant has only its spec.
func (e *engine) snapshot(next int) *planning.Snapshot {
	snap := &planning.Snapshot{APIVersion: planning.APIVersion, Kind: planning.KindSnapshot, Cluster: e.sc.Name}
	seconds := e.sc.intervalSeconds()
	for j, n := range e.sc.Nodes {
		var load planning.Load
		for _, ts := range e.tenants {
			if ts.measured {
				load.OpsPerSecond += float64(ts.stats[j].requests) / seconds
				load.BytesPerSecond += float64(ts.stats[j].bytes) / seconds
			}
		}
		snap.Nodes = append(snap.Nodes, planning.Node{
			Name: n.Name, MemoryBytes: n.MemoryBytes,
			BandwidthBytesPerSecond: int64(n.BandwidthBytesPerSecond), OpsPerSecond: int64(n.OpsPerSecond),
			Load: load,
		})
	}
	var active []*tenantState
	for _, ts := range e.tenants {
		if !ts.spec.activeAt(next) {
			continue
		}
		active = append(active, ts)
		snap.Tenants = append(snap.Tenants, e.snapshotTenant(ts, seconds))
	}
	refHit, refMiss := planning.ReferenceLatencies(snap.Tenants)
	for i, ts := range active {
		e.setObjective(&snap.Tenants[i], ts.spec, refHit, refMiss)
	}
	return snap
}

// setObjective translates the tenant's objective as the operator does: a latency objective
// whose reads all missed or all hit takes the service time it could not measure from the
// other tenants (planning.CompleteLatencies); one that cannot be modelled yet is planned as
// best effort this time.
func (e *engine) setObjective(pt *planning.Tenant, t *Tenant, refHit, refMiss float64) {
	o := t.Objective
	if o.Latency > 0 && pt.Observed.HitRatio != nil {
		// The side a tenant has is its mean latency; the simulator knows it.
		mean := e.sc.missLatency()
		if *pt.Observed.HitRatio >= 1 {
			mean = e.sc.hitLatency()
		}
		planning.CompleteLatencies(&pt.Observed, mean, refHit, refMiss)
	}
	switch {
	case o.HitRatio > 0:
		pt.Objective = &planning.Objective{HitRatio: &o.HitRatio}
	case o.MaxDegradation > 0:
		pt.Objective = &planning.Objective{MaxDegradation: &o.MaxDegradation}
	case o.Latency > 0 && pt.Observed.HitLatencySeconds > 0:
		target := o.Latency.Seconds()
		pt.Objective = &planning.Objective{LatencySeconds: &target}
	}
	if pt.Objective == nil && !o.IsZero() {
		// A latency objective cannot be modelled before latencies are measured.
		pt.Class = planning.ClassBestEffort
	}
}

func (e *engine) snapshotTenant(ts *tenantState, seconds float64) planning.Tenant {
	t := ts.spec
	pt := planning.Tenant{
		ID: t.ID, Class: t.Class, Priority: t.Priority,
		Memory:  planning.Memory{MaxBytes: t.MaxBytes},
		Spread:  planning.Spread{MinNodes: t.MinNodes, MaxNodes: t.MaxNodes},
		History: slices.Clone(ts.history),
	}
	if pt.Priority == 0 {
		pt.Priority = defaultPriority
	}
	// As the operator does, every tenant is planned at least a smallest partition: a tenant
	// without one has no tracker, so it never gets the curve that would earn it memory.
	pt.Memory.MinBytes = e.minPartition()
	if t.Class == planning.ClassStrict {
		pt.Memory.MinBytes = max(t.MinBytes, pt.Memory.MinBytes)
	}
	if pt.Memory.MaxBytes > 0 {
		pt.Memory.MinBytes = min(pt.Memory.MinBytes, pt.Memory.MaxBytes)
	}
	if ts.plan != nil {
		pt.Current.Isolated = ts.plan.Isolated
		for _, p := range ts.plan.Partitions {
			pt.Current.Partitions = append(pt.Current.Partitions, planning.CurrentPartition{Node: p.Node, MemoryBytes: p.MemoryBytes})
		}
	}
	if ts.measured {
		var curves []nodeCurve
		var hits, reads int64
		for j, st := range ts.stats {
			if st.requests == 0 {
				continue
			}
			rate := float64(st.requests) / seconds
			pt.Rates = append(pt.Rates, planning.NodeRate{Node: e.sc.Nodes[j].Name, RequestsPerSecond: rate, BytesPerSecond: float64(st.bytes) / seconds})
			hits += st.hits
			reads += st.served()
			if p := ts.parts[j]; p != nil && p.recorder != nil {
				if c, err := p.curve(); err == nil {
					curves = append(curves, nodeCurve{requestsPerSecond: rate, curve: c})
				}
			}
		}
		if reads > 0 {
			h := float64(hits) / float64(reads)
			pt.Observed.HitRatio = &h
			if h > 0 && h < 1 {
				// The operator estimates these from the latency histogram; the simulator knows them.
				pt.Observed.HitLatencySeconds = e.sc.hitLatency()
				pt.Observed.MissLatencySeconds = e.sc.missLatency()
			}
		}
		pt.MissRatioCurve = mergeCurves(curves, len(e.sc.Nodes))
	}
	return pt
}

// recordHistory appends each measured tenant's (total size in force, observed hit ratio).
func (ts *tenantState) recordHistory() {
	var hits, reads int64
	for _, st := range ts.stats {
		hits += st.hits
		reads += st.served()
	}
	size := ts.memory()
	if reads == 0 || size <= 0 {
		return
	}
	ts.history = append(ts.history, planning.HitRatioPoint{SizeBytes: size, HitRatio: float64(hits) / float64(reads)})
	if len(ts.history) > maxHistory {
		ts.history = ts.history[len(ts.history)-maxHistory:]
	}
}

// minPartition is the smallest partition every tenant is planned: 1/256 of the smallest node
// (at least 1 KiB), the scaled-down counterpart of the engines' smallest partition.
func (e *engine) minPartition() int64 {
	smallest := e.sc.Nodes[0].MemoryBytes
	for _, n := range e.sc.Nodes {
		smallest = min(smallest, n.MemoryBytes)
	}
	return max(smallest/256, 1024)
}
