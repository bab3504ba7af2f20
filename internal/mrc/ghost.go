package mrc

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/cacheqos/cacheqos/internal/keyhash"
)

// DefaultGhostEntries is the default number of evicted keys a Ghost remembers (under 1 MiB).
const DefaultGhostEntries = 16384

// GhostConfig configures a Ghost.
type GhostConfig struct {
	// MaxEntries bounds the number of remembered evictions, including those whose keys were
	// accessed since (they leave in eviction order); 0 means DefaultGhostEntries. A few times
	// the number of keys WindowBytes holds keeps every key within the window (MQ uses 4x).
	MaxEntries int
	// WindowBytes makes an access a ghost hit only when its depth is at most WindowBytes,
	// i.e. when that much more memory would have kept the key. 0 means no limit beyond
	// MaxEntries.
	WindowBytes int64
}

// GhostStats are a Ghost's counters since creation.
type GhostStats struct {
	Hits     uint64 // accesses of recently evicted keys within the window
	HitBytes uint64 // bytes of those accesses
	Entries  int    // evictions currently remembered (including keys since re-accessed)
}

// Ghost remembers the fingerprints (keyhash.Sum64) of recently evicted keys in eviction order,
// like MQ's history queue, so the sidecar can count the accesses a larger partition would have
// served. The depth of an evicted key is its own size plus the bytes of the keys evicted after
// it that have not been accessed since: in LRU terms, how far below the cache it sits now, so
// a cache larger by at least depth bytes would still hold it. For unit sizes this is exact
// (TestGhostPredictsLargerCache); for mixed sizes it carries LRU's byte granularity.
//
// The sidecar must report every access of a key through Access, hits included, before the
// engine evicts anything to admit it; otherwise keys that came back into the cache keep
// counting as evicted. Safe for concurrent use. Every request makes an access, and nearly all
// of them are of keys not remembered: a lock-free filter answers those without the mutex.
type Ghost struct {
	maxEntries int
	window     uint64
	// filter holds a superset of the fingerprints in index (nil while index is empty and has
	// never held any): an access whose fingerprint it does not hold is not a ghost hit.
	filter atomic.Pointer[ghostFilter]
	// filterAdds counts the fingerprints added to filter since it was built; mu held.
	filterAdds int

	mu    sync.Mutex
	ring  []ghostEntry      // eviction number q lives at ring[q % len(ring)]
	live  fenwick           // per ring slot: the size of a still-evicted key, else 0
	count int               // evictions remembered: numbers next-count .. next-1
	next  uint64            // number of the next eviction
	index map[uint64]uint64 // fingerprint -> number of its latest eviction, while still evicted
	// liveBytes is the sum of the sizes of the remembered keys still evicted.
	liveBytes uint64
	stats     GhostStats
}

type ghostEntry struct {
	fingerprint uint64
	size        uint32 // 0 once the key was accessed again (or evicted again later)
}

// NewGhost returns an empty ghost list.
func NewGhost(cfg GhostConfig) (*Ghost, error) {
	if cfg.MaxEntries < 0 {
		return nil, fmt.Errorf("mrc: ghost MaxEntries %d is negative", cfg.MaxEntries)
	}
	if cfg.WindowBytes < 0 {
		return nil, fmt.Errorf("mrc: ghost WindowBytes %d is negative", cfg.WindowBytes)
	}
	maxEntries := cfg.MaxEntries
	if maxEntries == 0 {
		maxEntries = DefaultGhostEntries
	}
	return &Ghost{
		maxEntries: maxEntries,
		window:     uint64(cfg.WindowBytes),
		live:       newFenwick(0),
		index:      make(map[uint64]uint64),
	}, nil
}

// RecordEviction remembers that key, of size bytes, was evicted.
func (g *Ghost) RecordEviction(key []byte, size int64) {
	g.RecordEvictionHash(keyhash.Sum64(key), size)
}

// RecordEvictionHash is RecordEviction for a key already hashed with keyhash.Sum64.
func (g *Ghost) RecordEvictionHash(fingerprint uint64, size int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	// Most evicted keys are not remembered: the filter spares them a lookup in index.
	if f := g.filter.Load(); f != nil && f.mayHold(fingerprint) {
		if q, ok := g.index[fingerprint]; ok {
			g.revive(q) // evicted again without an access reported: its older entry is obsolete
		}
	}
	if g.count == len(g.ring) {
		if len(g.ring) == g.maxEntries {
			g.dropOldest()
		} else {
			g.grow()
		}
	}
	clamped := clampSize(size)
	slot := g.slot(g.next)
	g.ring[slot] = ghostEntry{fingerprint: fingerprint, size: clamped}
	g.live.add(slot+1, int64(clamped))
	g.liveBytes += uint64(clamped)
	g.index[fingerprint] = g.next
	g.addToFilter(fingerprint)
	g.next++
	g.count++
	// The oldest entry is the deepest: its depth is all the live bytes.
	for g.count > 0 && (g.ring[g.slot(g.next-uint64(g.count))].size == 0 || g.window > 0 && g.liveBytes > g.window) {
		g.dropOldest()
	}
}

