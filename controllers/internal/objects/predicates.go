package objects

import (
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
)

// SpecOrLifecycleChanged passes the updates of a reconciler's own object that it acts on: the
// spec (generation), the finalizers (the one it adds brings it back) and deletion. Status
// writes, its own and other writers', do not wake it.
func SpecOrLifecycleChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() ||
			!slices.Equal(e.ObjectOld.GetFinalizers(), e.ObjectNew.GetFinalizers()) ||
			e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
	}}
}

// TenantGuaranteesChanged passes TenantSLO updates that can change what the tenant holds of its
// cluster: the spec, the Admitted condition's status or reason, and deletion. The status the
// allocation loop writes does not pass.
func TenantGuaranteesChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		before, okBefore := e.ObjectOld.(*v1.TenantSLO)
		after, okAfter := e.ObjectNew.(*v1.TenantSLO)
		if !okBefore || !okAfter {
			return true
		}
		a := meta.FindStatusCondition(before.Status.Conditions, v1.ConditionAdmitted)
		b := meta.FindStatusCondition(after.Status.Conditions, v1.ConditionAdmitted)
		sameAdmission := (a == nil) == (b == nil) && (a == nil || (a.Status == b.Status && a.Reason == b.Reason))
		return before.Generation != after.Generation || !sameAdmission ||
			before.DeletionTimestamp.IsZero() != after.DeletionTimestamp.IsZero()
	}}
}
