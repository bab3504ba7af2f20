package mrc

import "fmt"

// LRUCache is a byte-capacity LRU cache simulator: it holds keys and sizes, not values. An
// access of a cached key is a hit and makes it most recent; a miss inserts the key as most
// recent. Whenever the cached bytes exceed the capacity the least recent keys are evicted
// until they fit (an object larger than the whole capacity therefore evicts everything,
// itself included). Not safe for concurrent use.
type LRUCache struct {
	capacity int64
	used     int64
	index    map[string]int32
	nodes    []lruNode // nodes[0] is the sentinel of the circular recency list
	free     []int32
	onEvict  func(key string, size int64)
}

type lruNode struct {
	key        string
	size       int64
	prev, next int32 // prev is more recent, next less recent
}

// NewLRUCache returns an empty cache of capacity bytes. onEvict, if not nil, is called for
// every key the cache evicts to make room (not for Remove).
func NewLRUCache(capacity int64, onEvict func(key string, size int64)) (*LRUCache, error) {
	if capacity < 0 {
		return nil, fmt.Errorf("mrc: LRU capacity %d bytes is negative", capacity)
	}
	return &LRUCache{
		capacity: capacity,
		index:    make(map[string]int32),
		nodes:    []lruNode{{}}, // sentinel links to itself
		onEvict:  onEvict,
	}, nil
}

// Access looks key up, inserting it on a miss, with its object's current size (sizes below 1
// count as 1, as in ExactLRU), and reports whether it was cached.
func (c *LRUCache) Access(key string, size int64) (hit bool) {
	size = int64(clampSize(size))
	i, hit := c.index[key]
	if hit {
		c.unlink(i)
		c.used += size - c.nodes[i].size
		c.nodes[i].size = size
	} else {
		i = c.alloc(key, size)
		c.index[key] = i
		c.used += size
	}
	c.pushFront(i)
	c.evictToFit()
	return hit
}

// Contains reports whether key is cached, without touching its recency.
func (c *LRUCache) Contains(key string) bool {
	_, ok := c.index[key]
	return ok
}

// Remove deletes key (as a DEL would) and reports whether it was cached.
func (c *LRUCache) Remove(key string) bool {
	i, ok := c.index[key]
	if !ok {
		return false
	}
	c.drop(i)
	return true
}

// SetCapacity resizes the cache, evicting least recent keys if it shrank.
func (c *LRUCache) SetCapacity(capacity int64) error {
	if capacity < 0 {
		return fmt.Errorf("mrc: LRU capacity %d bytes is negative", capacity)
	}
	c.capacity = capacity
	c.evictToFit()
	return nil
}

// Capacity returns the capacity in bytes.
func (c *LRUCache) Capacity() int64 { return c.capacity }

// Bytes returns the bytes cached.
func (c *LRUCache) Bytes() int64 { return c.used }

// Len returns the number of keys cached.
func (c *LRUCache) Len() int { return len(c.index) }

func (c *LRUCache) evictToFit() {
	for c.used > c.capacity {
		victim := c.nodes[0].prev // least recent
		key, size := c.nodes[victim].key, c.nodes[victim].size
		c.drop(victim)
		if c.onEvict != nil {
			c.onEvict(key, size)
		}
	}
}

func (c *LRUCache) drop(i int32) {
	c.unlink(i)
	c.used -= c.nodes[i].size
	delete(c.index, c.nodes[i].key)
	c.nodes[i] = lruNode{}
	c.free = append(c.free, i)
}

func (c *LRUCache) alloc(key string, size int64) int32 {
	n := lruNode{key: key, size: size}
	if last := len(c.free) - 1; last >= 0 {
		i := c.free[last]
		c.free = c.free[:last]
		c.nodes[i] = n
		return i
	}
	c.nodes = append(c.nodes, n)
	return int32(len(c.nodes) - 1)
}

func (c *LRUCache) unlink(i int32) {
	n := &c.nodes[i]
	c.nodes[n.prev].next = n.next
	c.nodes[n.next].prev = n.prev
}

func (c *LRUCache) pushFront(i int32) {
	head := c.nodes[0].next
	c.nodes[i].prev, c.nodes[i].next = 0, head
	c.nodes[head].prev = i
	c.nodes[0].next = i
}
