package mrc

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// MaxCurveSizes bounds the number of candidate sizes of a curve, and with it the number of
// Prometheus series a curve becomes.
const MaxCurveSizes = 64

// Curve is an immutable snapshot of a miss-ratio curve: the LRU hit ratio a partition would
// have at each candidate size. Its slices are never modified after the snapshot is taken and
// must not be modified by callers.
type Curve struct {
	// Sizes are the candidate partition sizes in bytes, strictly increasing.
	Sizes []int64
	// HitRatio[i] is the fraction of accesses an LRU cache of Sizes[i] bytes would serve.
	HitRatio []float64
	// ByteHitRatio[i] is the fraction of accessed bytes such a cache would serve.
	ByteHitRatio []float64
	// AchievedHitRatio is the fraction of reads the engine actually served over the same
	// (decayed) window, as reported to Tracker.ReadHash: the curve's prediction at the
	// partition's own size should match it.
	AchievedHitRatio float64
	// ColdMissRatio is the fraction of accesses that were first accesses of their key, which
	// miss at every size.
	ColdMissRatio float64
	// Accesses is the (decayed) number of accesses the curve describes, sampled or not.
	Accesses float64
	// SampledAccesses is the (decayed) number of accesses that were sampled: the evidence the
	// curve rests on. A curve with few sampled accesses is noise.
	SampledAccesses float64
	// SampleRate is the fraction of the key space being sampled when the snapshot was taken.
	SampleRate float64
	// TrackedKeys is the number of keys whose last access is remembered.
	TrackedKeys int
	// FootprintBytes estimates the bytes of every object the tenant stored (the tracked
	// keys' sizes over the sampling rate): its working set, as the tracker counts bytes.
	FootprintBytes float64
	// Requests and RequestBytes count every access and its bytes since the tracker was created
	// (monotonic, never decayed: Prometheus counters).
	Requests     uint64
	RequestBytes uint64
}

// ValidateSizes checks candidate sizes: 1 to MaxCurveSizes positive sizes in strictly
// increasing order.
func ValidateSizes(sizes []int64) error {
	if len(sizes) == 0 {
		return errors.New("mrc: no candidate sizes")
	}
	if len(sizes) > MaxCurveSizes {
		return fmt.Errorf("mrc: %d candidate sizes, at most %d allowed", len(sizes), MaxCurveSizes)
	}
	for i, s := range sizes {
		if s < 1 {
			return fmt.Errorf("mrc: candidate size %d is %d bytes, must be positive", i, s)
		}
		if i > 0 && s <= sizes[i-1] {
			return fmt.Errorf("mrc: candidate sizes must increase strictly, but size %d (%d) follows %d", i, s, sizes[i-1])
		}
	}
	return nil
}

// GeometricSizes returns n candidate sizes spaced geometrically from minSize to maxSize
// (both included), rounded to whole bytes and kept strictly increasing.
func GeometricSizes(minSize, maxSize int64, n int) ([]int64, error) {
	switch {
	case n < 2 || n > MaxCurveSizes:
		return nil, fmt.Errorf("mrc: %d candidate sizes requested, want 2 to %d", n, MaxCurveSizes)
	case minSize < 1:
		return nil, fmt.Errorf("mrc: smallest candidate size %d must be positive", minSize)
	case maxSize-minSize < int64(n-1):
		return nil, fmt.Errorf("mrc: range %d..%d bytes cannot hold %d distinct sizes", minSize, maxSize, n)
	}
	sizes := make([]int64, n)
	ratio := math.Log(float64(maxSize) / float64(minSize))
	for i := range sizes {
		s := int64(math.Round(float64(minSize) * math.Exp(ratio*float64(i)/float64(n-1))))
		if i > 0 && s <= sizes[i-1] {
			s = sizes[i-1] + 1
		}
		sizes[i] = s
	}
	// Rounding must not overshoot the top: pull the tail back below maxSize, keeping order.
	sizes[n-1] = maxSize
	for i := n - 2; i >= 0 && sizes[i] >= sizes[i+1]; i-- {
		sizes[i] = sizes[i+1] - 1
	}
	return sizes, nil
}

// gridSteps snaps partition grid sizes to 2^(k/gridSteps) so that a grid that follows a
// slowly changing footprint keeps most of its sizes, and so its series.
const gridSteps = 16

// PartitionSizes returns the n sizes (n >= 3) a partition of current bytes whose tenant stores
// footprint bytes reports its curve at: geometric from a sixteenth of the smaller of the two
// up to twice the larger (the curve is flat beyond the footprint), a third of them (none of 3)
// in the band from current/1.5 to current*1.5 where decisions about this partition are made, and
// current itself, so the prediction at the partition's own size is read, not interpolated.
// Sizes are at least 64 KiB.
func PartitionSizes(current, footprint int64, n int) ([]int64, error) {
	if n < 3 || n > MaxCurveSizes {
		return nil, fmt.Errorf("mrc: %d curve points requested, want 3 to %d", n, MaxCurveSizes)
	}
	if current < 1 {
		return nil, fmt.Errorf("mrc: partition size %d is not positive", current)
	}
	const floor = 64 << 10
	footprint = max(footprint, 1)
	lo := max(min(current, footprint)/16, floor)
	hi := max(2*max(current, footprint), lo*2)
	// The wide range keeps both its ends: with 3 points, the band would take the top's place
	// and the curve would say nothing above the partition's size.
	dense := min(n/3, n-3)
	wide := n - dense - 1
	sizes := []int64{current}
	sizes = appendGeometric(sizes, lo, hi, wide)
	sizes = appendGeometric(sizes, max(current*2/3, lo), max(current*3/2, lo*2), dense)
	slices.Sort(sizes)
	return slices.Compact(sizes), nil
}

