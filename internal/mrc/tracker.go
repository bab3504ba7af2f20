package mrc

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cacheqos/cacheqos/internal/keyhash"
)

const (
	// DefaultMaxBytes is a tracker's default memory budget.
	DefaultMaxBytes = 1 << 20
	// bytesPerTrackedKey is what one tracked key may cost: a map entry (16-byte slot plus a
	// control byte, in tables 7/16 to 7/8 full), its slot (8), two timestamps' Fenwick cells
	// and slot indices (24) and a heap entry (8), with slices grown by append. Measured
	// (TestTrackerMemoryBound): 75-81 bytes per key from 64 KiB to 4 MiB, and up to ~100
	// when a budget lands just past a map or slice growth step.
	bytesPerTrackedKey = 112
	// minTrackedKeys is the smallest sample set a budget may allow; fewer keys give curves
	// too noisy to act on.
	minTrackedKeys = 64
)

// counterStripes is the number of request counter stripes (a power of two).
const counterStripes = 8

// requestCounter counts reads, their known bytes and the engine's hits, padded to a cache
// line of its own.
type requestCounter struct {
	requests, bytes, hits atomic.Uint64
	_                     [40]byte
}

// samplingSalt derives the sampling hash from the key hash. Sampling must not correlate with
// placement (rendezvous hashing uses other salts of the same key hash), or a node would see a
// biased subset of its keys sampled.
var samplingSalt = keyhash.Salt("cacheqos/mrc/sampling")

// Config configures a Tracker.
type Config struct {
	// Sizes are the sizes, in bytes, at which Snapshot reports the curve (see GeometricSizes);
	// SnapshotAt reads it at any others. Required.
	Sizes []int64
	// SampleRate is the initial fraction of the key space sampled, in (0, 1]; 0 means 1.
	// The tracker lowers it by itself when MaxBytes would be exceeded, so 1 gives exact
	// curves for small tenants and bounded ones for large tenants; a lower start saves CPU
	// on busy tenants (unsampled accesses cost a hash and a compare).
	SampleRate float64
	// MaxBytes bounds the tracker's memory, its distance histogram included; 0 means
	// DefaultMaxBytes. BudgetForKeys converts a number of tracked keys.
	MaxBytes int64
}

// BudgetForKeys is the memory budget (Config.MaxBytes) of a tracker that may track n keys.
func BudgetForKeys(n int) int64 { return fineHistogramBytes + int64(n)*bytesPerTrackedKey }

// Tracker estimates one tenant partition's LRU miss-ratio curve from a spatially sampled
// access stream (fixed-size SHARDS). It is safe for concurrent use: unsampled accesses touch
// only atomics; sampled accesses take a mutex for O(log n) work.
//
// Reads are the accesses the curve describes; writes only place an object, with its size, at
// the top of the LRU stack, as an engine's SET does. A read that misses with no size known
// (the object is not in the engine) moves nothing new onto the stack: the write that
// follows it, if any, brings the object and its size. A key read but never written thus
// takes no room, as in the engine.
//
// Recency: the histogram keeps everything until Decay is called. The sidecar calls Decay once
// per reporting interval (keep=0.5 halves the weight of older intervals; keep=0 starts a fresh
// window), while the remembered last accesses are kept, so reuse distances that span an
// interval boundary stay correct.
type Tracker struct {
	// limit: keys whose sampling hash is <= limit are sampled (rate (limit+1)/2^64).
	limit atomic.Uint64
	// counts are striped by key hash so that connections on different cores, accessing
	// different keys, rarely write the same cache line.
	counts [counterStripes]requestCounter

	mu      sync.Mutex
	stack   reuseStack[uint64] // keyed by sampling hash, a bijection of the key hash
	largest hashHeap           // sampling hashes of the tracked keys, and of deleted keys not popped yet
	maxKeys int
	hist    fineHistogram
	sizes   []int64 // Config.Sizes
	// folded* are the request counter values already added to hist.accesses, hist.bytes and
	// hist.achievedHits.
	foldedRequests, foldedBytes, foldedHits uint64
}

