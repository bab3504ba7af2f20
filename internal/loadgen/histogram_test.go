package loadgen

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestBuckets checks that buckets are contiguous and ordered, and that a bucket's middle is
// within the promised precision of every value in it.
func TestBuckets(t *testing.T) {
	prev := -1
	for _, ns := range []uint64{0, 1, 31, 32, 33, 63, 64, 65, 127, 128, 1000, 1 << 20, 1<<20 + 12345, 1 << 39, 1<<40 - 1} {
		i := bucketOf(ns)
		if i < prev {
			t.Errorf("bucket of %d is %d, below the bucket %d of a smaller value", ns, i, prev)
		}
		prev = i
		mid := float64(bucketMid(i))
		if rel := math.Abs(mid-float64(ns)) / math.Max(float64(ns), 1); rel > 1.0/(2*subBuckets)+1e-9 {
			t.Errorf("value %d: bucket %d middle %v is %.2f%% off", ns, i, mid, 100*rel)
		}
	}
	if got := bucketOf(math.MaxUint64); got != numBuckets-1 {
		t.Errorf("the largest value lands in bucket %d, want the last, %d", got, numBuckets-1)
	}
	for i := 1; i < numBuckets; i++ {
		if bucketMid(i) <= bucketMid(i-1) {
			t.Fatalf("bucket %d middle %v not above bucket %d middle %v", i, bucketMid(i), i-1, bucketMid(i-1))
		}
		if got := bucketOf(uint64(bucketMid(i))); got != i {
			t.Fatalf("the middle of bucket %d lands in bucket %d", i, got)
		}
	}
}

// TestQuantiles compares the histogram's percentiles with exact ones over log-normal latencies.
func TestQuantiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var live liveHistogram
	values := make([]time.Duration, 100_000)
	for i := range values {
		values[i] = time.Duration(math.Exp(12 + 1.5*rng.NormFloat64())) // median about 160 µs
		live.record(values[i])
	}
	slices.Sort(values)
	var h histogram
	live.take(&h)
	if h.total != uint64(len(values)) {
		t.Fatalf("took %d values, want %d", h.total, len(values))
	}
	for _, q := range []float64{0.01, 0.5, 0.95, 0.99, 0.999, 1} {
		exact := values[int(math.Ceil(q*float64(len(values))))-1]
		got, ok := h.quantile(q)
		if rel := math.Abs(float64(got-exact)) / float64(exact); !ok || rel > 1.0/(2*subBuckets)+1e-9 {
			t.Errorf("q%v: %v, exact %v (%.2f%% off)", q, got, exact, 100*rel)
		}
	}

	// take empties the live histogram; totals add up.
	var again histogram
	live.take(&again)
	if again.total != 0 {
		t.Errorf("a second take found %d values", again.total)
	}
	if _, ok := again.quantile(0.5); ok {
		t.Error("an empty histogram has a median")
	}
	again.add(&h)
	again.add(&h)
	if again.total != 2*h.total {
		t.Errorf("sum of two histograms has %d values, want %d", again.total, 2*h.total)
	}
}
