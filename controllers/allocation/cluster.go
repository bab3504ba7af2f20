package allocation

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/conditions"
	"github.com/cacheqos/cacheqos/controllers/internal/objects"
	"github.com/cacheqos/cacheqos/controllers/internal/ssa"
)

// clusterStatus is the part of CacheClusterStatus the loop owns; the cluster reconciler owns
// the rest (Ready, Progressing, PlanApplied, node capacities and generations).
type clusterStatus struct {
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	LastPlan   *v1.PlanSummary    `json:"lastPlan,omitempty"`
	Tenants    *tenantTally       `json:"tenants,omitempty"`
	Nodes      []nodeUsage        `json:"nodes,omitempty"`
}

type tenantTally struct {
	Total      *int32 `json:"total,omitempty"`
	Admitted   *int32 `json:"admitted,omitempty"`
	MeetingSLO *int32 `json:"meetingSLO,omitempty"`
	Throttled  *int32 `json:"throttled,omitempty"`
}

type nodeUsage struct {
	Name       string            `json:"name"`
	Allocated  objects.Resources `json:"allocated"`
	Observed   objects.Resources `json:"observed"`
	Partitions *int32            `json:"partitions,omitempty"`
}

// maxMessage keeps condition messages short enough to read.
const maxMessage = 4096

// maxStatusNodes is the API's bound on status.nodes.
const maxStatusNodes = 1000

// writeClusterStatus records the last plan, the metrics and degradation conditions, the
// tenant counts and each node's allocation and load.
func (l *Loop) writeClusterStatus(ctx context.Context, in *inputs, mr metricsResult, out outcome, generations map[string]int64, counts tenantCounts) error {
	c := in.cluster
	deadline := time.Duration(l.opts.ApplyDeadlineIntervals) * c.Spec.Allocation.IntervalOrDefault()
	problems := out.problems
	if late := lateNodes(in.plans, generations, deadline, time.Now()); len(late) > 0 {
		problems = append(problems, problem{conditions.ReasonPlanNotApplied,
			fmt.Sprintf("the sidecars on %s have not applied their plans within %d allocation intervals (%v)", objects.ListNames(late), l.opts.ApplyDeadlineIntervals, deadline)})
	}
	st := clusterStatus{
		Conditions: ssa.OwnedConditions(c.Status.Conditions, c.Generation, metav1.Now(), metricsCondition(in, mr), degradedCondition(problems)),
		LastPlan:   out.summary,
		Tenants: &tenantTally{
			Total:      ptr.To(int32(len(in.tenants))),
			Admitted:   ptr.To(int32(len(in.admitted))),
			MeetingSLO: ptr.To(counts.meetingSLO),
			Throttled:  ptr.To(counts.throttled),
		},
		Nodes: nodeUsages(in, mr, out.desired),
	}
	if st.LastPlan == nil {
		st.LastPlan = c.Status.LastPlan
	}
	return l.writer.ApplyStatus(ctx, in.cluster, st)
}

func metricsCondition(in *inputs, mr metricsResult) metav1.Condition {
	if mr.err != nil {
		return metav1.Condition{Type: conditions.MetricsAvailable, Status: metav1.ConditionFalse, Reason: mr.reason,
			Message: truncate(mr.err.Error()+"; the plan in force is kept", maxMessage)}
	}
	msg := fmt.Sprintf("read %d tenants' series over the last %v", len(mr.m.Tenants), mr.window)
	if len(mr.unmeasured) > 0 {
		msg += "; no fresh samples from " + objects.ListNames(mr.unmeasured)
	}
	if len(mr.m.Problems) > 0 {
		msg += "; skipped series: " + strings.Join(mr.m.Problems, "; ")
	}
	return metav1.Condition{Type: conditions.MetricsAvailable, Status: metav1.ConditionTrue, Reason: conditions.ReasonMetricsRead, Message: truncate(msg, maxMessage)}
}

func degradedCondition(problems []problem) metav1.Condition {
	if len(problems) == 0 {
		return metav1.Condition{Type: v1.ConditionDegraded, Status: metav1.ConditionFalse, Reason: conditions.ReasonAsExpected,
			Message: "metrics read, plan made by the policy, every sidecar applied its plan in time"}
	}
	msgs := make([]string, len(problems))
	for i, p := range problems {
		msgs[i] = p.message
	}
	return metav1.Condition{Type: v1.ConditionDegraded, Status: metav1.ConditionTrue, Reason: problems[0].reason,
		Message: truncate(strings.Join(msgs, "; "), maxMessage)}
}

// nodeUsages sums each node's allocation from the desired view and its observed load from
// the measurements and the sidecar's partition status.
func nodeUsages(in *inputs, mr metricsResult, desired view) []nodeUsage {
	type sums struct {
		memory, bandwidth, ops int64
		partitions             int32
	}
	allocated := map[string]*sums{}
	for _, parts := range desired {
		for _, p := range parts {
			if p.MemoryBytes <= 0 {
				continue
			}
			s := allocated[p.Node]
			if s == nil {
				s = &sums{}
				allocated[p.Node] = s
			}
			s.memory += p.MemoryBytes
			s.bandwidth += p.BandwidthLimitBytesPerSecond
			s.ops += p.OpsLimitPerSecond
			s.partitions++
		}
	}
	var out []nodeUsage
	for i := range in.plans {
		if i == maxStatusNodes {
			break
		}
		p := &in.plans[i]
		s := allocated[p.Spec.NodeName]
		if s == nil {
			s = &sums{}
		}
		var used int64
		for _, ps := range p.Status.Partitions {
			used += ps.UsedBytes
		}
		n := nodeUsage{
			Name: p.Spec.NodeName,
			Allocated: objects.Resources{
				Memory:       resource.NewQuantity(s.memory, resource.BinarySI),
				Bandwidth:    resource.NewQuantity(s.bandwidth, resource.DecimalSI),
				OpsPerSecond: ptr.To(s.ops),
			},
			Observed:   objects.Resources{Memory: resource.NewQuantity(used, resource.BinarySI)},
			Partitions: ptr.To(s.partitions),
		}
		if mr.m != nil {
			load := nodeLoad(mr.m, p.Spec.NodeName)
			n.Observed.Bandwidth = resource.NewQuantity(int64(math.Round(load.BytesPerSecond)), resource.DecimalSI)
			n.Observed.OpsPerSecond = ptr.To(int64(math.Round(load.OpsPerSecond)))
		}
		out = append(out, n)
	}
	return out
}