// NewTracker returns a tracker for cfg.
func NewTracker(cfg Config) (*Tracker, error) {
	if err := ValidateSizes(cfg.Sizes); err != nil {
		return nil, err
	}
	rate := cfg.SampleRate
	if rate == 0 {
		rate = 1
	}
	if !(rate > 0 && rate <= 1) {
		return nil, fmt.Errorf("mrc: sample rate %v outside (0, 1]", cfg.SampleRate)
	}
	maxBytes := cfg.MaxBytes
	if maxBytes < 0 {
		return nil, fmt.Errorf("mrc: memory budget %d bytes is negative", maxBytes)
	}
	if maxBytes == 0 {
		maxBytes = DefaultMaxBytes
	}
	maxKeys := (maxBytes - fineHistogramBytes) / bytesPerTrackedKey
	if maxKeys < minTrackedKeys {
		return nil, fmt.Errorf("mrc: memory budget %d bytes tracks fewer than %d keys; need at least %d bytes",
			cfg.MaxBytes, minTrackedKeys, BudgetForKeys(minTrackedKeys))
	}
	t := &Tracker{
		stack:   newReuseStack[uint64](int(2*maxKeys + 2)),
		maxKeys: int(maxKeys),
		hist:    newFineHistogram(),
		sizes:   slices.Clone(cfg.Sizes),
	}
	t.limit.Store(limitForRate(rate))
	return t, nil
}

// limitForRate returns the sampling limit for a rate in (0, 1].
func limitForRate(rate float64) uint64 {
	if rate >= 1 {
		return math.MaxUint64
	}
	return max(uint64(math.Ldexp(rate, 64)), 1) - 1
}

// rateForLimit is the fraction of the 64-bit hash space at or below limit.
func rateForLimit(limit uint64) float64 { return math.Ldexp(float64(limit)+1, -64) }

// Access records a read of key whose object takes size bytes, whether or not the engine
// found it (the simulator's use: it does not count toward AchievedHitRatio).
func (t *Tracker) Access(key []byte, size int64) { t.AccessHash(keyhash.Sum64(key), size) }

// AccessHash is Access for a key already hashed with keyhash.Sum64.
func (t *Tracker) AccessHash(h uint64, size int64) { t.ReadHash(h, max(size, 1), false) }

// ReadHash records a read of the key hashed h (keyhash.Sum64, so the proxy hashes each key
// once for routing and sampling). size is the object's bytes as the engine counts them, 0
// when unknown (a miss: the write that follows brings it); hit is whether the engine found
// the object.
func (t *Tracker) ReadHash(h uint64, size int64, hit bool) { t.read(h, size, hit, false) }

// ReadHashGuess is ReadHash with a size that is a guess: a key tracked with a known size keeps
// it.
func (t *Tracker) ReadHashGuess(h uint64, size int64, hit bool) { t.read(h, size, hit, true) }

// read is ReadHash, or ReadHashGuess when guess is set.
func (t *Tracker) read(h uint64, size int64, hit, guess bool) {
	c := &t.counts[h>>(64-3)] // top bits: 8 stripes
	c.requests.Add(1)
	if size > 0 {
		c.bytes.Add(uint64(clampSize(size)))
	}
	if hit {
		c.hits.Add(1)
	}
	s := keyhash.Derive(h, samplingSalt)
	if s > t.limit.Load() {
		return
	}
	t.mu.Lock()
	if i, tracked := t.stack.slotOf[s]; guess && tracked && t.stack.slots[i].size > 0 {
		size = 0
	}
	t.sampleRead(s, knownSize(size))
	t.mu.Unlock()
}

// WriteHash records that the key hashed h now holds an object of size bytes (as the engine
// counts them) at the top of the LRU order; size 0 (unknown) moves a tracked key to the top
// with the size it had and leaves an untracked one out. Writes are not reads: counting the
// write that follows every miss in a look-aside cache would make each miss look like a hit.
func (t *Tracker) WriteHash(h uint64, size int64) { t.write(h, size, nil) }

