// Package curve models how a tenant's cache hit ratio grows with the memory it gets, and
// translates latency objectives into hit-ratio objectives.
//
// A Curve is a monotone non-decreasing, piecewise-linear map from a size in bytes to a hit
// ratio in [0, 1], anchored at (0, 0) and flat beyond its last point. It is built either from a
// sampled miss-ratio curve (Fit, then Corrected by the hit ratio really observed at the
// current size) or, before any curve was sampled, from observed (size, hit ratio) points with
// the same monotone piecewise-linear fit (Soft-QoS' interpolation). Polynomial interpolation
// (Maxperf's Neville) is deliberately not offered: through noisy points it oscillates and is
// not monotone, which turns "the smallest size meeting a target" into a guess.
//
// Latency objectives go through the mean-latency model of latency.go: a request is a hit with
// probability h, costs the measured hit or miss latency, and waits in the node's queue, which
// is an M/M/1 queue as in LACS.
package curve

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
)

// Point is one (size, hit ratio) pair: SizeBytes of cache gives HitRatio in [0, 1].
type Point struct {
	SizeBytes int64
	HitRatio  float64
}

// Curve is a monotone non-decreasing piecewise-linear hit-ratio curve. The zero value is not
// usable; build one with Fit, Flat or Corrected. A Curve is immutable and safe for concurrent
// use.
type Curve struct {
	// pts has strictly increasing sizes, non-decreasing ratios, and pts[0] == (0, 0).
	pts []Point
}

// ErrNoPoints is returned by Fit when it is given no points.
var ErrNoPoints = errors.New("curve: no points")

// MaxSizeBytes bounds every size on a curve (1 EiB), so that rescaling never overflows int64.
const MaxSizeBytes int64 = 1 << 60

// Fit builds the monotone piecewise-linear curve closest (in least squares) to pts. Points at
// the same size keep only the last one given, as Soft-QoS' performance table does (a newer
// measurement replaces an older one). Non-monotone samples are pooled by isotonic regression
// (pool adjacent violators), so noise never makes more memory look worse. A point at size 0
// is forced to hit ratio 0.
func Fit(pts []Point) (*Curve, error) {
	if len(pts) == 0 {
		return nil, ErrNoPoints
	}
	last := make(map[int64]float64, len(pts))
	for i, p := range pts {
		if p.SizeBytes < 0 || p.SizeBytes > MaxSizeBytes {
			return nil, fmt.Errorf("curve: point %d: size %d outside [0, %d]", i, p.SizeBytes, MaxSizeBytes)
		}
		if math.IsNaN(p.HitRatio) || p.HitRatio < 0 || p.HitRatio > 1 {
			return nil, fmt.Errorf("curve: point %d: hit ratio %v outside [0, 1]", i, p.HitRatio)
		}
		last[p.SizeBytes] = p.HitRatio
	}
	sizes := make([]int64, 0, len(last))
	for s := range last {
		if s > 0 {
			sizes = append(sizes, s)
		}
	}
	slices.Sort(sizes)
	ratios := make([]float64, len(sizes))
	for i, s := range sizes {
		ratios[i] = last[s]
	}
	fitted := isotonic(ratios)
	out := make([]Point, 0, len(sizes)+1)
	out = append(out, Point{})
	for i, s := range sizes {
		out = append(out, Point{SizeBytes: s, HitRatio: fitted[i]})
	}
	return &Curve{pts: simplify(out)}, nil
}

// Flat returns the curve that is 0 at size 0 and hitRatio from the first byte on: what is
// known about a tenant that reported a hit ratio but neither a curve nor a size.
func Flat(hitRatio float64) *Curve {
	h := math.Min(1, math.Max(0, hitRatio))
	if h == 0 {
		return &Curve{pts: []Point{{}}}
	}
	return &Curve{pts: []Point{{}, {SizeBytes: 1, HitRatio: h}}}
}

// isotonic returns the non-decreasing sequence closest to ys in least squares (pool adjacent
// violators, equal weights).
func isotonic(ys []float64) []float64 {
	type block struct {
		sum   float64
		count int
	}
	blocks := make([]block, 0, len(ys))
	for _, y := range ys {
		blocks = append(blocks, block{sum: y, count: 1})
		for len(blocks) > 1 {
			a, b := blocks[len(blocks)-2], blocks[len(blocks)-1]
			if a.sum/float64(a.count) <= b.sum/float64(b.count) {
				break
			}
			blocks = blocks[:len(blocks)-2]
			blocks = append(blocks, block{sum: a.sum + b.sum, count: a.count + b.count})
		}
	}
	out := make([]float64, 0, len(ys))
	for _, b := range blocks {
		mean := b.sum / float64(b.count)
		for range b.count {
			out = append(out, mean)
		}
	}
	return out
}

