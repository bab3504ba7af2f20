package mrc

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"testing"
)

// TestExactWorkedExample checks byte-weighted stack distances computed by hand.
func TestExactWorkedExample(t *testing.T) {
	e, err := NewExactLRU([]int64{5, 6})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		key      string
		size     int64
		distance int64 // 0 for a first access
	}{
		{"A", 1, 0},
		{"B", 2, 0},
		{"C", 3, 0},
		{"B", 2, 3 + 2},     // C since, plus B itself
		{"A", 1, 3 + 2 + 1}, // C, B since, plus A
		{"D", 4, 0},
		{"A", 1, 4 + 1},         // only D since
		{"C", 7, 2 + 4 + 1 + 3}, // B, D, A since, plus C's size then (3); C now weighs 7
		{"B", 2, 4 + 1 + 7 + 2}, // D, A, C (new size) since, plus B
	}
	for i, s := range steps {
		d, seen := e.Access(s.key, s.size)
		if seen != (s.distance != 0) || d != s.distance {
			t.Errorf("step %d (%s): distance %d seen %v, want %d", i, s.key, d, seen, s.distance)
		}
	}
	c := e.Curve()
	// Hits at 5: B(5), A(5). At 6: also A(6). Cold: A, B, C, D.
	want := []float64{2.0 / 9, 3.0 / 9}
	for i := range want {
		if math.Abs(c.HitRatio[i]-want[i]) > 1e-12 {
			t.Errorf("hit ratio at %d = %v, want %v", c.Sizes[i], c.HitRatio[i], want[i])
		}
	}
	if math.Abs(c.ColdMissRatio-4.0/9) > 1e-12 || c.TrackedKeys != 4 {
		t.Errorf("cold %v tracked %d, want 4/9 and 4", c.ColdMissRatio, c.TrackedKeys)
	}
	// Byte hit ratio at 5: B(2) + A(1) of 1+2+3+2+1+4+1+7+2 = 23 bytes.
	if math.Abs(c.ByteHitRatio[0]-3.0/23) > 1e-12 {
		t.Errorf("byte hit ratio at 5 = %v, want 3/23", c.ByteHitRatio[0])
	}
}

// TestExactMatchesLRUCache is Mattson's check: an access hits in an LRU cache of capacity C
// exactly when its stack distance is at most C. With constant object sizes this holds access
// by access, for unit and for mixed sizes: a key is evicted only once the bytes above it
// (which only grow while sizes are constant) exceed C, and a cached key's prefix always fits.
// When objects change size that argument breaks: a cache evicts on the sizes it had, while the
// stack measures with the latest sizes, so an object that shrank later makes the stack count
// as hits some accesses of keys the cache had already evicted. The difference stays small.
func TestExactMatchesLRUCache(t *testing.T) {
	tests := []struct {
		name         string
		trace        func() []access
		maxMismatch  float64 // fraction of accesses whose hit/miss differs
		resizeChance float64
	}{
		{name: "unit sizes zipf", trace: func() []access {
			b := newTraceBuilder(20, 5000, unitSize)
			return b.trace(100000, b.zipf(0, 5000, 0.9))
		}},
		{name: "unit sizes loop and zipf", trace: func() []access {
			b := newTraceBuilder(21, 6000, unitSize)
			return b.trace(100000, b.mix([]float64{0.3, 0.7}, loop(0, 3000), b.zipf(3000, 3000, 0.8)))
		}},
		{name: "mixed constant sizes", trace: func() []access {
			b := newTraceBuilder(22, 5000, spreadSizes)
			return b.trace(100000, b.zipf(0, 5000, 0.9))
		}},
		{name: "sizes change on 10% of accesses", resizeChance: 0.1, maxMismatch: 0.002, trace: func() []access {
			b := newTraceBuilder(23, 5000, spreadSizes)
			return b.trace(100000, b.zipf(0, 5000, 0.9))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			trace := tt.trace()
			if tt.resizeChance > 0 {
				rng := rand.New(rand.NewPCG(1, 2))
				for i := range trace {
					if rng.Float64() < tt.resizeChance {
						trace[i].size = spreadSizes(rng)
					}
				}
			}
			sizes, err := GeometricSizes(workingSetBytes(trace)/50, workingSetBytes(trace), 16)
			if err != nil {
				t.Fatal(err)
			}
			e, err := NewExactLRU(sizes)
			if err != nil {
				t.Fatal(err)
			}
			distances := make([]int64, len(trace)) // 0: first access
			for i, a := range trace {
				distances[i], _ = e.Access(a.key, a.size)
			}
			curve := e.Curve()
			for si, capacity := range sizes {
				cache, err := NewLRUCache(capacity, nil)
				if err != nil {
					t.Fatal(err)
				}
				hits, mismatches := 0, 0
				for i, a := range trace {
					hit := cache.Access(a.key, a.size)
					if hit {
						hits++
					}
					if predicted := distances[i] != 0 && distances[i] <= capacity; predicted != hit {
						mismatches++
					}
				}
				frac := float64(mismatches) / float64(len(trace))
				if mismatches > 0 {
					t.Logf("capacity %d: %d of %d accesses (%.4f) disagree", capacity, mismatches, len(trace), frac)
				}
				if frac > tt.maxMismatch {
					t.Errorf("capacity %d: %d of %d accesses disagree with the stack", capacity, mismatches, len(trace))
				}
				simulated := float64(hits) / float64(len(trace))
				if tt.maxMismatch == 0 && math.Abs(curve.HitRatio[si]-simulated) > 1e-12 {
					t.Errorf("capacity %d: stack hit ratio %v, simulated %v", capacity, curve.HitRatio[si], simulated)
				}
				if d := math.Abs(curve.HitRatio[si] - simulated); d > tt.maxMismatch {
					t.Errorf("capacity %d: stack hit ratio %v, simulated %v", capacity, curve.HitRatio[si], simulated)
				}
			}
		})
	}
}