// Access reports an access of key (size bytes). When key was evicted and is remembered
// within the window, it is a ghost hit and depth is the extra cache, in bytes, that would have
// kept it. Either way the key counts as back in the cache.
func (g *Ghost) Access(key []byte, size int64) (depth uint64, hit bool) {
	return g.AccessHash(keyhash.Sum64(key), size)
}

// AccessHash is Access for a key already hashed with keyhash.Sum64.
func (g *Ghost) AccessHash(fingerprint uint64, size int64) (depth uint64, hit bool) {
	if f := g.filter.Load(); f == nil || !f.mayHold(fingerprint) {
		// Not remembered when the filter was read: the access is ordered before any
		// eviction of the key that is not in that filter.
		return 0, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	q, ok := g.index[fingerprint]
	if !ok {
		return 0, false
	}
	depth = g.liveBytes - g.liveBefore(q)
	g.revive(q)
	if g.window > 0 && depth > g.window {
		return 0, false
	}
	g.stats.Hits++
	g.stats.HitBytes += uint64(clampSize(size))
	return depth, true
}

// Stats returns the counters.
func (g *Ghost) Stats() GhostStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.stats
	s.Entries = g.count
	return s
}

func (g *Ghost) slot(q uint64) int { return int(q % uint64(len(g.ring))) }

// liveBefore returns the live bytes of the entries evicted before eviction q.
func (g *Ghost) liveBefore(q uint64) uint64 {
	oldest, at := g.slot(g.next-uint64(g.count)), g.slot(q)
	if oldest <= at {
		return uint64(g.live.prefix(at) - g.live.prefix(oldest))
	}
	return g.liveBytes - uint64(g.live.prefix(oldest)) + uint64(g.live.prefix(at))
}

// revive marks eviction q's key as back in the cache.
func (g *Ghost) revive(q uint64) {
	slot := g.slot(q)
	e := &g.ring[slot]
	g.live.add(slot+1, -int64(e.size))
	g.liveBytes -= uint64(e.size)
	delete(g.index, e.fingerprint)
	e.size = 0
}

func (g *Ghost) dropOldest() {
	q := g.next - uint64(g.count)
	if g.ring[g.slot(q)].size > 0 {
		g.revive(q)
	}
	g.count--
}

// grow doubles the ring (up to maxEntries), so that a ghost list for a small cache stays small.
func (g *Ghost) grow() {
	ring := make([]ghostEntry, min(max(2*len(g.ring), 64), g.maxEntries))
	live := newFenwick(len(ring))
	for q := g.next - uint64(g.count); q < g.next; q++ {
		slot := int(q % uint64(len(ring)))
		ring[slot] = g.ring[g.slot(q)]
		live.tree[slot+1] = int64(ring[slot].size)
	}
	live.rebuild()
	g.ring, g.live = ring, live
	g.rebuildFilter()
}

// ghostFilterBitsPerEntry sizes a ghost filter: with at most two fingerprints (live or stale)
// per ring entry set in it, about 12% of the accesses of keys not remembered take the mutex.
const ghostFilterBitsPerEntry = 16

// ghostFilter is a bitset indexed by fingerprint bits. Bits are set under the Ghost's mutex
// and never cleared: a rebuilt filter replaces it, so a reader never sees a fingerprint of
// its filter's time as absent.
type ghostFilter struct {
	words []atomic.Uint64
	mask  uint64 // bits - 1, bits a power of two
}

func (f *ghostFilter) mayHold(fingerprint uint64) bool {
	bit := fingerprint & f.mask
	return f.words[bit/64].Load()&(1<<(bit%64)) != 0
}

func (f *ghostFilter) add(fingerprint uint64) {
	bit := fingerprint & f.mask
	f.words[bit/64].Or(1 << (bit % 64))
}

// addToFilter adds an evicted fingerprint to the filter. Keys accessed since or dropped leave
// their bits set, so once it holds two fingerprints per ring entry it is rebuilt from index
// (at most one per entry): O(1) amortized per eviction; g.mu is held.
func (g *Ghost) addToFilter(fingerprint uint64) {
	if g.filterAdds >= 2*len(g.ring) {
		g.rebuildFilter()
	}
	g.filter.Load().add(fingerprint)
	g.filterAdds++
}

// rebuildFilter replaces the filter with one sized for the ring holding just the fingerprints
// in index; g.mu is held.
func (g *Ghost) rebuildFilter() {
	bits := uint64(64)
	for bits < uint64(len(g.ring))*ghostFilterBitsPerEntry {
		bits *= 2
	}
	f := &ghostFilter{words: make([]atomic.Uint64, bits/64), mask: bits - 1}
	for fingerprint := range g.index {
		f.add(fingerprint)
	}
	g.filter.Store(f)
	g.filterAdds = len(g.index)
}
