package allocation

import (
	"context"
	"fmt"
	"time"

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
	// number last changed (zero while it has not changed since the wait began).
	awaiting  int
	changedAt time.Time
}

// awaitingAdmission counts the cluster's tenants whose admission for their current spec the
// TenantSLO reconciler has not decided yet (objects.TenantAwaitingAdmissionIndex). It lists
// only those, and without deep copies: it runs every debounce while admissions are under way.
func (l *Loop) awaitingAdmission(ctx context.Context, cluster types.NamespacedName) (int, error) {
	var tenants v1.TenantSLOList
	if err := l.client.List(ctx, &tenants, client.MatchingFields{objects.TenantAwaitingAdmissionIndex: cluster.String()}, client.UnsafeDisableDeepCopy); err != nil {
		return 0, fmt.Errorf("listing TenantSLOs: %w", err)
	}
	return len(tenants.Items), nil
}

// holdForAdmission reports whether the allocation should wait for admissions under way
// (awaiting tenants, at now). Every plan lists every admitted tenant, so each allocation that
// sees a few more admitted rewrites every plan: a cold start of 2,000 tenants, admitted at the
// client's rate limit, wrote each of 200 plans about five times. The allocation waits while
// the number awaiting keeps changing, and stops waiting once it has not changed for an
// interval after it first did (decisions stopped: a reconcile that keeps failing), or after
// maxAdmissionWaitIntervals intervals. Before the first decision it waits up to that bound:
// at a cold start the reconciler may take longer than an interval to decide the first tenant
// (2,000 finalizers and credentials come first at the same rate limit). A cluster that already
// has a plan (planned) waits at most one interval: its tenants' plans must not stall for ten
// because one new tenant's admission keeps failing.
func (s *clusterState) holdForAdmission(awaiting int, planned bool, interval time.Duration, now time.Time) bool {
	w := &s.admission
	if awaiting == 0 {
		*w = admissionWait{}
		return false
	}
	switch {
	case w.since.IsZero():
		w.since, w.awaiting = now, awaiting
	case awaiting != w.awaiting:
		w.awaiting, w.changedAt = awaiting, now
	}
	longest := maxAdmissionWaitIntervals * interval
	if planned {
		longest = interval
	}
	if now.Sub(w.since) >= longest {
		return false
	}
	return w.changedAt.IsZero() || now.Sub(w.changedAt) < interval
}
