package promquery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
)

// Scope selects what Measure reads: the series of some nodes, rated over a window.
type Scope struct {
	// Nodes whose sidecar series are read (the cluster's nodes). Required.
	Nodes []string
	// Window of the rate() functions; it should span several scrape intervals.
	Window time.Duration
	// At is the evaluation time; zero means the server's current time.
	At time.Time
}

// Measurements is what the sidecars of one cluster reported.
type Measurements struct {
	// Tenants by tenant ID ("<namespace>/<name>").
	Tenants map[string]*TenantMeasurement
	// NodeSampleAge is, per node that has reported at all, how old its newest sample is.
	NodeSampleAge map[string]time.Duration
	// Problems lists series that were skipped (malformed labels or values), at most
	// maxProblems of them.
	Problems []string
}

// maxProblems bounds Measurements.Problems; the count of further ones is added last.
const maxProblems = 8

// TenantMeasurement is one tenant's traffic over the window, as rates per second.
type TenantMeasurement struct {
	// Nodes by node name: the tenant's traffic and miss-ratio curve on that node.
	Nodes map[string]*TenantNodeMeasurement
	// HitsPerSecond and MissesPerSecond count read keys over all nodes.
	HitsPerSecond, MissesPerSecond float64
	// ThrottledPerSecond counts requests that waited for tokens or were refused.
	ThrottledPerSecond float64
	// LatencySumPerSecond / LatencyCountPerSecond is the mean request latency in seconds.
	LatencySumPerSecond, LatencyCountPerSecond float64
	// LatencyBuckets is the cumulative latency histogram (rates), sorted by upper bound.
	LatencyBuckets []Bucket
}

// TenantNodeMeasurement is one tenant's traffic on one node.
type TenantNodeMeasurement struct {
	RequestsPerSecond float64
	// BytesPerSecond counts request and reply bytes.
	BytesPerSecond float64
	// Curve is the local partition's sampled hit-ratio curve, sorted by size.
	Curve []CurvePoint
	// CurveCheck compares the curve with the partition's own hits; nil when not exported.
	CurveCheck *CurveCheck
}

// CurveCheck is a partition's curve read at its current memory limit against the hit ratio
// the partition achieved, both over the curve's (decayed) window. A value not exported is NaN.
type CurveCheck struct {
	Predicted, Achieved float64
	// SampledReads is the number of sampled reads the curve rests on in that window.
	SampledReads float64
}

// CurveCheck combines the partitions' checks, each weighted by its sampled reads; false when
// no partition exported a complete check with a sampled read.
func (t *TenantMeasurement) CurveCheck() (CurveCheck, bool) {
	var sum CurveCheck
	for _, n := range t.Nodes {
		c := n.CurveCheck
		if c == nil || math.IsNaN(c.Predicted) || math.IsNaN(c.Achieved) || math.IsNaN(c.SampledReads) || c.SampledReads <= 0 {
			continue
		}
		sum.Predicted += c.Predicted * c.SampledReads
		sum.Achieved += c.Achieved * c.SampledReads
		sum.SampledReads += c.SampledReads
	}
	if sum.SampledReads <= 0 {
		return CurveCheck{}, false
	}
	return CurveCheck{Predicted: sum.Predicted / sum.SampledReads, Achieved: sum.Achieved / sum.SampledReads, SampledReads: sum.SampledReads}, true
}

// CurvePoint is the hit ratio a partition of SizeBytes would have.
type CurvePoint struct {
	SizeBytes int64
	HitRatio  float64
}

// Bucket is a cumulative histogram bucket: Count observations at most UpperBound.
type Bucket struct {
	UpperBound float64
	Count      float64
}

// RequestsPerSecond sums the tenant's request rate over its nodes.
func (t *TenantMeasurement) RequestsPerSecond() float64 {
	var sum float64
	for _, n := range t.Nodes {
		sum += n.RequestsPerSecond
	}
	return sum
}

// BytesPerSecond sums the tenant's byte rate over its nodes.
func (t *TenantMeasurement) BytesPerSecond() float64 {
	var sum float64
	for _, n := range t.Nodes {
		sum += n.BytesPerSecond
	}
	return sum
}

// HitRatio is hits / (hits + misses); false when the tenant read nothing.
func (t *TenantMeasurement) HitRatio() (float64, bool) {
	reads := t.HitsPerSecond + t.MissesPerSecond
	if reads <= 0 {
		return 0, false
	}
	return t.HitsPerSecond / reads, true
}

// MeanLatency in seconds; false when no request was timed.
func (t *TenantMeasurement) MeanLatency() (float64, bool) {
	if t.LatencyCountPerSecond <= 0 {
		return 0, false
	}
	return t.LatencySumPerSecond / t.LatencyCountPerSecond, true
}

// LatencyQuantile is the q-quantile of request latency in seconds; false without data.
func (t *TenantMeasurement) LatencyQuantile(q float64) (float64, bool) {
	return BucketQuantile(q, t.LatencyBuckets)
}

