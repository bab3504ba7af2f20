package sim

import (
	"fmt"
	"math/rand/v2"

	"github.com/cacheqos/cacheqos/internal/mrc"
)

// The cache models a partition can simulate.
const (
	// CacheLRU is exact LRU by bytes (mrc.LRUCache): what the miss-ratio curves describe.
	CacheLRU = "lru"
	// CacheSampledLRU is Redis' approximate LRU (allkeys-lru): evict the idlest of a few
	// sampled keys, kept in a small eviction pool across evictions.
	CacheSampledLRU = "sampled-lru"
)

// Redis' defaults: maxmemory-samples 5, and an eviction pool of 16 candidates.
const (
	redisSamples  = 5
	redisPoolSize = 16
)

// Cache is one simulated partition (or, for the shared policy, one node's whole memory): keys
// and sizes only, no values.
type Cache interface {
	// Access looks key up, inserting it on a miss, and reports whether it was cached; size is
	// what the object takes of the capacity (the engine's bytes, objectBytes).
	Access(key string, size int64) bool
	// SetCapacity resizes the cache, evicting if it shrank.
	SetCapacity(capacity int64) error
	// Bytes returns the bytes cached.
	Bytes() int64
}

// NewCache returns an empty cache of the given model and capacity; seed drives the sampled
// model's random choices.
func NewCache(model string, capacity int64, seed uint64) (Cache, error) {
	switch model {
	case CacheLRU, "":
		return mrc.NewLRUCache(capacity, nil)
	case CacheSampledLRU:
		if capacity < 0 {
			return nil, fmt.Errorf("sim: cache capacity %d bytes is negative", capacity)
		}
		return &sampledLRU{
			capacity: capacity,
			index:    make(map[string]int32),
			rng:      rand.New(rand.NewPCG(seed, 0x6a09e667f3bcc909)),
		}, nil
	}
	return nil, fmt.Errorf("sim: unknown cache model %q (want %q or %q)", model, CacheLRU, CacheSampledLRU)
}

// sampledLRU is Redis' approximated LRU: each key remembers when it was last used; to make
// room, redisSamples random keys are sampled into a pool holding the redisPoolSize idlest
// candidates seen, and the idlest pool entry that still exists is evicted. As in Redis, a
// pooled key's idle time is the one measured when it was sampled.
type sampledLRU struct {
	capacity, used int64
	clock          uint64
	entries        []sampledEntry // dense, so a random key is a random index
	index          map[string]int32
	pool           []poolEntry // ascending idle time: the best victim is last
	rng            *rand.Rand
}

type sampledEntry struct {
	key      string
	size     int64
	lastUsed uint64
}

type poolEntry struct {
	key  string
	idle uint64
}

func (c *sampledLRU) Access(key string, size int64) bool {
	size = max(size, 1)
	c.clock++
	if i, ok := c.index[key]; ok {
		e := &c.entries[i]
		c.used += size - e.size
		e.size, e.lastUsed = size, c.clock
		c.evictToFit()
		return true
	}
	c.index[key] = int32(len(c.entries))
	c.entries = append(c.entries, sampledEntry{key: key, size: size, lastUsed: c.clock})
	c.used += size
	c.evictToFit()
	return false
}

func (c *sampledLRU) SetCapacity(capacity int64) error {
	if capacity < 0 {
		return fmt.Errorf("sim: cache capacity %d bytes is negative", capacity)
	}
	c.capacity = capacity
	c.evictToFit()
	return nil
}

func (c *sampledLRU) Bytes() int64 { return c.used }

func (c *sampledLRU) evictToFit() {
	for c.used > c.capacity && len(c.entries) > 0 {
		c.populatePool()
		for len(c.pool) > 0 {
			victim := c.pool[len(c.pool)-1]
			c.pool = c.pool[:len(c.pool)-1]
			if i, ok := c.index[victim.key]; ok {
				c.remove(i)
				break
			}
		}
	}
}

// populatePool samples keys into the pool, keeping the redisPoolSize idlest.
func (c *sampledLRU) populatePool() {
	for range min(redisSamples, len(c.entries)) {
		e := &c.entries[c.rng.IntN(len(c.entries))]
		idle := c.clock - e.lastUsed
		if len(c.pool) == redisPoolSize && idle <= c.pool[0].idle {
			continue
		}
		pos := 0
		for pos < len(c.pool) && c.pool[pos].idle < idle {
			pos++
		}
		if pos > 0 && c.pool[pos-1].key == e.key || pos < len(c.pool) && c.pool[pos].key == e.key {
			continue // already pooled with this idle time
		}
		c.pool = append(c.pool, poolEntry{})
		copy(c.pool[pos+1:], c.pool[pos:])
		c.pool[pos] = poolEntry{key: e.key, idle: idle}
		if len(c.pool) > redisPoolSize {
			copy(c.pool, c.pool[1:]) // drop the least idle
			c.pool = c.pool[:redisPoolSize]
		}
	}
}

// remove deletes entry i, moving the last entry into its place.
func (c *sampledLRU) remove(i int32) {
	e := c.entries[i]
	c.used -= e.size
	delete(c.index, e.key)
	last := int32(len(c.entries) - 1)
	if i != last {
		c.entries[i] = c.entries[last]
		c.index[c.entries[i].key] = i
	}
	c.entries = c.entries[:last]
}
