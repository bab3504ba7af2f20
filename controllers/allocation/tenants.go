package allocation

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/api/v1alpha1/decimal"
	"github.com/cacheqos/cacheqos/controllers/internal/opmetrics"
	"github.com/cacheqos/cacheqos/controllers/internal/ssa"
	"github.com/cacheqos/cacheqos/internal/allocator/planning"
	"github.com/cacheqos/cacheqos/internal/curve"
	"github.com/cacheqos/cacheqos/internal/promquery"
)

// Event reasons on TenantSLOs.
const (
	EventSLOMet          = "SLOMet"
	EventSLOMissed       = "SLOMissed"
	EventThrottled       = "Throttled"
	EventThrottlingEnded = "ThrottlingEnded"
)

// minThrottledRate is the rate of held requests (per second) below which a tenant does not
// count as throttled: one request in a minute and a half is noise, not a limit in force.
const minThrottledRate = 0.01

// tenantStatus is the part of TenantSLOStatus the loop owns.
type tenantStatus struct {
	Conditions        []metav1.Condition    `json:"conditions,omitempty"`
	Allocation        *v1.TenantAllocation  `json:"allocation,omitempty"`
	Observed          *v1.TenantObservation `json:"observed,omitempty"`
	PredictedHitRatio string                `json:"predictedHitRatio,omitempty"`
}

// tenantCounts is what writeTenantStatuses tallied, for the cluster status.
type tenantCounts struct {
	meetingSLO, throttled int32
}

// loopConditions are the condition types the loop owns, in the order it writes them.
var loopConditions = []string{v1.ConditionSLOMet, v1.ConditionThrottled, v1.ConditionCurveAccurate, v1.ConditionAllocated}

// loopStatusOf is what the tenant's status holds of the fields the loop owns.
func loopStatusOf(t *v1.TenantSLO) tenantStatus {
	st := tenantStatus{Allocation: t.Status.Allocation, Observed: t.Status.Observed, PredictedHitRatio: t.Status.PredictedHitRatio}
	for _, typ := range loopConditions {
		if c := meta.FindStatusCondition(t.Status.Conditions, typ); c != nil {
			st.Conditions = append(st.Conditions, *c)
		}
	}
	return st
}

// applyTenantStatus applies st to the tenant's status unless the status as read already holds
// it (statusHolds).
func (l *Loop) applyTenantStatus(ctx context.Context, t *v1.TenantSLO, st tenantStatus) error {
	if statusHolds(t, st) {
		return nil
	}
	return l.writer.ApplyStatus(ctx, t, st)
}

// statusHolds says whether the tenant's status as read holds exactly st, as the apply would
// encode it, in the fields the loop owns. Comparing with the object, not only with the loop's
// own last apply (what ssa.Writer remembers), keeps another manager's write to its own fields
// (the TenantSLO reconciler's Ready) from making the next allocation re-send an identical
// status; a field the loop owns that anyone changed differs, and is written back.
func statusHolds(t *v1.TenantSLO, st tenantStatus) bool {
	held, errHeld := json.Marshal(loopStatusOf(t))
	want, errWant := json.Marshal(st)
	return errHeld == nil && errWant == nil && bytes.Equal(held, want)
}

