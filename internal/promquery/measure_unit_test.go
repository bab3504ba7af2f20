package promquery

import (
	"math"
	"testing"
)

func TestBucketQuantile(t *testing.T) {
	// 100 observations: 50 at most 0.001s, 80 at most 0.002s, 100 at most 0.004s.
	buckets := []Bucket{{0.001, 50}, {0.002, 80}, {0.004, 100}, {math.Inf(1), 100}}
	tests := []struct {
		q    float64
		want float64
		ok   bool
	}{
		{0, 0, true},
		{0.25, 0.0005, true},   // rank 25 in the first bucket: 0 + 0.001*25/50
		{0.5, 0.001, true},     // rank 50 at the first bound
		{0.65, 0.0015, true},   // rank 65: 0.001 + 0.001*15/30
		{0.99, 0.0039, true},   // rank 99: 0.002 + 0.002*19/20
		{1, 0.004, true},       // rank 100 at the last finite bound
		{-0.1, 0, false},       // q outside [0, 1]
		{1.5, 0, false},        // q outside [0, 1]
		{math.NaN(), 0, false}, // no quantile of NaN
	}
	for _, tt := range tests {
		got, ok := BucketQuantile(tt.q, buckets)
		if ok != tt.ok || math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("BucketQuantile(%v) = %v, %v; want %v, %v", tt.q, got, ok, tt.want, tt.ok)
		}
	}
	overflow := []Bucket{{0.001, 1}, {math.Inf(1), 10}}
	if got, ok := BucketQuantile(0.9, overflow); !ok || got != 0.001 {
		t.Errorf("a rank in the +Inf bucket = %v, %v; want the last finite bound 0.001", got, ok)
	}
	for name, b := range map[string][]Bucket{
		"empty":         nil,
		"no +Inf":       {{0.001, 1}, {0.002, 2}},
		"no data":       {{0.001, 0}, {math.Inf(1), 0}},
		"single bucket": {{math.Inf(1), 3}},
	} {
		if _, ok := BucketQuantile(0.5, b); ok {
			t.Errorf("%s: got a quantile", name)
		}
	}
}

func TestHitMissLatency(t *testing.T) {
	// 80% hits at ~0.5ms, 20% misses at ~3ms: mean 0.001s.
	m := &TenantMeasurement{
		HitsPerSecond: 80, MissesPerSecond: 20,
		LatencySumPerSecond: 0.1, LatencyCountPerSecond: 100,
		LatencyBuckets: []Bucket{{0.0005, 0}, {0.001, 80}, {0.004, 100}, {math.Inf(1), 100}},
	}
	hit, miss, ok := m.HitMissLatency()
	if !ok {
		t.Fatal("no estimate")
	}
	// The hit estimate is the median of the fastest 80%: rank 40 of 80 in (0.5ms, 1ms].
	if math.Abs(hit-0.00075) > 1e-9 {
		t.Errorf("hit latency %v, want 0.00075", hit)
	}
	// The rest follows from the mean: (0.001 - 0.8*0.00075) / 0.2.
	if math.Abs(miss-0.002) > 1e-9 {
		t.Errorf("miss latency %v, want 0.002", miss)
	}
	for name, m := range map[string]*TenantMeasurement{
		"no reads":       {LatencySumPerSecond: 1, LatencyCountPerSecond: 1},
		"only hits":      {HitsPerSecond: 1, LatencySumPerSecond: 1, LatencyCountPerSecond: 1},
		"only misses":    {MissesPerSecond: 1, LatencySumPerSecond: 1, LatencyCountPerSecond: 1},
		"no timing data": {HitsPerSecond: 1, MissesPerSecond: 1},
	} {
		if _, _, ok := m.HitMissLatency(); ok {
			t.Errorf("%s: got an estimate", name)
		}
	}
}

func TestTenantSums(t *testing.T) {
	m := &TenantMeasurement{Nodes: map[string]*TenantNodeMeasurement{
		"a": {RequestsPerSecond: 10, BytesPerSecond: 100},
		"b": {RequestsPerSecond: 5, BytesPerSecond: 50},
	}}
	if m.RequestsPerSecond() != 15 || m.BytesPerSecond() != 150 {
		t.Fatalf("sums %v %v", m.RequestsPerSecond(), m.BytesPerSecond())
	}
	if _, ok := m.HitRatio(); ok {
		t.Fatal("hit ratio without reads")
	}
}

func TestCurveCheckWeighsPartitionsBySampledReads(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name  string
		nodes map[string]*CurveCheck
		want  CurveCheck
		ok    bool
	}{
		{name: "no check exported", nodes: map[string]*CurveCheck{"a": nil}},
		{name: "one partition", nodes: map[string]*CurveCheck{"a": {Predicted: 0.9, Achieved: 0.8, SampledReads: 50}},
			want: CurveCheck{Predicted: 0.9, Achieved: 0.8, SampledReads: 50}, ok: true},
		{name: "weighted by sampled reads", nodes: map[string]*CurveCheck{
			"a": {Predicted: 0.9, Achieved: 0.5, SampledReads: 300},
			"b": {Predicted: 0.5, Achieved: 0.5, SampledReads: 100}},
			want: CurveCheck{Predicted: 0.8, Achieved: 0.5, SampledReads: 400}, ok: true},
		{name: "incomplete and unsampled partitions are left out", nodes: map[string]*CurveCheck{
			"a": {Predicted: 0.9, Achieved: nan, SampledReads: 300},
			"b": {Predicted: 0.2, Achieved: 0.1, SampledReads: 0},
			"c": {Predicted: 0.6, Achieved: 0.4, SampledReads: 10}},
			want: CurveCheck{Predicted: 0.6, Achieved: 0.4, SampledReads: 10}, ok: true},
		{name: "nothing sampled", nodes: map[string]*CurveCheck{"a": {Predicted: 0.9, Achieved: 0.9, SampledReads: 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &TenantMeasurement{Nodes: map[string]*TenantNodeMeasurement{}}
			for node, c := range tt.nodes {
				m.Nodes[node] = &TenantNodeMeasurement{CurveCheck: c}
			}
			got, ok := m.CurveCheck()
			near := func(a, b float64) bool { return math.Abs(a-b) < 1e-12 }
			if ok != tt.ok || !near(got.Predicted, tt.want.Predicted) || !near(got.Achieved, tt.want.Achieved) || got.SampledReads != tt.want.SampledReads {
				t.Errorf("CurveCheck() = %+v, %v; want %+v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}
