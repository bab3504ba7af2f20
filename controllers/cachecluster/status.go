package cachecluster

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/conditions"
	"github.com/cacheqos/cacheqos/controllers/internal/objects"
	"github.com/cacheqos/cacheqos/controllers/internal/ssa"
)

// clusterStatus is the part of CacheClusterStatus this reconciler owns; the allocation loop
// owns lastPlan, tenants, the per-node allocation and load, and its own conditions.
type clusterStatus struct {
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
	NodeCount          *int32             `json:"nodeCount,omitempty"`
	Nodes              []nodeStatus       `json:"nodes,omitempty"`
}

type nodeStatus struct {
	Name              string            `json:"name"`
	Capacity          objects.Resources `json:"capacity"`
	PlanGeneration    *int64            `json:"planGeneration,omitempty"`
	AppliedGeneration *int64            `json:"appliedGeneration,omitempty"`
}

// applyStatus writes what this reconcile found; reconcileErr, when not nil, shows in
// Progressing.
func (r *Reconciler) applyStatus(ctx context.Context, s *scope, reconcileErr error) error {
	c := s.cluster
	now := metav1.Now()
	ready, fit := readyCondition(s), guaranteesCondition(s)
	st := clusterStatus{
		ObservedGeneration: c.Generation,
		Conditions: ssa.OwnedConditions(c.Status.Conditions, c.Generation, now,
			ready, progressingCondition(s, reconcileErr), planAppliedCondition(s), monitoringCondition(s.monitoring), fit, overridesCondition(s)),
		NodeCount: ptr.To(int32(len(s.plans))),
	}
	partitionable := c.Spec.Capacity.PartitionableMemory()
	for i := range s.plans {
		if i == maxStatusNodes {
			break
		}
		p := &s.plans[i]
		st.Nodes = append(st.Nodes, nodeStatus{
			Name: p.Spec.NodeName,
			Capacity: objects.Resources{
				Memory:       resource.NewQuantity(partitionable, resource.BinarySI),
				Bandwidth:    ptr.To(c.Spec.Capacity.Bandwidth.DeepCopy()),
				OpsPerSecond: ptr.To(c.Spec.Capacity.OpsPerSecond),
			},
			PlanGeneration:    ptr.To(p.Spec.PlanGeneration),
			AppliedGeneration: ptr.To(p.Status.AppliedGeneration),
		})
	}
	r.recordReadiness(c, ready)
	r.recordGuarantees(c, fit)
	return r.writer.ApplyStatus(ctx, c, st)
}

// maxStatusNodes is the API's bound on status.nodes; nodeCount stays exact above it.
const maxStatusNodes = 1000

// recordReadiness emits an event when Ready changes.
func (r *Reconciler) recordReadiness(c *v1.CacheCluster, ready metav1.Condition) {
	old := meta.FindStatusCondition(c.Status.Conditions, v1.ConditionReady)
	if r.Recorder == nil || (old != nil && old.Status == ready.Status) {
		return
	}
	kind := corev1.EventTypeNormal
	if ready.Status != metav1.ConditionTrue {
		kind = corev1.EventTypeWarning
	}
	r.Recorder.Event(c, kind, ready.Reason, ready.Message)
}

// readyCondition is True only when the DaemonSet controller reports every sidecar ready for
// the current DaemonSet generation: the operator never assumes its pods serve.
func readyCondition(s *scope) metav1.Condition {
	notReady := func(reason, format string, args ...any) metav1.Condition {
		return metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: reason, Message: fmt.Sprintf(format, args...)}
	}
	if len(s.nodes) == 0 {
		return notReady(v1.ReasonNoMatchingNodes, "no node matches spec.nodeSelector %v with the cluster's tolerations; no sidecar runs", s.cluster.Spec.NodeSelector)
	}
	ds := s.daemonSet
	if ds == nil {
		return notReady(v1.ReasonNodesNotReady, "the sidecar DaemonSet could not be applied")
	}
	if ds.Status.ObservedGeneration < ds.Generation {
		return notReady(v1.ReasonNodesNotReady, "the DaemonSet controller has not yet observed generation %d of DaemonSet %s", ds.Generation, ds.Name)
	}
	desired, ready := ds.Status.DesiredNumberScheduled, ds.Status.NumberReady
	if desired == 0 || ready < desired {
		msg := fmt.Sprintf("%d of %d sidecars ready", ready, desired)
		if nodes := nodesWithoutReadySidecar(s); len(nodes) > 0 {
			msg += "; not serving on " + objects.ListNames(nodes)
		}
		return notReady(v1.ReasonNodesNotReady, "%s", msg)
	}
	return metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1.ReasonAllNodesReady,
		Message: fmt.Sprintf("%d of %d sidecars ready", ready, desired)}
}

