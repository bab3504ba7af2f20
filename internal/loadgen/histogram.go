package loadgen

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// Latency histogram: log-linear buckets over nanoseconds, subBuckets per power of two, so a
// percentile read from it is within 1/(2*subBuckets) (1.6%) of the true value. Values below
// subBuckets ns are exact; values beyond the last bucket (about 20 minutes) land in it.
const (
	subBucketBits = 5
	subBuckets    = 1 << subBucketBits
	maxExponent   = 40 - subBucketBits // 2^40 ns is about 18 minutes
	numBuckets    = (maxExponent + 2) * subBuckets
)

// bucketOf returns the bucket of a latency of ns nanoseconds.
func bucketOf(ns uint64) int {
	if ns < subBuckets {
		return int(ns)
	}
	exp := bits.Len64(ns) - subBucketBits - 1 // ns >> exp is in [subBuckets, 2*subBuckets)
	if exp > maxExponent {
		return numBuckets - 1
	}
	return (exp+1)*subBuckets + int(ns>>exp) - subBuckets
}

// bucketMid returns the middle of bucket i, the value a percentile in it is reported as.
func bucketMid(i int) time.Duration {
	if i < subBuckets {
		return time.Duration(i)
	}
	exp := i/subBuckets - 1
	low := uint64(i%subBuckets+subBuckets) << exp
	return time.Duration(low + (uint64(1)<<exp)/2)
}

// liveHistogram counts latencies from many goroutines without a lock; the reporter takes the
// counts of each interval with take.
type liveHistogram struct {
	counts [numBuckets]atomic.Uint64
}

func (h *liveHistogram) record(d time.Duration) {
	h.counts[bucketOf(uint64(max(d, 0)))].Add(1)
}

// take moves the counts recorded so far into dst (which it resets first). A latency recorded
// during take lands in this interval or the next, never in both.
func (h *liveHistogram) take(dst *histogram) {
	*dst = histogram{}
	for i := range h.counts {
		if n := h.counts[i].Swap(0); n != 0 {
			dst.counts[i] = n
			dst.total += n
		}
	}
}

// histogram is a snapshot of latency counts, owned by one goroutine.
type histogram struct {
	counts [numBuckets]uint64
	total  uint64
}

func (h *histogram) add(o *histogram) {
	for i, n := range o.counts {
		h.counts[i] += n
	}
	h.total += o.total
}

// quantile returns the smallest recorded latency (to the bucket's precision) that at least a
// share q of the latencies do not exceed; ok is false when nothing was recorded.
func (h *histogram) quantile(q float64) (d time.Duration, ok bool) {
	if h.total == 0 {
		return 0, false
	}
	rank := uint64(q * float64(h.total))
	if float64(rank) < q*float64(h.total) {
		rank++ // the ceiling
	}
	rank = max(rank, 1)
	var seen uint64
	for i, n := range h.counts {
		seen += n
		if seen >= rank {
			return bucketMid(i), true
		}
	}
	return bucketMid(numBuckets - 1), true
}

// maximum returns the largest recorded latency (to the bucket's precision).
func (h *histogram) maximum() (time.Duration, bool) { return h.quantile(1) }