// writeTenantStatuses writes every tenant's allocation, observations and SLOMet, Throttled
// and Allocated conditions, and emits events when SLOMet or Throttled change. Tenants no longer admitted lose
// what the loop wrote. Without measurements, observations and conditions stay as they were.
func (l *Loop) writeTenantStatuses(ctx context.Context, in *inputs, mr metricsResult, out outcome, generations map[string]int64, cs *clusterState) (tenantCounts, error) {
	predictions := map[string]*planning.TenantPlan{}
	if out.plan != nil {
		for i := range out.plan.Tenants {
			predictions[out.plan.Tenants[i].ID] = &out.plan.Tenants[i]
		}
	}
	cluster := in.key.String()
	var errs []error
	counts := tenantCounts{}
	fairShare := in.cluster.Spec.Capacity.PartitionableMemory() * int64(len(in.nodes)) / int64(max(1, len(in.admitted)))
	for _, t := range in.admitted {
		id := t.TenantID()
		st := tenantStatus{Allocation: allocationOf(out.desired[id], generations), PredictedHitRatio: t.Status.PredictedHitRatio}
		if cs.isolated[id] {
			st.Allocation.Isolated = true
			st.Allocation.Demand = trafficOf(cs.demand[id])
		}
		if tp := predictions[id]; tp != nil {
			if p, err := decimal.Format(clamp01(tp.Predicted.HitRatio)); err == nil && !closeValues(st.PredictedHitRatio, p) {
				st.PredictedHitRatio = p
			}
		}
		allocated, hasAllocated := allocatedCondition(t, out, st.Allocation)
		l.recordUnpackable(t, allocated)
		if mr.err == nil {
			var tm *promquery.TenantMeasurement
			if mr.m != nil {
				tm = mr.m.Tenants[id]
			}
			j := judge(t, tm, in.nodes, fairShare)
			st.Observed = observation(tm, j)
			slo := sloCondition(t, j, predictions[id], st.PredictedHitRatio, mr.window)
			if old := meta.FindStatusCondition(t.Status.Conditions, v1.ConditionSLOMet); old != nil && old.Status == slo.Status && old.Reason == slo.Reason &&
				withinNoise(t.Status.Observed, st.Observed) {
				st.Observed, j.value = t.Status.Observed.DeepCopy(), t.Status.Observed.ObjectiveValue
				slo = sloCondition(t, j, predictions[id], st.PredictedHitRatio, mr.window)
			}
			throttled := throttledCondition(tm, st.Allocation)
			conds := []metav1.Condition{slo, throttled, curveCondition(tm)}
			if hasAllocated {
				conds = append(conds, allocated)
			}
			st.Conditions = ssa.OwnedConditions(t.Status.Conditions, t.Generation, metav1.Now(), conds...)
			l.recordTransitions(t, slo, throttled)
			setSLOMetric(cluster, id, slo)
			opmetrics.SetTenantObserved(cluster, id, &t.Spec.Objective, j.measured, j.met != nil)
		} else {
			st.Observed = t.Status.Observed
			for _, typ := range []string{v1.ConditionSLOMet, v1.ConditionThrottled, v1.ConditionCurveAccurate} {
				if c := meta.FindStatusCondition(t.Status.Conditions, typ); c != nil {
					st.Conditions = append(st.Conditions, *c)
				}
			}
			if hasAllocated {
				st.Conditions = append(st.Conditions, ssa.OwnedConditions(t.Status.Conditions, t.Generation, metav1.Now(), allocated)...)
			}
		}
		if meta.IsStatusConditionTrue(st.Conditions, v1.ConditionSLOMet) {
			counts.meetingSLO++
		}
		if meta.IsStatusConditionTrue(st.Conditions, v1.ConditionThrottled) {
			counts.throttled++
		}
		errs = append(errs, l.applyTenantStatus(ctx, t, st))
	}
	for i := range in.tenants {
		t := &in.tenants[i]
		if isAdmitted(in, t) {
			continue
		}
		errs = append(errs, l.applyTenantStatus(ctx, t, tenantStatus{}))
	}
	opmetrics.TenantsMeetingSLO.WithLabelValues(cluster).Set(float64(counts.meetingSLO))
	return counts, errors.Join(errs...)
}

// allocatedCondition says why the allocation gave tenant t its memory, from the control
// loop's decision, and records the decision in a. When t's memory minimum cannot be packed
// with others' it says so, and a keeps the last decision. Without a decision for t (the plan
// in force was kept because metrics were missing or no plan could be made) the condition the
// tenant had stays.
func allocatedCondition(t *v1.TenantSLO, out outcome, a *v1.TenantAllocation) (metav1.Condition, bool) {
	if msg, ok := out.unpackable[t.TenantID()]; ok {
		if t.Status.Allocation != nil {
			a.Decision = t.Status.Allocation.Decision
		}
		return metav1.Condition{
			Type:    v1.ConditionAllocated,
			Status:  metav1.ConditionFalse,
			Reason:  v1.ReasonMinimumsUnpackable,
			Message: truncate(msg, maxConditionMessage),
		}, true
	}
	d, ok := out.decisions[t.TenantID()]
	if !ok {
		c := meta.FindStatusCondition(t.Status.Conditions, v1.ConditionAllocated)
		if c == nil {
			return metav1.Condition{}, false
		}
		if t.Status.Allocation != nil {
			a.Decision = t.Status.Allocation.Decision
		}
		return *c, true
	}
	a.Decision = string(d.Reason)
	// The same decision on the same allocation keeps its message: the figures a decision
	// quotes (expected hits) move with every interval's measurements.
	if c := meta.FindStatusCondition(t.Status.Conditions, v1.ConditionAllocated); c != nil && c.Status == metav1.ConditionTrue &&
		c.Reason == string(d.Reason) && equality.Semantic.DeepEqual(a, t.Status.Allocation) {
		return *c, true
	}
	return metav1.Condition{
		Type:    v1.ConditionAllocated,
		Status:  metav1.ConditionTrue,
		Reason:  string(d.Reason),
		Message: truncate(d.Message, maxConditionMessage),
	}, true
}

