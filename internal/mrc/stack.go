package mrc

import "math"

// minStackCapacity is the initial number of logical timestamps of a reuseStack.
const minStackCapacity = 64

// stackSlot is what a reuseStack remembers about one key: the logical time of its latest
// access (0 for a free slot) and its latest size.
type stackSlot struct {
	time uint32
	size uint32
}

// reuseStack computes byte-weighted LRU stack distances in O(log n) per access. The latest
// access of every key owns one logical timestamp whose Fenwick position holds the key's size,
// so the bytes of distinct keys touched since a key's previous access are the sum over the
// timestamps after it. When timestamps run out they are renumbered densely in access order
// (O(capacity) without hashing, once per at least capacity/2 accesses), which keeps the cost
// amortized O(log n) without ever scanning on the common path.
type reuseStack[K comparable] struct {
	slotOf map[K]int32
	slots  []stackSlot
	free   []int32 // indices of free slots
	slotAt []int32 // slotAt[t] is the slot of the key accessed at time t; stale once it moved on
	tree   fenwick
	now    int   // latest timestamp handed out
	total  int64 // bytes of all tracked keys
	// capLimit caps the number of timestamps (0: unbounded). It must exceed twice the largest
	// number of keys the owner lets the stack hold.
	capLimit int
}

func newReuseStack[K comparable](capLimit int) reuseStack[K] {
	return reuseStack[K]{slotOf: make(map[K]int32), tree: newFenwick(0), capLimit: capLimit}
}

// clampSize maps a caller's object size to the stack's unit: every object occupies at least
// one byte, and no object is larger than 4 GiB (far above any engine's value limit).
func clampSize(size int64) uint32 {
	switch {
	case size < 1:
		return 1
	case size > math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(size)
}

// access records an access of key with its (new) size. It returns the bytes of distinct other
// keys accessed since key's previous access and the size the key had then; seen is false on
// the key's first access. Size 0 means unknown: a tracked key keeps its size, and a key not
// tracked yet is not added (it takes no room until its size is known).
func (s *reuseStack[K]) access(key K, size uint32) (above int64, prevSize uint32, seen bool) {
	i, seen := s.slotOf[key]
	if !seen && size == 0 {
		return 0, 0, false
	}
	if s.now == s.tree.size() {
		s.makeRoom() // renumbers timestamps; slot indices stay
	}
	if seen {
		slot := s.slots[i]
		if size == 0 {
			size = slot.size
		}
		if int(slot.time) == s.now {
			// Already the latest key (a look-aside write right after its read): nothing
			// moves, only its size may change.
			s.tree.add(s.now, int64(size)-int64(slot.size))
			s.total += int64(size) - int64(slot.size)
			s.slots[i].size = size
			return 0, slot.size, true
		}
		above = s.total - s.tree.prefix(int(slot.time))
		s.tree.add(int(slot.time), -int64(slot.size))
		s.total -= int64(slot.size)
		prevSize = slot.size
	} else {
		i = s.allocSlot()
		s.slotOf[key] = i
	}
	s.now++
	s.tree.add(s.now, int64(size))
	s.total += int64(size)
	s.slotAt[s.now] = i
	s.slots[i] = stackSlot{time: uint32(s.now), size: size}
	return above, prevSize, seen
}

// remove forgets key; a later access of it is a first access again.
func (s *reuseStack[K]) remove(key K) {
	i, ok := s.slotOf[key]
	if !ok {
		return
	}
	slot := s.slots[i]
	s.tree.add(int(slot.time), -int64(slot.size))
	s.total -= int64(slot.size)
	delete(s.slotOf, key)
	s.slots[i] = stackSlot{}
	s.free = append(s.free, i)
}

// recentMeanSize returns the mean size of the n keys accessed most recently (fewer when fewer
// are tracked) and how many it averaged: O(timestamps walked).
func (s *reuseStack[K]) recentMeanSize(n int) (float64, int) {
	var sum float64
	count := 0
	for t := s.now; t >= 1 && count < n; t-- {
		slot := s.slots[s.slotAt[t]]
		if int(slot.time) != t {
			continue
		}
		sum += float64(slot.size)
		count++
	}
	if count == 0 {
		return 0, 0
	}
	return sum / float64(count), count
}

// len returns the number of tracked keys.
func (s *reuseStack[K]) len() int { return len(s.slotOf) }

func (s *reuseStack[K]) allocSlot() int32 {
	if last := len(s.free) - 1; last >= 0 {
		i := s.free[last]
		s.free = s.free[:last]
		return i
	}
	s.slots = append(s.slots, stackSlot{})
	return int32(len(s.slots) - 1)
}

// makeRoom renumbers the live timestamps 1..live in access order. It grows the timestamp space
// first when fewer than 3 in 4 timestamps would be free afterwards, so renumbering costs at
// most a few slot visits per access.
func (s *reuseStack[K]) makeRoom() {
	live := len(s.slotOf)
	capacity := s.tree.size()
	if 4*live+1 > capacity {
		capacity = max(2*capacity, minStackCapacity, 4*live+1)
		if s.capLimit > 0 {
			capacity = min(capacity, s.capLimit)
		}
	}
	slotAt, tree := s.slotAt, s.tree.tree
	if capacity != s.tree.size() {
		slotAt, tree = make([]int32, capacity+1), make([]int64, capacity+1)
	} else {
		clear(tree)
	}
	t := 0
	for old := 1; old <= s.now; old++ {
		i := s.slotAt[old]
		if int(s.slots[i].time) != old {
			continue
		}
		t++ // t <= old, so renumbering in place never overwrites an unread timestamp
		slotAt[t] = i
		tree[t] = int64(s.slots[i].size)
		s.slots[i].time = uint32(t)
	}
	s.slotAt, s.tree.tree, s.now = slotAt, tree, t
	s.tree.rebuild()
}
