package control

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cacheqos/cacheqos/internal/allocator/planning"
)

// Reason says why a tenant's memory is what the decision makes it.
type Reason string

// The reasons, one per tenant and decision.
const (
	// ReasonPlaced: the tenant had no memory; the plan places it.
	ReasonPlaced Reason = "Placed"
	// ReasonKept: the tenant's memory did not change (the plan in force was kept, or the new
	// plan leaves it as it was).
	ReasonKept Reason = "Kept"
	// ReasonMoved: the tenant keeps as much memory, but the new plan places some of it on
	// other nodes, where its keys start cold.
	ReasonMoved Reason = "Moved"
	// ReasonProtected: the tenant met its objective and keeps at least the memory that met it.
	ReasonProtected Reason = "Protected"
	// ReasonLearning: a strict tenant whose curve is not learned yet holds a fair share.
	ReasonLearning Reason = "Learning"
	// ReasonRaisedForTarget: a strict tenant's memory grows to reach its target.
	ReasonRaisedForTarget Reason = "RaisedForTarget"
	// ReasonRaised: the tenant gets spare memory where it earns the most hits.
	ReasonRaised Reason = "Raised"
	// ReasonLoweredForPriority: the tenant lost its protection to a higher-priority objective
	// that needed the memory.
	ReasonLoweredForPriority Reason = "LoweredForPriority"
	// ReasonLowered: the memory earns more hits elsewhere or meets another objective.
	ReasonLowered Reason = "Lowered"
)

// TenantDecision is why one tenant's memory is what it is, with the numbers.
type TenantDecision struct {
	Reason Reason
	// Message says it in a sentence.
	Message string
	// FromBytes and ToBytes are the tenant's total memory before and after the decision.
	FromBytes, ToBytes int64
}

// explain says, for every tenant in the snapshot, why its memory is what the decision makes it.
func (l *Loop) explain(in Input, c *candidate, d *Decision) map[string]TenantDecision {
	out := make(map[string]TenantDecision, len(in.Snapshot.Tenants))
	for i := range in.Snapshot.Tenants {
		t := &in.Snapshot.Tenants[i]
		st := l.tenants[t.ID]
		from, to := totalOf(t.Current.Partitions), allocated(d.Desired[t.ID])
		td := TenantDecision{FromBytes: from, ToBytes: to}
		_, protected := c.protected[t.ID]
		// blocker is the objective a layer dropped the tenant's protection for; the layer
		// for the highest unmet objective drops that tenant's own protection too, which then
		// names no one else.
		blocker, wasDropped := c.dropped[t.ID]
		changed := abs(to-from) > l.cfg.MinChangeBytes
		left, joined := relocated(t.Current.Partitions, d.Desired[t.ID])
		// moved is the memory that changes nodes: what it gives up on some nodes beyond what it
		// loses in total.
		moved := left - max(0, from-to)
		switch {
		case !d.Taken:
			td.Reason = ReasonKept
			td.Message = fmt.Sprintf("keeps %s: %s", planning.FormatBytes(to), d.Kept)
		case from == 0 && to > 0:
			td.Reason = ReasonPlaced
			td.Message = fmt.Sprintf("placed with %s", planning.FormatBytes(to))
		case protected && c.protected[t.ID].learning && to >= c.protected[t.ID].bytes-l.cfg.MinChangeBytes:
			td.Reason = ReasonLearning
			td.Message = fmt.Sprintf("holds at least a fair share, %s, while its curve is learned: %s%s", planning.FormatBytes(c.protected[t.ID].bytes), learningText(st), estimatedText(st))
		case protected && c.protected[t.ID].pending && to >= from-l.cfg.MinChangeBytes:
			td.Reason = ReasonProtected
			td.Message = fmt.Sprintf("was given %s for its objective and missed it%s while that memory was still filling: keeps at least %s until it is measured settled", planning.FormatBytes(from), observedText(st), planning.FormatBytes(c.protected[t.ID].bytes))
		case protected && to >= from-l.cfg.MinChangeBytes:
			td.Reason = ReasonProtected
			td.Message = fmt.Sprintf("met its objective%s with %s: keeps at least %s", observedText(st), planning.FormatBytes(from), planning.FormatBytes(c.protected[t.ID].bytes))
		case !changed && moved > l.cfg.MinChangeBytes:
			td.Reason = ReasonMoved
			td.Message = fmt.Sprintf("keeps %s, but %s of it moves to other nodes (%s): the new plan places it differently, and the keys routed there start cold",
				planning.FormatBytes(to), planning.FormatBytes(moved), joined)
		case !changed:
			td.Reason = ReasonKept
			td.Message = fmt.Sprintf("keeps %s: the new plan leaves it as it was", planning.FormatBytes(to))
		case to > from && t.Class == planning.ClassStrict && t.Objective != nil && !st.met:
			td.Reason = ReasonRaisedForTarget
			td.Message = fmt.Sprintf("raised from %s to %s to reach its target%s%s%s", planning.FormatBytes(from), planning.FormatBytes(to), observedText(st), raisedText(st), estimatedText(st))
		case to > from:
			td.Reason = ReasonRaised
			td.Message = fmt.Sprintf("raised from %s to %s: spare memory earns the most expected hits here", planning.FormatBytes(from), planning.FormatBytes(to))
		case wasDropped && blocker != "" && blocker != t.ID:
			td.Reason = ReasonLoweredForPriority
			td.Message = fmt.Sprintf("lowered from %s to %s: the objective of %s, of higher or equal priority, needed the memory that met this tenant's", planning.FormatBytes(from), planning.FormatBytes(to), blocker)
		default:
			td.Reason = ReasonLowered
			td.Message = fmt.Sprintf("lowered from %s to %s: the memory meets another objective or earns more expected hits elsewhere", planning.FormatBytes(from), planning.FormatBytes(to))
		}
		if td.Reason != ReasonMoved && d.Taken && from > 0 && moved > l.cfg.MinChangeBytes {
			td.Message += fmt.Sprintf("; %s of it moves to other nodes (%s), where its keys start cold", planning.FormatBytes(moved), joined)
		}
		out[t.ID] = td
	}
	return out
}

