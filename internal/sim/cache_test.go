package sim

import (
	"math"
	"strings"
	"testing"

	"github.com/cacheqos/cacheqos/internal/mrc"
	"github.com/cacheqos/cacheqos/internal/workload"
)

// requests draws n requests of a workload (Size: the value's bytes).
func requests(t *testing.T, text string, n int) []workload.Access {
	t.Helper()
	spec, err := workload.ParseSpec(text)
	if err != nil {
		t.Fatal(err)
	}
	g, err := workload.New(spec, 7)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]workload.Access, n)
	for i := range out {
		out[i] = g.Next()
	}
	return out
}

// trace draws n accesses of a workload sized key + value.
func trace(t *testing.T, text string, n int) []workload.Access {
	t.Helper()
	out := requests(t, text, n)
	for i, a := range out {
		out[i].Size = int64(len(a.Key)) + a.Size
	}
	return out
}

var cacheTraces = []string{
	"zipf:keys=20000,skew=0.9,value=100-1000",
	"loop:keys=3000,value=64-4096/log",
	"phase:20000@zipf:keys=5000,skew=1.1,value=100,prefix=z;20000@uniform:keys=8000,value=10-3000,prefix=u",
}

// TestExactLRUMatchesStackSimulation checks the simulator's exact LRU partition against an
// independent reference: Mattson's stack algorithm says an access hits an LRU cache of C
// bytes exactly when it was seen before at a stack distance of at most C.
func TestExactLRUMatchesStackSimulation(t *testing.T) {
	capacities := []int64{64 << 10, 512 << 10, 1 << 20, 3 << 20, 9 << 20}
	for _, text := range cacheTraces {
		t.Run(text, func(t *testing.T) {
			accesses := trace(t, text, 60000)
			stack, err := mrc.NewExactLRU([]int64{1})
			if err != nil {
				t.Fatal(err)
			}
			want := make([]int, len(capacities))
			for _, a := range accesses {
				distance, seen := stack.Access(a.Key, a.Size)
				for c, capacity := range capacities {
					if seen && distance <= capacity {
						want[c]++
					}
				}
			}
			for c, capacity := range capacities {
				cache, err := NewCache(CacheLRU, capacity, 1)
				if err != nil {
					t.Fatal(err)
				}
				got := 0
				for _, a := range accesses {
					if cache.Access(a.Key, a.Size) {
						got++
					}
					if cache.Bytes() > capacity {
						t.Fatalf("cache holds %d bytes, above its capacity %d", cache.Bytes(), capacity)
					}
				}
				if got != want[c] {
					t.Errorf("capacity %d: %d hits, the stack simulation says %d", capacity, got, want[c])
				}
			}
		})
	}
}

// TestSampledLRUIsCloseToLRU checks the Redis-like model: within its capacity at all times,
// deterministic for a seed, and a close approximation of LRU on skewed traffic.
func TestSampledLRUIsCloseToLRU(t *testing.T) {
	const capacity = 2 << 20
	for _, text := range cacheTraces {
		t.Run(text, func(t *testing.T) {
			accesses := trace(t, text, 60000)
			exact, _ := NewCache(CacheLRU, capacity, 1)
			sampled, err := NewCache(CacheSampledLRU, capacity, 1)
			if err != nil {
				t.Fatal(err)
			}
			again, _ := NewCache(CacheSampledLRU, capacity, 1)
			var exactHits, sampledHits, againHits int
			for _, a := range accesses {
				if exact.Access(a.Key, a.Size) {
					exactHits++
				}
				if sampled.Access(a.Key, a.Size) {
					sampledHits++
				}
				if again.Access(a.Key, a.Size) {
					againHits++
				}
				if sampled.Bytes() > capacity {
					t.Fatalf("sampled cache holds %d bytes, above %d", sampled.Bytes(), capacity)
				}
			}
			if sampledHits != againHits {
				t.Fatalf("same seed, different hits: %d and %d", sampledHits, againHits)
			}
			diff := math.Abs(float64(sampledHits-exactHits)) / float64(len(accesses))
			// A loop larger than the cache is LRU's worst case; sampling beats it there.
			if !strings.HasPrefix(text, "loop") && diff > 0.03 {
				t.Errorf("sampled LRU hit ratio differs from LRU's by %.3f (hits %d vs %d)", diff, sampledHits, exactHits)
			}
		})
	}
}

func TestCacheShrinkEvicts(t *testing.T) {
	for _, model := range []string{CacheLRU, CacheSampledLRU} {
		c, err := NewCache(model, 10000, 1)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range trace(t, "uniform:keys=200,value=100", 1000) {
			c.Access(a.Key, a.Size)
		}
		if err := c.SetCapacity(3000); err != nil {
			t.Fatal(err)
		}
		if c.Bytes() > 3000 || c.Bytes() < 2000 {
			t.Errorf("%s: %d bytes after shrinking to 3000", model, c.Bytes())
		}
		if err := c.SetCapacity(-1); err == nil {
			t.Errorf("%s: negative capacity accepted", model)
		}
	}
	if _, err := NewCache("lfu", 1, 1); err == nil || !strings.Contains(err.Error(), `unknown cache model "lfu"`) {
		t.Errorf("unknown model: error %v", err)
	}
	if _, err := NewCache(CacheSampledLRU, -5, 1); err == nil {
		t.Error("negative capacity accepted")
	}
}
