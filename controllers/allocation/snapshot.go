package allocation

import (
	"slices"
	"strings"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/internal/allocator/planning"
	"github.com/cacheqos/cacheqos/internal/curve"
	"github.com/cacheqos/cacheqos/internal/promquery"
)

// buildSnapshot is the allocator's input: the cluster's nodes with their measured load, and
// every admitted tenant with its objective, limits, measured traffic, curve and current
// partitions. m is nil when there are no usable measurements.
func buildSnapshot(in *inputs, m *promquery.Measurements, st *clusterState) *planning.Snapshot {
	capacity := &in.cluster.Spec.Capacity
	snap := &planning.Snapshot{APIVersion: planning.APIVersion, Kind: planning.KindSnapshot, Cluster: in.key.String()}
	for _, node := range in.nodes {
		snap.Nodes = append(snap.Nodes, planning.Node{
			Name:                    node,
			MemoryBytes:             capacity.PartitionableMemory(),
			BandwidthBytesPerSecond: capacity.Bandwidth.Value(),
			OpsPerSecond:            capacity.OpsPerSecond,
			Load:                    nodeLoad(m, node),
		})
	}
	measured := make([]*promquery.TenantMeasurement, len(in.admitted))
	for i, t := range in.admitted {
		if m != nil {
			measured[i] = m.Tenants[t.TenantID()]
		}
		snap.Tenants = append(snap.Tenants, snapshotTenant(t, measured[i], in, st))
	}
	refHit, refMiss := planning.ReferenceLatencies(snap.Tenants)
	for i, t := range in.admitted {
		setObjective(&snap.Tenants[i], t, measured[i], refHit, refMiss)
	}
	return snap
}

// setObjective translates the tenant's objective. A latency objective whose reads all missed
// or all hit takes the service time it could not measure from the cluster's other tenants
// (planning.CompleteLatencies). A tenant whose objective cannot be modelled yet (no latency
// measured on either side) keeps its guarantees but is planned as best effort this time.
func setObjective(pt *planning.Tenant, t *v1.TenantSLO, tm *promquery.TenantMeasurement, refHit, refMiss float64) {
	if t.Spec.Objective.Latency != nil && tm != nil {
		if mean, ok := tm.MeanLatency(); ok {
			planning.CompleteLatencies(&pt.Observed, mean, refHit, refMiss)
		}
	}
	pt.Objective = objectiveOf(t, tm, pt.Observed)
	if pt.Objective == nil {
		pt.Class = planning.ClassBestEffort
	}
}

// nodeLoad sums every tenant's traffic on node, this cluster's or not: the allocator keeps
// what its tenants do not explain as background load.
func nodeLoad(m *promquery.Measurements, node string) planning.Load {
	var load planning.Load
	if m == nil {
		return load
	}
	for _, t := range m.Tenants {
		if n := t.Nodes[node]; n != nil {
			load.OpsPerSecond += n.RequestsPerSecond
			load.BytesPerSecond += n.BytesPerSecond
		}
	}
	return load
}

func snapshotTenant(t *v1.TenantSLO, tm *promquery.TenantMeasurement, in *inputs, st *clusterState) planning.Tenant {
	spec := &t.Spec
	pt := planning.Tenant{
		ID:       t.TenantID(),
		Class:    planning.ClassStrict,
		Priority: spec.Priority,
		Spread:   planning.Spread{MinNodes: spec.Placement.MinNodes, MaxNodes: spec.Placement.MaxNodes},
		History:  st.history[t.TenantID()],
		Current:  planning.Current{Isolated: st.isolated[t.TenantID()]},
	}
	if spec.Class == v1.ClassBestEffort {
		pt.Class = planning.ClassBestEffort
	}
	if pt.Priority == 0 {
		pt.Priority = v1.DefaultTenantPriority
	}
	// Every admitted tenant is planned at least one engine's smallest partition: a tenant
	// without a partition has nowhere to connect, so it could never send the traffic whose
	// miss-ratio curve would earn it memory (a best-effort tenant without memory.min, or an
	// elephant LACS took the cache from). The curve is sampled from every access, whatever the
	// partition holds.
	floor := in.cluster.Spec.Engine.MinPartitionBytes()
	pt.Memory.MinBytes = floor
	if q := spec.Memory.Min; q != nil && pt.Class == planning.ClassStrict {
		pt.Memory.MinBytes = max(q.Value(), floor)
	}
	if q := spec.Memory.Max; q != nil {
		pt.Memory.MaxBytes = max(q.Value(), floor)
	}
	if q := spec.Bandwidth.Guaranteed; q != nil && pt.Class == planning.ClassStrict {
		pt.Bandwidth.GuaranteedBytesPerSecond = q.Value()
	}
	if q := spec.Bandwidth.Limit; q != nil {
		pt.Bandwidth.LimitBytesPerSecond = q.Value()
	}
	if spec.OpsLimit != nil {
		pt.OpsLimitPerSecond = *spec.OpsLimit
	}
	for _, p := range in.current[t.TenantID()] {
		if _, out := in.outOfService[p.Node]; out {
			// Not a node of the snapshot: the allocator places this memory anew.
			continue
		}
		pt.Current.Partitions = append(pt.Current.Partitions, planning.CurrentPartition{Node: p.Node, MemoryBytes: p.MemoryBytes})
	}
	if tm != nil {
		observe(&pt, tm, in.nodes)
		pt.Rates = st.demandOf(pt.ID, pt.Rates, tm.ThrottledPerSecond >= minThrottledRate)
	}
	return pt
}

