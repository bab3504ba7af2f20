package allocator

import (
	"strings"
	"testing"

	"github.com/cacheqos/cacheqos/internal/allocator/planning"
)

// PlacementBroken judges the allocation in force by the nodes that hold memory.
func TestPlacementBroken(t *testing.T) {
	nodes := []planning.Node{memNode("n1", 100*mib), memNode("n2", 100*mib), memNode("n3", 100*mib)}
	for _, tc := range []struct {
		name    string
		spread  planning.Spread
		allowed []string
		current []planning.CurrentPartition
		want    string // a part of the answer; "" for none
	}{
		{"within its spread", planning.Spread{MinNodes: 2}, nil,
			[]planning.CurrentPartition{{Node: "n1", MemoryBytes: 8 * mib}, {Node: "n2", MemoryBytes: 8 * mib}}, ""},
		{"a node without memory does not count", planning.Spread{MinNodes: 2}, nil,
			[]planning.CurrentPartition{{Node: "n1", MemoryBytes: 16 * mib}, {Node: "n2"}}, "a/x on 1 nodes outside [2, 3]"},
		{"above its spread", planning.Spread{MaxNodes: 1}, nil,
			[]planning.CurrentPartition{{Node: "n1", MemoryBytes: 8 * mib}, {Node: "n3", MemoryBytes: 8 * mib}}, "a/x on 2 nodes outside [1, 1]"},
		{"on a node it may not use", planning.Spread{}, []string{"n2"},
			[]planning.CurrentPartition{{Node: "n1", MemoryBytes: 8 * mib}}, "a/x on n1: not allowed"},
		{"new, without memory", planning.Spread{MinNodes: 2}, nil, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tn := planning.Tenant{ID: "a/x", Spread: tc.spread, AllowedNodes: tc.allowed, Rates: rates("n1", 100),
				Current: planning.Current{Partitions: tc.current}}
			got, err := PlacementBroken(snapshotOf(nodes, tn), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("PlacementBroken = %q, want %q", got, tc.want)
			}
		})
	}
}
