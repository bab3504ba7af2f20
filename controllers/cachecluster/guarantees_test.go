package cachecluster_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/internal/testenv"
)

// TestCapacityShrinkBelowGuarantees: shrinking capacity.memory below what the admitted
// tenants were guaranteed turns GuaranteesFit False with the totals and the new capacity in
// its message, with a Warning event; the tenant that no longer fits loses admission, and
// growing the capacity back restores both.
func TestCapacityShrinkBelowGuarantees(t *testing.T) {
	ns := env.Namespace(t, "shrink")
	node(t, "shrink-a", map[string]string{"pool": "shrink"})
	c := newCluster(ns, "shrinking", "shrink")
	c.Spec.Capacity.HeadroomPercent = ptr.To[int32](0)
	create(t, c)
	first, second := tenantWithMinimum(ns, "first", "1Gi"), tenantWithMinimum(ns, "second", "2Gi")
	create(t, first)
	testenv.Eventually(t, timeout, tenantAdmitted(first, metav1.ConditionTrue, v1.ReasonAdmitted))
	create(t, second)
	testenv.Eventually(t, timeout, tenantAdmitted(second, metav1.ConditionTrue, v1.ReasonAdmitted))
	fit := waitGuaranteesFit(t, c, metav1.ConditionTrue, v1.ReasonWithinCapacity, "memory.min totals 3Gi (3Gi admitted to 2 tenants")
	if !strings.Contains(fit.Message, "against 4Gi of partitionable memory (1 nodes x 4Gi)") {
		t.Errorf("GuaranteesFit message %q does not give the capacity", fit.Message)
	}

	setMemory(t, c, "2Gi")
	waitGuaranteesFit(t, c, metav1.ConditionFalse, v1.ReasonGuaranteesExceedCapacity, "memory.min totals 3Gi")
	testenv.Eventually(t, timeout, func() error {
		var events corev1.EventList
		if err := env.Client.List(context.Background(), &events, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.InvolvedObject.Name == c.Name && e.Type == corev1.EventTypeWarning && e.Reason == v1.ReasonGuaranteesExceedCapacity &&
				strings.Contains(e.Message, "memory.min totals 3Gi") && strings.Contains(e.Message, "against 2Gi of partitionable memory (1 nodes x 2Gi)") {
				return nil
			}
		}
		return errors.New("no Warning event GuaranteesExceedCapacity with the totals and the new capacity")
	})
	// Admission keeps the first admitted tenant that fits; the other waits, and the cluster
	// keeps saying why.
	testenv.Eventually(t, timeout, tenantAdmitted(second, metav1.ConditionFalse, v1.ReasonInsufficientCapacity))
	testenv.Eventually(t, timeout, tenantAdmitted(first, metav1.ConditionTrue, v1.ReasonAdmitted))
	waitGuaranteesFit(t, c, metav1.ConditionFalse, v1.ReasonGuaranteesExceedCapacity,
		"memory.min totals 3Gi (1Gi admitted to 1 tenants, 2Gi asked by 1 tenants refused for capacity) against 2Gi")

	setMemory(t, c, "8Gi")
	testenv.Eventually(t, timeout, tenantAdmitted(second, metav1.ConditionTrue, v1.ReasonAdmitted))
	waitGuaranteesFit(t, c, metav1.ConditionTrue, v1.ReasonWithinCapacity, "memory.min totals 3Gi (3Gi admitted to 2 tenants")
}

func tenantWithMinimum(ns, name, minimum string) *v1.TenantSLO {
	return &v1.TenantSLO{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.TenantSLOSpec{
			ClusterRef: v1.ClusterReference{Name: "shrinking"},
			Objective:  v1.Objective{HitRatio: &v1.HitRatioObjective{Ratio: "0.9"}},
			Memory:     v1.MemoryRange{Min: ptr.To(resource.MustParse(minimum))},
		},
	}
}

func tenantAdmitted(tslo *v1.TenantSLO, status metav1.ConditionStatus, reason string) func() error {
	return func() error {
		if err := get(tslo, tslo.Namespace, tslo.Name); err != nil {
			return err
		}
		_, err := conditionIs(tslo.Status.Conditions, v1.ConditionAdmitted, status, reason)
		return err
	}
}

// waitGuaranteesFit waits for the cluster's GuaranteesFit condition with a message containing
// want, and returns it.
func waitGuaranteesFit(t *testing.T, c *v1.CacheCluster, status metav1.ConditionStatus, reason, want string) metav1.Condition {
	t.Helper()
	var got metav1.Condition
	testenv.Eventually(t, timeout, clusterCondition(c, v1.ConditionGuaranteesFit, status, reason, want, &got))
	return got
}

func setMemory(t *testing.T, c *v1.CacheCluster, memory string) {
	t.Helper()
	testenv.Eventually(t, timeout, func() error {
		if err := get(c, c.Namespace, c.Name); err != nil {
			return err
		}
		c.Spec.Capacity.Memory = resource.MustParse(memory)
		return env.Client.Update(context.Background(), c)
	})
}