// demandOf is the tenant's demand per node: the measured rates while its limits hold nothing
// back (and they are remembered), and while they do, on each node the larger of the measured
// rate and the one remembered from before. Without this, a throttled elephant would look like
// a mouse at its limit, be released by the next plan, flood again, and be throttled again.
func (st *clusterState) demandOf(tenant string, measured []planning.NodeRate, throttled bool) []planning.NodeRate {
	if !throttled {
		st.demand[tenant] = measured
		return measured
	}
	out := slices.Clone(measured)
	for _, before := range st.demand[tenant] {
		i := slices.IndexFunc(out, func(r planning.NodeRate) bool { return r.Node == before.Node })
		if i < 0 {
			out = append(out, before)
			continue
		}
		out[i].RequestsPerSecond = max(out[i].RequestsPerSecond, before.RequestsPerSecond)
		out[i].BytesPerSecond = max(out[i].BytesPerSecond, before.BytesPerSecond)
	}
	slices.SortFunc(out, func(a, b planning.NodeRate) int { return strings.Compare(a.Node, b.Node) })
	return out
}

// observe copies a tenant's measurements into the snapshot: rates on the cluster's nodes,
// hit ratio, hit and miss latencies, and the miss-ratio curve.
func observe(pt *planning.Tenant, tm *promquery.TenantMeasurement, nodes []string) {
	for _, node := range nodes {
		if n := tm.Nodes[node]; n != nil {
			pt.Rates = append(pt.Rates, planning.NodeRate{Node: node, RequestsPerSecond: n.RequestsPerSecond, BytesPerSecond: n.BytesPerSecond})
		}
	}
	if h, ok := tm.HitRatio(); ok {
		pt.Observed.HitRatio = &h
	}
	if hit, miss, ok := tm.HitMissLatency(); ok {
		pt.Observed.HitLatencySeconds = min(hit, planning.MaxLatencySeconds)
		pt.Observed.MissLatencySeconds = min(miss, planning.MaxLatencySeconds)
	}
	pt.MissRatioCurve = mergedCurve(tm, nodes)
}

// objectiveOf translates the TenantSLO objective into the allocator's. Latency objectives
// need measured hit and miss latencies; a p99 target is scaled by the observed mean/p99
// ratio, since the allocator models mean latency. Nil when the objective cannot be modelled.
func objectiveOf(t *v1.TenantSLO, tm *promquery.TenantMeasurement, obs planning.Observation) *planning.Objective {
	o := t.Spec.Objective
	switch {
	case o.HitRatio != nil:
		if v, err := o.HitRatio.Target(); err == nil {
			return &planning.Objective{HitRatio: &v}
		}
	case o.MaxDegradation != nil:
		if v, err := o.MaxDegradation.Target(); err == nil {
			return &planning.Objective{MaxDegradation: &v}
		}
	case o.Latency != nil:
		if obs.HitLatencySeconds <= 0 || obs.MissLatencySeconds <= 0 {
			return nil
		}
		target := o.Latency.Target.Seconds()
		if o.Latency.Statistic == v1.LatencyP99 {
			mean, okMean := tm.MeanLatency()
			p99, okP99 := tm.LatencyQuantile(0.99)
			if !okMean || !okP99 || p99 <= 0 {
				return nil
			}
			target *= min(1, mean/p99)
		}
		if target > 0 && target <= planning.MaxLatencySeconds {
			return &planning.Objective{LatencySeconds: &target}
		}
	}
	return nil
}

// mergedCurve combines the tenant's per-node curves into one curve over its total size
// (curve.Merge).
func mergedCurve(tm *promquery.TenantMeasurement, nodes []string) []planning.MissRatioPoint {
	var curves []curve.NodeCurve
	for _, node := range nodes {
		if n := tm.Nodes[node]; n != nil {
			pts := make([]curve.Point, len(n.Curve))
			for i, p := range n.Curve {
				pts[i] = curve.Point{SizeBytes: p.SizeBytes, HitRatio: p.HitRatio}
			}
			curves = append(curves, curve.NodeCurve{Points: pts, RequestsPerSecond: n.RequestsPerSecond})
		}
	}
	return planning.MissRatios(curve.Merge(curves, float64(planning.MaxNodeMemoryBytes)*float64(len(nodes)), planning.MaxCurvePoints))
}

func clamp01(v float64) float64 {
	return min(1, max(0, v))
}

// recordHistory appends each measured tenant's (total size in force, observed hit ratio).
func recordHistory(st *clusterState, in *inputs, m *promquery.Measurements) {
	for _, t := range in.admitted {
		id := t.TenantID()
		tm := m.Tenants[id]
		if tm == nil {
			continue
		}
		h, ok := tm.HitRatio()
		var size int64
		for _, p := range in.current[id] {
			size += p.MemoryBytes
		}
		if !ok || size <= 0 {
			continue
		}
		hist := append(st.history[id], planning.HitRatioPoint{SizeBytes: size, HitRatio: h})
		if len(hist) > maxHistory {
			hist = hist[len(hist)-maxHistory:]
		}
		st.history[id] = hist
	}
	for id := range st.history {
		if !slices.ContainsFunc(in.admitted, func(t *v1.TenantSLO) bool { return t.TenantID() == id }) {
			delete(st.history, id)
			delete(st.isolated, id)
		}
	}
}