// nodesWithoutReadySidecar lists the selected nodes whose sidecar pod is missing or not ready.
func nodesWithoutReadySidecar(s *scope) []string {
	ready := map[string]bool{}
	for i := range s.pods {
		if objects.PodReady(&s.pods[i]) {
			ready[s.pods[i].Spec.NodeName] = true
		}
	}
	var out []string
	for _, n := range s.nodes {
		if !ready[n.Name] {
			out = append(out, n.Name)
		}
	}
	return out
}

// pendingPlans lists the nodes whose sidecar has not applied its plan's generation, and
// those whose sidecar reported a failure applying it.
func pendingPlans(plans []v1.CacheNodePlan) (pending, failed []string) {
	for i := range plans {
		p := &plans[i]
		if c := meta.FindStatusCondition(p.Status.Conditions, v1.ConditionPlanApplied); c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1.ReasonApplyFailed {
			failed = append(failed, p.Spec.NodeName)
			continue
		}
		if p.Status.AppliedGeneration < p.Spec.PlanGeneration {
			pending = append(pending, p.Spec.NodeName)
		}
	}
	return pending, failed
}

func planAppliedCondition(s *scope) metav1.Condition {
	pending, failed := pendingPlans(s.plans)
	switch {
	case len(s.plans) == 0:
		return metav1.Condition{Type: v1.ConditionPlanApplied, Status: metav1.ConditionFalse, Reason: v1.ReasonPlanPending, Message: "the cluster has no node plans yet"}
	case len(failed) > 0:
		return metav1.Condition{Type: v1.ConditionPlanApplied, Status: metav1.ConditionFalse, Reason: v1.ReasonApplyFailed,
			Message: "sidecars could not apply their plans on " + objects.ListNames(failed) + "; see those CacheNodePlans' status"}
	case len(pending) > 0:
		return metav1.Condition{Type: v1.ConditionPlanApplied, Status: metav1.ConditionFalse, Reason: v1.ReasonPlanPending,
			Message: "plans not applied yet on " + objects.ListNames(pending)}
	}
	return metav1.Condition{Type: v1.ConditionPlanApplied, Status: metav1.ConditionTrue, Reason: v1.ReasonPlanApplied,
		Message: fmt.Sprintf("all %d nodes applied their plans", len(s.plans))}
}

func overridesCondition(s *scope) metav1.Condition {
	if len(s.overridesRefused) > 0 {
		return metav1.Condition{Type: conditions.SidecarOverridesApplied, Status: metav1.ConditionFalse, Reason: conditions.ReasonUnsafeResources,
			Message: truncate(strings.Join(s.overridesRefused, "; "))}
	}
	return metav1.Condition{Type: conditions.SidecarOverridesApplied, Status: metav1.ConditionTrue, Reason: conditions.ReasonOverridesApplied,
		Message: "the sidecar pod template carries spec.sidecar and the operator's defaults"}
}

func progressingCondition(s *scope, reconcileErr error) metav1.Condition {
	progressing := func(reason, msg string) metav1.Condition {
		return metav1.Condition{Type: v1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: reason, Message: msg}
	}
	if reconcileErr != nil {
		return progressing(conditions.ReasonReconcileError, truncate(reconcileErr.Error()))
	}
	if ds := s.daemonSet; ds != nil && (ds.Status.ObservedGeneration < ds.Generation || ds.Status.UpdatedNumberScheduled < ds.Status.DesiredNumberScheduled) {
		return progressing(conditions.ReasonRollingOut, fmt.Sprintf("%d of %d sidecars run the current pod template", ds.Status.UpdatedNumberScheduled, ds.Status.DesiredNumberScheduled))
	}
	if pending, _ := pendingPlans(s.plans); len(pending) > 0 {
		return progressing(v1.ReasonPlanPending, "new plans on their way to "+objects.ListNames(pending))
	}
	return metav1.Condition{Type: v1.ConditionProgressing, Status: metav1.ConditionFalse, Reason: conditions.ReasonUpToDate,
		Message: "sidecars run the current template and every plan is applied"}
}

// maxMessage keeps condition messages well under the API's 32768-byte limit.
const maxMessage = 4096

func truncate(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	return s[:maxMessage-3] + "..."
}
