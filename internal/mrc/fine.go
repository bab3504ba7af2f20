package mrc

import (
	"math"
	"slices"
)

// Reuse distances are counted in logarithmic buckets, bucketsPerOctave per doubling, so a curve
// can be read at any size (a partition's own size grid, its current size) without knowing the
// sizes in advance and without restarting when they change. Within a bucket the distances are
// taken as spread evenly, which bounds the reading error by the mass of one bucket, 2.2% wide.
const (
	bucketsPerOctave = 32
	// distanceOctaves covers distances up to 2^44 bytes (16 TiB); longer ones never hit.
	distanceOctaves = 44
	distanceBuckets = bucketsPerOctave * distanceOctaves
	// fineHistogramBytes is the memory of a fineHistogram's two bucket arrays.
	fineHistogramBytes = 2 * 8 * (distanceBuckets + 1)
)

// bucketOf returns the bucket of a distance in bytes: bucket i holds [2^(i/32), 2^((i+1)/32)),
// bucket 0 everything below 2^(1/32), the last bucket everything beyond the range.
func bucketOf(distance float64) int {
	if distance < 1 {
		return 0
	}
	return min(int(math.Log2(distance)*bucketsPerOctave), distanceBuckets)
}

// bucketLow is the smallest distance bucket i holds (0 for bucket 0).
func bucketLow(i int) float64 {
	if i == 0 {
		return 0
	}
	return math.Exp2(float64(i) / bucketsPerOctave)
}

// fineHistogram counts a tracker's accesses by reuse distance in logarithmic buckets.
type fineHistogram struct {
	distanceCounts
	// achievedHits counts the reads the engine served (all of them, sampled or not), so
	// achieved and predicted hit ratios cover the same decayed window.
	achievedHits float64
}

func newFineHistogram() fineHistogram {
	return fineHistogram{distanceCounts: newDistanceCounts(distanceBuckets + 1)}
}

func (h *fineHistogram) record(distance float64, size uint32, weight float64) {
	h.add(bucketOf(distance), size, weight)
}

func (h *fineHistogram) decay(keep float64) {
	h.distanceCounts.decay(keep)
	h.achievedHits *= keep
}

// curve reads the hit ratios at sizes, whose usable object bytes capacity returns (nil: the
// sizes themselves). The difference between the true access count and the recorded weight
// (sampling error, mostly from whether a few very hot keys happen to be sampled) is credited
// to the smallest distances, as SHARDS-adj does: such keys have tiny reuse distances.
func (h *fineHistogram) curve(sizes []int64, capacity func(int64) float64) Curve {
	c := Curve{
		Sizes:           slices.Clone(sizes),
		HitRatio:        make([]float64, len(sizes)),
		ByteHitRatio:    make([]float64, len(sizes)),
		Accesses:        h.accesses,
		SampledAccesses: h.sampled,
	}
	if h.accesses <= 0 {
		return c
	}
	c.AchievedHitRatio = clamp01(h.achievedHits / h.accesses)
	if h.sampled == 0 {
		return c
	}
	hits, hitBytes := cumulativeSums(h.hits), cumulativeSums(h.hitBytes)
	for i, size := range sizes {
		capBytes := float64(size)
		if capacity != nil {
			capBytes = capacity(size)
		}
		c.HitRatio[i] = adjustedRatio(readCumulative(hits, h.hits, capBytes), hits, h.cold, h.accesses)
		c.ByteHitRatio[i] = adjustedRatio(readCumulative(hitBytes, h.hitBytes, capBytes), hitBytes, h.coldBytes, h.bytes)
	}
	c.ColdMissRatio = clamp01(h.cold / h.accesses)
	return c
}

// cumulativeSums returns s with s[i] the sum of buckets[:i].
func cumulativeSums(buckets []float64) []float64 {
	s := make([]float64, len(buckets)+1)
	for i, w := range buckets {
		s[i+1] = s[i] + w
	}
	return s
}

// readCumulative is the weight of distances at most capacity: whole buckets below it and the
// share of its own bucket below it (the last bucket, beyond the range, never hits).
func readCumulative(sums, buckets []float64, capacity float64) float64 {
	if capacity < 1 {
		return 0
	}
	i := bucketOf(capacity)
	if i >= distanceBuckets {
		return sums[distanceBuckets]
	}
	low, high := bucketLow(i), bucketLow(i+1)
	return sums[i] + buckets[i]*(capacity-low)/(high-low)
}

// adjustedRatio is the hit ratio of hit weight out of total, crediting the unrecorded
// remainder of total (what the recorded weights miss: sums' last entry plus cold) as hits.
func adjustedRatio(hit float64, sums []float64, cold, total float64) float64 {
	if total <= 0 {
		return 0
	}
	remainder := total - sums[len(sums)-1] - cold
	return clamp01((hit + remainder) / total)
}
