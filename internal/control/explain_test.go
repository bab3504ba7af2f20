package control

import (
	"testing"

	"github.com/cacheqos/cacheqos/internal/allocator/planning"
)

// A tenant whose total memory stays but whose memory changes nodes is told it moved, with the
// change per node: its keys routed to the new node start cold, which "kept" would hide. Any
// other decision that moves memory between nodes says so too.
func TestExplainSaysWhenMemoryMoves(t *testing.T) {
	parts := func(nodeMiB ...any) []planning.CurrentPartition {
		var out []planning.CurrentPartition
		for i := 0; i < len(nodeMiB); i += 2 {
			out = append(out, planning.CurrentPartition{Node: nodeMiB[i].(string), MemoryBytes: int64(nodeMiB[i+1].(int)) * mib})
		}
		return out
	}
	desired := func(cur []planning.CurrentPartition) []planning.Partition {
		var out []planning.Partition
		for _, p := range cur {
			out = append(out, planning.Partition{Node: p.Node, MemoryBytes: p.MemoryBytes})
		}
		return out
	}
	cases := []struct {
		name        string
		from, to    []planning.CurrentPartition
		want        Reason
		wantMessage string
	}{
		{"same nodes, same memory", parts("n1", 8), parts("n1", 8), ReasonKept, "keeps 8.0 MiB: the new plan leaves it as it was"},
		{"within the noise floor", parts("n1", 8, "n2", 8), parts("n1", 9, "n2", 7), ReasonKept, "keeps 16.0 MiB: the new plan leaves it as it was"},
		{"half to another node", parts("n1", 8), parts("n1", 4, "n2", 4), ReasonMoved,
			"keeps 8.0 MiB, but 4.0 MiB of it moves to other nodes (n1 -4.0 MiB, n2 +4.0 MiB): the new plan places it differently, and the keys routed there start cold"},
		{"off a node entirely", parts("n1", 4, "n2", 4), parts("n2", 4, "n3", 4), ReasonMoved,
			"keeps 8.0 MiB, but 4.0 MiB of it moves to other nodes (n1 -4.0 MiB, n3 +4.0 MiB): the new plan places it differently, and the keys routed there start cold"},
		{"grown", parts("n1", 4), parts("n1", 4, "n2", 4), ReasonRaised, "raised from 4.0 MiB to 8.0 MiB: spare memory earns the most expected hits here"},
		{"grown and moved", parts("n1", 4), parts("n2", 8), ReasonRaised,
			"raised from 4.0 MiB to 8.0 MiB: spare memory earns the most expected hits here; 4.0 MiB of it moves to other nodes (n1 -4.0 MiB, n2 +8.0 MiB), where its keys start cold"},
		{"protected, and moved within its nodes", parts("n1", 6, "n2", 2), parts("n1", 4, "n2", 4), ReasonProtected,
			"met its objective with 8.0 MiB: keeps at least 8.0 MiB; 2.0 MiB of it moves to other nodes (n1 -2.0 MiB, n2 +2.0 MiB), where its keys start cold"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := New()
			l.cfg = config(DefaultMechanisms())
			tn := planning.Tenant{ID: "ns/app", Class: planning.ClassBestEffort, Current: planning.Current{Partitions: tc.from}}
			l.tenants[tn.ID] = &tenantState{}
			snap := &planning.Snapshot{Tenants: []planning.Tenant{tn}}
			d := &Decision{Taken: true, Desired: Allocation{tn.ID: desired(tc.to)}}
			c := &candidate{}
			if tc.want == ReasonProtected {
				c.protected = map[string]protection{tn.ID: {bytes: 8 * mib}}
			}
			got := l.explain(Input{Snapshot: snap}, c, d)[tn.ID]
			if got.Reason != tc.want || got.Message != tc.wantMessage {
				t.Errorf("%s: %q, want %s: %q", got.Reason, got.Message, tc.want, tc.wantMessage)
			}
		})
	}
}
