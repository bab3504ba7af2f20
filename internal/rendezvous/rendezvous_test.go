package rendezvous

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/cacheqos/cacheqos/internal/keyhash"
)

const testKeys = 100000

// keyHashes returns the hashes of testKeys distinct keys.
func keyHashes() []uint64 {
	hs := make([]uint64, testKeys)
	for i := range hs {
		hs[i] = keyhash.Sum64String("tenant-a:key:" + strconv.Itoa(i))
	}
	return hs
}

// placement returns the ID of the node owning each key.
func placement(t *testing.T, nodes []Node, hs []uint64) []string {
	t.Helper()
	table, err := New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(hs))
	for i, h := range hs {
		idx, ok := table.PickHash(h)
		if !ok {
			t.Fatalf("no node for key %d", i)
		}
		out[i] = nodes[idx].ID
	}
	return out
}

func nodesOf(weights ...float64) []Node {
	nodes := make([]Node, len(weights))
	for i, w := range weights {
		nodes[i] = Node{ID: "node-" + strconv.Itoa(i), Weight: w}
	}
	return nodes
}

func TestShareFollowsWeight(t *testing.T) {
	hs := keyHashes()
	for _, weights := range [][]float64{{1, 1}, {1, 2, 3, 4}, {1, 10, 100}, {5, 0, 5}, {3, 3, 3, 3, 3, 3, 3, 3}} {
		nodes := nodesOf(weights...)
		owners := placement(t, nodes, hs)
		counts := map[string]int{}
		for _, id := range owners {
			counts[id]++
		}
		total := 0.0
		for _, w := range weights {
			total += w
		}
		for _, n := range nodes {
			want := n.Weight / total
			got := float64(counts[n.ID]) / testKeys
			// Binomial noise over 1e5 keys is at most 0.0016 (one standard deviation).
			if math.Abs(got-want) > 0.005 {
				t.Errorf("weights %v: %s has %.4f of the keys, want %.4f", weights, n.ID, got, want)
			}
			if n.Weight == 0 && counts[n.ID] != 0 {
				t.Errorf("weights %v: zero-weight %s got %d keys", weights, n.ID, counts[n.ID])
			}
		}
	}
}

// TestDeterminism pins placements (they must never change between releases: keys would move
// between nodes on upgrade) and checks that the order of the node list does not matter.
func TestDeterminism(t *testing.T) {
	nodes := []Node{{"node-a", 1}, {"node-b", 2}, {"node-c", 3}}
	table, err := New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	golden := map[string]string{"user:1": "node-c", "user:2": "node-a", "session:abc": "node-c", "": "node-b"}
	for key, want := range golden {
		idx, ok := table.Pick([]byte(key))
		if !ok || nodes[idx].ID != want {
			t.Errorf("Pick(%q) = %s, want %s", key, nodes[idx].ID, want)
		}
	}
	hs := keyHashes()
	base := placement(t, nodes, hs)
	rng := rand.New(rand.NewPCG(3, 4))
	for range 5 {
		shuffled := append([]Node(nil), nodes...)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		for i, id := range placement(t, shuffled, hs) {
			if id != base[i] {
				t.Fatalf("key %d on %s after reordering the nodes, %s before", i, id, base[i])
			}
		}
	}
}