// maxConditionMessage is metav1.Condition's bound on a message.
const maxConditionMessage = 32768

func isAdmitted(in *inputs, t *v1.TenantSLO) bool {
	for _, a := range in.admitted {
		if a.TenantID() == t.TenantID() {
			return true
		}
	}
	return false
}

// allocationOf sums a tenant's partitions. Limits sum only when every partition has one
// (an unlimited partition makes the total unlimited).
func allocationOf(parts []planning.Partition, generations map[string]int64) *v1.TenantAllocation {
	a := &v1.TenantAllocation{}
	var memory, bandwidth, ops int64
	bandwidthLimited, opsLimited := true, true
	for _, p := range parts {
		if p.MemoryBytes <= 0 {
			continue
		}
		memory += p.MemoryBytes
		na := v1.NodeAllocation{NodeName: p.Node, Memory: *resource.NewQuantity(p.MemoryBytes, resource.BinarySI)}
		if p.BandwidthLimitBytesPerSecond > 0 {
			bandwidth += p.BandwidthLimitBytesPerSecond
			na.BandwidthLimit = resource.NewQuantity(p.BandwidthLimitBytesPerSecond, resource.DecimalSI)
		} else {
			bandwidthLimited = false
		}
		if p.OpsLimitPerSecond > 0 {
			ops += p.OpsLimitPerSecond
			na.OpsLimit = ptr.To(p.OpsLimitPerSecond)
		} else {
			opsLimited = false
		}
		a.NodeCount++
		if len(a.Nodes) < v1.MaxTenantNodes {
			a.Nodes = append(a.Nodes, na)
		}
		a.PlanGeneration = max(a.PlanGeneration, generations[p.Node])
	}
	a.Memory = *resource.NewQuantity(memory, resource.BinarySI)
	if a.NodeCount > 0 && bandwidthLimited {
		a.BandwidthLimit = resource.NewQuantity(bandwidth, resource.DecimalSI)
	}
	if a.NodeCount > 0 && opsLimited {
		a.OpsLimit = ptr.To(ops)
	}
	return a
}

// trafficOf turns the allocator's per-node rates into their status form, and ratesOf back.
func trafficOf(rates []planning.NodeRate) []v1.NodeTraffic {
	out := make([]v1.NodeTraffic, 0, min(len(rates), v1.MaxTenantNodes))
	for _, r := range rates[:min(len(rates), v1.MaxTenantNodes)] {
		out = append(out, v1.NodeTraffic{
			NodeName:       r.Node,
			OpsPerSecond:   int64(math.Round(r.RequestsPerSecond)),
			BytesPerSecond: *resource.NewQuantity(int64(math.Round(r.BytesPerSecond)), resource.DecimalSI),
		})
	}
	return out
}

func ratesOf(traffic []v1.NodeTraffic) []planning.NodeRate {
	out := make([]planning.NodeRate, len(traffic))
	for i, tr := range traffic {
		out[i] = planning.NodeRate{Node: tr.NodeName, RequestsPerSecond: float64(tr.OpsPerSecond), BytesPerSecond: tr.BytesPerSecond.AsApproximateFloat64()}
	}
	return out
}

