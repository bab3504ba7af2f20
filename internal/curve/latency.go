package curve

import "math"

// MeanLatency is the mean request latency at hit ratio h when a hit costs hitLatency and a
// miss missLatency (any time unit; the result is in the same unit): h*hit + (1-h)*miss.
func MeanLatency(h, hitLatency, missLatency float64) float64 {
	return h*hitLatency + (1-h)*missLatency
}

// HitRatioForLatency returns the hit ratio needed for a mean latency of at most target when
// every request also waits queueDelay in the node's queue: the inverse of MeanLatency plus the
// delay, h = (miss + queue - target) / (miss - hit), clamped at 0. It reports false when even
// a hit ratio of 1 cannot meet the target, or when hits are not faster than misses and the
// miss path does not meet it.
//
// With hit 0.2 ms and miss 10 ms (Soft-QoS' t_c and t_d) and no queueing this is Soft-QoS'
// H = (t_d - T) / (t_d - t_c).
func HitRatioForLatency(target, hitLatency, missLatency, queueDelay float64) (float64, bool) {
	if missLatency+queueDelay <= target {
		return 0, true
	}
	if missLatency <= hitLatency {
		return 0, false
	}
	h := (missLatency + queueDelay - target) / (missLatency - hitLatency)
	if h > 1+1e-12 {
		return 0, false
	}
	return math.Min(1, math.Max(0, h)), true
}

// QueueDelay is the mean time a request spends in an M/M/1 queue (waiting plus service) whose
// server completes serviceRate requests per second and receives arrivalRate: 1/(mu - lambda)
// seconds, as in LACS. It reports false when the queue is unstable (arrivalRate >= serviceRate
// or serviceRate <= 0).
func QueueDelay(serviceRate, arrivalRate float64) (float64, bool) {
	if serviceRate <= 0 || arrivalRate >= serviceRate {
		return math.Inf(1), false
	}
	return 1 / (serviceRate - math.Max(0, arrivalRate)), true
}

// QueueDelayAtUtilization is the M/M/1 delay 1/(mu - lambda) written with the utilization
// rho = lambda/mu: (1/mu) / (1 - rho). It is how a node whose ops and bytes capacities are
// both in use is modelled, with rho the larger of the two utilizations. It reports false when
// rho >= 1 or serviceRate <= 0.
func QueueDelayAtUtilization(serviceRate, rho float64) (float64, bool) {
	if serviceRate <= 0 || rho >= 1 {
		return math.Inf(1), false
	}
	return 1 / serviceRate / (1 - math.Max(0, rho)), true
}
