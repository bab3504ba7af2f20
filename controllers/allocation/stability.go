package allocation

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"slices"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/internal/objects"
	"github.com/cacheqos/cacheqos/internal/allocator"
	"github.com/cacheqos/cacheqos/internal/allocator/planning"
)

// Plans follow meaningful change, not measurement noise. The allocator maximizes expected
// hits first and minimizes movement last, and its sizes are discrete levels, so rates that
// wobble by a few percent between intervals would flip a tenant between two levels every
// interval, emptying caches for nothing. A new plan therefore replaces the plan in force only
// when a spec changed since that plan was made (recorded in its CacheNodePlans, so a
// restarted operator knows too), or when it is worth it: it meets more objectives, or it
// expects at least minGain more hits than the plan in force does under the same
// measurements. Where the plan in force cannot be evaluated (policies other than optimal,
// no OR-Tools), a new plan is taken when it differs materially: another set of tenants or
// nodes, a limit added or removed, or a partition's memory or limit off by more than
// changeThreshold.
const (
	minGain         = 0.02
	changeThreshold = 0.10
	// memoryFloorShare of a node's partitionable memory: smaller memory changes are noise,
	// however large relative to a small partition.
	memoryFloorShare = 0.01
)

// specHash identifies what a plan was made for: the cluster's and every admitted tenant's
// spec generation, and the nodes.
func specHash(in *inputs) string {
	h := sha256.New()
	fmt.Fprintf(h, "cluster %s %d\n", in.key, in.cluster.Generation)
	for _, t := range in.admitted {
		fmt.Fprintf(h, "tenant %s %s %d\n", t.TenantID(), t.UID, t.Generation)
	}
	for _, n := range in.nodes {
		fmt.Fprintf(h, "node %s\n", n)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// specsChanged reports whether some plan was made for other specs than hash.
func specsChanged(in *inputs, hash string) bool {
	return slices.ContainsFunc(in.plans, func(p v1.CacheNodePlan) bool {
		return p.Annotations[objects.AnnotationSpecHash] != hash
	})
}

// keepCurrent decides whether the plan in force stays instead of proposed, and says why ("":
// take proposed). current is the plan in force as the allocator evaluates it under the new
// measurements, when that was possible.
func keepCurrent(ctx context.Context, in *inputs, snap *planning.Snapshot, opts allocator.Options, proposed *planning.Plan) (current *planning.Plan, reason string) {
	if current = evaluateCurrent(ctx, snap, opts); current != nil {
		c, p := current.Summary, proposed.Summary
		if p.StrictMet > c.StrictMet || p.ObjectivesMet > c.ObjectivesMet || p.ExpectedHitsPerSecond > c.ExpectedHitsPerSecond*(1+minGain) {
			return nil, ""
		}
		return current, fmt.Sprintf("kept the plan in force: it meets %d objectives and expects %.1f hits/s; the new plan would meet %d and expect %.1f (less than %.0f%% more)",
			c.ObjectivesMet, c.ExpectedHitsPerSecond, p.ObjectivesMet, p.ExpectedHitsPerSecond, minGain*100)
	}
	floor := int64(memoryFloorShare * float64(in.cluster.Spec.Capacity.PartitionableMemory()))
	if materialChange(in.kept(), viewOf(proposed, in.cluster.Spec.Engine.MinPartitionBytes()), floor) != "" {
		return nil, ""
	}
	return nil, fmt.Sprintf("kept the plan in force: the new plan changed no partition by more than %.0f%%", changeThreshold*100)
}

// evaluateCurrent is the plan in force as the optimal policy sees it under the snapshot's
// measurements: planned with a movement cap of one byte, the only plan left is the current
// one (the policy always offers a tenant's current size). Nil when that is not what came
// back: another policy, no OR-Tools (the greedy fallback ignores the cap), or a plan in
// force that no longer satisfies the constraints.
func evaluateCurrent(ctx context.Context, snap *planning.Snapshot, opts allocator.Options) *planning.Plan {
	if (opts.Policy != "" && opts.Policy != allocator.PolicyOptimal) || opts.DisableSolver {
		return nil
	}
	opts.MaxChurnBytes = 1
	p, err := allocator.Plan(ctx, snap, opts)
	if err != nil || p.Summary.MovementBytes > 1 || (p.Solver != nil && p.Solver.Fallback != "") {
		return nil
	}
	return p
}

// materialChange describes how proposed differs materially from current ("" when it does
// not). floor is the smallest memory change that counts.
func materialChange(current, proposed view, floor int64) string {
	if len(current) != len(proposed) {
		return "the set of tenants changed"
	}
	for id, want := range proposed {
		have, ok := current[id]
		if !ok {
			return "tenant " + id + " is new"
		}
		haveByNode := partitionsByNodeName(have)
		wantByNode := partitionsByNodeName(want)
		if len(haveByNode) != len(wantByNode) {
			return "tenant " + id + " moves to other nodes"
		}
		for node, w := range wantByNode {
			h, ok := haveByNode[node]
			switch {
			case !ok:
				return "tenant " + id + " moves to other nodes"
			case differs(h.MemoryBytes, w.MemoryBytes, floor):
				return fmt.Sprintf("tenant %s's memory on %s changes from %d to %d bytes", id, node, h.MemoryBytes, w.MemoryBytes)
			case differs(h.BandwidthLimitBytesPerSecond, w.BandwidthLimitBytesPerSecond, 0) || differs(h.OpsLimitPerSecond, w.OpsLimitPerSecond, 0):
				return fmt.Sprintf("tenant %s's limits on %s change", id, node)
			}
		}
	}
	return ""
}

// partitionsByNodeName indexes a tenant's partitions that hold memory.
func partitionsByNodeName(parts []planning.Partition) map[string]planning.Partition {
	out := make(map[string]planning.Partition, len(parts))
	for _, p := range parts {
		if p.MemoryBytes > 0 {
			out[p.Node] = p
		}
	}
	return out
}

// differs reports whether b is off from a by more than changeThreshold of a and more than
// floor; a limit appearing or disappearing (one side 0) always differs.
func differs(a, b, floor int64) bool {
	if (a == 0) != (b == 0) {
		return true
	}
	d := math.Abs(float64(b - a))
	return d > changeThreshold*float64(a) && d > float64(floor)
}
