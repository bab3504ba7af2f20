package planning

import (
	"slices"
)

// A latency objective is modelled from a tenant's mean hit and miss service times, which are
// split out of its latency histogram by its hit ratio. A tenant whose reads all missed (a
// loop larger than its partition) or all hit has only one side: without the other it could
// not be planned for its objective, so it would be planned as best effort, keep the smallest
// partition, and never hit, never to be measured otherwise. The service time of a hit is the
// proxy's and the engine's, much the same for every tenant of a cluster, and so is a miss's:
// the side a tenant lacks is taken from the cluster's other tenants.

// ReferenceLatencies are the median hit and miss service times over the tenants whose own
// reads measured both (0 when none did).
func ReferenceLatencies(tenants []Tenant) (hit, miss float64) {
	var hits, misses []float64
	for i := range tenants {
		o := &tenants[i].Observed
		if o.HitLatencySeconds > 0 && o.MissLatencySeconds > 0 {
			hits = append(hits, o.HitLatencySeconds)
			misses = append(misses, o.MissLatencySeconds)
		}
	}
	return median(hits), median(misses)
}

// CompleteLatencies fills in the hit and miss service times of a tenant whose reads all
// missed (hitRatio 0: its mean latency is its miss time) or all hit (hitRatio 1: its mean is
// its hit time), the other side from the reference (ReferenceLatencies). It reports false
// when obs already has both, when the side needed has no reference, or when the reference
// would make a hit slower than a miss.
func CompleteLatencies(obs *Observation, meanSeconds, refHit, refMiss float64) bool {
	if obs.HitRatio == nil || obs.HitLatencySeconds > 0 && obs.MissLatencySeconds > 0 || meanSeconds <= 0 {
		return false
	}
	hit, miss := 0.0, 0.0
	switch h := *obs.HitRatio; {
	case h <= 0:
		hit, miss = refHit, meanSeconds
	case h >= 1:
		hit, miss = meanSeconds, refMiss
	default:
		return false
	}
	if hit <= 0 || miss <= 0 || hit > miss {
		return false
	}
	obs.HitLatencySeconds = min(hit, MaxLatencySeconds)
	obs.MissLatencySeconds = min(miss, MaxLatencySeconds)
	return true
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}