// relocated is the memory the tenant gives up on the nodes where it shrinks, and the change
// on each node that changes, as "n1 -1.0 MiB, n2 +1.0 MiB" in node order.
func relocated(current []planning.CurrentPartition, desired []planning.Partition) (int64, string) {
	change := map[string]int64{}
	for _, p := range current {
		change[p.Node] -= p.MemoryBytes
	}
	for _, p := range desired {
		change[p.Node] += p.MemoryBytes
	}
	var left int64
	var nodes []string
	for _, n := range slices.Sorted(maps.Keys(change)) {
		delta := change[n]
		switch {
		case delta < 0:
			left -= delta
			nodes = append(nodes, fmt.Sprintf("%s -%s", n, planning.FormatBytes(-delta)))
		case delta > 0:
			nodes = append(nodes, fmt.Sprintf("%s +%s", n, planning.FormatBytes(delta)))
		}
	}
	return left, strings.Join(nodes, ", ")
}

func allocated(parts []planning.Partition) int64 {
	var total int64
	for _, p := range parts {
		total += p.MemoryBytes
	}
	return total
}

// observedText is " (observed 0.930, target 0.900)" when the tenant has a hit-ratio target
// and an observation.
func observedText(st *tenantState) string {
	if st.target == 0 || st.observed < 0 {
		return ""
	}
	return fmt.Sprintf(" (observed hit ratio %.3f, target %.3f)", st.observed, st.target)
}

// raisedText is "; planned for 0.930 by feedback" when feedback raised the target.
func raisedText(st *tenantState) string {
	if st.raisedTo == 0 {
		return ""
	}
	return fmt.Sprintf("; planned for %.3f (feedback and measurement uncertainty)", st.raisedTo)
}

// estimatedText is "; planned on its last interval's reads, which reach 0.999 where its
// curve ... reaches 0.856" when the tenant's curve was replaced by that estimate (converging).
func estimatedText(st *tenantState) string {
	if st.estimatedTop == 0 {
		return ""
	}
	return fmt.Sprintf("; planned on its last interval's reads, which reach %.3f where its curve, still counting first reads of keys it has read again since, reaches %.3f", st.estimatedTop, st.measuredTop)
}

// learningText says what a learning tenant's curve still waits for.
func learningText(st *tenantState) string {
	if st.samples < learnSamples {
		return fmt.Sprintf("%d of %d settled observations so far", st.samples, learnSamples)
	}
	return fmt.Sprintf("it shows no reuse after %d settled observations; held for up to %d", st.samples, maxLearnSamples)
}
