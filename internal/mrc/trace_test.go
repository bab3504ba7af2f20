package mrc

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/cacheqos/cacheqos/internal/keyhash"
)

// access is one request of a synthetic trace.
type access struct {
	key  string
	hash uint64 // keyhash.Sum64String(key), precomputed so benchmarks and tests measure the tracker
	size int64
}

// traceBuilder generates deterministic synthetic traces over a fixed universe of keys.
type traceBuilder struct {
	rng   *rand.Rand
	names []string
	sizes []int64
}

func newTraceBuilder(seed uint64, keys int, sizeOf func(rng *rand.Rand) int64) *traceBuilder {
	b := &traceBuilder{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	b.names = make([]string, keys)
	b.sizes = make([]int64, keys)
	for i := range keys {
		b.names[i] = "key:" + strconv.FormatUint(seed, 36) + ":" + strconv.Itoa(i)
		b.sizes[i] = sizeOf(b.rng)
	}
	return b
}

func unitSize(*rand.Rand) int64 { return 1 }

// spreadSizes gives object sizes from 64 bytes to 64 KiB, log-uniformly: most objects small,
// a few large ones holding much of the bytes, as in real caches.
func spreadSizes(rng *rand.Rand) int64 { return int64(64 * math.Exp2(10*rng.Float64())) }

func (b *traceBuilder) at(i int) access {
	return access{key: b.names[i], hash: keyhash.Sum64String(b.names[i]), size: b.sizes[i]}
}

// zipf returns a sampler of key indices with popularity proportional to 1/rank^skew over
// keys [first, first+n), ranks shuffled across indices.
func (b *traceBuilder) zipf(first, n int, skew float64) func() int {
	cdf := make([]float64, n)
	sum := 0.0
	for i := range cdf {
		sum += 1 / math.Pow(float64(i+1), skew)
		cdf[i] = sum
	}
	perm := b.rng.Perm(n)
	return func() int {
		i, _ := slices.BinarySearch(cdf, b.rng.Float64()*sum)
		return first + perm[min(i, n-1)]
	}
}

// loop returns a sampler that cycles over keys [first, first+n).
func loop(first, n int) func() int {
	next := 0
	return func() int {
		i := first + next
		next = (next + 1) % n
		return i
	}
}

// mix draws from samplers[i] with probability weights[i].
func (b *traceBuilder) mix(weights []float64, samplers ...func() int) func() int {
	return func() int {
		x := b.rng.Float64()
		for i, w := range weights {
			if x < w {
				return samplers[i]()
			}
			x -= w
		}
		return samplers[len(samplers)-1]()
	}
}

func (b *traceBuilder) trace(n int, next func() int) []access {
	out := make([]access, n)
	for i := range out {
		out[i] = b.at(next())
	}
	return out
}

// workingSetBytes is the total size of the distinct keys in a trace.
func workingSetBytes(trace []access) int64 {
	seen := make(map[string]int64)
	for _, a := range trace {
		seen[a.key] = a.size
	}
	var total int64
	for _, s := range seen {
		total += s
	}
	return total
}

// meanAbsError is the mean absolute difference of two curves' hit ratios over their sizes.
func meanAbsError(a, b []float64) float64 {
	sum := 0.0
	for i := range a {
		sum += math.Abs(a[i] - b[i])
	}
	return sum / float64(len(a))
}
