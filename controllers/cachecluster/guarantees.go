package cachecluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/internal/objects"
)

// +kubebuilder:rbac:groups=cacheqos.io,resources=tenantslos,verbs=get;list;watch

// readTenants lists the TenantSLOs naming the cluster, for the GuaranteesFit condition.
func (r *Reconciler) readTenants(ctx context.Context, s *scope) error {
	var list v1.TenantSLOList
	key := client.ObjectKeyFromObject(s.cluster).String()
	if err := r.Client.List(ctx, &list, client.MatchingFields{objects.TenantClusterIndex: key}); err != nil {
		return fmt.Errorf("listing the tenants of %s: %w", key, err)
	}
	s.tenants, s.tenantsRead = list.Items, true
	return nil
}

// guaranteeTotals sums the guarantees of the tenants holding them (admitted) and of those
// refused only for lack of capacity: the guarantees the cluster is asked to hold. Tenants its
// governance refuses, or not decided yet, ask for nothing.
type guaranteeTotals struct {
	admittedMemory, waitingMemory       int64
	admittedBandwidth, waitingBandwidth int64
	admitted, waiting                   int
}

func totalGuarantees(tenants []v1.TenantSLO) guaranteeTotals {
	var g guaranteeTotals
	for i := range tenants {
		t := &tenants[i]
		memory, bandwidth := t.Guarantees()
		admitted := meta.FindStatusCondition(t.Status.Conditions, v1.ConditionAdmitted)
		switch {
		case !t.DeletionTimestamp.IsZero() || admitted == nil || memory+bandwidth == 0:
		case admitted.Status == metav1.ConditionTrue:
			g.admittedMemory += memory
			g.admittedBandwidth += bandwidth
			g.admitted++
		case admitted.Reason == v1.ReasonInsufficientCapacity:
			g.waitingMemory += memory
			g.waitingBandwidth += bandwidth
			g.waiting++
		}
	}
	return g
}

// guaranteesCondition compares the tenants' guarantees with nodes x what each node gives
// partitions, the capacity admission reserves them against. Without the tenants (their list
// failed) it keeps what it said before rather than claim they fit.
func guaranteesCondition(s *scope) metav1.Condition {
	if !s.tenantsRead {
		if old := meta.FindStatusCondition(s.cluster.Status.Conditions, v1.ConditionGuaranteesFit); old != nil {
			return *old
		}
		return metav1.Condition{Type: v1.ConditionGuaranteesFit, Status: metav1.ConditionUnknown, Reason: v1.ReasonReconciling, Message: "the cluster's tenants could not be listed"}
	}
	g := totalGuarantees(s.tenants)
	nodes := int64(len(s.plans))
	perNodeMemory := s.cluster.Spec.Capacity.PartitionableMemory()
	perNodeBandwidth := s.cluster.Spec.Capacity.Bandwidth.Value()
	memory, bandwidth := g.admittedMemory+g.waitingMemory, g.admittedBandwidth+g.waitingBandwidth
	totals := fmt.Sprintf("memory.min totals %s (%s admitted to %d tenants, %s asked by %d tenants refused for capacity) against %s of partitionable memory (%d nodes x %s); bandwidth.guaranteed totals %s against %s bytes/s (%d nodes x %s)",
		objects.Bytes(memory), objects.Bytes(g.admittedMemory), g.admitted, objects.Bytes(g.waitingMemory), g.waiting,
		objects.Bytes(nodes*perNodeMemory), nodes, objects.Bytes(perNodeMemory),
		objects.Rate(bandwidth), objects.Rate(nodes*perNodeBandwidth), nodes, objects.Rate(perNodeBandwidth))
	if memory > nodes*perNodeMemory || bandwidth > nodes*perNodeBandwidth {
		return metav1.Condition{Type: v1.ConditionGuaranteesFit, Status: metav1.ConditionFalse, Reason: v1.ReasonGuaranteesExceedCapacity,
			Message: "the tenants' guarantees exceed the cluster's capacity: " + totals +
				". Admitted tenants that no longer fit lose admission (InsufficientCapacity); raise spec.capacity, add nodes, or lower the guarantees"}
	}
	return metav1.Condition{Type: v1.ConditionGuaranteesFit, Status: metav1.ConditionTrue, Reason: v1.ReasonWithinCapacity, Message: totals}
}

// recordGuarantees emits a Warning event when the guarantees stop fitting (a capacity shrink,
// nodes leaving, or tenants asking for more than is left).
func (r *Reconciler) recordGuarantees(c *v1.CacheCluster, fit metav1.Condition) {
	old := meta.FindStatusCondition(c.Status.Conditions, v1.ConditionGuaranteesFit)
	if r.Recorder == nil || fit.Status != metav1.ConditionFalse || (old != nil && old.Status == metav1.ConditionFalse) {
		return
	}
	r.Recorder.Event(c, corev1.EventTypeWarning, fit.Reason, fit.Message)
}

// clusterOfTenant enqueues the cluster a TenantSLO names.
func clusterOfTenant(_ context.Context, obj client.Object) []reconcile.Request {
	t, ok := obj.(*v1.TenantSLO)
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: t.ClusterKey()}}
}