// GrowHash is WriteHash for a write that leaves the object at least size bytes: a tracked
// key keeps a larger size it had (memcached's incr and decr pad a number they rewrite in
// place to the length it had).
func (t *Tracker) GrowHash(h uint64, size int64) {
	t.write(h, 0, func(prev int64) int64 { return max(prev, size) })
}

// RewriteHash is WriteHash for a write whose object's size depends on the size it had:
// size(prev) is the new size, prev 0 when the key is not tracked with a known size (redis'
// APPEND and SETRANGE, which keep a string's allocation when it has room). It returns the
// new size.
func (t *Tracker) RewriteHash(h uint64, size func(prev int64) int64) int64 {
	return t.write(h, 0, size)
}

// write places the key hashed h at the top of the LRU order with size (0: unknown), or, given
// rewrite, with rewrite of the size it had. It returns the size, rewrite(0) for a key not
// tracked.
func (t *Tracker) write(h uint64, size int64, rewrite func(prev int64) int64) int64 {
	s := keyhash.Derive(h, samplingSalt)
	if s > t.limit.Load() {
		if rewrite != nil {
			size = rewrite(0)
		}
		return size
	}
	t.mu.Lock()
	if rewrite != nil {
		var prev int64
		if i, tracked := t.stack.slotOf[s]; tracked {
			prev = int64(t.stack.slots[i].size)
		}
		size = rewrite(prev)
	}
	if s <= t.limit.Load() {
		t.track(s, knownSize(size))
	}
	t.mu.Unlock()
	return size
}

// DeleteHash records that the key hashed h left the engine: it no longer takes room between
// other keys' accesses, and its next access is a first one.
func (t *Tracker) DeleteHash(h uint64) {
	s := keyhash.Derive(h, samplingSalt)
	if s > t.limit.Load() {
		return
	}
	t.mu.Lock()
	t.stack.remove(s)
	// The heap keeps the hash until it is popped (popLargestTracked skips it); rebuilt when
	// such stale hashes would outgrow the tracked ones, so deletes never grow it unbounded.
	if len(t.largest) > 2*t.stack.len()+minTrackedKeys {
		t.largest = t.largest[:0]
		for k := range t.stack.slotOf {
			t.largest.push(k)
		}
	}
	t.mu.Unlock()
}

// knownSize maps a size to the stack's unit, 0 staying "unknown".
func knownSize(size int64) uint32 {
	if size <= 0 {
		return 0
	}
	return clampSize(size)
}

// sampleRead processes a sampled read; t.mu is held.
func (t *Tracker) sampleRead(s uint64, size uint32) {
	limit := t.limit.Load()
	if s > limit { // the limit dropped since the caller checked it
		return
	}
	weight := 1 / rateForLimit(limit)
	above, prevSize, seen := t.track(s, size)
	if seen {
		if size == 0 {
			size = prevSize
		}
		t.hist.record(float64(above)*weight+float64(prevSize), size, weight)
		return
	}
	t.hist.recordCold(size, weight)
}

// track moves a sampled key to the top of the stack with its size (0: unknown, see
// reuseStack.access) and keeps the fixed-size SHARDS bound; t.mu is held.
func (t *Tracker) track(s uint64, size uint32) (above int64, prevSize uint32, seen bool) {
	before := t.stack.len()
	above, prevSize, seen = t.stack.access(s, size)
	if t.stack.len() == before {
		return above, prevSize, seen
	}
	t.largest.push(s)
	if t.stack.len() > t.maxKeys {
		// Fixed-size SHARDS: forget the key with the largest sampling hash and sample only
		// below it from now on. The evicted keys can never be sampled again, so no key's
		// history is lost while it is still sampled.
		evict := t.popLargestTracked()
		t.stack.remove(evict)
		t.limit.Store(evict - 1)
	}
	return above, prevSize, seen
}