// HitMissLatency estimates the mean latency of a hit and of a miss (seconds), which the
// allocator's latency model needs. The sidecar times requests, not hits and misses, so the
// estimate assumes hits are the fastest requests (reads dominate the traffic): the mean of a
// hit is taken as the median of the fastest hit-ratio share of requests, and the mean of the
// rest follows from the overall mean. False when the tenant has no hits, only hits, or no
// timed requests.
func (t *TenantMeasurement) HitMissLatency() (hit, miss float64, ok bool) {
	h, ok := t.HitRatio()
	if !ok || h <= 0 || h >= 1 {
		return 0, 0, false
	}
	mean, ok := t.MeanLatency()
	if !ok {
		return 0, 0, false
	}
	hit, ok = t.LatencyQuantile(h / 2)
	if !ok || hit <= 0 {
		return 0, 0, false
	}
	hit = min(hit, mean)
	miss = (mean - h*hit) / (1 - h)
	return hit, max(miss, hit), true
}

// BucketQuantile computes the q-quantile of a cumulative histogram the way Prometheus'
// histogram_quantile does: linear interpolation inside the bucket holding the rank, 0 as
// the lower bound of the first bucket, and the last finite bound when the rank falls in the
// +Inf bucket. False without observations or a +Inf bucket, or when q is outside [0, 1].
func BucketQuantile(q float64, buckets []Bucket) (float64, bool) {
	if math.IsNaN(q) || q < 0 || q > 1 || len(buckets) < 2 {
		return 0, false
	}
	if !math.IsInf(buckets[len(buckets)-1].UpperBound, 1) {
		return 0, false
	}
	total := buckets[len(buckets)-1].Count
	if total <= 0 {
		return 0, false
	}
	rank := q * total
	i := 0
	for i < len(buckets)-1 && buckets[i].Count < rank {
		i++
	}
	if i == len(buckets)-1 {
		return buckets[len(buckets)-2].UpperBound, true
	}
	lower, below := 0.0, 0.0
	if i > 0 {
		lower, below = buckets[i-1].UpperBound, buckets[i-1].Count
	}
	upper, in := buckets[i].UpperBound, buckets[i].Count-below
	if in <= 0 {
		return upper, true
	}
	return lower + (upper-lower)*(rank-below)/in, true
}

// measureStep is one query of Measure and how its samples are recorded.
type measureStep struct {
	expr string
	add  func(m *Measurements, smp Sample) error
}

// measureSteps lists Measure's queries for the series selected by sel, rated over w.
func measureSteps(sel string, w time.Duration) []measureStep {
	return []measureStep{
		{nodeSampleAge(sel), addNodeAge},
		{tenantNodeRate(MetricRequests, sel, w), addTenantNode(func(n *TenantNodeMeasurement, v float64) { n.RequestsPerSecond += v })},
		{tenantNodeRate(MetricBytesIn, sel, w), addTenantNode(func(n *TenantNodeMeasurement, v float64) { n.BytesPerSecond += v })},
		{tenantNodeRate(MetricBytesOut, sel, w), addTenantNode(func(n *TenantNodeMeasurement, v float64) { n.BytesPerSecond += v })},
		{tenantRate(MetricHits, sel, w), addTenant(func(t *TenantMeasurement, v float64) { t.HitsPerSecond = v })},
		{tenantRate(MetricMisses, sel, w), addTenant(func(t *TenantMeasurement, v float64) { t.MissesPerSecond = v })},
		{tenantRate(MetricThrottledRequests, sel, w), addTenant(func(t *TenantMeasurement, v float64) { t.ThrottledPerSecond = v })},
		{tenantRate(MetricRequestDuration+"_sum", sel, w), addTenant(func(t *TenantMeasurement, v float64) { t.LatencySumPerSecond = v })},
		{tenantRate(MetricRequestDuration+"_count", sel, w), addTenant(func(t *TenantMeasurement, v float64) { t.LatencyCountPerSecond = v })},
		{tenantLatencyBuckets(sel, w), addBucket},
		{tenantNodeCurve(sel), addCurvePoint},
		{tenantNodeGauge(MetricMRCPredicted, sel), addCurveCheck(func(c *CurveCheck, v float64) { c.Predicted = v })},
		{tenantNodeGauge(MetricMRCAchieved, sel), addCurveCheck(func(c *CurveCheck, v float64) { c.Achieved = v })},
		{tenantNodeGauge(MetricMRCSampledReads, sel), addCurveCheck(func(c *CurveCheck, v float64) { c.SampledReads = v })},
	}
}

// Querier evaluates instant queries; *Client is one.
type Querier interface {
	Query(ctx context.Context, expr string, at time.Time) ([]Sample, error)
}

