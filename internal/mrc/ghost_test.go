package mrc

import (
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/cacheqos/cacheqos/internal/keyhash"
)

func TestGhost(t *testing.T) {
	g, err := NewGhost(GhostConfig{MaxEntries: 4, WindowBytes: 100})
	if err != nil {
		t.Fatal(err)
	}
	g.RecordEviction([]byte("a"), 10)
	g.RecordEviction([]byte("b"), 20)
	g.RecordEviction([]byte("c"), 30)
	// a was evicted 60 bytes of evictions ago (itself included).
	if depth, hit := g.Access([]byte("a"), 10); !hit || depth != 60 {
		t.Errorf("Access(a) = %d, %v; want 60, true", depth, hit)
	}
	// A ghost hit brings the key back: it is no longer a ghost.
	if _, hit := g.Access([]byte("a"), 10); hit {
		t.Error("second Access(a) is a ghost hit")
	}
	if _, hit := g.Access([]byte("never"), 10); hit {
		t.Error("never evicted key is a ghost hit")
	}
	// 60 more bytes push b (evicted 110 bytes ago now) out of the 100-byte window.
	g.RecordEviction([]byte("d"), 60)
	if _, hit := g.Access([]byte("b"), 20); hit {
		t.Error("b outside the window is a ghost hit")
	}
	if depth, hit := g.Access([]byte("c"), 30); !hit || depth != 90 {
		t.Errorf("Access(c) = %d, %v; want 90, true", depth, hit)
	}
	s := g.Stats()
	if s.Hits != 2 || s.HitBytes != 40 {
		t.Errorf("stats %+v, want 2 hits, 40 bytes", s)
	}
}

func TestGhostEntryBoundAndReEviction(t *testing.T) {
	g, err := NewGhost(GhostConfig{MaxEntries: 100})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		g.RecordEvictionHash(uint64(i), 1)
	}
	if s := g.Stats(); s.Entries != 100 || len(g.index) != 100 {
		t.Fatalf("entries %d, index %d; want 100", s.Entries, len(g.index))
	}
	if _, hit := g.AccessHash(899, 1); hit {
		t.Error("key pushed out by MaxEntries is a ghost hit")
	}
	if depth, hit := g.AccessHash(900, 1); !hit || depth != 100 {
		t.Errorf("oldest remembered key: %d, %v; want 100, true", depth, hit)
	}
	// A key evicted twice counts from its latest eviction, and dropping its older entry
	// must not forget the newer one.
	g.RecordEvictionHash(950, 1)
	for i := range 99 {
		g.RecordEvictionHash(uint64(2000+i), 1)
	}
	if depth, hit := g.AccessHash(950, 1); !hit || depth != 100 {
		t.Errorf("re-evicted key: %d, %v; want 100, true", depth, hit)
	}
	for _, cfg := range []GhostConfig{{MaxEntries: -1}, {WindowBytes: -1}} {
		if _, err := NewGhost(cfg); err == nil {
			t.Errorf("NewGhost(%+v) accepted", cfg)
		}
	}
}

// TestGhostPredictsLargerCache: with unit sizes, an access that misses an LRU cache of C keys
// but is a ghost hit at depth <= X is exactly an access that a cache of C+X keys would serve,
// because every eviction after a key's own pushes it one position further down the stack.
func TestGhostPredictsLargerCache(t *testing.T) {
	const capacity, extra = 500, 300
	b := newTraceBuilder(40, 10000, unitSize)
	trace := b.trace(200000, b.zipf(0, 10000, 0.9))
	ghost, err := NewGhost(GhostConfig{MaxEntries: 4 * extra, WindowBytes: extra})
	if err != nil {
		t.Fatal(err)
	}
	small, err := NewLRUCache(capacity, func(key string, size int64) {
		ghost.RecordEvictionHash(keyhash.Sum64String(key), size)
	})
	if err != nil {
		t.Fatal(err)
	}
	large, err := NewLRUCache(capacity+extra, nil)
	if err != nil {
		t.Fatal(err)
	}
	smallHits, largeHits, ghostHits := 0, 0, 0
	for _, a := range trace {
		if large.Access(a.key, a.size) {
			largeHits++
		}
		// The ghost list sees the access before the cache evicts anything to admit the key.
		_, ghostHit := ghost.AccessHash(a.hash, a.size)
		hit := small.Access(a.key, a.size)
		if hit && ghostHit {
			t.Fatalf("%s is both cached and a ghost", a.key)
		}
		if hit {
			smallHits++
		}
		if ghostHit {
			ghostHits++
		}
	}
	if smallHits+ghostHits != largeHits {
		t.Errorf("hits: %d at %d keys + %d ghost hits != %d at %d keys", smallHits, capacity, ghostHits, largeHits, capacity+extra)
	}
}

// TestGhostMemoryBound measures the heap a full ghost list holds.
func TestGhostMemoryBound(t *testing.T) {
	before := liveHeap()
	g, err := NewGhost(GhostConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 * DefaultGhostEntries {
		g.RecordEviction([]byte("key:"+strconv.Itoa(i)), 100)
	}
	used := liveHeap() - before
	t.Logf("%d entries: %d bytes (%.1f per entry)", g.Stats().Entries, used, float64(used)/DefaultGhostEntries)
	if g.Stats().Entries != DefaultGhostEntries || used > 1<<20 {
		t.Errorf("%d entries in %d bytes, want %d in at most 1 MiB", g.Stats().Entries, used, DefaultGhostEntries)
	}
}

func TestGhostConcurrent(t *testing.T) {
	g, err := NewGhost(GhostConfig{MaxEntries: 1000})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	for w := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 5000 {
				h := uint64(w*10000 + i%700)
				g.RecordEvictionHash(h, 10)
				g.AccessHash(h+1, 10)
			}
		}()
	}
	for range 4 {
		<-done
	}
	if s := g.Stats(); s.Entries > 1000 {
		t.Errorf("stats %+v, want at most 1000 entries", s)
	}
}

// TestGhostFilterHoldsRemembered: through growth, re-evictions, accesses and rebuilds, the
// lock-free filter holds every remembered fingerprint (else a ghost hit would be missed) and
// stays within two fingerprints per ring entry.
func TestGhostFilterHoldsRemembered(t *testing.T) {
	for _, maxEntries := range []int{1, 64, 100, 1000} {
		g, err := NewGhost(GhostConfig{MaxEntries: maxEntries})
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(uint64(maxEntries), 1))
		for i := range 20000 {
			key := rng.Uint64N(uint64(3 * maxEntries))
			if rng.IntN(2) == 0 {
				g.RecordEvictionHash(key, 1)
			} else {
				g.AccessHash(key, 1)
			}
			f := g.filter.Load()
			for fingerprint := range g.index {
				if !f.mayHold(fingerprint) {
					t.Fatalf("max %d, op %d: remembered fingerprint %d not in the filter", maxEntries, i, fingerprint)
				}
			}
			if g.filterAdds > 2*len(g.ring) {
				t.Fatalf("max %d, op %d: %d fingerprints in the filter of a %d-entry ring", maxEntries, i, g.filterAdds, len(g.ring))
			}
		}
	}
}
