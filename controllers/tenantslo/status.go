package tenantslo

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/conditions"
	"github.com/cacheqos/cacheqos/controllers/internal/objects"
	"github.com/cacheqos/cacheqos/controllers/internal/ssa"
)

// tenantStatus is the part of TenantSLOStatus this reconciler owns; the allocation loop owns
// allocation, observed, predictedHitRatio, SLOMet and Throttled.
type tenantStatus struct {
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
	CredentialsSecret  string             `json:"credentialsSecret,omitempty"`
	Endpoint           string             `json:"endpoint,omitempty"`
	Objective          string             `json:"objective,omitempty"`
	ClusterNamespace   string             `json:"clusterNamespace,omitempty"`
}

// applyStatus writes the conditions and credentials reference, emits an event when admission
// changed, and asks for a new plan when admission or the spec changed.
func (r *Reconciler) applyStatus(ctx context.Context, s *scope) error {
	t := s.tenant
	old := meta.FindStatusCondition(t.Status.Conditions, v1.ConditionAdmitted)
	admitted := s.admitted
	if admitted == nil {
		// The reconcile failed before deciding: keep what was decided before.
		if old == nil {
			admitted = &metav1.Condition{Type: v1.ConditionAdmitted, Status: metav1.ConditionUnknown, Reason: v1.ReasonReconciling, Message: "admission not decided yet"}
		} else {
			admitted = old.DeepCopy()
		}
	}
	st := tenantStatus{
		ObservedGeneration: t.Generation,
		Conditions:         ssa.OwnedConditions(t.Status.Conditions, t.Generation, metav1.Now(), *admitted, readyCondition(s, admitted)),
		Objective:          t.Spec.Objective.Summary(),
		ClusterNamespace:   t.ClusterKey().Namespace,
	}
	if s.password != "" {
		st.CredentialsSecret = objects.TenantCredentialsSecretName(t.Name)
	}
	if s.cluster != nil {
		st.Endpoint = endpoint(s.cluster)
	}
	changed := old == nil || old.Status != admitted.Status
	if changed && r.Recorder != nil && admitted.Status != metav1.ConditionUnknown {
		kind := corev1.EventTypeNormal
		if admitted.Status != metav1.ConditionTrue {
			kind = corev1.EventTypeWarning
		}
		r.Recorder.Event(t, kind, admitted.Reason, admitted.Message)
	}
	if err := r.writer.ApplyStatus(ctx, t, st); err != nil {
		return err
	}
	if (changed || t.Status.ObservedGeneration != t.Generation) && r.Trigger != nil {
		r.Trigger.Trigger(t.ClusterKey())
	}
	return nil
}

// readyCondition: admitted, credentials issued, and every partition the plans hold for the
// tenant running. A tenant not admitted is not ready for the Admitted condition's reason.
func readyCondition(s *scope, admitted *metav1.Condition) metav1.Condition {
	notReady := func(reason, msg string) metav1.Condition {
		return metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: reason, Message: msg}
	}
	if admitted.Status != metav1.ConditionTrue {
		// The admission's own reason, so that `kubectl get` shows what to act on.
		return notReady(admitted.Reason, "not admitted: "+admitted.Message)
	}
	if s.password == "" || !s.hashStored {
		return notReady(conditions.ReasonCredentialsPending, "the credentials are not issued yet")
	}
	id := s.tenant.TenantID()
	var held, notRunning []string
	for i := range s.plans {
		p := &s.plans[i]
		if !holdsTenant(p, id) {
			continue
		}
		held = append(held, p.Spec.NodeName)
		if !partitionRunning(p, id) {
			notRunning = append(notRunning, p.Spec.NodeName)
		}
	}
	switch {
	case len(held) == 0:
		return notReady(conditions.ReasonAwaitingPlan, "admitted; waiting for the allocation loop to place the tenant's partitions")
	case len(notRunning) > 0:
		return notReady(conditions.ReasonPartitionsPending, fmt.Sprintf("%d of %d partitions not running yet, on %s", len(notRunning), len(held), objects.ListNames(notRunning)))
	}
	return metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: conditions.ReasonPartitionsRunning,
		Message: fmt.Sprintf("partitions running on %d nodes", len(held))}
}

// partitionRunning reports whether the node's sidecar applied the plan generation and runs
// the tenant's partition.
func partitionRunning(p *v1.CacheNodePlan, tenant string) bool {
	if p.Status.AppliedGeneration < p.Spec.PlanGeneration {
		return false
	}
	for _, ps := range p.Status.Partitions {
		if ps.Tenant == tenant {
			return ps.State == v1.PartitionRunning
		}
	}
	return false
}
