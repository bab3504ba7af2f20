package curve

import (
	"math"
	"testing"
)

func TestHitRatioForLatencySoftQoS(t *testing.T) {
	// Soft-QoS: t_c = 0.2 ms, t_d = 10 ms, H = (t_d - T) / (t_d - t_c).
	const tc, td = 0.2e-3, 10e-3
	cases := []struct {
		target float64
		want   float64
		ok     bool
	}{
		{2e-3, (td - 2e-3) / (td - tc), true},
		{td, 0, true},
		{20e-3, 0, true},
		{tc, 1, true},
		{0.1e-3, 0, false},
	}
	for _, c := range cases {
		got, ok := HitRatioForLatency(c.target, tc, td, 0)
		if ok != c.ok || !near(got, c.want, 1e-12) {
			t.Errorf("HitRatioForLatency(%v) = %v, %v; want %v, %v", c.target, got, ok, c.want, c.ok)
		}
		if ok && c.target < td && !near(MeanLatency(got, tc, td), c.target, 1e-12) {
			t.Errorf("MeanLatency(%v) = %v, want %v", got, MeanLatency(got, tc, td), c.target)
		}
	}
	// Queueing delay raises the required hit ratio.
	withQueue, _ := HitRatioForLatency(2e-3, tc, td, 0.5e-3)
	if want := (td + 0.5e-3 - 2e-3) / (td - tc); !near(withQueue, want, 1e-12) {
		t.Errorf("with queueing: %v, want %v", withQueue, want)
	}
	if _, ok := HitRatioForLatency(1e-3, 5e-3, 5e-3, 0); ok {
		t.Error("hits no faster than misses above the target: want not reachable")
	}
}

func TestQueueDelayLACSToyExample(t *testing.T) {
	// LACS Fig. 2: two servers serving 5 requests/s each; user A reads 1 file/s per server,
	// user B 3 files/s. Shared (max-min) placement: each server sees 1 + 3 = 4 requests/s.
	shared, ok := QueueDelay(5, 1+3)
	if !ok || !near(shared, 1, 1e-12) {
		t.Errorf("shared delay = %v, %v; want 1 s", shared, ok)
	}
	// Isolated: A gets half of each server's bandwidth (2.5 requests/s) and sends it 1/s.
	isolated, ok := QueueDelay(5.0/2, 1)
	if !ok || !near(isolated, 2.0/3, 1e-12) {
		t.Errorf("isolated delay = %v, %v; want 0.67 s", isolated, ok)
	}
	if isolated >= shared {
		t.Error("user A is not better off isolated")
	}
	// B's per-file rate at 4 or more makes each shared server unstable.
	for _, b := range []float64{4, 4.5} {
		if d, ok := QueueDelay(5, 1+b); ok || !math.IsInf(d, 1) {
			t.Errorf("B at %v/s: delay %v, %v; want unstable", b, d, ok)
		}
	}
	if _, ok := QueueDelay(5, 1+3.99); !ok {
		t.Error("B at 3.99/s should still be stable")
	}
	// The same in utilization form.
	if d, ok := QueueDelayAtUtilization(5, 0.8); !ok || !near(d, 1, 1e-12) {
		t.Errorf("QueueDelayAtUtilization(5, 0.8) = %v, %v", d, ok)
	}
	if _, ok := QueueDelayAtUtilization(5, 1); ok {
		t.Error("utilization 1 should be unstable")
	}
}
