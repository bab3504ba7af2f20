package mrc

import (
	"slices"
	"testing"
)

func TestLRUCache(t *testing.T) {
	type step struct {
		key     string
		size    int64
		wantHit bool
	}
	tests := []struct {
		name        string
		capacity    int64
		steps       []step
		wantKeys    []string // cached keys after the steps, any order
		wantEvicted []string // in eviction order
	}{
		{
			name: "least recent goes first", capacity: 3,
			steps:    []step{{"a", 1, false}, {"b", 1, false}, {"c", 1, false}, {"a", 1, true}, {"d", 1, false}},
			wantKeys: []string{"a", "c", "d"}, wantEvicted: []string{"b"},
		},
		{
			name: "bytes not keys", capacity: 10,
			steps:    []step{{"a", 4, false}, {"b", 4, false}, {"c", 4, false}},
			wantKeys: []string{"b", "c"}, wantEvicted: []string{"a"},
		},
		{
			name: "oversized object evicts everything including itself", capacity: 10,
			steps:    []step{{"a", 4, false}, {"b", 4, false}, {"huge", 11, false}, {"a", 4, false}},
			wantKeys: []string{"a"}, wantEvicted: []string{"a", "b", "huge"},
		},
		{
			name: "growth on a hit evicts the least recent", capacity: 10,
			steps:    []step{{"a", 3, false}, {"b", 3, false}, {"c", 3, false}, {"c", 6, true}},
			wantKeys: []string{"b", "c"}, wantEvicted: []string{"a"},
		},
		{
			name: "zero size counts as one byte", capacity: 2,
			steps:    []step{{"a", 0, false}, {"b", 0, false}, {"c", 0, false}},
			wantKeys: []string{"b", "c"}, wantEvicted: []string{"a"},
		},
		{
			name: "zero capacity caches nothing", capacity: 0,
			steps:    []step{{"a", 1, false}, {"a", 1, false}},
			wantKeys: nil, wantEvicted: []string{"a", "a"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var evicted []string
			c, err := NewLRUCache(tt.capacity, func(key string, _ int64) { evicted = append(evicted, key) })
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range tt.steps {
				if hit := c.Access(s.key, s.size); hit != s.wantHit {
					t.Errorf("step %d: Access(%q) hit %v, want %v", i, s.key, hit, s.wantHit)
				}
				if c.Bytes() > c.Capacity() {
					t.Fatalf("step %d: %d bytes cached in %d", i, c.Bytes(), c.Capacity())
				}
			}
			var keys []string
			for _, k := range []string{"a", "b", "c", "d", "huge"} {
				if c.Contains(k) {
					keys = append(keys, k)
				}
			}
			if !slices.Equal(keys, tt.wantKeys) || c.Len() != len(tt.wantKeys) {
				t.Errorf("cached %v (len %d), want %v", keys, c.Len(), tt.wantKeys)
			}
			if !slices.Equal(evicted, tt.wantEvicted) {
				t.Errorf("evicted %v, want %v", evicted, tt.wantEvicted)
			}
		})
	}
}

func TestLRUCacheResizeAndRemove(t *testing.T) {
	var evicted []string
	c, err := NewLRUCache(5, func(key string, _ int64) { evicted = append(evicted, key) })
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		c.Access(k, 1)
	}
	if !c.Remove("c") || c.Remove("c") || c.Len() != 4 || c.Bytes() != 4 {
		t.Fatalf("after Remove: len %d bytes %d", c.Len(), c.Bytes())
	}
	if err := c.SetCapacity(2); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(evicted, []string{"a", "b"}) || !c.Contains("d") || !c.Contains("e") {
		t.Errorf("shrinking evicted %v, want [a b]; d and e stay", evicted)
	}
	if err := c.SetCapacity(-1); err == nil {
		t.Error("negative capacity accepted")
	}
	if _, err := NewLRUCache(-1, nil); err == nil {
		t.Error("NewLRUCache(-1) accepted")
	}
	// Freed nodes are reused: the arena does not grow with churn.
	for i := range 1000 {
		c.Access(string(rune('A'+i%26)), 1)
	}
	if len(c.nodes) > 1+5 {
		t.Errorf("%d nodes allocated for a cache that never held more than 5 keys", len(c.nodes))
	}
}
