package control

import (
	"fmt"
	"math"

	"github.com/cacheqos/cacheqos/internal/allocator"
	"github.com/cacheqos/cacheqos/internal/allocator/planning"
)

// Plans follow meaningful change, not measurement noise. The allocator maximizes expected
// hits first and minimizes movement last, and its sizes are discrete levels, so rates that
// wobble by a few percent between intervals would flip a tenant between two levels every
// interval, emptying caches for nothing. A new plan therefore replaces the plan in force only
// when what the plan in force was made for changed (Input.SpecsChanged), or when it is worth
// it: it meets more objectives, it saturates fewer nodes, or it expects at least minGain more hits than the plan in
// force does under the same measurements and, with ColdStartCost, its gain over
// paybackIntervals pays for the hits the keys it moves lose while they warm up again. Where
// the plan in force is not evaluated (policies other than optimal), a new plan
// is taken when it differs materially: another set of tenants or nodes, a limit added or
// removed, or a partition's memory off by more than changeThreshold and MinChangeBytes.
const (
	minGain          = 0.02
	changeThreshold  = 0.10
	paybackIntervals = 3
)

// keepCurrent decides whether the plan in force stays instead of the candidate's plan, and
// says why ("": take the new plan). current is the plan in force as the allocator assesses it
// under the same fed snapshot (nil under policies other than optimal).
func (l *Loop) keepCurrent(in Input, c *candidate) (current *planning.Plan, reason string) {
	proposed := c.plan
	if l.shortOfLearning(in, c) {
		return nil, ""
	}
	// The optimal policy's plans keep every tenant's placement; the papers' policies may
	// leave a node of a tenant's spread without memory, in the new plan as in the old.
	if l.shaping() {
		if broken, err := allocator.PlacementBroken(c.snap, l.cfg.Allocator); err == nil && broken != "" {
			return nil, ""
		}
	}
	current = l.evaluateCurrent(c.snap)
	if current != nil {
		cs, ps := current.Summary, proposed.Summary
		// A strict tenant that met its objective under the plan in force counts as met by
		// it, whatever its curve predicts: a new plan is taken for an objective only when
		// that objective is really missed, not when a curve's error says it would be.
		if l.score(c.snap, proposed) > l.observedScore(c.snap, current) || ps.ObjectivesMet-ps.StrictMet > cs.ObjectivesMet-cs.StrictMet ||
			ps.SaturatedNodes < cs.SaturatedNodes {
			return nil, ""
		}
		gain := ps.ExpectedHitsPerSecond - cs.ExpectedHitsPerSecond
		need, why := minGain*cs.ExpectedHitsPerSecond, fmt.Sprintf("less than %.0f%% more", minGain*100)
		if l.cfg.Mechanisms.ColdStartCost && l.shaping() {
			if cost := coldStartCost(current, proposed); cost/paybackIntervals > need {
				need = cost / paybackIntervals
				why = fmt.Sprintf("%.1f more hits/s over %d intervals do not pay for the %.1f hits/s its moved keys lose while they warm up", gain, paybackIntervals, cost)
			}
		}
		if gain > need {
			return nil, ""
		}
		return current, keepCurrentReason(cs, ps, why)
	}
	if materialChange(in.Current, l.quantize(proposed), l.cfg.MinChangeBytes) != "" {
		return nil, ""
	}
	return nil, fmt.Sprintf("kept the plan in force: the new plan changed no partition by more than %.0f%%", changeThreshold*100)
}

// shortOfLearning reports that the plan in force leaves a tenant whose curve is being learned
// short of the fair share the new plan holds for it: no expected gain can say what that
// costs, since its curve does not know yet.
func (l *Loop) shortOfLearning(in Input, c *candidate) bool {
	for id, p := range c.protected {
		if p.learning && allocated(in.Current[id]) < p.bytes-l.cfg.MinChangeBytes {
			return true
		}
	}
	return false
}

// evaluateCurrent is the plan in force as the optimal policy assesses it under snap, or nil
// under another policy (those reproduce papers and are judged by materialChange alone) or
// when snap cannot be assessed.
func (l *Loop) evaluateCurrent(snap *planning.Snapshot) *planning.Plan {
	if !l.shaping() {
		return nil
	}
	p, err := allocator.Evaluate(snap, l.cfg.Allocator)
	if err != nil {
		return nil
	}
	return p
}

// coldStartCost is the hits per second lost, for about one interval, by the keys proposed
// moves: a tenant loses the share of its current memory that shrinks or leaves a node, and
// with it that share of its current hits.
func coldStartCost(current, proposed *planning.Plan) float64 {
	next := map[string]map[string]int64{}
	for _, tp := range proposed.Tenants {
		next[tp.ID] = map[string]int64{}
		for _, p := range tp.Partitions {
			next[tp.ID][p.Node] += p.MemoryBytes
		}
	}
	var cost float64
	for _, tp := range current.Tenants {
		if tp.MemoryBytes <= 0 {
			continue
		}
		var lost int64
		for _, p := range tp.Partitions {
			lost += max(0, p.MemoryBytes-next[tp.ID][p.Node])
		}
		cost += tp.Predicted.HitsPerSecond * float64(lost) / float64(tp.MemoryBytes)
	}
	return cost
}

// materialChange describes how proposed differs materially from current ("" when it does
// not). floor is the smallest memory change that counts.
func materialChange(current, proposed Allocation, floor int64) string {
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