// judgement is a tenant's objective against what was observed.
type judgement struct {
	// what names the observed quantity ("hit ratio", "mean latency"...).
	what string
	// target and value in the target's unit; value is empty when nothing was observed.
	target, value string
	// measured is value as a number, latencies in seconds.
	measured float64
	// met is nil when nothing was observed.
	met *bool
	tm  *promquery.TenantMeasurement
}

// judge compares the tenant's measurement with its objective. A maxDegradation objective is
// judged against the latency the tenant would have with a fair share (the cluster's memory
// split evenly among the admitted tenants), from its merged curve and hit/miss latencies.
func judge(t *v1.TenantSLO, tm *promquery.TenantMeasurement, nodes []string, fairShare int64) judgement {
	o := t.Spec.Objective
	j := judgement{tm: tm}
	observed := func(v float64, ok bool, met func(float64) bool, format func(float64) string) {
		if ok && tm != nil {
			j.value, j.measured = format(v), v
			j.met = ptr.To(met(v))
		}
	}
	decimal := func(v float64) string {
		s, err := decimal.Format(v)
		if err != nil {
			return ""
		}
		return s
	}
	duration := func(v float64) string {
		return time.Duration(v * float64(time.Second)).Round(time.Microsecond).String()
	}
	switch {
	case o.HitRatio != nil:
		target, _ := o.HitRatio.Target()
		j.what, j.target = "hit ratio", o.HitRatio.Ratio
		if tm != nil {
			h, ok := tm.HitRatio()
			observed(h, ok, func(v float64) bool { return v >= target }, decimal)
		}
	case o.Latency != nil:
		target := o.Latency.Target.Seconds()
		j.target = o.Latency.Target.Duration.String()
		if o.Latency.Statistic == v1.LatencyP99 {
			j.what = "p99 latency"
			if tm != nil {
				v, ok := tm.LatencyQuantile(0.99)
				observed(v, ok, func(v float64) bool { return v <= target }, duration)
			}
		} else {
			j.what = "mean latency"
			if tm != nil {
				v, ok := tm.MeanLatency()
				observed(v, ok, func(v float64) bool { return v <= target }, duration)
			}
		}
	case o.MaxDegradation != nil:
		target, _ := o.MaxDegradation.Target()
		j.what, j.target = "latency relative to a fair share", o.MaxDegradation.Factor
		if tm != nil {
			v, ok := degradation(tm, nodes, fairShare)
			observed(v, ok, func(v float64) bool { return v <= target }, decimal)
		}
	}
	return j
}

// sameHitRatio is how close two hit ratios are to count as the same service.
const sameHitRatio = 0.01

// degradation is the tenant's observed mean latency over the mean latency its curve and
// hit/miss latencies predict at the fair share.
func degradation(tm *promquery.TenantMeasurement, nodes []string, fairShare int64) (float64, bool) {
	mean, ok := tm.MeanLatency()
	pts := mergedCurve(tm, nodes)
	if !ok || len(pts) == 0 {
		return 0, false
	}
	cp := make([]curve.Point, len(pts))
	for i, p := range pts {
		cp[i] = curve.Point{SizeBytes: p.SizeBytes, HitRatio: 1 - p.MissRatio}
	}
	c, err := curve.Fit(cp)
	if err != nil {
		return 0, false
	}
	atFair := c.At(fairShare)
	if h, ok := tm.HitRatio(); ok && math.Abs(atFair-h) <= sameHitRatio {
		// A fair share would serve it as it is served now, so with the same latency. This also
		// judges the tenants whose hit and miss latencies cannot be told apart: every read a
		// miss (a scan) or a hit.
		return 1, true
	}
	hit, miss, ok := tm.HitMissLatency()
	if !ok {
		return 0, false
	}
	fair := curve.MeanLatency(atFair, hit, miss)
	if fair <= 0 || math.IsNaN(fair) {
		return 0, false
	}
	return mean / fair, true
}