// TestL2Hill reproduces MQ's observation: the accesses that miss an LRU first-level cache of k
// keys have long reuse distances at the second level, a "hill" that starts after k, so an LRU
// second-level cache smaller than k is nearly useless.
func TestL2Hill(t *testing.T) {
	for _, skew := range []float64{0.9, 1.2} {
		b := newTraceBuilder(30, 50000, unitSize)
		trace := b.trace(400000, b.zipf(0, 50000, skew))
		whole, err := NewExactLRU([]int64{1})
		if err != nil {
			t.Fatal(err)
		}
		distances := make([]int64, len(trace)) // in the unfiltered trace; 0: first access
		for i, a := range trace {
			distances[i], _ = whole.Access(a.key, a.size)
		}
		for _, k := range []int64{200, 2000} {
			l1, err := NewLRUCache(k, nil)
			if err != nil {
				t.Fatal(err)
			}
			l2, err := NewExactLRU([]int64{k / 2, k})
			if err != nil {
				t.Fatal(err)
			}
			var histogram [64]int // MQ's figure: reuse distances rounded up to powers of two
			l2Reuses, withinK, wholeWithinHalfK := 0, 0, 0
			for i, a := range trace {
				d := distances[i]
				if d != 0 && d <= k/2 {
					wholeWithinHalfK++
				}
				if l1.Access(a.key, a.size) {
					if d == 0 || d > k {
						t.Fatalf("L1 hit at stack distance %d > %d", d, k)
					}
					continue
				}
				if d != 0 && d <= k {
					t.Fatalf("L1 miss at stack distance %d <= %d", d, k)
				}
				d2, seen := l2.Access(a.key, a.size)
				if seen {
					l2Reuses++
					histogram[bits.Len64(uint64(d2-1))]++
					if d2 <= k {
						withinK++
					}
				}
			}
			peak := 0
			for i := range histogram {
				if histogram[i] > histogram[peak] {
					peak = i
				}
			}
			l2Curve := l2.Curve()
			t.Logf("skew %.1f k %d: %d L2 reuses, %.4f within k, peak bucket <= %d, L2 hit ratio at k/2 %.4f (whole trace %.4f)",
				skew, k, l2Reuses, float64(withinK)/float64(l2Reuses), int64(1)<<peak, l2Curve.HitRatio[0],
				float64(wholeWithinHalfK)/float64(len(trace)))
			if l2Curve.HitRatio[0] > 0.001 {
				t.Errorf("skew %.1f k %d: L2 LRU of k/2 keys hits %.4f, want ~0", skew, k, l2Curve.HitRatio[0])
			}
			if frac := float64(withinK) / float64(l2Reuses); frac > 0.1 {
				t.Errorf("skew %.1f k %d: %.3f of L2 reuses within k, want < 0.1", skew, k, frac)
			}
			if int64(1)<<peak <= k {
				t.Errorf("skew %.1f k %d: L2 reuse-distance peak at <= %d, want beyond k", skew, k, int64(1)<<peak)
			}
		}
	}
}
