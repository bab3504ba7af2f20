package allocation

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/internal/objects"
)

// maxAdmissionWaitIntervals bounds, in allocation intervals, how long allocations wait for
// admissions under way (holdForAdmission), so a stream of new tenants cannot stop planning.
const maxAdmissionWaitIntervals = 10

// admissionWait is what the loop knows about the admissions it waits for.
type admissionWait struct {
	// since is when allocations started waiting; zero when none is waited for.
	since time.Time
	// awaiting is how many tenants awaited admission at the last look, changedAt when that
	// number last changed.
	awaiting  int
	changedAt time.Time
}

// awaitingAdmission counts the cluster's tenants whose admission for their current spec the
// TenantSLO reconciler has not decided yet: a status for an older generation, no decided
// Admitted condition, or one refused for a missing cluster (the loop is allocating that
// cluster, so it exists now and the tenant will be reconsidered). It reads the cache without
// copying: it runs every debounce while admissions are under way.
func (l *Loop) awaitingAdmission(ctx context.Context, cluster types.NamespacedName) (int, error) {
	var tenants v1.TenantSLOList
	if err := l.client.List(ctx, &tenants, client.MatchingFields{objects.TenantClusterIndex: cluster.String()}, client.UnsafeDisableDeepCopy); err != nil {
		return 0, fmt.Errorf("listing TenantSLOs: %w", err)
	}
	n := 0
	for i := range tenants.Items {
		t := &tenants.Items[i]
		if !t.DeletionTimestamp.IsZero() {
			continue
		}
		admitted := meta.FindStatusCondition(t.Status.Conditions, v1.ConditionAdmitted)
		if t.Status.ObservedGeneration != t.Generation || admitted == nil || admitted.Status == metav1.ConditionUnknown ||
			(admitted.Status == metav1.ConditionFalse && admitted.Reason == v1.ReasonClusterNotFound) {
			n++
		}
	}
	return n, nil
}

// holdForAdmission reports whether the allocation should wait for admissions under way
// (awaiting tenants, at now). Every plan lists every admitted tenant, so each allocation that
// sees a few more admitted rewrites every plan: a cold start of 2,000 tenants, admitted at the
// client's rate limit, wrote each of 200 plans about five times. The allocation waits while
// the number awaiting keeps changing, and stops waiting once it has not changed for an
// interval (a reconcile that keeps failing) or after maxAdmissionWaitIntervals intervals.
func (s *clusterState) holdForAdmission(awaiting int, interval time.Duration, now time.Time) bool {
	w := &s.admission
	if awaiting == 0 {
		*w = admissionWait{}
		return false
	}
	if w.since.IsZero() {
		w.since = now
	}
	if awaiting != w.awaiting {
		w.awaiting, w.changedAt = awaiting, now
	}
	return now.Sub(w.changedAt) < interval && now.Sub(w.since) < maxAdmissionWaitIntervals*interval
}