// Measure runs the allocator's queries for the nodes in scope. Any failed query fails the
// whole measurement (a partial one would make the allocator move memory on missing data);
// malformed series are skipped and listed in Problems.
func Measure(ctx context.Context, q Querier, s Scope) (*Measurements, error) {
	if len(s.Nodes) == 0 {
		return nil, errors.New("measure: no nodes to measure")
	}
	if s.Window <= 0 {
		return nil, fmt.Errorf("measure: window %v is not positive", s.Window)
	}
	m := &Measurements{Tenants: map[string]*TenantMeasurement{}, NodeSampleAge: map[string]time.Duration{}}
	var problems []string
	for _, step := range measureSteps(nodeSelector(s.Nodes), s.Window) {
		samples, err := q.Query(ctx, step.expr, s.At)
		if err != nil {
			return nil, err
		}
		for _, smp := range samples {
			if math.IsNaN(smp.Value) || math.IsInf(smp.Value, 0) {
				// rate() of a series that has not moved, 0/0: no information, not a problem.
				continue
			}
			if err := step.add(m, smp); err != nil {
				problems = append(problems, err.Error())
			}
		}
	}
	for _, t := range m.Tenants {
		slices.SortFunc(t.LatencyBuckets, func(a, b Bucket) int { return cmp.Compare(a.UpperBound, b.UpperBound) })
		for _, n := range t.Nodes {
			slices.SortFunc(n.Curve, func(a, b CurvePoint) int { return cmp.Compare(a.SizeBytes, b.SizeBytes) })
		}
	}
	if len(problems) > maxProblems {
		problems = append(problems[:maxProblems], fmt.Sprintf("and %d more", len(problems)-maxProblems))
	}
	m.Problems = problems
	return m, nil
}

func label(smp Sample, name string) (string, error) {
	v := smp.Labels[name]
	if v == "" {
		return "", fmt.Errorf("series %v has no %s label", smp.Labels, name)
	}
	return v, nil
}

func (m *Measurements) tenant(id string) *TenantMeasurement {
	t := m.Tenants[id]
	if t == nil {
		t = &TenantMeasurement{Nodes: map[string]*TenantNodeMeasurement{}}
		m.Tenants[id] = t
	}
	return t
}

func (t *TenantMeasurement) node(name string) *TenantNodeMeasurement {
	n := t.Nodes[name]
	if n == nil {
		n = &TenantNodeMeasurement{}
		t.Nodes[name] = n
	}
	return n
}

func addNodeAge(m *Measurements, smp Sample) error {
	node, err := label(smp, LabelNode)
	if err != nil {
		return err
	}
	m.NodeSampleAge[node] = time.Duration(smp.Value * float64(time.Second))
	return nil
}

func addTenant(set func(*TenantMeasurement, float64)) func(*Measurements, Sample) error {
	return func(m *Measurements, smp Sample) error {
		id, err := label(smp, LabelTenant)
		if err != nil {
			return err
		}
		set(m.tenant(id), smp.Value)
		return nil
	}
}

func addTenantNode(add func(*TenantNodeMeasurement, float64)) func(*Measurements, Sample) error {
	return func(m *Measurements, smp Sample) error {
		id, err := label(smp, LabelTenant)
		if err != nil {
			return err
		}
		node, err := label(smp, LabelNode)
		if err != nil {
			return err
		}
		add(m.tenant(id).node(node), smp.Value)
		return nil
	}
}

func addBucket(m *Measurements, smp Sample) error {
	id, err := label(smp, LabelTenant)
	if err != nil {
		return err
	}
	le, err := label(smp, LabelLE)
	if err != nil {
		return err
	}
	bound, err := strconv.ParseFloat(le, 64)
	if err != nil || math.IsNaN(bound) {
		return fmt.Errorf("series %v: le %q is not a number", smp.Labels, le)
	}
	t := m.tenant(id)
	t.LatencyBuckets = append(t.LatencyBuckets, Bucket{UpperBound: bound, Count: smp.Value})
	return nil
}

func addCurvePoint(m *Measurements, smp Sample) error {
	id, err := label(smp, LabelTenant)
	if err != nil {
		return err
	}
	node, err := label(smp, LabelNode)
	if err != nil {
		return err
	}
	sizeLabel, err := label(smp, LabelSizeBytes)
	if err != nil {
		return err
	}
	size, err := strconv.ParseInt(sizeLabel, 10, 64)
	if err != nil || size <= 0 {
		return fmt.Errorf("series %v: %s %q is not a positive integer", smp.Labels, LabelSizeBytes, sizeLabel)
	}
	if smp.Value < 0 || smp.Value > 1 {
		return fmt.Errorf("series %v: hit ratio %v is outside [0, 1]", smp.Labels, smp.Value)
	}
	n := m.tenant(id).node(node)
	n.Curve = append(n.Curve, CurvePoint{SizeBytes: size, HitRatio: smp.Value})
	return nil
}

// addCurveCheck records one value of a partition's curve check; the others stay NaN until
// their queries record them.
func addCurveCheck(set func(*CurveCheck, float64)) func(*Measurements, Sample) error {
	return addTenantNode(func(n *TenantNodeMeasurement, v float64) {
		if n.CurveCheck == nil {
			n.CurveCheck = &CurveCheck{Predicted: math.NaN(), Achieved: math.NaN(), SampledReads: math.NaN()}
		}
		set(n.CurveCheck, v)
	})
}