// observation is the tenant's observed traffic for its status; nil without traffic.
func observation(tm *promquery.TenantMeasurement, j judgement) *v1.TenantObservation {
	if tm == nil {
		return nil
	}
	obs := &v1.TenantObservation{
		Time:           metav1.Now(),
		ObjectiveValue: j.value,
		OpsPerSecond:   int64(math.Round(tm.RequestsPerSecond())),
		BytesPerSecond: *resource.NewQuantity(int64(math.Round(tm.BytesPerSecond())), resource.DecimalSI),
	}
	if h, ok := tm.HitRatio(); ok {
		if s, err := decimal.Format(h); err == nil {
			obs.HitRatio = s
		}
	}
	if mean, ok := tm.MeanLatency(); ok {
		obs.MeanLatency = &metav1.Duration{Duration: time.Duration(mean * float64(time.Second))}
	}
	if p99, ok := tm.LatencyQuantile(0.99); ok {
		obs.P99Latency = &metav1.Duration{Duration: time.Duration(p99 * float64(time.Second))}
	}
	return obs
}

// Measurement noise: an observation this close to the one in the status is not written
// again (rates and latencies wobble by a few percent from one window to the next, which
// rewrote every tenant's status every interval), and keeps its time.
const (
	noiseShare   = 0.05 // of a rate or a latency
	noiseDecimal = 0.01 // of a hit ratio or a degradation factor
)

// withinNoise reports whether fresh differs from old only by measurement noise.
func withinNoise(old, fresh *v1.TenantObservation) bool {
	return old != nil && fresh != nil &&
		closeValues(old.ObjectiveValue, fresh.ObjectiveValue) && closeValues(old.HitRatio, fresh.HitRatio) &&
		closeDurations(old.MeanLatency, fresh.MeanLatency) && closeDurations(old.P99Latency, fresh.P99Latency) &&
		closeShare(float64(old.OpsPerSecond), float64(fresh.OpsPerSecond)) &&
		closeShare(old.BytesPerSecond.AsApproximateFloat64(), fresh.BytesPerSecond.AsApproximateFloat64())
}

// closeShare reports whether a and b differ by at most noiseShare of the larger.
func closeShare(a, b float64) bool {
	return math.Abs(a-b) <= noiseShare*math.Max(math.Abs(a), math.Abs(b))
}

func closeDurations(a, b *metav1.Duration) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return closeShare(float64(a.Duration), float64(b.Duration))
}

// closeValues compares two values as the status writes them: decimals within noiseDecimal,
// durations within noiseShare, anything else only when equal.
func closeValues(a, b string) bool {
	if a == b {
		return true
	}
	if x, err := strconv.ParseFloat(a, 64); err == nil {
		y, err := strconv.ParseFloat(b, 64)
		return err == nil && math.Abs(x-y) <= noiseDecimal
	}
	x, errX := time.ParseDuration(a)
	y, errY := time.ParseDuration(b)
	return errX == nil && errY == nil && closeShare(float64(x), float64(y))
}

// sloCondition says whether the observed value meets the target, with both in the message.
func sloCondition(t *v1.TenantSLO, j judgement, tp *planning.TenantPlan, predicted string, window time.Duration) metav1.Condition {
	c := metav1.Condition{Type: v1.ConditionSLOMet}
	switch {
	case j.met == nil:
		c.Status, c.Reason = metav1.ConditionUnknown, v1.ReasonAwaitingMetrics
		c.Message = fmt.Sprintf("no %s observed over the last %v; target %s", j.what, window, j.target)
	case *j.met:
		c.Status, c.Reason = metav1.ConditionTrue, v1.ReasonTargetMet
		c.Message = fmt.Sprintf("observed %s %s meets target %s", j.what, j.value, j.target)
	case tp != nil && tp.Verdict == planning.VerdictInfeasible:
		c.Status, c.Reason = metav1.ConditionFalse, v1.ReasonTargetUnreachable
		c.Message = fmt.Sprintf("observed %s %s misses target %s, and the allocator cannot meet it: %s", j.what, j.value, j.target, tp.Reason)
	default:
		c.Status, c.Reason = metav1.ConditionFalse, v1.ReasonTargetMissed
		c.Message = fmt.Sprintf("observed %s %s misses target %s", j.what, j.value, j.target)
	}
	if predicted != "" && t.Spec.Objective.HitRatio != nil {
		c.Message += fmt.Sprintf(" (predicted hit ratio at the allocation: %s)", predicted)
	}
	return c
}