// appendGeometric appends n sizes geometric from lo to hi, each snapped to the grid.
func appendGeometric(sizes []int64, lo, hi int64, n int) []int64 {
	for i := range n {
		f := 0.0
		if n > 1 {
			f = float64(i) / float64(n-1)
		}
		x := math.Log2(float64(lo)) + f*math.Log2(float64(hi)/float64(lo))
		sizes = append(sizes, int64(math.Round(math.Exp2(math.Round(x*gridSteps)/gridSteps))))
	}
	return sizes
}

// distanceCounts count accesses by reuse distance bucket. Counts are float64 because sampled
// accesses carry weight 1/rate and decay scales everything.
type distanceCounts struct {
	hits      []float64 // per-bucket access weight
	hitBytes  []float64 // per-bucket byte weight
	cold      float64   // weight of accesses that miss at every size
	coldBytes float64
	sampled   float64 // unweighted count of recorded accesses
	// accesses and bytes are the totals the recorded weights estimate; with sampling they come
	// from the exact request counters, and their difference from the recorded weight is the
	// SHARDS-adj correction.
	accesses float64
	bytes    float64
}

func newDistanceCounts(buckets int) distanceCounts {
	return distanceCounts{hits: make([]float64, buckets), hitBytes: make([]float64, buckets)}
}

// add counts an access in bucket i.
func (d *distanceCounts) add(i int, size uint32, weight float64) {
	d.hits[i] += weight
	d.hitBytes[i] += weight * float64(size)
	d.sampled++
}

// recordCold counts an access that misses at every size (a first access of a key).
func (d *distanceCounts) recordCold(size uint32, weight float64) {
	d.cold += weight
	d.coldBytes += weight * float64(size)
	d.sampled++
}

// decay multiplies every count by keep, so that older accesses weigh less: after k calls an
// access counts keep^k.
func (d *distanceCounts) decay(keep float64) {
	for i := range d.hits {
		d.hits[i] *= keep
		d.hitBytes[i] *= keep
	}
	d.cold *= keep
	d.coldBytes *= keep
	d.sampled *= keep
	d.accesses *= keep
	d.bytes *= keep
}

// histogram counts accesses by reuse distance into buckets bounded by the candidate sizes:
// bucket i holds distances in (sizes[i-1], sizes[i]], the last bucket distances beyond the
// largest size, so the curve is exact at the sizes.
type histogram struct {
	distanceCounts
	sizes []int64
}

func newHistogram(sizes []int64) histogram {
	return histogram{distanceCounts: newDistanceCounts(len(sizes) + 1), sizes: slices.Clone(sizes)}
}

// record counts an access at the given stack distance (the smallest LRU capacity in bytes
// at which it hits).
func (h *histogram) record(distance float64, size uint32, weight float64) {
	i := len(h.sizes)
	if distance <= float64(h.sizes[len(h.sizes)-1]) {
		i, _ = slices.BinarySearch(h.sizes, int64(math.Ceil(distance)))
	}
	h.add(i, size, weight)
}

// curve turns the counts into hit ratios. The difference between the true access count and
// the recorded weight (sampling error, mostly from whether a few very hot keys happen to be
// sampled) is credited to the smallest distances, as SHARDS-adj does: such keys have tiny
// reuse distances.
func (h *histogram) curve() Curve {
	c := Curve{
		Sizes:           slices.Clone(h.sizes),
		HitRatio:        make([]float64, len(h.sizes)),
		ByteHitRatio:    make([]float64, len(h.sizes)),
		Accesses:        h.accesses,
		SampledAccesses: h.sampled,
	}
	if h.sampled == 0 || h.accesses <= 0 {
		return c
	}
	cumulativeRatios(c.HitRatio, h.hits, h.cold, h.accesses)
	cumulativeRatios(c.ByteHitRatio, h.hitBytes, h.coldBytes, h.bytes)
	c.ColdMissRatio = clamp01(h.cold / h.accesses)
	return c
}

// cumulativeRatios fills out[i] with the share of total that hits at size i, crediting the
// unrecorded remainder of total to the smallest bucket.
func cumulativeRatios(out, buckets []float64, cold, total float64) {
	if total <= 0 {
		return
	}
	recorded := cold
	for _, w := range buckets {
		recorded += w
	}
	cumulative := total - recorded
	for i := range out {
		cumulative += buckets[i]
		out[i] = clamp01(cumulative / total)
	}
}

func clamp01(x float64) float64 { return min(max(x, 0), 1) }
