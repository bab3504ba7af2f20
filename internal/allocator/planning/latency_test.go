package planning

import "testing"

func TestCompleteLatencies(t *testing.T) {
	ratio := func(h float64) *float64 { return &h }
	tests := []struct {
		name      string
		obs       Observation
		mean      float64
		ok        bool
		hit, miss float64
	}{
		{"every read missed: its mean is the miss time", Observation{HitRatio: ratio(0)}, 0.004, true, 0.0005, 0.004},
		{"every read hit: its mean is the hit time", Observation{HitRatio: ratio(1)}, 0.0004, true, 0.0004, 0.003},
		{"split measured: left as it is", Observation{HitRatio: ratio(0.5), HitLatencySeconds: 0.001, MissLatencySeconds: 0.002}, 0.0015, false, 0.001, 0.002},
		{"a hit ratio between 0 and 1 without a split", Observation{HitRatio: ratio(0.5)}, 0.002, false, 0, 0},
		{"no hit ratio", Observation{}, 0.004, false, 0, 0},
		{"no mean latency", Observation{HitRatio: ratio(0)}, 0, false, 0, 0},
		{"the reference hit is slower than its misses", Observation{HitRatio: ratio(0)}, 0.0002, false, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obs := tt.obs
			ok := CompleteLatencies(&obs, tt.mean, 0.0005, 0.003)
			if ok != tt.ok || obs.HitLatencySeconds != tt.hit || obs.MissLatencySeconds != tt.miss {
				t.Errorf("= %v, hit %v s, miss %v s; want %v, %v s, %v s", ok, obs.HitLatencySeconds, obs.MissLatencySeconds, tt.ok, tt.hit, tt.miss)
			}
		})
	}
	if ok := CompleteLatencies(&Observation{HitRatio: ratio(0)}, 0.004, 0, 0); ok {
		t.Error("completed without a reference")
	}
}

func TestReferenceLatencies(t *testing.T) {
	split := func(hit, miss float64) Tenant {
		return Tenant{Observed: Observation{HitLatencySeconds: hit, MissLatencySeconds: miss}}
	}
	hit, miss := ReferenceLatencies([]Tenant{split(0.001, 0.004), {}, split(0.0002, 0.002), split(0.0005, 0.009), split(0, 0.003)})
	if hit != 0.0005 || miss != 0.004 {
		t.Errorf("median hit %v s, miss %v s over the tenants with both; want 0.0005 s and 0.004 s", hit, miss)
	}
	if hit, miss := ReferenceLatencies(nil); hit != 0 || miss != 0 {
		t.Errorf("without tenants: %v, %v; want 0, 0", hit, miss)
	}
}