// throttledCondition says whether the tenant's requests wait for its limits. The sidecar
// counts held requests without saying which bucket held them, so the reason names the limit
// the tenant uses the larger share of.
func throttledCondition(tm *promquery.TenantMeasurement, a *v1.TenantAllocation) metav1.Condition {
	c := metav1.Condition{Type: v1.ConditionThrottled}
	if tm == nil || tm.ThrottledPerSecond < minThrottledRate {
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, v1.ReasonWithinLimits, "no request waited for the tenant's limits"
		return c
	}
	requests, bytes := tm.RequestsPerSecond(), tm.BytesPerSecond()
	c.Status = metav1.ConditionTrue
	c.Reason = v1.ReasonBandwidthLimited
	var opsShare, bytesShare float64
	if a.OpsLimit != nil && *a.OpsLimit > 0 {
		opsShare = requests / float64(*a.OpsLimit)
	}
	if a.BandwidthLimit != nil && a.BandwidthLimit.Value() > 0 {
		bytesShare = bytes / float64(a.BandwidthLimit.Value())
	}
	if opsShare > bytesShare {
		c.Reason = v1.ReasonOpsLimited
	}
	share := 0.0
	if requests > 0 {
		share = 100 * tm.ThrottledPerSecond / requests
	}
	c.Message = fmt.Sprintf("%.2f requests/s (%.1f%% of %.1f requests/s) waited for the tenant's limits", tm.ThrottledPerSecond, share, requests)
	if a.Isolated {
		c.Message += "; the tenant is isolated by policy lacs: its traffic exceeds a 1/K share, so its limits are 1/K of every node"
	}
	return c
}

// recordUnpackable emits a Warning event when a tenant's minimum becomes unpackable, or
// unpackable beside other tenants than before.
func (l *Loop) recordUnpackable(t *v1.TenantSLO, allocated metav1.Condition) {
	if l.recorder == nil || allocated.Reason != v1.ReasonMinimumsUnpackable {
		return
	}
	old := meta.FindStatusCondition(t.Status.Conditions, v1.ConditionAllocated)
	if old == nil || old.Reason != allocated.Reason || old.Message != allocated.Message {
		l.recorder.Event(t, corev1.EventTypeWarning, v1.ReasonMinimumsUnpackable, allocated.Message)
	}
}

// recordTransitions emits events when a tenant starts or stops meeting its SLO, or starts or
// stops being throttled.
func (l *Loop) recordTransitions(t *v1.TenantSLO, slo, throttled metav1.Condition) {
	if l.recorder == nil {
		return
	}
	wasMet := meta.IsStatusConditionTrue(t.Status.Conditions, v1.ConditionSLOMet)
	oldSLO := meta.FindStatusCondition(t.Status.Conditions, v1.ConditionSLOMet)
	switch {
	case slo.Status == metav1.ConditionTrue && !wasMet:
		l.recorder.Event(t, corev1.EventTypeNormal, EventSLOMet, slo.Message)
	case slo.Status == metav1.ConditionFalse && (oldSLO == nil || oldSLO.Status != metav1.ConditionFalse):
		l.recorder.Event(t, corev1.EventTypeWarning, EventSLOMissed, slo.Message)
	}
	wasThrottled := meta.IsStatusConditionTrue(t.Status.Conditions, v1.ConditionThrottled)
	switch {
	case throttled.Status == metav1.ConditionTrue && !wasThrottled:
		l.recorder.Event(t, corev1.EventTypeWarning, EventThrottled, throttled.Message)
	case throttled.Status == metav1.ConditionFalse && wasThrottled:
		l.recorder.Event(t, corev1.EventTypeNormal, EventThrottlingEnded, throttled.Message)
	}
}

// setSLOMetric exports the tenant's SLOMet as 1 or 0, and nothing while it is unknown.
func setSLOMetric(cluster, tenant string, slo metav1.Condition) {
	switch slo.Status {
	case metav1.ConditionTrue:
		opmetrics.TenantSLOMet.WithLabelValues(cluster, tenant).Set(1)
	case metav1.ConditionFalse:
		opmetrics.TenantSLOMet.WithLabelValues(cluster, tenant).Set(0)
	default:
		opmetrics.TenantSLOMet.DeleteLabelValues(cluster, tenant)
	}
}