// TestMinimalMovement: changing one node's weight, adding a node or removing one moves only
// the keys that must move, and about as many as the weight shares say.
func TestMinimalMovement(t *testing.T) {
	hs := keyHashes()
	tests := []struct {
		name        string
		before      []Node
		after       []Node
		changed     string  // the only node keys may move to or from
		wantMovedTo bool    // keys move to it (true) or away from it (false)
		wantMoved   float64 // expected fraction of keys that move
	}{
		{"weight up", nodesOf(1, 2, 3), nodesOf(1, 4, 3), "node-1", true, 4.0/8 - 2.0/6},
		{"weight down", nodesOf(1, 2, 3), nodesOf(1, 2, 1), "node-2", false, 3.0/6 - 1.0/4},
		{"weight to zero", nodesOf(1, 2, 3), nodesOf(1, 0, 3), "node-1", false, 2.0 / 6},
		{"add a node", nodesOf(1, 2, 3), nodesOf(1, 2, 3, 2), "node-3", true, 2.0 / 8},
		{"remove a node", nodesOf(1, 2, 3, 2), nodesOf(1, 2, 3), "node-3", false, 2.0 / 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, after := placement(t, tt.before, hs), placement(t, tt.after, hs)
			moved := 0
			for i := range hs {
				if before[i] == after[i] {
					continue
				}
				moved++
				if tt.wantMovedTo && after[i] != tt.changed || !tt.wantMovedTo && before[i] != tt.changed {
					t.Fatalf("key %d moved %s -> %s; only moves involving %s are allowed", i, before[i], after[i], tt.changed)
				}
			}
			if got := float64(moved) / testKeys; math.Abs(got-tt.wantMoved) > 0.005 {
				t.Errorf("%.4f of keys moved, want %.4f", got, tt.wantMoved)
			}
		})
	}
}

// TestPickExceptIsRemoval: skipping nodes places every key where a table without them does,
// so a sidecar that routes around an unreachable node sends its keys where the plan without
// it will.
func TestPickExceptIsRemoval(t *testing.T) {
	hs := keyHashes()
	all := nodesOf(1, 2, 3, 2)
	tests := []struct {
		name    string
		skipped []int
	}{
		{"none", nil},
		{"one", []int{2}},
		{"two", []int{0, 3}},
		{"all but one", []int{0, 1, 2}},
	}
	full, err := New(all)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var kept []Node
			for i, n := range all {
				if !slices.Contains(tt.skipped, i) {
					kept = append(kept, n)
				}
			}
			want := placement(t, kept, hs)
			for i, h := range hs {
				got, ok := full.PickHashExcept(h, func(n int) bool { return slices.Contains(tt.skipped, n) })
				if !ok || full.Node(got).ID != want[i] {
					t.Fatalf("key %d: picked %v (ok %v), want %s as without nodes %v", i, got, ok, want[i], tt.skipped)
				}
			}
		})
	}
	if _, ok := full.PickHashExcept(hs[0], func(int) bool { return true }); ok {
		t.Errorf("every node skipped: a node was picked")
	}
}

func TestNoNode(t *testing.T) {
	for _, nodes := range [][]Node{nil, {{"a", 0}, {"b", 0}}} {
		table, err := New(nodes)
		if err != nil {
			t.Fatal(err)
		}
		if idx, ok := table.Pick([]byte("k")); ok {
			t.Errorf("nodes %v: Pick chose %d", nodes, idx)
		}
	}
}

func TestNewErrors(t *testing.T) {
	tests := []struct {
		name  string
		nodes []Node
	}{
		{"empty ID", []Node{{"", 1}}},
		{"duplicate ID", []Node{{"a", 1}, {"a", 2}}},
		{"negative weight", []Node{{"a", -1}}},
		{"NaN weight", []Node{{"a", math.NaN()}}},
		{"infinite weight", []Node{{"a", math.Inf(1)}}},
	}
	for _, tt := range tests {
		if _, err := New(tt.nodes); err == nil {
			t.Errorf("%s: New(%v) accepted", tt.name, tt.nodes)
		}
	}
	nodes := []Node{{"a", 1}}
	table, err := New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	nodes[0].Weight = 0 // the table keeps its own copy
	if _, ok := table.Pick([]byte("k")); !ok || table.Len() != 1 || table.Node(0) != (Node{"a", 1}) {
		t.Error("table changed with the caller's slice")
	}
}

func BenchmarkPick(b *testing.B) {
	key := []byte("tenant-a:object:12345678")
	for _, n := range []int{2, 8, 32} {
		weights := make([]float64, n)
		for i := range weights {
			weights[i] = float64(1 + i%4)
		}
		table, err := New(nodesOf(weights...))
		if err != nil {
			b.Fatal(err)
		}
		b.Run("nodes="+strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := table.Pick(key); !ok {
					b.Fatal("no node")
				}
			}
		})
	}
}