// simplify drops interior points that lie on the segment between their neighbours and
// trailing points that add nothing (the curve is flat after its last point anyway).
func simplify(pts []Point) []Point {
	for len(pts) > 1 && pts[len(pts)-1].HitRatio <= pts[len(pts)-2].HitRatio {
		pts = pts[:len(pts)-1]
	}
	out := []Point{pts[0]}
	for i := 1; i < len(pts); i++ {
		if i+1 < len(pts) {
			a, b, c := out[len(out)-1], pts[i], pts[i+1]
			interp := a.HitRatio + (c.HitRatio-a.HitRatio)*float64(b.SizeBytes-a.SizeBytes)/float64(c.SizeBytes-a.SizeBytes)
			if math.Abs(interp-b.HitRatio) < 1e-12 {
				continue
			}
		}
		out = append(out, pts[i])
	}
	return out
}

// Points returns a copy of the curve's breakpoints, starting with (0, 0).
func (c *Curve) Points() []Point { return slices.Clone(c.pts) }

// At returns the hit ratio predicted at size bytes.
func (c *Curve) At(size int64) float64 {
	if size <= 0 {
		return 0
	}
	i := sort.Search(len(c.pts), func(i int) bool { return c.pts[i].SizeBytes >= size })
	if i == len(c.pts) {
		return c.pts[len(c.pts)-1].HitRatio
	}
	if c.pts[i].SizeBytes == size {
		return c.pts[i].HitRatio
	}
	a, b := c.pts[i-1], c.pts[i]
	return a.HitRatio + (b.HitRatio-a.HitRatio)*float64(size-a.SizeBytes)/float64(b.SizeBytes-a.SizeBytes)
}

// Max returns the highest hit ratio the curve reaches and the smallest size reaching it.
func (c *Curve) Max() (hitRatio float64, size int64) {
	p := c.pts[len(c.pts)-1]
	return p.HitRatio, p.SizeBytes
}

// MinSize returns the smallest size whose predicted hit ratio is at least target (rounded up
// to a whole byte), and false when the curve never reaches target.
func (c *Curve) MinSize(target float64) (int64, bool) {
	if target <= 0 {
		return 0, true
	}
	for i := 1; i < len(c.pts); i++ {
		b := c.pts[i]
		if b.HitRatio < target {
			continue
		}
		a := c.pts[i-1]
		frac := (target - a.HitRatio) / (b.HitRatio - a.HitRatio)
		s := a.SizeBytes + int64(math.Ceil(frac*float64(b.SizeBytes-a.SizeBytes)-1e-9))
		s = min(max(s, a.SizeBytes), b.SizeBytes)
		// Guard against rounding: the answer must really reach the target.
		for s < b.SizeBytes && c.At(s) < target-1e-12 {
			s++
		}
		return s, true
	}
	return 0, false
}

// Breakpoints returns the sizes strictly between lo and hi where the curve changes slope.
func (c *Curve) Breakpoints(lo, hi int64) []int64 {
	var out []int64
	for _, p := range c.pts {
		if p.SizeBytes > lo && p.SizeBytes < hi {
			out = append(out, p.SizeBytes)
		}
	}
	return out
}

// SamplingTolerance is the hit ratio a sampled curve may credit where there are no hits: curves
// are held to 0.02 mean absolute error, and a few points are off by more.
const SamplingTolerance = 0.05

// Corrected returns the curve adjusted so that it predicts observed.HitRatio at
// observed.SizeBytes, which is what the engine really achieved there. A sampled miss-ratio
// curve describes exact LRU over the tenant's key bytes; the engine differs (approximate LRU,
// per-key overhead, fragmentation), which mostly acts like a different effective size. So when
// the observed ratio is one the curve reaches, the size axis is rescaled
// (h'(s) = h(s * f), f = size where the curve reaches the observation / observed size), by
// as much as the observation needs: a fixed bound on f would leave a curve as far off as the
// engine's bytes are from the sampled ones (a trace of one-hit scans needed 1/5). Damping
// against noise is the caller's: the control loop averages f over settled intervals. When the
// observation is above anything the curve reaches, the ratios are lifted instead, by the
// observed excess, ramping in from size 0 to the observed size and capped at 1. Monotonicity
// is preserved in both cases. A zero observed size returns the curve unchanged, and so does an
// observation of at most SamplingTolerance where the curve predicts at most that too: a
// sampled curve credits a loop a few hits below its cliff, and the engine serves a few, and
// rescaling on that noise would stretch the curve and starve the tenant of the memory that
// reaches the cliff.
func (c *Curve) Corrected(observed Point) *Curve {
	if observed.SizeBytes <= 0 || observed.SizeBytes > MaxSizeBytes || math.IsNaN(observed.HitRatio) {
		return c
	}
	obs := math.Min(1, math.Max(0, observed.HitRatio))
	predicted := c.At(observed.SizeBytes)
	if bothNoise(obs, predicted) {
		return c
	}
	if f, ok := c.CorrectionFactor(observed); ok {
		return c.Rescaled(f)
	}
	lift := obs - predicted
	sizes := []int64{observed.SizeBytes}
	for _, p := range c.pts {
		sizes = append(sizes, p.SizeBytes)
	}
	slices.Sort(sizes)
	sizes = slices.Compact(sizes)
	out := make([]Point, 0, len(sizes))
	for _, s := range sizes {
		ramp := math.Min(1, float64(s)/float64(observed.SizeBytes))
		out = append(out, Point{SizeBytes: s, HitRatio: math.Min(1, c.At(s)+lift*ramp)})
	}
	return &Curve{pts: simplify(out)}
}