// popLargestTracked pops the largest hash of a tracked key off the heap, dropping the hashes
// of deleted keys above it (and second copies of keys deleted and tracked again); t.mu is
// held, and more keys are tracked than the heap may be empty of.
func (t *Tracker) popLargestTracked() uint64 {
	for {
		s := t.largest.pop()
		if _, tracked := t.stack.slotOf[s]; tracked {
			return s
		}
	}
}

// Decay multiplies the curve's accumulated counts by keep in [0, 1]: 0 resets the window,
// 0.5 halves the weight of the past. Remembered last accesses are kept.
func (t *Tracker) Decay(keep float64) error {
	if !(keep >= 0 && keep <= 1) {
		return fmt.Errorf("mrc: decay factor %v outside [0, 1]", keep)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.fold()
	t.hist.decay(keep)
	return nil
}

// Snapshot returns the current curve at Config.Sizes.
func (t *Tracker) Snapshot() Curve { return t.SnapshotAt(t.sizes, nil) }

// SnapshotAt returns the current curve at sizes (partition limits, increasing), each holding
// capacity(size) bytes of objects as the tracker counts them (nil: size itself).
func (t *Tracker) SnapshotAt(sizes []int64, capacity func(int64) float64) Curve {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.fold()
	c := t.hist.curve(sizes, capacity)
	c.SampleRate = rateForLimit(t.limit.Load())
	c.TrackedKeys = t.stack.len()
	c.FootprintBytes = float64(t.stack.total) / c.SampleRate
	c.Requests, c.RequestBytes = t.foldedRequests, t.foldedBytes
	return c
}

// RecentMeanSize returns the mean size of the objects an LRU cache holding keys keys would
// hold now (the most recently used sampled keys, as many as keys times the sampling rate),
// and how many sampled keys that mean rests on. Calibration compares it with an engine's
// memory per key.
func (t *Tracker) RecentMeanSize(keys int64) (mean float64, sampled int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := int(math.Ceil(float64(keys) * rateForLimit(t.limit.Load())))
	return t.stack.recentMeanSize(n)
}

// fold adds the reads counted since the last fold to the histogram's totals; t.mu is held.
func (t *Tracker) fold() {
	var requests, bytes, hits uint64
	for i := range t.counts {
		requests += t.counts[i].requests.Load()
		bytes += t.counts[i].bytes.Load()
		hits += t.counts[i].hits.Load()
	}
	t.hist.accesses += float64(requests - t.foldedRequests)
	t.hist.bytes += float64(bytes - t.foldedBytes)
	t.hist.achievedHits += float64(hits - t.foldedHits)
	t.foldedRequests, t.foldedBytes, t.foldedHits = requests, bytes, hits
}

// MaxTrackedKeys returns how many keys the tracker's memory budget allows.
func (t *Tracker) MaxTrackedKeys() int { return t.maxKeys }

// hashHeap is a max-heap of sampling hashes.
type hashHeap []uint64

func (h *hashHeap) push(x uint64) {
	*h = append(*h, x)
	a := *h
	for i := len(a) - 1; i > 0; {
		parent := (i - 1) / 2
		if a[parent] >= a[i] {
			break
		}
		a[parent], a[i] = a[i], a[parent]
		i = parent
	}
}

// pop removes and returns the largest hash; the heap must not be empty.
func (h *hashHeap) pop() uint64 {
	a := *h
	top := a[0]
	last := len(a) - 1
	a[0] = a[last]
	a = a[:last]
	for i := 0; ; {
		largest, l, r := i, 2*i+1, 2*i+2
		if l < len(a) && a[l] > a[largest] {
			largest = l
		}
		if r < len(a) && a[r] > a[largest] {
			largest = r
		}
		if largest == i {
			break
		}
		a[i], a[largest] = a[largest], a[i]
		i = largest
	}
	*h = a
	return top
}
