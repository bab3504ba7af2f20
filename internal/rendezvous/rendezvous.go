// Package rendezvous places keys on weighted nodes with rendezvous (highest random weight)
// hashing, as the cache sidecar routes a tenant's keys to the nodes holding its partitions.
//
// Each node scores a key as -weight / ln(u), where u in (0, 1) is a hash of the key and the
// node's ID; the highest score wins. With this logarithmic method a node wins a share of the
// keys equal to its share of the total weight, and changing one node's weight, or adding or
// removing a node, moves only the keys that must move: to or from that node. Scores depend
// only on the key, the node's ID and its weight, never on the order of the list, so every
// sidecar and the operator agree on placement (the hash is keyhash's, stable across
// processes and versions).
package rendezvous

import (
	"fmt"
	"math"

	"github.com/cacheqos/cacheqos/internal/keyhash"
)

// Node is a placement target; Weight is proportional to the keys it should receive (the
// tenant's partition size on that node). Zero-weight nodes receive nothing.
type Node struct {
	ID     string
	Weight float64
}

// saltPrefix keeps node salts apart from other keyhash salts (such as the MRC sampler's).
const saltPrefix = "cacheqos/rendezvous/"

// Table is an immutable set of nodes to place keys on. Safe for concurrent use.
type Table struct {
	nodes []Node
	salts []uint64 // per node, precomputed so Pick hashes the key once
}

// New validates nodes and returns their table. IDs must be non-empty and unique; weights
// finite and non-negative. An empty list is allowed (Pick then reports no node).
func New(nodes []Node) (*Table, error) {
	t := &Table{nodes: make([]Node, len(nodes)), salts: make([]uint64, len(nodes))}
	seen := make(map[string]bool, len(nodes))
	for i, n := range nodes {
		switch {
		case n.ID == "":
			return nil, fmt.Errorf("rendezvous: node %d has an empty ID", i)
		case seen[n.ID]:
			return nil, fmt.Errorf("rendezvous: node ID %q appears twice", n.ID)
		case math.IsNaN(n.Weight) || math.IsInf(n.Weight, 0) || n.Weight < 0:
			return nil, fmt.Errorf("rendezvous: node %q has weight %v, want a finite number >= 0", n.ID, n.Weight)
		}
		seen[n.ID] = true
		t.nodes[i] = n
		t.salts[i] = keyhash.Salt(saltPrefix + n.ID)
	}
	return t, nil
}

// Len returns the number of nodes.
func (t *Table) Len() int { return len(t.nodes) }

// Node returns node i.
func (t *Table) Node(i int) Node { return t.nodes[i] }

// Pick returns the index of the node that owns key; ok is false when no node has a positive
// weight.
func (t *Table) Pick(key []byte) (index int, ok bool) { return t.PickHash(keyhash.Sum64(key)) }

// PickHash is Pick for a key already hashed with keyhash.Sum64.
func (t *Table) PickHash(h uint64) (index int, ok bool) { return t.PickHashExcept(h, nil) }

// PickHashExcept is PickHash among the nodes skip does not name (nil skips none): the node
// that would own the key if the skipped ones were removed from the table.
func (t *Table) PickHashExcept(h uint64, skip func(index int) bool) (index int, ok bool) {
	best, bestScore := -1, 0.0
	for i, n := range t.nodes {
		if n.Weight == 0 || skip != nil && skip(i) {
			continue
		}
		score := n.Weight / -math.Log(unit(keyhash.Derive(h, t.salts[i])))
		if best < 0 || score > bestScore || score == bestScore && n.ID < t.nodes[best].ID {
			best, bestScore = i, score
		}
	}
	return best, best >= 0
}

// unit maps a hash to a float in the open interval (0, 1) using its top 53 bits.
func unit(x uint64) float64 { return (float64(x>>11) + 0.5) / (1 << 53) }