// bothNoise reports that an observed and a predicted hit ratio agree: equal, or both at most
// SamplingTolerance. Below a loop's cliff the engine serves a few hits (0.002 in one simulated
// fleet) where the curve predicts none; taken as a rescaling, that reads "the curve first
// reaches 0.002 at size 0", a factor of 1e-6, and the loop looked as if it needed 16 times
// more memory than it does for as long as the factor was remembered.
func bothNoise(obs, predicted float64) bool {
	return math.Abs(predicted-obs) < 1e-9 || obs <= SamplingTolerance && predicted <= SamplingTolerance
}

// CorrectionFactor is the factor f by which the size axis must be divided (h'(s) = h(s * f))
// for the curve to predict observed.HitRatio at observed.SizeBytes: the size where the curve
// reaches the observation over the observed size, not clamped. ok is false when no rescaling
// explains the observation (it is above anything the curve reaches) or nothing needs explaining
// (the curve predicts it, or both are at most SamplingTolerance, see Corrected).
func (c *Curve) CorrectionFactor(observed Point) (f float64, ok bool) {
	if observed.SizeBytes <= 0 || observed.SizeBytes > MaxSizeBytes || math.IsNaN(observed.HitRatio) {
		return 0, false
	}
	obs := math.Min(1, math.Max(0, observed.HitRatio))
	predicted := c.At(observed.SizeBytes)
	if bothNoise(obs, predicted) {
		return 0, false
	}
	maxHit, _ := c.Max()
	if obs > maxHit {
		return 0, false
	}
	level := obs
	if obs < SamplingTolerance {
		// A sampled curve credits a few hits below a cliff, which are noise: an observation
		// under SamplingTolerance says the curve has not yet risen above them at this size,
		// so the smallest rescaling that explains it moves the size to where the curve first
		// reaches SamplingTolerance. Taking it for the size where the curve reaches the
		// observation instead would read an observed 0 as "needs infinitely more memory".
		level = math.Min(SamplingTolerance, predicted)
	}
	reach, ok := c.MinSize(level)
	if !ok {
		reach, _ = c.MinSize(obs)
	}
	return math.Max(float64(reach), 1) / float64(observed.SizeBytes), true
}

// Rescaled returns the curve with its size axis divided by f > 0: h'(s) = h(s * f). A curve
// rescaled by 2 needs half the memory for every hit ratio.
func (c *Curve) Rescaled(f float64) *Curve {
	if !(f > 0) || f == 1 || math.IsInf(f, 0) {
		return c
	}
	out := make([]Point, 0, len(c.pts))
	for _, p := range c.pts {
		size := int64(min(float64(MaxSizeBytes), math.Round(float64(p.SizeBytes)/f)))
		if p.SizeBytes > 0 {
			size = max(size, 1) // only the anchor stays at size 0
		}
		out = append(out, Point{SizeBytes: size, HitRatio: p.HitRatio})
	}
	return &Curve{pts: dedupeSizes(out)}
}

// dedupeSizes merges points that rounding put at the same size, keeping the highest ratio,
// and re-simplifies.
func dedupeSizes(pts []Point) []Point {
	out := pts[:0:0]
	for _, p := range pts {
		if n := len(out); n > 0 && out[n-1].SizeBytes == p.SizeBytes {
			out[n-1].HitRatio = math.Max(out[n-1].HitRatio, p.HitRatio)
			continue
		}
		out = append(out, p)
	}
	return simplify(out)
}

// UpperHull returns the vertices of the smallest concave function above the curve on
// [lo, hi], from (lo, At(lo)) to (hi, At(hi)). Allocating memory along hull segments in order
// of decreasing slope is the optimum of the fractional (LP) relaxation, which is what LACS'
// sizing LP and the greedy fallback use.
func (c *Curve) UpperHull(lo, hi int64) []Point {
	if hi <= lo {
		return []Point{{SizeBytes: lo, HitRatio: c.At(lo)}}
	}
	cand := []Point{{SizeBytes: lo, HitRatio: c.At(lo)}}
	for _, s := range c.Breakpoints(lo, hi) {
		cand = append(cand, Point{SizeBytes: s, HitRatio: c.At(s)})
	}
	cand = append(cand, Point{SizeBytes: hi, HitRatio: c.At(hi)})
	return ConcaveHull(cand)
}

// ConcaveHull returns the upper concave hull of points sorted by strictly increasing size.
func ConcaveHull(pts []Point) []Point {
	hull := make([]Point, 0, len(pts))
	for _, p := range pts {
		for len(hull) >= 2 {
			a, b := hull[len(hull)-2], hull[len(hull)-1]
			// b is below the chord a-p (or on it): drop it.
			cross := (b.HitRatio-a.HitRatio)*float64(p.SizeBytes-a.SizeBytes) -
				(p.HitRatio-a.HitRatio)*float64(b.SizeBytes-a.SizeBytes)
			if cross > 0 {
				break
			}
			hull = hull[:len(hull)-1]
		}
		hull = append(hull, p)
	}
	return hull
}
